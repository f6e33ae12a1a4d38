// The port layer's I/O (rnic/port/port_io.h) for unit tests: frames are plain
// byte buffers from a fixed pool, the clock is whatever the test sets, and
// the TX side takes only as many frames as the test allows (refusing the
// rest, as a full port does). Frames the port took wait on `wire` for the
// test to deliver, drop or rewrite.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <vector>

#include "common/wire/byte_order.h"
#include "rnic/core/frame.h"
#include "rnic/port/port_io.h"

namespace tandem::rnic::port::test {

struct FakeFrame {
  uint32_t len = 0;
  std::array<uint8_t, 9216> bytes{};
};

class FakeIo {
 public:
  using Buf = FakeFrame;
  static constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

  explicit FakeIo(std::size_t frames = 512) : pool_(frames) {
    for (FakeFrame& f : pool_) free_.push_back(&f);
  }
  FakeIo(const FakeIo&) = delete;
  FakeIo& operator=(const FakeIo&) = delete;

  // ---- the interface PortWorker uses
  uint64_t now_ns() const noexcept { return now; }
  uint16_t rx_ports() const noexcept { return 1; }
  uint16_t rx_burst(uint16_t, FakeFrame** out, uint16_t n) noexcept {
    uint16_t k = 0;
    while (k < n && !rx.empty()) {
      out[k++] = rx.front();
      rx.pop_front();
    }
    return k;
  }
  uint16_t tx_burst(FakeFrame** b, uint16_t n) noexcept {
    const uint16_t k = static_cast<uint16_t>(std::min<std::size_t>(n, tx_room));
    if (tx_room != kUnlimited) tx_room -= k;
    for (uint16_t i = 0; i < k; ++i) wire.push_back(b[i]);
    ++tx_calls;
    return k;
  }
  FakeFrame* build(const TxDesc& d, const EncapTemplate& t, uint16_t sport) noexcept {
    FakeFrame* f = alloc();
    if (f == nullptr) return nullptr;
    // The addresses from the template's Ethernet/IPv4 bytes, the P_Key it
    // stamps and the path's source port: what TxEncap writes.
    FrameAddrs a;
    std::memcpy(a.dst_mac.data(), t.hdr, 6);
    std::memcpy(a.src_mac.data(), t.hdr + 6, 6);
    a.tos = t.hdr[15];
    a.src_ip = common::load_be32(t.hdr + 26);
    a.dst_ip = common::load_be32(t.hdr + 30);
    TxDesc out = d;
    out.bth.pkey = t.pkey;
    out.udp_sport = sport;
    f->len = static_cast<uint32_t>(build_frame(out, a, f->bytes.data(), f->bytes.size()));
    if (f->len == 0) {
      release(f);
      return nullptr;
    }
    ++built;
    return f;
  }
  void finish() noexcept {}
  void free_bulk(FakeFrame** b, uint16_t n) noexcept {
    for (uint16_t i = 0; i < n; ++i) release(b[i]);
  }
  static uint8_t* data(FakeFrame* f) noexcept { return f->bytes.data(); }
  static uint32_t len(const FakeFrame* f) noexcept { return f->len; }
  static bool segmented(const FakeFrame*) noexcept { return false; }
  static uint8_t* linearize(FakeFrame* f, uint32_t, uint8_t*) noexcept { return f->bytes.data(); }
  static void prefetch(const FakeFrame*) noexcept {}

  // ---- the test's side
  FakeFrame* alloc() noexcept {
    if (free_.empty()) return nullptr;
    FakeFrame* f = free_.back();
    free_.pop_back();
    return f;
  }
  void release(FakeFrame* f) noexcept { free_.push_back(f); }
  std::size_t free_frames() const noexcept { return free_.size(); }
  // A frame of the test's making arrives.
  bool inject(const uint8_t* bytes, uint32_t n) {
    FakeFrame* f = alloc();
    if (f == nullptr || n > f->bytes.size()) return false;
    std::memcpy(f->bytes.data(), bytes, n);
    f->len = n;
    rx.push_back(f);
    return true;
  }

  uint64_t now = 0;
  std::size_t tx_room = kUnlimited;  // frames tx_burst takes before it refuses
  uint64_t tx_calls = 0;
  uint64_t built = 0;
  std::deque<FakeFrame*> rx;    // to be received, in order
  std::vector<FakeFrame*> wire;  // taken by the "port", for the test to deliver

 private:
  std::vector<FakeFrame> pool_;
  std::vector<FakeFrame*> free_;
};

static_assert(PortIo<FakeIo>);

}  // namespace tandem::rnic::port::test
