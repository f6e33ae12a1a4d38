#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/pcap/pcap_reader.h"
#include "common/pcap/pcap_writer.h"
#include "common/wire/byte_order.h"

using namespace tandem::common;

namespace {

std::string temp_path(const char* tag) {
  return "/tmp/tandem-pcap-test-" + std::to_string(::getpid()) + "-" + tag + ".pcap";
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put32(std::vector<uint8_t>& v, uint32_t x, bool big) {
  for (int i = 0; i < 4; ++i) v.push_back(static_cast<uint8_t>(big ? x >> (24 - 8 * i) : x >> (8 * i)));
}

// A hand-made capture in either byte order and timestamp unit.
std::vector<uint8_t> handmade(bool big, uint32_t magic, const std::vector<std::vector<uint8_t>>& frames) {
  std::vector<uint8_t> v;
  put32(v, magic, big);
  v.insert(v.end(), big ? std::initializer_list<uint8_t>{0, 2, 0, 4}
                        : std::initializer_list<uint8_t>{2, 0, 4, 0});
  put32(v, 0, big);
  put32(v, 0, big);
  put32(v, 65535, big);
  put32(v, kLinktypeEthernet, big);
  uint32_t sec = 100;
  for (const auto& f : frames) {
    put32(v, sec++, big);
    put32(v, 7, big);
    put32(v, static_cast<uint32_t>(f.size()), big);
    put32(v, static_cast<uint32_t>(f.size()) + 10, big);
    v.insert(v.end(), f.begin(), f.end());
  }
  return v;
}

std::string error_of(std::span<const uint8_t> bytes) {
  try {
    PcapReader r(bytes, "cap.pcap");
    PcapRecord rec;
    while (r.next(rec)) {
    }
  } catch (const PcapError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("frames written by the writer read back with timestamps and lengths") {
  for (bool nano : {false, true}) {
    const std::string path = temp_path(nano ? "nano" : "micro");
    {
      PcapWriter w(path, nano);
      std::vector<uint8_t> a(60, 0xAA), b(1500, 0xBB);
      w.write(1'700'000'000'123'456'789ull, a);
      w.write(1'700'000'001'000'001'000ull, b, 9000);
      w.close();
      CHECK(w.records_written() == 2);
    }
    PcapFile f(path);
    PcapReader& r = f.reader();
    CHECK(r.nanosecond() == nano);
    CHECK_FALSE(r.swapped());
    PcapRecord rec;
    REQUIRE(r.next(rec));
    CHECK(rec.data.size() == 60);
    CHECK(rec.data[59] == 0xAA);
    CHECK(rec.ts_ns == (nano ? 1'700'000'000'123'456'789ull : 1'700'000'000'123'456'000ull));
    REQUIRE(r.next(rec));
    CHECK(rec.data.size() == 1500);
    CHECK(rec.orig_len == 9000);
    CHECK(rec.ts_ns == 1'700'000'001'000'001'000ull);
    CHECK_FALSE(r.next(rec));
    std::remove(path.c_str());
  }
}

TEST_CASE("big-endian and nanosecond captures from other tools are read") {
  const std::vector<std::vector<uint8_t>> frames = {{1, 2, 3}, std::vector<uint8_t>(64, 9)};
  for (bool big : {false, true}) {
    for (uint32_t magic : {kPcapMagicMicro, kPcapMagicNano}) {
      INFO("big " << big << " magic " << magic);
      auto bytes = handmade(big, magic, frames);
      PcapReader r(bytes, "x.pcap");
      CHECK(r.swapped() == big);  // this test runs on little-endian hosts
      CHECK(r.nanosecond() == (magic == kPcapMagicNano));
      CHECK(r.snaplen() == 65535);
      PcapRecord rec;
      REQUIRE(r.next(rec));
      CHECK(rec.data.size() == 3);
      CHECK(rec.data[2] == 3);
      CHECK(rec.orig_len == 13);
      CHECK(rec.ts_ns == 100'000'000'000ull + (magic == kPcapMagicNano ? 7 : 7000));
      REQUIRE(r.next(rec));
      CHECK(rec.data.size() == 64);
      CHECK(rec.ts_ns / 1'000'000'000ull == 101);
      CHECK_FALSE(r.next(rec));
    }
  }
}

TEST_CASE("an empty capture has no records") {
  auto bytes = handmade(false, kPcapMagicMicro, {});
  PcapReader r(bytes, "e.pcap");
  PcapRecord rec;
  CHECK_FALSE(r.next(rec));
}

TEST_CASE("a missing file is a clear error naming it") {
  try {
    PcapFile f("/nonexistent/dir/none.pcap");
    FAIL("no error");
  } catch (const PcapError& e) {
    CHECK(std::string(e.what()) == "/nonexistent/dir/none.pcap: cannot open: No such file or directory");
  }
}

TEST_CASE("a file that is not a pcap is refused by its magic") {
  const std::string text = "{\"opcode\": 4}\n{\"opcode\": 5}\n";
  std::vector<uint8_t> bytes(text.begin(), text.end());
  CHECK(error_of(bytes).find("cap.pcap: not a pcap file (bad magic") == 0);
  std::vector<uint8_t> tiny = {0xD4, 0xC3};
  CHECK(error_of(tiny).find("not a pcap file") != std::string::npos);
  std::vector<uint8_t> ng = {0x0A, 0x0D, 0x0D, 0x0A, 0, 0, 0, 0};
  CHECK(error_of(ng).find("pcapng") != std::string::npos);
}

TEST_CASE("a cut header, cut record or non-Ethernet link type is refused") {
  auto good = handmade(false, kPcapMagicMicro, {std::vector<uint8_t>(40, 1), std::vector<uint8_t>(40, 2)});
  CHECK(error_of(good).empty());

  std::vector<uint8_t> cut_hdr(good.begin(), good.begin() + 20);
  CHECK(error_of(cut_hdr) == "cap.pcap: truncated pcap header (20 of 24 bytes)");

  std::vector<uint8_t> cut_data(good.begin(), good.end() - 5);
  CHECK(error_of(cut_data) ==
        "cap.pcap: record 2 (byte offset 80): truncated record (header says 40 bytes, file has 35)");

  std::vector<uint8_t> cut_rec(good.begin(), good.begin() + 24 + 16 + 40 + 7);
  CHECK(error_of(cut_rec) == "cap.pcap: record 2 (byte offset 80): truncated record header (7 of 16 bytes)");

  auto huge = good;
  store_le32(huge.data() + 24 + 8, 0x7FFFFFFF);
  CHECK(error_of(huge).find("impossible captured length") != std::string::npos);

  auto raw_ip = good;
  raw_ip[20] = 101;  // LINKTYPE_RAW
  CHECK(error_of(raw_ip) == "cap.pcap: unsupported link type 101 (only Ethernet, LINKTYPE_ETHERNET=1)");
}

TEST_CASE("every prefix of a capture either reads cleanly or throws PcapError") {
  auto good = handmade(true, kPcapMagicNano, {std::vector<uint8_t>(30, 1), std::vector<uint8_t>(10, 2)});
  for (std::size_t n = 0; n <= good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + n);  // exact size, so ASan sees over-reads
    const std::string err = error_of(cut);
    const bool clean = n == 24 || n == 24 + 16 + 30 || n == good.size();
    CHECK(err.empty() == clean);
  }
}

TEST_CASE("the writer reports a path it cannot create") {
  try {
    PcapWriter w("/nonexistent/dir/out.pcap");
    FAIL("no error");
  } catch (const PcapError& e) {
    CHECK(std::string(e.what()).find("/nonexistent/dir/out.pcap: cannot create") == 0);
  }
}
