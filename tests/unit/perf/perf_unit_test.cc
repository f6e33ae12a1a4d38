#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "rnic/perf/pattern.h"
#include "rnic/perf/perf_options.h"
#include "rnic/perf/perf_report.h"
#include "rnic/perf/perf_stats.h"

using namespace tandem::rnic::perf;

namespace {
std::optional<Options> parse(std::vector<const char*> args, int* code) {
  args.insert(args.begin(), "tandem-perf");
  return parse_args(static_cast<int>(args.size()), args.data(), code);
}
}  // namespace

TEST_CASE("a filled buffer verifies, at every size including odd tails") {
  for (std::size_t size : {1u, 7u, 8u, 9u, 4096u, 4099u}) {
    std::vector<uint8_t> b(size);
    fill_pattern(b, 3, 17);
    CHECK(find_mismatch(b, 3, 17) == kNoMismatch);
    for (std::size_t off = 0; off < size; ++off) REQUIRE(b[off] == pattern_byte(3, 17, off));
  }
}

TEST_CASE("verify names the first wrong byte") {
  std::vector<uint8_t> b(4099);
  fill_pattern(b, 0, 5);
  b[2050] ^= 0x01;
  b[3000] ^= 0x80;
  CHECK(find_mismatch(b, 0, 5) == 2050);
  fill_pattern(b, 0, 5);
  b[4098] = static_cast<uint8_t>(~b[4098]);  // in the tail after the last full word
  CHECK(find_mismatch(b, 0, 5) == 4098);
}

TEST_CASE("a buffer from another QP or iteration does not verify") {
  std::vector<uint8_t> b(64);
  fill_pattern(b, 1, 100);
  CHECK(find_mismatch(b, 1, 101) != kNoMismatch);
  CHECK(find_mismatch(b, 2, 100) != kNoMismatch);
  CHECK(find_mismatch(b, 1, 100 + 256) != kNoMismatch);
  std::vector<uint8_t> zero(64, 0);
  CHECK(find_mismatch(zero, 1, 100) != kNoMismatch);
}

TEST_CASE("the latency marker changes between consecutive iterations, also across wrap") {
  for (uint64_t i = 0; i < 1000; ++i) CHECK(marker_byte(i) != marker_byte(i + 1));
  CHECK(marker_byte(0) != 0);  // a fresh (zeroed) buffer never looks like message 0 arrived
}

TEST_CASE("server and client command lines parse, with perftest's defaults") {
  int code = -1;
  auto s = parse({"write_bw", "--device", "/tmp/r0.sock"}, &code);
  REQUIRE(s);
  CHECK(code == 0);
  CHECK(s->is_server());
  CHECK(s->test == TestKind::kWriteBw);
  CHECK(s->size == 65536);
  CHECK(s->iterations == 5000);
  CHECK(s->tx_depth == 128);
  CHECK(s->port == 18515);
  CHECK(s->qps == 1);
  CHECK_FALSE(s->verify);

  auto c = parse({"send_bw", "-d", "/tmp/r1.sock", "-s", "4096", "-n", "100", "-q", "4", "-t", "32",
                  "--mtu", "1024", "-p", "20000", "--verify", "--json", "--spray", "rr4", "--cc",
                  "credit", "--gid", "10.0.0.2", "127.0.0.1"},
                 &code);
  REQUIRE(c);
  CHECK_FALSE(c->is_server());
  CHECK(c->server == "127.0.0.1");
  CHECK(c->test == TestKind::kSendBw);
  CHECK(c->size == 4096);
  CHECK(c->iterations == 100);
  CHECK(c->qps == 4);
  CHECK(c->tx_depth == 32);
  CHECK(c->mtu == 1024);
  CHECK(c->port == 20000);
  CHECK(c->verify);
  CHECK(c->json);
  CHECK(c->spray == "rr4");
  CHECK(c->cc == "credit");
  CHECK(c->gid == "10.0.0.2");

  auto l = parse({"write_lat", "--device", "/tmp/r0.sock"}, &code);
  REQUIRE(l);
  CHECK(l->size == 2);
  CHECK(l->iterations == 1000);
  CHECK(l->tx_depth == 1);

  auto d = parse({"read_bw", "--device", "/tmp/r0.sock", "-D", "2"}, &code);
  REQUIRE(d);
  CHECK(d->duration_s == 2);
  CHECK(d->iterations == 0);  // runs for the duration
}

TEST_CASE("bad command lines are refused with exit code 2") {
  int code = -1;
  CHECK_FALSE(parse({"write_bw"}, &code));  // no --device
  CHECK(code == 2);
  code = -1;
  CHECK_FALSE(parse({"atomic_bw", "--device", "/x"}, &code));
  CHECK(code == 2);
  code = -1;
  CHECK_FALSE(parse({"write_bw", "--device", "/x", "-n", "10", "-D", "1"}, &code));
  CHECK(code == 2);
  code = -1;
  CHECK_FALSE(parse({"write_bw", "--device", "/x", "--mtu", "1500"}, &code));
  CHECK(code == 2);
  code = -1;
  CHECK_FALSE(parse({"write_lat", "--device", "/x", "-q", "2"}, &code));
  CHECK(code == 2);
  code = -1;
  CHECK_FALSE(parse({"write_bw", "--device", "/x", "-q", "0"}, &code));
  CHECK(code == 2);
  code = -1;
  CHECK_FALSE(parse({"write_bw", "--device", "/x", "--gid", "fe80::1"}, &code));
  CHECK(code == 2);
  code = -1;
  CHECK_FALSE(parse({"write_bw", "--device", "/x", "-s", "notanumber"}, &code));
  CHECK(code == 2);
  code = -1;
  CHECK_FALSE(parse({"write_bw", "--device", "/x", "a", "b"}, &code));
  CHECK(code == 2);
}

TEST_CASE("latency summary: min, median as typical, 99th percentile, max") {
  std::vector<uint64_t> s;
  for (uint64_t i = 100; i >= 1; --i) s.push_back(i * 1000);  // 1..100 us, unsorted
  LatencySummary l = summarize_latency(s);
  CHECK(l.samples == 100);
  CHECK(l.t_min_us == Approx(1));
  CHECK(l.t_max_us == Approx(100));
  CHECK(l.t_typical_us == Approx(50));
  CHECK(l.t_avg_us == Approx(50.5));
  CHECK(l.t_99_us == Approx(99));
  CHECK(l.t_999_us == Approx(100));
}

TEST_CASE("bandwidth meter: average over the run, peak over the best 10 ms window") {
  BwMeter m;
  m.start(0);
  // 10 ms at 1 GB/s (8 Gb/s), then 10 ms at 2 GB/s (16 Gb/s).
  for (uint64_t t = 1; t <= 10; ++t) m.add(t * 1'000'000, 1'000'000, 1);
  for (uint64_t t = 11; t <= 20; ++t) m.add(t * 1'000'000, 2'000'000, 1);
  CHECK(m.bytes() == 30'000'000);
  CHECK(m.messages() == 20);
  CHECK(m.avg_gbps() == Approx(12.0));
  CHECK(m.peak_gbps() == Approx(16.0));
  CHECK(m.msg_rate_mpps() == Approx(0.001));

  BwMeter shortrun;
  shortrun.start(0);
  shortrun.add(1'000'000, 1'000'000, 1);
  CHECK(shortrun.peak_gbps() == Approx(shortrun.avg_gbps()));
}

TEST_CASE("the JSON report carries the agreed keys and the first mismatch") {
  RunReport r;
  r.options.test = TestKind::kWriteBw;
  r.options.size = 4096;
  r.options.qps = 2;
  r.role = "server";
  r.iterations = 10;
  r.messages = 20;
  r.have_bw = true;
  r.bw_avg_gbps = 1.5;
  r.bw_peak_gbps = 2.0;
  r.msg_rate_mpps = 0.04;
  r.verify = "failed";
  r.mismatch = Mismatch{1, 7, 2048, 0xab, 0x54};
  r.errors = 1;
  auto j = nlohmann::json::parse(format_json(r));
  CHECK(j["test"] == "write_bw");
  CHECK(j["size"] == 4096);
  CHECK(j["iterations"] == 10);
  CHECK(j["qps"] == 2);
  CHECK(j["bw_avg_gbps"] == 1.5);
  CHECK(j["msg_rate_mpps"] == 0.04);
  CHECK(j["verify"] == "failed");
  CHECK(j["errors"] == 1);
  CHECK(j["first_mismatch"]["offset"] == 2048);
  CHECK(j["first_mismatch"]["qp"] == 1);
  CHECK(j["first_mismatch"]["iteration"] == 7);
  CHECK_FALSE(j.contains("t_avg_us"));

  std::string table = format_table(r);
  CHECK(table.find("#bytes") != std::string::npos);
  CHECK(table.find("BW average[Gb/sec]") != std::string::npos);
  CHECK(table.find("offset 2048") != std::string::npos);
}

TEST_CASE("the latency report has perftest's columns") {
  RunReport r;
  r.options.test = TestKind::kWriteLat;
  r.options.size = 2;
  r.role = "client";
  r.have_latency = true;
  r.latency.t_min_us = 1.0;
  r.latency.t_typical_us = 2.0;
  r.latency.t_99_us = 3.0;
  r.latency.t_max_us = 4.0;
  auto j = nlohmann::json::parse(format_json(r));
  CHECK(j["t_min_us"] == 1.0);
  CHECK(j["t_typical_us"] == 2.0);
  CHECK(j["t_99_us"] == 3.0);
  CHECK(j["t_max_us"] == 4.0);
  CHECK(j["verify"] == "off");
  std::string table = format_table(r);
  CHECK(table.find("t_typical[usec]") != std::string::npos);
  CHECK(table.find("99% percentile[usec]") != std::string::npos);
}
