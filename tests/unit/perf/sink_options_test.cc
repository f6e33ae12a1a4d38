// tandem-perf sink's command line: defaults, every flag, refusals (exit 2).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "rnic/perf/sink_options.h"

using namespace tandem::rnic::perf;

namespace {
std::optional<SinkOptions> sink(std::vector<const char*> args, int* code) {
  args.insert(args.begin(), {"tandem-perf", "sink"});
  return parse_sink_args(static_cast<int>(args.size()), args.data(), code);
}
}  // namespace

TEST_CASE("sink: defaults and every flag") {
  int code = -1;
  auto o = sink({"-d", "/s", "--table", "t.yaml", "--remote", "192.168.7.2"}, &code);
  REQUIRE(o);
  CHECK(code == 0);
  CHECK(o->qps == 16);
  CHECK(o->remote_qpn_base == 0x10000);
  CHECK(o->remote_psn == 0);
  CHECK(o->size == 65536);
  CHECK(o->mode == "irn");
  CHECK(o->mtu == 1024);
  CHECK_FALSE(o->json);
  o = sink({"-d", "/s", "--table", "t.yaml", "--remote", "192.168.7.2", "-q", "64", "--gid", "192.168.7.1",
            "--remote-qpn-base", "4096", "--remote-psn", "1000", "-s", "4096", "--recv-size", "256",
            "--recv-depth", "512", "-m", "4096", "--mode", "gbn", "--out", "x.json", "--json", "-D", "2.5",
            "--huge"},
           &code);
  REQUIRE(o);
  CHECK(o->qps == 64);
  CHECK(o->gid == "192.168.7.1");
  CHECK(o->remote_qpn_base == 4096);
  CHECK(o->remote_psn == 1000);
  CHECK(o->size == 4096);
  CHECK(o->recv_size == 256);
  CHECK(o->recv_depth == 512);
  CHECK(o->mtu == 4096);
  CHECK(o->mode == "gbn");
  CHECK(o->out == "x.json");
  CHECK(o->json);
  CHECK(o->duration_s == 2.5);
  CHECK(o->huge);
}

TEST_CASE("sink: bad command lines are refused with exit code 2") {
  const std::vector<std::vector<const char*>> bad = {
      {"--table", "t", "--remote", "1.2.3.4"},                             // no --device
      {"-d", "/s", "--remote", "1.2.3.4"},                                 // no --table
      {"-d", "/s", "--table", "t"},                                        // no --remote
      {"-d", "/s", "--table", "t", "--remote", "fe80::1"},
      {"-d", "/s", "--table", "t", "--remote", "1.2.3.4", "--gid", "x"},
      {"-d", "/s", "--table", "t", "--remote", "1.2.3.4", "-q", "0"},
      {"-d", "/s", "--table", "t", "--remote", "1.2.3.4", "-q", "1025"},
      {"-d", "/s", "--table", "t", "--remote", "1.2.3.4", "-s", "100"},   // not a multiple of 8
      {"-d", "/s", "--table", "t", "--remote", "1.2.3.4", "-m", "1500"},
      {"-d", "/s", "--table", "t", "--remote", "1.2.3.4", "--mode", "rc"},
      {"-d", "/s", "--table", "t", "--remote", "1.2.3.4", "--remote-psn", "16777216"},
      {"-d", "/s", "--table", "t", "--remote", "1.2.3.4", "--remote-qpn-base", "16777215"},
      {"-d", "/s", "--table", "t", "--remote", "1.2.3.4", "--recv-depth", "0"},
      {"-d", "/s", "--table", "t", "--remote", "1.2.3.4", "--bogus"},
  };
  for (const auto& args : bad) {
    int code = -1;
    INFO(args.back());
    CHECK_FALSE(sink(args, &code));
    CHECK(code == 2);
  }
}
