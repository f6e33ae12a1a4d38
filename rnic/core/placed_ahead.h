// What a responder keeps to place a request's payload before its ICRC is
// known (rnic/core/README.md "ICRC"): the messages whose place a verified
// packet has told it (IRN), so a later packet of one is placed while its
// ICRC is computed, and the PSNs whose place holds a bad packet's bytes until
// the good packet with that PSN overwrites them (no READ or atomic reads
// memory meanwhile).
#pragma once

#include <array>
#include <cstdint>

#include "common/wire/psn.h"
#include "rnic/core/irn_wire.h"

namespace tandem::rnic {

class PlacedAhead {
 public:
  // Forgets everything (QP reset, a benchmark's restart).
  void clear() noexcept {
    for (Msg& m : msgs_) m.npkts = 0;
    ntaint_ = 0;
  }

  // IRN: a packet of a message at `psn` with XETH `x` passed its ICRC.
  // `mtu_shift`: log2 of the path MTU (a power of two).
  void learn(const Xeth& x, uint32_t psn, uint32_t mtu_shift) noexcept {
    const uint32_t first = common::psn_add(psn, -static_cast<int64_t>(x.msg_offset >> mtu_shift));
    Msg* slot = nullptr;
    for (Msg& m : msgs_)
      if (m.npkts != 0 && m.first_psn == first) slot = &m;  // known (or a stale one, 2^24 PSNs ago)
    Msg& m = slot != nullptr ? *slot : msgs_[next_++ % msgs_.size()];
    m.first_psn = first;
    m.npkts = x.msg_len == 0 ? 1 : ((x.msg_len - 1) >> mtu_shift) + 1;
    m.recv_idx = x.recv_idx;
    m.rkey = x.rkey;
    m.msg_len = x.msg_len;
    m.va = x.va;
  }

  // IRN: true if a packet at `psn` (in the window, its slot unarrived) with
  // XETH `x` belongs to a message a verified packet told of, still going on
  // at `epsn`, and sits at the offset its PSN has in it: its place is then the
  // one the good packet with that PSN writes, whatever bits of it are
  // corrupted, and the sender sends that packet (again) until it arrives.
  bool knows(const Xeth& x, uint32_t psn, uint32_t epsn, uint32_t mtu_shift) const noexcept {
    if ((x.msg_offset & ((1u << mtu_shift) - 1)) != 0) return false;
    const uint32_t first = common::psn_add(psn, -static_cast<int64_t>(x.msg_offset >> mtu_shift));
    for (const Msg& m : msgs_) {
      if (m.npkts == 0 || m.first_psn != first) continue;
      return m.rkey == x.rkey && m.va == x.va && m.msg_len == x.msg_len && m.recv_idx == x.recv_idx &&
             (x.msg_offset >> mtu_shift) < m.npkts &&
             common::psn_diff(common::psn_add(first, m.npkts - 1), epsn) >= 0;  // not all arrived yet
    }
    return false;
  }

  // Room to remember one more bad packet's PSN (else: check before placing).
  bool can_taint() const noexcept { return ntaint_ < taint_.size(); }
  void taint(uint32_t psn) noexcept {
    if (ntaint_ < taint_.size()) taint_[ntaint_++] = psn;
  }
  // True while a bad packet's bytes may still sit at some PSN's place.
  // `overwritten(psn)`: that PSN's good packet has arrived (or ePSN passed it).
  template <class Overwritten>
  bool tainted(Overwritten&& overwritten) noexcept {
    for (uint32_t i = 0; i < ntaint_;) {
      if (overwritten(taint_[i])) taint_[i] = taint_[--ntaint_];
      else ++i;
    }
    return ntaint_ != 0;
  }
  bool any_taint() const noexcept { return ntaint_ != 0; }

 private:
  struct Msg {
    uint32_t first_psn = 0;
    uint32_t npkts = 0;  // 0: empty
    uint32_t recv_idx = 0;
    uint32_t rkey = 0;
    uint32_t msg_len = 0;
    uint64_t va = 0;
  };
  // A few messages: IRN's spraying interleaves the packets of neighbours.
  std::array<Msg, 4> msgs_{};
  uint32_t next_ = 0;
  std::array<uint32_t, 4> taint_{};
  uint32_t ntaint_ = 0;
};

}  // namespace tandem::rnic
