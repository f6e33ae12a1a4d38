// parse_roce's fast path for the common layout against the general parser:
// on valid, mutated, truncated, VLAN, VXLAN and IP-options frames both must
// give the same drop reason and the same value in every field.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "common/wire/roce_packet.h"
#include "tests/lib/roce_packet_diff.h"

using namespace tandem::common;

namespace {

// What a reused RocePacket holds from an earlier, different frame: no field
// at its default, so a field the fast path forgets to write shows.
RocePacket poisoned() {
  RocePacket p;
  p.has_outer = true;
  p.outer.eth = {{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}, true, 77, 0x86DD};
  p.outer.ip = {6, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  p.outer.udp = {1, 2, 3, 4};
  p.outer.vxlan = {0xFF, 1234};
  p.eth = p.outer.eth;
  p.ip = p.outer.ip;
  p.udp = p.outer.udp;
  p.bth = {0x55, true, true, 3, 9, 1, true, true, 5, true, 7, 6};
  p.reth = {1, 2, 3};
  p.aeth = {1, 2};
  p.imm = 3;
  p.atomic = {1, 2, 3, 4};
  p.atomic_ack = 5;
  p.ip_offset = p.payload_offset = p.payload_len = p.icrc = p.icrc_computed = 99;
  p.icrc_checked = true;
  return p;
}

struct Tally {
  std::size_t fast = 0, fallback = 0;
};

// Runs both on `f` under every ParseOptions combination.
void check_same(const std::vector<uint8_t>& f, Tally& t) {
  for (int o = 0; o < 4; ++o) {
    ParseOptions opts;
    opts.check_icrc = (o & 1) != 0;
    opts.check_ip_checksum = (o & 2) != 0;
    // An exact-size heap copy, so ASan sees any over-read.
    const std::vector<uint8_t> bytes(f);
    RocePacket general = poisoned();
    const DropReason want = detail::parse_roce_general(bytes.data(), bytes.size(), general, opts);
    RocePacket fast = poisoned();
    DropReason got = DropReason::kNone;
    if (detail::parse_roce_common_layout(bytes.data(), bytes.size(), fast, opts, got)) {
      ++t.fast;
      INFO("fast path, options " << o << ", frame length " << bytes.size());
      REQUIRE(got == want);
      REQUIRE(diff(fast, general).empty());
    } else {
      ++t.fallback;
      INFO("fallback, options " << o << ", frame length " << bytes.size() << ", general says "
                                << static_cast<int>(want));
      REQUIRE(diff(fast, poisoned()).empty());  // untouched
    }
    RocePacket through = poisoned();
    REQUIRE(parse_roce(bytes.data(), bytes.size(), through, opts) == want);
    REQUIRE(diff(through, general).empty());
  }
}

RocePacket random_spec(uint8_t opcode, std::mt19937& rng) {
  auto r = [&](uint32_t bits) { return static_cast<uint32_t>(rng()) & ((bits >= 32) ? ~0u : ((1u << bits) - 1)); };
  RocePacket p;
  for (auto& b : p.eth.dst) b = static_cast<uint8_t>(r(8));
  for (auto& b : p.eth.src) b = static_cast<uint8_t>(r(8));
  p.ip.tos = static_cast<uint8_t>(r(8));
  p.ip.id = static_cast<uint16_t>(r(16));
  p.ip.frag = (r(1) != 0u) ? 0x4000 : 0;
  p.ip.ttl = static_cast<uint8_t>(r(8));
  p.ip.src = r(32);
  p.ip.dst = r(32);
  p.udp.sport = static_cast<uint16_t>(r(16));
  p.bth = {opcode, r(1) != 0, r(1) != 0, 0, 0, static_cast<uint16_t>(r(16)), r(1) != 0, r(1) != 0,
           r(24), r(1) != 0, static_cast<uint8_t>(r(7)), r(24)};
  p.reth = {(uint64_t{r(32)} << 32) | r(32), r(32), r(32)};
  p.aeth = {static_cast<uint8_t>(r(8)), r(24)};
  p.imm = r(32);
  p.atomic = {(uint64_t{r(32)} << 32) | r(32), r(32), (uint64_t{r(32)} << 32) | r(32), r(32)};
  p.atomic_ack = (uint64_t{r(32)} << 32) | r(32);
  return p;
}

std::vector<uint8_t> build(const RocePacket& spec, std::size_t payload_len, std::mt19937& rng) {
  std::vector<uint8_t> payload(payload_len);
  for (auto& b : payload) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> out(payload_len + 200);
  out.resize(build_roce(spec, payload, out.data(), out.size()));
  REQUIRE(!out.empty());
  return out;
}

// The same frame with 4 bytes of IPv4 options (IHL 6) at `ip_off`, lengths
// and checksum fixed; the ICRC is left as it was (so wrong).
std::vector<uint8_t> with_ip_options(std::vector<uint8_t> f, std::size_t ip_off) {
  f.insert(f.begin() + static_cast<std::ptrdiff_t>(ip_off + kIpv4HdrLen), {1, 1, 1, 0});
  f[ip_off] = 0x46;
  store_be16(&f[ip_off + 2], static_cast<uint16_t>(load_be16(&f[ip_off + 2]) + 4));
  store_be16(&f[ip_off + 10], 0);
  store_be16(&f[ip_off + 10], ipv4_checksum(&f[ip_off], 24));
  return f;
}

void fix_ip_checksum(std::vector<uint8_t>& f, std::size_t ip_off) {
  if (f.size() < ip_off + kIpv4HdrLen) return;
  store_be16(&f[ip_off + 10], 0);
  store_be16(&f[ip_off + 10], ipv4_checksum(&f[ip_off], kIpv4HdrLen));
}

}  // namespace

TEST_CASE("the fast path and the general parser agree on every frame of every opcode and its mutations") {
  std::mt19937 rng(4791);
  Tally t;
  for (int op = 0; op < 256; ++op) {
    if (!opcode_known(static_cast<uint8_t>(op))) continue;
    const bool payload = opcode_has(static_cast<uint8_t>(op), kOpPayload);
    for (std::size_t len : payload ? std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 64, 1024} : std::vector<std::size_t>{0}) {
      for (int variant = 0; variant < 4; ++variant) {  // plain, VLAN, VXLAN, IPv4 options
        INFO("opcode " << op << " payload " << len << " variant " << variant);
        RocePacket spec = random_spec(static_cast<uint8_t>(op), rng);
        spec.eth.has_vlan = variant == 1;
        spec.eth.vlan_tci = static_cast<uint16_t>(rng());
        spec.has_outer = variant == 2;
        auto f = build(spec, len, rng);
        const std::size_t ip_off = roce_ip_offset(spec);
        if (variant == 3) f = with_ip_options(f, ip_off);
        check_same(f, t);

        // Every truncation of the headers and the last bytes; Ethernet padding.
        for (std::size_t n = 0; n < f.size(); ++n) {
          if (n > 100 && n + 8 < f.size()) continue;
          check_same(std::vector<uint8_t>(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n)), t);
        }
        auto padded = f;
        padded.resize(f.size() + 1 + rng() % 40, static_cast<uint8_t>(rng()));
        check_same(padded, t);

        // Single-byte changes at every header byte and a few later ones, with
        // the IPv4 checksum left wrong or fixed up (to reach later checks).
        for (std::size_t i = 0; i < f.size(); ++i) {
          if (i > 100 && i + 8 < f.size() && rng() % 16 != 0) continue;
          for (int k = 0; k < 2; ++k) {
            auto m = f;
            m[i] ^= static_cast<uint8_t>(1 + rng() % 255);
            if (k == 1) fix_ip_checksum(m, ip_off);
            check_same(m, t);
          }
        }
      }
    }
  }
  // Both halves ran: the test is not vacuous.
  CHECK(t.fast > 1000);
  CHECK(t.fallback > 1000);
}

TEST_CASE("the fast path takes the usual frames: no VLAN, IHL 5, UDP 4791, an RC opcode") {
  std::mt19937 rng(1);
  for (uint8_t op : {uint8_t{IBV_OPCODE_RC_RDMA_WRITE_ONLY}, uint8_t{IBV_OPCODE_RC_SEND_MIDDLE},
                     uint8_t{IBV_OPCODE_RC_ACKNOWLEDGE}, uint8_t{IBV_OPCODE_RC_RDMA_READ_RESPONSE_FIRST}}) {
    RocePacket spec = random_spec(op, rng);
    auto f = build(spec, opcode_has(op, kOpPayload) ? 64 : 0, rng);
    RocePacket got;
    DropReason r = DropReason::kUnknownOpcode;
    REQUIRE(detail::parse_roce_common_layout(f.data(), f.size(), got, {}, r));
    CHECK(r == DropReason::kNone);
    f[f.size() - 5] ^= 1;  // last payload/header byte before the ICRC
    REQUIRE(detail::parse_roce_common_layout(f.data(), f.size(), got, {}, r));
    CHECK(r == DropReason::kBadIcrc);
    spec.eth.has_vlan = true;
    f = build(spec, 8, rng);
    CHECK_FALSE(detail::parse_roce_common_layout(f.data(), f.size(), got, {}, r));
  }
}
