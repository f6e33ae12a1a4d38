#include <catch2/catch.hpp>

#include <zlib.h>

#if defined(TANDEM_HAVE_ISAL)
#include <isa-l/crc.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/wire/byte_order.h"
#include "common/wire/icrc.h"

using namespace tandem::common;

namespace {
std::vector<uint8_t> from_hex(const std::string& s) {
  std::vector<uint8_t> v;
  for (std::size_t i = 0; i + 1 < s.size(); i += 2) v.push_back(std::stoi(s.substr(i, 2), nullptr, 16));
  return v;
}
// Ether/IPv4/UDP/BTH(RC_SEND_ONLY, dqpn 0x12, psn 0x345)/"hello roce!!" as built by scapy.
const char* kScapySendOnly =
    "02000000000202000000000108004500003800014000401126b20a0000010a000002c00112b7002400000400ffff"
    "000000128000034568656c6c6f20726f63652121370ac999";
}  // namespace

// Runs `f` once under every CRC kernel this CPU has, then puts back the
// one chosen at start-up.
template <typename F>
static void for_each_kernel(F&& f) {
  const CrcKernel initial = crc_kernel();
  for (CrcKernel k : kCrcKernels) {
    if (!select_crc_kernel(k)) continue;
    f(k);
  }
  REQUIRE(select_crc_kernel(initial));
}

TEST_CASE("crc32 matches zlib for any length and chaining") {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(5000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (std::size_t len : {0u, 1u, 3u, 15u, 16u, 63u, 64u, 1000u, 4096u, 5000u}) {
    uint32_t z = static_cast<uint32_t>(crc32(0, buf.data(), static_cast<uInt>(len)));
    CHECK(crc32_update(0, buf.data(), len) == z);
    std::size_t half = len / 3;
    CHECK(crc32_update(crc32_update(0, buf.data(), half), buf.data() + half, len - half) == z);
  }
}

TEST_CASE("an empty part leaves the running CRC alone, even at a null pointer, on every kernel") {
  // zlib's crc32(crc, NULL, 0) returns 0 (found by fuzz_icrc).
  for_each_kernel([](CrcKernel k) {
    INFO("kernel " << crc_kernel_name(k));
    CHECK(crc32_update(0x12345678u, nullptr, 0) == 0x12345678u);
    const std::vector<uint8_t> none;
    CHECK(crc32_update(0xCAFEF00Du, none.data(), none.size()) == 0xCAFEF00Du);
  });
}

TEST_CASE("icrc of a scapy-built packet matches the carried value") {
  auto pkt = from_hex(kScapySendOnly);
  const std::size_t ip = 14;
  const uint32_t carried = load_le32(pkt.data() + pkt.size() - 4);
  CHECK(carried == 0x99c90a37u);
  CHECK(roce_icrc(pkt.data() + ip, pkt.size() - 4 - ip) == carried);
}

TEST_CASE("icrc ignores the masked fields and nothing else") {
  auto pkt = from_hex(kScapySendOnly);
  const std::size_t ip = 14, n = pkt.size() - 4 - ip;
  const uint32_t ref = roce_icrc(pkt.data() + ip, n);
  auto masked = pkt;
  masked[ip + 1] ^= 0xE3;   // TOS (DSCP/ECN is rewritten by switches)
  masked[ip + 8] -= 3;      // TTL
  masked[ip + 10] ^= 0x55;  // IP checksum
  masked[ip + 26] ^= 0x11;  // UDP checksum
  masked[ip + 28 + 4] = 0xC0;  // FECN + BECN
  CHECK(roce_icrc(masked.data() + ip, n) == ref);
  for (std::size_t i : {ip + 12u, ip + 22u, ip + 28u, ip + 33u, ip + 40u, pkt.size() - 5}) {
    auto changed = pkt;
    changed[i] ^= 0x01;
    CHECK(roce_icrc(changed.data() + ip, n) != ref);
  }
}

TEST_CASE("icrc_headers refuses a header shorter than its IHL") {
  auto pkt = from_hex(kScapySendOnly);
  CHECK(icrc_headers(pkt.data() + 14, 39) == 0);
  pkt[14] = 0x4F;  // IHL 15 = 60 bytes of IP header, longer than we have
  CHECK(icrc_headers(pkt.data() + 14, 50) == 0);
}

// The definition, written out: CRC-32 over 8 bytes of ones and a copy of the
// packet with the variant fields set to ones.
static uint32_t icrc_by_definition(const uint8_t* ip, std::size_t len) {
  std::vector<uint8_t> m(8 + len, 0xFF);
  std::copy(ip, ip + len, m.begin() + 8);
  const std::size_t ihl = static_cast<std::size_t>(ip[0] & 0x0F) * 4, o = 8;
  m[o + 1] = m[o + 8] = m[o + 10] = m[o + 11] = 0xFF;
  m[o + ihl + 6] = m[o + ihl + 7] = 0xFF;
  m[o + ihl + 8 + 4] = 0xFF;
  return static_cast<uint32_t>(crc32(0, m.data(), static_cast<uInt>(m.size())));
}

TEST_CASE("icrc equals its definition for random packets, with and without IP options") {
  std::mt19937 rng(11);
  std::vector<uint8_t> p(2000);
  for (int t = 0; t < 2000; ++t) {
    for (auto& b : p) b = static_cast<uint8_t>(rng());
    const std::size_t ihl_words = t % 4 == 0 ? 5 + rng() % 11 : 5;
    p[0] = static_cast<uint8_t>(0x40 | ihl_words);
    const std::size_t len = ihl_words * 4 + 8 + 12 + rng() % 1500;
    CHECK(roce_icrc(p.data(), len) == icrc_by_definition(p.data(), len));
  }
}

// The carry-less-multiplication kernel (icrc.cc) has separate paths for up
// to 16 blocks, for four 512-bit lanes folded 256 bytes a step, for the 0-15
// blocks after the lanes and for a partial last block: every length from 0
// to 700 (and long ones) at a random start alignment, from any running CRC.
TEST_CASE("crc32 matches zlib for every length, alignment and running CRC") {
  std::mt19937 rng(13);
  std::vector<uint8_t> buf(9000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  std::vector<std::size_t> lens;
  for (std::size_t n = 0; n <= 700; ++n) lens.push_back(n);
  for (std::size_t n : {767u, 768u, 769u, 1023u, 1024u, 1025u, 1039u, 1295u, 2047u, 4099u, 8191u}) lens.push_back(n);
  for (std::size_t len : lens) {
    const std::size_t at = rng() % 16;
    const uint32_t start = len % 3 == 0 ? 0u : static_cast<uint32_t>(rng());
    const uint32_t z = static_cast<uint32_t>(crc32(start, buf.data() + at, static_cast<uInt>(len)));
    CHECK(crc32_update(start, buf.data() + at, len) == z);
  }
}

TEST_CASE("icrc equals its definition for every transport length without IP options") {
  std::mt19937 rng(17);
  std::vector<uint8_t> p(700);
  for (std::size_t len = 20 + 8 + 12; len < p.size(); ++len) {
    for (auto& b : p) b = static_cast<uint8_t>(rng());
    p[0] = 0x45;
    CHECK(roce_icrc(p.data(), len) == icrc_by_definition(p.data(), len));
  }
}

TEST_CASE("the kernel chosen at start-up is the best one the CPU has, unless the environment names one") {
  REQUIRE(crc_kernel_supported(CrcKernel::kLibrary));
  // The AVX-512 kernel needs everything the AVX2 one does.
  if (crc_kernel_supported(CrcKernel::kAvx512)) CHECK(crc_kernel_supported(CrcKernel::kAvx2));
  const char* forced = std::getenv("TANDEM_ICRC_KERNEL");
  if (forced != nullptr && std::string(forced) == "library") {
    CHECK(crc_kernel() == CrcKernel::kLibrary);
  } else if (forced != nullptr) {
    CHECK(std::string(crc_kernel_name(crc_kernel())) == forced);
  } else if (std::getenv("TANDEM_CRC_NO_AVX512") != nullptr) {
    CHECK(crc_kernel() == CrcKernel::kLibrary);
  } else {
    const CrcKernel best = crc_kernel_supported(CrcKernel::kAvx512) ? CrcKernel::kAvx512
                           : crc_kernel_supported(CrcKernel::kAvx2) ? CrcKernel::kAvx2
                                                                    : CrcKernel::kLibrary;
    CHECK(crc_kernel() == best);
  }
  CHECK(std::string(crc32_backend()).find(crc_kernel() == CrcKernel::kAvx2     ? "vpclmulqdq-256"
                                          : crc_kernel() == CrcKernel::kAvx512 ? "vpclmulqdq-512"
                                                                               : "") != std::string::npos);
}

// Every kernel against zlib (the reference, extended a byte at a time) and
// ISA-L (called whole) on every length 0-9000 at every start alignment
// modulo 64, from a zero and from a running CRC; then each length once more
// as an exact-size heap copy, so that a read past the end shows under ASan.
TEST_CASE("every crc kernel matches zlib and ISA-L for every length 0-9000 at every alignment") {
  constexpr std::size_t kMax = 9000;
  std::mt19937 rng(23);
  std::vector<uint8_t> storage(kMax + 2 * 64);
  for (auto& b : storage) b = static_cast<uint8_t>(rng());
  const std::size_t skew = (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  const uint8_t* base = storage.data() + skew;
  std::vector<std::string> bad;
  std::size_t checked = 0;
  for (std::size_t a = 0; a < 64; ++a) {
    const uint32_t start = a % 2 == 0 ? 0u : static_cast<uint32_t>(rng());
    const uint8_t* p = base + a;
    uint32_t ref = start;  // zlib's CRC of p[0..n)
    for (std::size_t n = 0; n <= kMax; ++n) {
#if defined(TANDEM_HAVE_ISAL)
      if (crc32_gzip_refl(start, p, n) != ref) bad.push_back("isa-l at " + std::to_string(a) + "+" + std::to_string(n));
#endif
      for (CrcKernel k : kCrcKernels) {
        if (!select_crc_kernel(k)) continue;
        ++checked;
        if (crc32_update(start, p, n) != ref && bad.size() < 20)
          bad.push_back(std::string(crc_kernel_name(k)) + " at " + std::to_string(a) + "+" + std::to_string(n));
      }
      ref = static_cast<uint32_t>(crc32(ref, p + n, 1));
    }
  }
  for_each_kernel([&](CrcKernel k) {
    for (std::size_t n = 0; n <= kMax; ++n) {
      const std::vector<uint8_t> exact(base + 7, base + 7 + n);
      const uint32_t z = static_cast<uint32_t>(crc32(0, base + 7, static_cast<uInt>(n)));
      if (crc32_update(0, exact.data(), n) != z && bad.size() < 20)
        bad.push_back(std::string(crc_kernel_name(k)) + " exact copy of " + std::to_string(n));
    }
  });
  std::string first;
  for (const auto& b : bad) first += b + "; ";
  INFO(checked << " kernel runs; first mismatches: " << first);
  CHECK(bad.empty());
  CHECK(checked >= 64 * (kMax + 1));
}

TEST_CASE("every crc kernel gives the ICRC's definition for every packet length to 9000 and alignment") {
  std::mt19937 rng(29);
  std::vector<uint8_t> storage(9000 + 64);
  std::vector<std::string> bad;
  for_each_kernel([&](CrcKernel k) {
    for (std::size_t len = 20 + 8 + 12; len <= 9000; ++len) {
      uint8_t* p = storage.data() + (len * 7) % 64;
      for (std::size_t i = 0; i < len; ++i) p[i] = static_cast<uint8_t>(rng());
      p[0] = static_cast<uint8_t>(0x40 | (len % 5 == 0 && len >= 100 ? 5 + len % 11 : 5));
      if (roce_icrc(p, len) != icrc_by_definition(p, len) && bad.size() < 20)
        bad.push_back(std::string(crc_kernel_name(k)) + " len " + std::to_string(len));
    }
  });
  std::string first;
  for (const auto& b : bad) first += b + "; ";
  INFO("first mismatches: " << first);
  CHECK(bad.empty());
}

TEST_CASE("a burst's ICRCs equal each packet's, whatever the mix of lengths and IP options") {
  for_each_kernel([](CrcKernel k) {
    INFO("kernel " << crc_kernel_name(k));
    std::mt19937 rng(19);
    std::vector<std::vector<uint8_t>> pkts(37);
    std::vector<const uint8_t*> ip(pkts.size());
    std::vector<std::size_t> len(pkts.size());
    std::vector<uint32_t> out(pkts.size());
    for (int round = 0; round < 200; ++round) {
      for (std::size_t i = 0; i < pkts.size(); ++i) {
        pkts[i].resize(600);
        for (auto& b : pkts[i]) b = static_cast<uint8_t>(rng());
        const bool options = rng() % 8 == 0;
        pkts[i][0] = static_cast<uint8_t>(0x40 | (options ? 6 + rng() % 10 : 5));
        const std::size_t ihl = (pkts[i][0] & 0x0F) * 4u;
        // Mostly alike (a burst of one QP's frames), sometimes anything up to 500 bytes.
        len[i] = ihl + 8 + 12 + (rng() % 4 == 0 ? rng() % 480 : 104 + rng() % 3);
        ip[i] = pkts[i].data();
      }
      const std::size_t n = rng() % (pkts.size() + 1);
      roce_icrc_burst(ip.data(), len.data(), out.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        INFO("round " << round << " packet " << i << " len " << len[i]);
        CHECK(out[i] == icrc_by_definition(ip[i], len[i]));
      }
    }
  });
}

TEST_CASE("crc32_copy equals crc32_update and memcpy for every length 0-9000 at 64 alignments, on every crc kernel") {
  // The fused kernel of the receive path (the ICRC checked while the payload
  // is placed) against the plain CRC of this kernel (checked against zlib
  // above) and memcpy: the CRC, every destination byte, and not one byte
  // written outside dst[0..n) (guard bytes either side).
  constexpr std::size_t kMax = 9000, kGuard = 64;
  std::mt19937 rng(31);
  std::vector<uint8_t> src_store(kMax + 2 * 64), dst_store(kMax + 2 * 64 + 2 * kGuard);
  for (auto& b : src_store) b = static_cast<uint8_t>(rng());
  const std::size_t src_skew = (64 - reinterpret_cast<uintptr_t>(src_store.data()) % 64) % 64;
  const std::size_t dst_skew = (64 - reinterpret_cast<uintptr_t>(dst_store.data()) % 64) % 64;
  std::vector<std::string> bad;
  std::size_t checked = 0;
  for_each_kernel([&](CrcKernel k) {
    for (std::size_t a = 0; a < 64; ++a) {
      // Source and destination at different alignments (a, and 37a + 11 mod 64).
      const uint8_t* src = src_store.data() + src_skew + a;
      uint8_t* const dst0 = dst_store.data() + dst_skew + kGuard;
      uint8_t* const dst = dst0 + (37 * a + 11) % 64;
      const uint32_t start = a % 2 == 0 ? 0u : static_cast<uint32_t>(rng());
      const uint8_t fill = static_cast<uint8_t>(0xA5 ^ a);
      std::memset(dst_store.data(), fill, dst_store.size());
      for (std::size_t n = 0; n <= kMax; ++n) {
        ++checked;
        const uint32_t want = crc32_update(start, src, n);
        const uint32_t got = crc32_copy(start, dst, src, n);
        const bool bytes_ok = std::memcmp(dst, src, n) == 0;
        // The bytes around dst[0..n): before it, and the 64 after it.
        bool guards_ok = std::all_of(dst_store.data(), dst, [&](uint8_t b) { return b == fill; }) &&
                         std::all_of(dst + n, dst + n + kGuard, [&](uint8_t b) { return b == fill; });
        if ((got != want || !bytes_ok || !guards_ok) && bad.size() < 20)
          bad.push_back(std::string(crc_kernel_name(k)) + " at " + std::to_string(a) + "+" + std::to_string(n) +
                        (got != want ? " crc" : "") + (bytes_ok ? "" : " bytes") + (guards_ok ? "" : " guard"));
        std::memset(dst, fill, n);  // the next length writes into fill bytes again
      }
    }
    // Exact-size heap copies: a kernel that read or wrote past either end
    // would be caught by ASan (tests/fuzz/fuzz_crc_copy.cc runs the same).
    for (std::size_t n : {16u, 17u, 31u, 63u, 64u, 65u, 255u, 256u, 257u, 4095u, 4096u, 4097u}) {
      const std::vector<uint8_t> s(src_store.begin(), src_store.begin() + static_cast<std::ptrdiff_t>(n));
      std::vector<uint8_t> d(n);
      if ((crc32_copy(7, d.data(), s.data(), n) != crc32_update(7, s.data(), n) || d != s) && bad.size() < 20)
        bad.push_back(std::string(crc_kernel_name(k)) + " exact " + std::to_string(n));
    }
  });
  std::string first;
  for (const auto& b : bad) first += b + "; ";
  INFO(checked << " kernel runs; first mismatches: " << first);
  CHECK(bad.empty());
  CHECK(checked >= 64 * (kMax + 1));
}

TEST_CASE("an ICRC continued over a payload with crc32_copy is the packet's ICRC, on every crc kernel") {
  // The receive path's split: icrc_headers over IPv4..transport headers
  // (the RX stage), then crc32_update / crc32_copy over the payload in pieces
  // (the core: XETH, each scatter entry) and the pad.
  std::mt19937 rng(37);
  std::vector<uint8_t> pkt(4200), dst(4200);
  std::vector<std::string> bad;
  for_each_kernel([&](CrcKernel k) {
    for (int round = 0; round < 2000; ++round) {
      const std::size_t hdr = 40 + 4 * (rng() % 8), len = hdr + rng() % 4100;
      for (std::size_t i = 0; i < len; ++i) pkt[i] = static_cast<uint8_t>(rng());
      pkt[0] = 0x45;
      const std::size_t cut1 = hdr + rng() % (len - hdr + 1), cut2 = cut1 + rng() % (len - cut1 + 1);
      uint32_t c = icrc_headers(pkt.data(), hdr);
      c = crc32_update(c, pkt.data() + hdr, cut1 - hdr);
      c = crc32_copy(c, dst.data(), pkt.data() + cut1, cut2 - cut1);
      c = crc32_copy(c, dst.data() + (cut2 - cut1), pkt.data() + cut2, len - cut2);
      if ((c != roce_icrc(pkt.data(), len) || std::memcmp(dst.data(), pkt.data() + cut1, len - cut1) != 0) &&
          bad.size() < 20)
        bad.push_back(std::string(crc_kernel_name(k)) + " len " + std::to_string(len));
    }
  });
  std::string first;
  for (const auto& b : bad) first += b + "; ";
  INFO("first mismatches: " << first);
  CHECK(bad.empty());
}
