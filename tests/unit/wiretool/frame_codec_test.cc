#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/wire/roce_packet.h"
#include "common/wiretool/frame_decoder.h"
#include "common/wiretool/frame_encoder.h"

using namespace tandem::common;

namespace {

Json spec(const char* text) { return Json::parse(text); }

std::string encode_error(const char* text) {
  try {
    encode_frame(spec(text));
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("an encoded WRITE FIRST decodes to the fields it was built from") {
  auto f = encode_frame(spec(R"({"opcode":"RC_RDMA_WRITE_FIRST","src":"10.1.2.3","dst":"10.4.5.6",
      "sport":49153,"dqpn":"0x123456","psn":16777215,"ack_req":true,"se":true,"pkey":"0x8001",
      "reth":{"va":"0x7f0000001000","rkey":4660,"len":3000},"payload_len":1023})"));
  RocePacket p;
  REQUIRE(parse_roce(f.data(), f.size(), p) == DropReason::kNone);
  Json d = decode_frame(f, 1);
  CHECK(d["ok"] == true);
  CHECK(d["drop_reason"].is_null());
  CHECK(d["src"] == "10.1.2.3");
  CHECK(d["dst"] == "10.4.5.6");
  CHECK(d["sport"] == 49153);
  CHECK(d["dport"] == 4791);
  CHECK(d["opcode"] == 6);
  CHECK(d["opcode_name"] == "RC_RDMA_WRITE_FIRST");
  CHECK(d["dqpn"] == 0x123456);
  CHECK(d["psn"] == 0xFFFFFF);
  CHECK(d["ack_req"] == true);
  CHECK(d["se"] == true);
  CHECK(d["pkey"] == 0x8001);
  CHECK(d["reth"]["va"] == 0x7f0000001000ull);
  CHECK(d["reth"]["rkey"] == 4660);
  CHECK(d["reth"]["len"] == 3000);
  CHECK_FALSE(d.contains("aeth"));
  CHECK_FALSE(d.contains("imm"));
  CHECK(d["payload_len"] == 1023);
  CHECK(d["icrc_ok"] == true);
  char want[16];
  std::snprintf(want, sizeof want, "0x%08x", p.icrc);
  CHECK(d["icrc"] == want);
  CHECK(f[p.payload_offset + 300] == spec_payload_byte(300));
}

TEST_CASE("decoded packets with payload re-encode to the same bytes") {
  const char* specs[] = {
      R"({"opcode":"RC_SEND_ONLY_WITH_IMMEDIATE","imm":3405691582,"payload_hex":"0102030405"})",
      R"({"opcode":17,"aeth":{"syndrome":"0x60","msn":99},"dqpn":5,"psn":7})",
      R"({"opcode":"RC_RDMA_READ_REQUEST","reth":{"va":1,"rkey":2,"len":65536},"tos":2,"ttl":3})",
      R"({"opcode":"RC_RDMA_READ_RESPONSE_ONLY","aeth":{"syndrome":0,"msn":3},"payload_len":4096})",
      R"({"opcode":"RC_COMPARE_SWAP","atomic":{"va":8,"rkey":9,"swap_add":10,"compare":11}})",
      R"({"opcode":"RC_ATOMIC_ACKNOWLEDGE","aeth":{"syndrome":0,"msn":1},"atomic_ack":12345})",
      R"({"opcode":"CNP","dqpn":77,"becn":true})",
      R"({"opcode":"RC_SEND_ONLY","payload_len":3,"vlan":100,"vlan_pcp":5,"src_mac":"0a:0b:0c:0d:0e:0f"})",
      R"({"opcode":"RC_SEND_LAST","payload_len":10,"outer":{"vni":5001,"src":"192.168.9.1","sport":50000}})",
      R"({"opcode":"RC_SEND_ONLY","payload_len":10,"bad_icrc":true})",
  };
  for (const char* s : specs) {
    INFO(s);
    auto f = encode_frame(spec(s));
    DecodeOptions o;
    o.payload_hex = true;
    Json d = decode_frame(f, 3, o);
    CHECK(d["index"] == 3);
    auto again = encode_frame(d);
    CHECK(again == f);
  }
}

TEST_CASE("a corrupted ICRC is reported as bad_icrc with the carried value") {
  auto good = encode_frame(spec(R"({"opcode":"RC_SEND_ONLY","payload_len":10})"));
  auto bad = encode_frame(spec(R"({"opcode":"RC_SEND_ONLY","payload_len":10,"bad_icrc":true})"));
  Json g = decode_frame(good, 1), b = decode_frame(bad, 2);
  CHECK(b["ok"] == false);
  CHECK(b["drop_reason"] == "bad_icrc");
  CHECK(b["icrc_ok"] == false);
  CHECK(b["payload_len"] == 10);
  CHECK(b["icrc"] != g["icrc"]);
  auto forced = encode_frame(spec(R"({"opcode":"RC_SEND_ONLY","payload_len":10,"icrc":"0x01020304"})"));
  CHECK(decode_frame(forced, 1)["icrc"] == "0x01020304");
  CHECK(forced[forced.size() - 4] == 0x04);  // stored least-significant byte first
}

TEST_CASE("a truncated frame shows only the layers it still holds") {
  auto f = encode_frame(spec(R"({"opcode":"RC_RDMA_WRITE_ONLY","payload_len":100})"));
  auto at = [&](std::size_t n) {
    std::vector<uint8_t> cut(f.begin(), f.begin() + n);
    return decode_frame(cut, 1);
  };
  Json d = at(10);
  CHECK(d["drop_reason"] == "truncated");
  CHECK_FALSE(d.contains("dst_mac"));
  d = at(20);
  CHECK(d.contains("src_mac"));
  CHECK_FALSE(d.contains("src"));
  d = at(14 + 20 + 4);
  CHECK(d["src"] == "10.0.0.1");
  CHECK_FALSE(d.contains("sport"));
  d = at(14 + 20 + 8 + 12);
  CHECK(d["opcode"] == 10);
  CHECK_FALSE(d.contains("reth"));
  d = at(14 + 20 + 8 + 12 + 16);
  CHECK(d["reth"]["len"] == 100);
  CHECK_FALSE(d.contains("payload_len"));
  CHECK_FALSE(d.contains("icrc"));
  CHECK_FALSE(d.contains("icrc_ok"));
  auto t = encode_frame(spec(R"({"opcode":"RC_RDMA_WRITE_ONLY","payload_len":100,"truncate":50})"));
  CHECK(t.size() == 50);
  CHECK(decode_frame(t, 1)["drop_reason"] == "truncated");
  for (std::size_t n = 0; n < f.size(); ++n) {
    CHECK(at(n)["drop_reason"] == "truncated");
  }
}

TEST_CASE("a non-RoCE UDP packet keeps its UDP fields and no BTH") {
  auto f = encode_frame(spec(R"({"opcode":"RC_SEND_ONLY","payload_len":8})"));
  f[14 + 20 + 3] = 0x35;  // dport 4661+... no longer 4791
  Json d = decode_frame(f, 1);
  CHECK(d["drop_reason"] == "not_roce_port");
  CHECK(d.contains("dport"));
  CHECK_FALSE(d.contains("opcode"));
  CHECK_FALSE(d.contains("icrc"));
}

TEST_CASE("spec errors name the field and what was wrong") {
  CHECK(encode_error(R"({"opcode":"RC_FOO"})").find("field 'opcode': unknown opcode name \"RC_FOO\"") == 0);
  CHECK(encode_error(R"({"dqpn":1})") == "field 'opcode' is required (a number or a name like RC_SEND_ONLY)");
  CHECK(encode_error(R"({"opcode":4,"dqpn":16777216})") ==
        "field 'dqpn': expected an integer 0..16777215, got 16777216");
  CHECK(encode_error(R"({"opcode":4,"psn":-1})") == "field 'psn': expected an integer 0..16777215, got -1");
  CHECK(encode_error(R"({"opcode":4,"src":"10.0.0"})") ==
        "field 'src': expected a dotted IPv4 address, got \"10.0.0\"");
  CHECK(encode_error(R"({"opcode":4,"qpn":3})") == "unknown field 'qpn'");
  CHECK(encode_error(R"({"opcode":4,"reth":{"va":1}})") == "field 'reth': RC_SEND_ONLY carries no RETH");
  CHECK(encode_error(R"({"opcode":6,"reth":{"vaddr":1}})") == "unknown field 'reth.vaddr'");
  CHECK(encode_error(R"({"opcode":17,"payload_len":4})") == "field 'payload_len': RC_ACKNOWLEDGE carries no payload");
  CHECK(encode_error(R"({"opcode":4,"payload_hex":"abc"})") == "field 'payload_hex': odd number of hex digits");
  CHECK(encode_error(R"({"opcode":4,"payload_len":2,"payload_hex":"aabbcc"})") ==
        "field 'payload_len': 2 but payload_hex has 3 bytes");
  CHECK(encode_error(R"({"opcode":4,"ack_req":1})") == "field 'ack_req': expected true or false, got 1");
  CHECK(encode_error(R"({"opcode":4,"truncate":5000})").find("field 'truncate': 5000 is not shorter") == 0);
  CHECK(encode_error(R"({"opcode":4,"payload_len":65535})") ==
        "field 'payload_len': packet too large for one IPv4 datagram");
  CHECK(encode_error(R"({"opcode":4,"src_mac":"02:00:00:00:00"})").find("field 'src_mac'") == 0);
  CHECK(encode_error(R"({"opcode":4,"dport":4792})").find("field 'dport'") == 0);
  CHECK(encode_error(R"([1,2])").find("expected a JSON object") == 0);
}
