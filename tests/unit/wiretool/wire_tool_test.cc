#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <algorithm>

#include "common/pcap/pcap_reader.h"
#include "common/wiretool/frame_decoder.h"
#include "common/wiretool/wire_tool.h"

using namespace tandem::common;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/tandem-wiretool-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path).c_str()); }
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(path + "/" + name) << text;
    return path + "/" + name;
  }
};

struct Result {
  int rc;
  std::string out, err;
};

Result run_tool(WireToolConfig cfg) {
  std::ostringstream out, err;
  int rc = run(cfg, out, err);
  return {rc, out.str(), err.str()};
}

}  // namespace

TEST_CASE("encode then decode prints one JSON line per packet") {
  TempDir t;
  const auto spec = t.file("s.jsonl",
                           "# comment\n"
                           "{\"opcode\":\"RC_RDMA_WRITE_FIRST\",\"dqpn\":17,\"psn\":1,\"payload_len\":64}\n"
                           "\n"
                           "{\"opcode\":\"RC_ACKNOWLEDGE\",\"dqpn\":18,\"psn\":1,\"aeth\":{\"msn\":1}}\n"
                           "{\"opcode\":\"RC_SEND_ONLY\",\"payload_len\":5,\"bad_icrc\":true}\n");
  auto enc = run_tool({"encode", spec, t.path + "/o.pcap"});
  CHECK(enc.rc == 0);
  CHECK(enc.out == "wrote 3 packets to " + t.path + "/o.pcap\n");
  CHECK(enc.err.empty());

  auto dec = run_tool({"decode", t.path + "/o.pcap"});
  REQUIRE(dec.rc == 0);
  std::istringstream lines(dec.out);
  std::string line;
  std::vector<Json> pkts;
  while (std::getline(lines, line)) pkts.push_back(Json::parse(line));
  REQUIRE(pkts.size() == 3);
  CHECK(pkts[0]["index"] == 1);
  CHECK(pkts[0]["opcode_name"] == "RC_RDMA_WRITE_FIRST");
  CHECK(pkts[1]["aeth"]["msn"] == 1);
  CHECK(pkts[2]["drop_reason"] == "bad_icrc");

  WireToolConfig sum{"decode", t.path + "/o.pcap"};
  sum.summary = true;
  auto s = run_tool(sum);
  CHECK(s.rc == 0);
  CHECK(s.out.find("RC_RDMA_WRITE_FIRST") != std::string::npos);
  CHECK(s.out.find("DROP bad_icrc") != std::string::npos);
}

TEST_CASE("the pcap timestamps of encoded packets are 1 us apart and deterministic") {
  TempDir t;
  const auto spec = t.file("s.jsonl", "{\"opcode\":4}\n{\"opcode\":4}\n");
  WireToolConfig cfg{"encode", spec, t.path + "/n.pcap"};
  cfg.nanosecond = true;
  REQUIRE(run_tool(cfg).rc == 0);
  PcapFile f(t.path + "/n.pcap");
  CHECK(f.reader().nanosecond());
  PcapRecord a, b;
  REQUIRE(f.reader().next(a));
  REQUIRE(f.reader().next(b));
  CHECK(b.ts_ns - a.ts_ns == 1000);
}

TEST_CASE("bad input gives one error line naming file and line, exit 2") {
  TempDir t;
  auto one_line = [](const std::string& s) {
    return !s.empty() && s.back() == '\n' && s.find('\n') == s.size() - 1;
  };

  auto r = run_tool({"decode", t.path + "/missing.pcap"});
  CHECK(r.rc == kExitBadInput);
  CHECK(r.err == "tandem-wire: " + t.path + "/missing.pcap: cannot open: No such file or directory\n");

  const auto notpcap = t.file("x.pcap", "hello, this is text and not a capture\n");
  r = run_tool({"decode", notpcap});
  CHECK(r.rc == kExitBadInput);
  CHECK(r.err.find("tandem-wire: " + notpcap + ": not a pcap file") == 0);
  CHECK(one_line(r.err));

  const auto badjson = t.file("b.jsonl", "{\"opcode\":4}\n{\"opcode\":4,,}\n");
  r = run_tool({"encode", badjson, t.path + "/o.pcap"});
  CHECK(r.rc == kExitBadInput);
  CHECK(r.err.find("tandem-wire: " + badjson + ":2: bad JSON: syntax error") == 0);
  CHECK(one_line(r.err));
  CHECK(::access((t.path + "/o.pcap").c_str(), F_OK) != 0);  // nothing half-written

  const auto badval = t.file("v.jsonl", "{\"opcode\":4}\n\n{\"opcode\":\"RC_NOPE\"}\n");
  r = run_tool({"encode", badval, t.path + "/o.pcap"});
  CHECK(r.rc == kExitBadInput);
  CHECK(r.err == "tandem-wire: " + badval + ":3: field 'opcode': unknown opcode name \"RC_NOPE\" (e.g. RC_SEND_ONLY)\n");

  r = run_tool({"encode", t.path + "/none.jsonl", t.path + "/o.pcap"});
  CHECK(r.rc == kExitBadInput);
  CHECK(r.err == "tandem-wire: " + t.path + "/none.jsonl: cannot open: No such file or directory\n");

  const auto ok = t.file("ok.jsonl", "{\"opcode\":4}\n");
  r = run_tool({"encode", ok, "/nonexistent/dir/o.pcap"});
  CHECK(r.rc == kExitBadInput);
  CHECK(r.err.find("tandem-wire: /nonexistent/dir/o.pcap: cannot create") == 0);
}

TEST_CASE("a capture cut inside a record decodes the whole records, then fails") {
  TempDir t;
  const auto spec = t.file("s.jsonl", "{\"opcode\":4,\"payload_len\":100}\n{\"opcode\":4,\"payload_len\":100}\n");
  REQUIRE(run_tool({"encode", spec, t.path + "/o.pcap"}).rc == 0);
  REQUIRE(::truncate((t.path + "/o.pcap").c_str(), 24 + 2 * 16 + 2 * 158 - 10) == 0);
  auto r = run_tool({"decode", t.path + "/o.pcap"});
  CHECK(r.rc == kExitBadInput);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  CHECK(r.err.find(": record 2 (byte offset 198): truncated record (header says 158 bytes, file has 148)") !=
        std::string::npos);
}
