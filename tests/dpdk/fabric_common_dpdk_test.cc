// common/dpdk helpers under a real EAL (--no-huge --no-pci, so no hugepages
// are taken): argument warnings, pool sizing, the TSC clock
// and the idle loop, telemetry registration.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "common/dpdk/eal.h"
#include "common/dpdk/idle_loop.h"
#include "common/dpdk/port.h"
#include "common/dpdk/telemetry.h"
#include "common/dpdk/tsc_clock.h"

using namespace tandem::common::dpdk;

TEST_CASE("EAL arguments without --no-pci or an allow-list are warned about") {
  REQUIRE(eal_arg_warnings({"--no-pci", "--file-prefix=x"}).empty());
  REQUIRE(eal_arg_warnings({"-a", "0000:00:04.0", "--file-prefix", "x"}).empty());
  REQUIRE(eal_arg_warnings({"-a0000:00:04.0", "--in-memory"}).empty());
  REQUIRE(eal_arg_warnings({"--file-prefix=x"}).size() == 1);
  REQUIRE(eal_arg_warnings({"--no-pci"}).size() == 1);  // shares the default prefix
  REQUIRE(eal_arg_warnings({}).size() == 2);
}

TEST_CASE("the mbuf pool covers every ring, the bursts and what the app holds") {
  PortSetup s{.rx_desc = 512, .tx_desc = 512};
  const uint32_t base = mempool_size(2, s, 32, 0);
  REQUIRE(base >= 2 * (512 + 512 + 64));
  REQUIRE(mempool_size(2, s, 32, 4096) == base + 4096);
  REQUIRE(mempool_size(3, s, 32, 0) > base);
}

TEST_CASE("the TSC clock counts nanoseconds") {
  TscClock clock;
  const uint64_t t0 = clock.now_ns();
  const auto s0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const uint64_t dt = clock.now_ns() - t0;
  const auto ds = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - s0).count();
  // Same interval seen by two clocks; generous bounds, this is no benchmark.
  REQUIRE(dt > static_cast<uint64_t>(ds) * 9 / 10);
  REQUIRE(dt < static_cast<uint64_t>(ds) * 11 / 10);
  REQUIRE(clock.to_ns(clock.hz()) == Approx(1e9).epsilon(1e-6));
}

TEST_CASE("the adaptive idle loop sleeps only after the spin budget, busy never sleeps") {
  IdleLoop busy({.mode = IdleMode::kBusy});
  for (int i = 0; i < 5000; ++i) busy.after_iteration(false);
  REQUIRE(busy.sleeps() == 0);
  IdleLoop adaptive({.mode = IdleMode::kAdaptive, .spin_iterations = 100, .sleep_us = 1});
  for (int i = 0; i < 99; ++i) adaptive.after_iteration(false);
  REQUIRE(adaptive.sleeps() == 0);
  for (int i = 0; i < 10; ++i) adaptive.after_iteration(false);
  REQUIRE(adaptive.sleeps() == 10);
  adaptive.after_iteration(true);  // work resets the budget
  for (int i = 0; i < 50; ++i) adaptive.after_iteration(false);
  REQUIRE(adaptive.sleeps() == 10);
}

TEST_CASE("a telemetry command is registered once, a second name too") {
  REQUIRE_NOTHROW(telemetry_register("/tandem/test/counters", "test", [](std::string_view, TelemetryDict& d) {
    d.u64("x", 1);
    return 0;
  }));
  REQUIRE_NOTHROW(telemetry_register("/tandem/test/other", "test", [](std::string_view, TelemetryDict&) { return 0; }));
  REQUIRE_THROWS(telemetry_register("no-slash", "bad", [](std::string_view, TelemetryDict&) { return 0; }));
}

int main(int argc, char** argv) {
  const std::string prefix = "tandem-fabric-common-" + std::to_string(getpid());
  try {
    eal_init("fabric_common_dpdk_test",
             {"--no-huge", "--no-pci", "-l", "0", "-m", "64", "--file-prefix=" + prefix, "--log-level=error"});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  const int rc = Catch::Session().run(argc, argv);
  eal_cleanup();
  std::error_code ec;
  std::filesystem::remove_all("/var/run/dpdk/" + prefix, ec);
  return rc;
}
