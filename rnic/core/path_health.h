// Path health (after Harp): per path of a QP's path set, whether it is usable.
// A path is taken out when it loses kLossesToRemove packets in a row while
// most other paths are not losing (losses everywhere mean congestion at the
// destination, not a broken path), or when it has packets outstanding and no
// acknowledgement for its silence time (a few of its own smoothed RTTs, at
// least kMinSilenceNs) although packets sent later on other paths have been
// acknowledged. While out, one packet is sent on it every probe interval, and
// the acknowledgement of a packet sent after it went out brings it back.
//
// While a path is out, the probe interval doubles with every probe that
// brings it no answer (up to kMaxProbeShift): with one packet in flight a
// probe that dies costs a whole timeout, and latency-bound traffic would
// otherwise pay it every few operations for as long as the path stays dead.
//
// Both rules judge a path only against evidence from that path: with
// spraying, a packet on a slow path is routinely overtaken, and a sender
// cannot tell late from lost by order alone. A path is FIFO, so a loss counts
// against it only once a packet sent later on the same path was acknowledged
// (the requester's own loss rule, RACK over all paths, may retransmit sooner);
// and silence is measured against the path's own RTT, and only while the
// peer is answering on other paths (a stalled receiver or host silences every
// path at once, which says nothing about any one of them).
//
// Host jitter (a software RNIC's loop descheduled, a peer that stalls, late
// ACKs) silences paths that work. Silence is evidence against a path only
// for time in which the owner was running and other paths were answering:
// * a gap in the owner's loop (on_local_gap: the Transport sees no call for
//   longer than its loop period) moves every silence deadline by the gap:
//   the ACKs that arrived meanwhile wait in the RX ring, and the first
//   burst after the gap holds some paths' answers but not others';
// * silence on every path at once (no ACK on any path for kAllQuietNs) is
//   the peer's stall or the whole fabric's, whatever burst of ACKs ends
//   it: its length moves every deadline too;
// * RTT samples of packets sent before such a stall ended are not used for
//   a path's RTT spread (they measure the stall).
// What remains: a path is silent when packets sent on it after the peer
// answered other paths' later packets stay unanswered past its own RTT
// spread. A silence the old deadline would have convicted but a stall
// excused is counted per path (PathStats::stall_excused).
//
// Silence needs as many unanswered packets as the loss rule needs losses
// (kLossesToRemove), the last of them past its RTT spread: on a sparse
// path (the lab's: 16 paths per QP at ~1 Gb/s, a packet per path per ms,
// each out alone, longer than the silence time) one random loss that RACK
// reports after that time, or two in a row, left a path that delivers
// unanswered: that is loss evidence, not a path that stopped. A dead path
// loses every packet and is out an RTT spread after its third.
//
// A timeout is evidence against the path the timed-out packet was sent on
// (on_timeout: a packet out a whole RTO is not merely overtaken), counted as
// a confirmed loss; an answer that shows the packet did arrive (on_ack for
// that path, e.g. the responder saying the resend was a duplicate) ends the
// run again. A resent packet goes where the answers come from: answering()
// says which paths have answered everything they were sent lately, and
// pick_retry() walks those (then every live path) in turn, never the path
// that lost the packet.
//
// A responder learns about its ACK paths from the requester's echo
// (irn_wire.h: each request names the path the latest response reached it
// on): on_echo is the ACK path's answer, so a dead ACK path goes silent and
// out by the same rules as a dead data path. With one request out at a time
// that may not happen (every lost ACK is a quiet of the whole QP, excused as
// a stall); there a duplicate of the newest PSN is the requester's word that
// the ACK (or both ACKs: a credit kick) telling of it died, and each such
// ACK path, echoed once, keeps its own run of these losses, out at the third
// and probed back like a data path (so half of a set dying at once is found;
// a run shared by all paths, broken by each blame of another, found none).
// Without echoes (go-back-N) the
// evidence is the requester resending a request the responder had already
// acknowledged (on_duplicate): if every ACK that carried the news went on one
// path, long enough ago, that path lost it; kLossesToRemove such losses in a
// row on one path take it out for a hold time that doubles while it keeps
// losing, then it is used again (no acknowledgement will bring it back).
// Shared by the spraying policies; plain arrays, nothing allocated.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "common/wire/psn.h"

namespace tandem::rnic {

inline constexpr uint32_t kMaxPaths = 64;

struct PathStats {
  uint64_t pkts = 0;      // packets sent on the path
  uint64_t acks = 0;      // acknowledged packets that had used it
  uint64_t losses = 0;    // losses reported (a path may be only late)
  uint64_t confirmed_losses = 0;  // of them, with a later packet on the path acknowledged
  uint64_t ack_losses = 0;  // responder: ACKs it sent on the path that were lost (on_duplicate)
  uint64_t ecn = 0;
  uint64_t removals = 0;  // times the path was taken out
  uint64_t silent_removals = 0;  // of which by the silence rule
  uint64_t loss_removals = 0;    // of which by loss evidence (the rest: a responder's ACK path)
  uint64_t stall_excused = 0;    // silences a host stall excused (no removal)
  uint64_t returns = 0;   // times a probe brought it back
  uint64_t first_removed_ns = 0;  // when it was first taken out (0: never)
  uint64_t last_returned_ns = 0;
  uint64_t srtt_ns = 0;  // filled by PathHealth::snapshot (telemetry), not counted
  bool up = true;
};

class PathHealth {
 public:
  static constexpr uint32_t kLossesToRemove = 3;
  static constexpr uint64_t kMinSilenceNs = 100'000;
  static constexpr uint32_t kSilenceRtts = 4;
  // Responder: an ACK counts as lost when the requester resends what it
  // acknowledged this long after it was sent (a live ACK arrives within an
  // RTT; the requester's tail timer waits at least 100 us).
  static constexpr uint64_t kAckLossAgeNs = 50'000;
  // Responder: how long an ACK path found losing stays out (doubling while
  // it keeps losing, up to ~1 s): failures last milliseconds to seconds, and
  // a wrong verdict only narrows the ACKs' spread for a while.
  static constexpr uint64_t kAckHoldNs = 1'000'000;
  static constexpr uint32_t kMaxHoldShift = 10;
  // No ACK on any path for this long: a stall of the peer (or the fabric),
  // not of one path; the quiet time does not count against any path.
  static constexpr uint64_t kAllQuietNs = 50'000;
  // A path that is out: the probe interval doubles per unanswered probe up
  // to 2^kMaxProbeShift times (a heal is still found within ~0.1-0.3 s).
  static constexpr uint32_t kMaxProbeShift = 7;
  // A PSN resent more often than this in a row goes on every live path in
  // turn, not only on those that answer lately (pick_retry).
  static constexpr uint32_t kAnsweringTries = 2;

  void reset(uint32_t n) noexcept {
    n_ = std::clamp<uint32_t>(n, 1, kMaxPaths);
    for (auto& p : p_) p = PerPath{};
    blame_path_ = kMaxPaths;
    blame_run_ = 0;
    last_any_ack_ = 0;
    stall_end_ = 0;
    echoes_ok_ = 0;
  }
  uint32_t size() const noexcept { return n_; }
  bool up(uint32_t i) const noexcept { return !p_[i].down; }
  uint32_t up_count() const noexcept {
    uint32_t k = 0;
    for (uint32_t i = 0; i < n_; ++i) k += !p_[i].down;
    return k;
  }
  const PathStats& stats(uint32_t i) const noexcept { return p_[i].s; }
  // The counters with the path's smoothed RTT and whether it is in the set now.
  PathStats snapshot(uint32_t i) const noexcept {
    PathStats s = p_[i].s;
    s.srtt_ns = p_[i].srtt;
    s.up = !p_[i].down;
    return s;
  }
  uint64_t srtt_ns(uint32_t i) const noexcept { return p_[i].srtt; }
  // How long path i may stay silent: its own RTT (a path without samples
  // gets the slowest path's), a few times over, and past its jitter.
  uint64_t silence_ns(uint32_t i) const noexcept {
    uint64_t srtt = p_[i].srtt, var = p_[i].rttvar;
    if (srtt == 0) {
      for (uint32_t k = 0; k < n_; ++k)
        if (p_[k].srtt > srtt) { srtt = p_[k].srtt; var = p_[k].rttvar; }
    }
    return std::max({kMinSilenceNs, kSilenceRtts * srtt, srtt + 4 * var});
  }
  uint64_t probe_interval_ns(uint32_t i) const noexcept { return silence_ns(i) << p_[i].probe_shift; }
  // How late path i's answer may plausibly come: sRTT + 4 RTTVAR (a path
  // without samples gets the slowest path's).
  uint64_t spread_ns(uint32_t i) const noexcept {
    uint64_t s = p_[i].srtt + 4 * p_[i].rttvar;
    if (p_[i].srtt == 0)
      for (uint32_t k = 0; k < n_; ++k) s = std::max(s, p_[k].srtt + 4 * p_[k].rttvar);
    return s;
  }

  // Checks silences; returns a path that is out and due for a probe
  // (n_ if none). The caller sends the next packet there and calls on_sent.
  // Only new data probes (`may_probe`): a retransmission sent as a probe
  // onto a dead path is lost again, and if it was the RTO's it costs a
  // doubled timeout.
  uint32_t tick(uint64_t now, bool may_probe = true) noexcept {
    uint32_t probe = n_;
    for (uint32_t i = 0; i < n_; ++i) {
      PerPath& p = p_[i];
      if (!p.down) {
        // Only a path that has answered before can go silent (a QP that
        // never gets feedback, e.g. a responder's ACK path, keeps all), and
        // only while most other paths answer packets sent after its oldest
        // outstanding one and few of them are in trouble too.
        if (silent(i, now) && most_answer_since(i, p.outstanding_since) && alone_troubled(i, now)) {
          ++p.s.silent_removals;
          take_out(i, now);
        } else if (!p.excused && p.excused_ns != 0 && p.s.acks > 0 && p.outstanding_since != 0 &&
                   p.unanswered >= kLossesToRemove && now > p.silent_after - p.excused_ns &&
                   most_answer_since(i, p.outstanding_since) && alone_troubled(i, now)) {
          p.excused = true;  // convicted without the stall's time; once per silence
          ++p.s.stall_excused;
        }
      } else if (p.s.acks == 0 && p.s.ack_losses > 0) {
        // An ACK path: nothing will ever acknowledge a probe; back after its hold.
        if (now >= p.next_probe) bring_back(p, now);
      } else if (may_probe && probe == n_ && now >= p.next_probe) {
        probe = i;
      }
    }
    return probe;
  }
  // `psn`: the packet's PSN (a responder's ACK: the PSN it acknowledges).
  // Inline (as on_ack): once per packet, and a call costs a third of it.
  [[gnu::always_inline]] void on_sent(uint32_t i, uint64_t now, uint32_t psn = 0) noexcept {
    PerPath& p = p_[i];
    ++p.s.pkts;
    p.last_psn = psn;
    p.last_sent_at = now ? now : 1;
    if (p.outstanding_since == 0) {
      // The path's RTT changes only with its own acks, which restart this:
      // the deadline is computed once here, not per packet in tick().
      p.outstanding_since = now ? now : 1;
      p.silent_after = p.outstanding_since + silence_ns(i);
      p.excused_ns = 0;
      p.excused = false;
    }
    // The kLossesToRemove-th unanswered packet must have had its time too:
    // its path's RTT spread (the silence time runs from the first).
    if (++p.unanswered == kLossesToRemove) {
      p.third_sent_at = now;
      if (now + spread_ns(i) > p.silent_after) {
        p.silent_after = now + spread_ns(i);
        p.excused_ns = 0;  // stalls before it was sent do not delay its answer
        p.excused = false;
      }
    }
    if (p.down && p.s.acks > 0) [[unlikely]] {
      // A probe: the next one waits twice as long unless this one is answered.
      p.probe_shift = static_cast<uint8_t>(std::min<uint32_t>(p.probe_shift + 1u, kMaxProbeShift));
      p.next_probe = now + probe_interval_ns(i);
    }
  }
  // A packet sent on path i `rtt_ns` ago was acknowledged (rtt_ns 0: its
  // send time is not known, e.g. a resent packet's; it restarts the
  // path's silence clock but brings no removed path back).
  [[gnu::always_inline]] void on_ack(uint32_t i, uint64_t rtt_ns, uint64_t now) noexcept {
    PerPath& p = p_[i];
    ++p.s.acks;
    const uint64_t sent = rtt_ns && rtt_ns < now ? now - rtt_ns : 0;
    note_answer_time(now);
    // A sample that spans a stall measures the stall, not the path.
    if (sent != 0 && sent < stall_end_) rtt_ns = 0;
    // An ack of a packet sent before the last counted loss does not break
    // the run of losses (acks and loss reports do not come in send order).
    if (sent == 0 || sent > p.last_loss_sent) p.consecutive_losses = 0;
    p.acked_sent = std::max(p.acked_sent, sent);
    // Something on the path answered: restart its silence clock.
    p.outstanding_since = 0;
    p.unanswered = 0;
    p.lost_since_ack = false;
    p.loss_since_ack = false;
    if (rtt_ns) {
      if (p.srtt == 0) {
        p.srtt = rtt_ns;
        p.rttvar = rtt_ns / 2;
      } else {
        const uint64_t dev = rtt_ns > p.srtt ? rtt_ns - p.srtt : p.srtt - rtt_ns;
        p.rttvar = (3 * p.rttvar + dev) / 4;
        p.srtt = (7 * p.srtt + rtt_ns) / 8;
      }
    }
    // Only a packet sent after the path went out proves it works again: a
    // late acknowledgement of an older one (held back behind a gap) does not.
    if (p.down && sent != 0 && sent >= p.removed_at) bring_back(p, now);
  }
  // The packet sent on path i at `sent_at` (0: not known) was declared lost
  // (`timeout`: by the retransmission timer, a confirmed loss whatever was
  // acknowledged on the path since).
  void on_loss(uint32_t i, uint64_t sent_at, uint64_t now, bool timeout = false) noexcept {
    PerPath& p = p_[i];
    ++p.s.losses;
    p.last_loss_at = now ? now : 1;
    p.loss_since_ack = true;
    // Evidence against the path only if a packet sent on it later arrived:
    // otherwise it may merely be late, overtaken by faster paths.
    if (sent_at == 0 || sent_at >= p.acked_sent) {
      // Declared lost, never to be answered: the first such loss since the
      // path's last ACK restarts its silence clock at its newest packet (a
      // sparse path that loses one packet is a loss, for the loss rule,
      // not a silence); a second one with no ACK between keeps the clock
      // running (a dead path loses every packet).
      if (!p.lost_since_ack && p.outstanding_since != 0 && sent_at >= p.outstanding_since) {
        p.lost_since_ack = true;
        if (p.last_sent_at > sent_at) {
          p.outstanding_since = p.last_sent_at;
          // Never before on_sent's deadline for the kLossesToRemove-th
          // unanswered packet: the newest was sent no earlier.
          p.silent_after = p.outstanding_since + silence_ns(i);
          p.excused_ns = 0;
          p.excused = false;
        } else {
          p.outstanding_since = 0;
        }
      }
      if (!timeout) return;
    }
    ++p.s.confirmed_losses;
    p.last_loss_sent = std::max(p.last_loss_sent, sent_at);
    if (!p.down && ++p.consecutive_losses >= kLossesToRemove && alone_losing(i)) {
      ++p.s.loss_removals;
      take_out(i, now);
    }
  }
  void on_ecn(uint32_t i) noexcept { ++p_[i].s.ecn; }

  // Whether path i has answered what it was sent lately: in the set, no loss
  // reported since its last answer, nothing unanswered past its RTT spread.
  bool answering(uint32_t i, uint64_t now) const noexcept {
    const PerPath& p = p_[i];
    return !p.down && !p.loss_since_ack && (p.outstanding_since == 0 || now <= p.outstanding_since + spread_ns(i));
  }
  // A path for a resent packet (or a response to a duplicate), the first
  // from `from` on (mod size()) that is not `avoid` (the path that lost it;
  // kMaxPaths: none) and, if `answering_only`, answering; else the first
  // live one that is not `avoid`; else `avoid` if live; else any but it.
  uint32_t pick_retry(uint32_t from, uint32_t avoid, bool answering_only, uint64_t now) const noexcept {
    if (from >= n_) from = 0;
    for (int pass = answering_only ? 0 : 1; pass < 2; ++pass) {
      for (uint32_t k = 0; k < n_; ++k) {
        const uint32_t i = from + k < n_ ? from + k : from + k - n_;
        if (i != avoid && (pass == 0 ? answering(i, now) : !p_[i].down)) return i;
      }
    }
    if (avoid < n_ && !p_[avoid].down) return avoid;
    return from != avoid || n_ == 1 ? from : (from + 1) % n_;
  }

  // Responder: the color responses on path i carry (irn_wire.h).
  bool color(uint32_t i) const noexcept { return p_[i].color; }
  // Responder: the requester echoed that responses sent on path i with
  // `color` reached it since it last echoed that (irn_wire.h). An echo of
  // the path's current color answers responses sent since the color last
  // flipped (color_since); the color flips for the next ones. Like an ACK
  // it restarts the path's silence clock; its "RTT" (from the oldest
  // unanswered) includes the wait for a request to carry it, so it only
  // makes the silence time longer. An echo of the other color is of
  // responses already answered. Echoes lag behind bursts of responses (one
  // per request, the paths waiting in turn), so an ACK path is silent only
  // once the last 2 x size() echoes taken all answered responses sent after
  // its third unanswered one, plus its RTT spread (echoes_passed()).
  void on_echo(uint32_t i, bool color, uint64_t now) noexcept {
    if (i >= n_) return;
    PerPath& p = p_[i];
    p.echo_answered = true;
    if (color != p.color) {
      // The requester is alive: a quiet it ends was a stall, as for an ACK.
      note_answer_time(now);
      return;
    }
    p.color = !p.color;
    echo_sent_[echoes_ok_++ % echo_sent_.size()] = p.color_since;
    p.acked_sent = std::max(p.acked_sent, p.color_since);
    p.color_since = now;
    if (p.unanswered == 0 || p.outstanding_since == 0) return;
    on_ack(i, now > p.outstanding_since ? now - p.outstanding_since : 1, now);
  }

  // A resent `psn` was acknowledged, and either copy may have arrived: a
  // path whose latest packet was the earlier copy answered if the answer
  // came within that path's own RTT spread of sending it, plus any stall
  // excused since (a per-path Eifel test; its silence clock restarts, no
  // RTT sample). Without this, a slow
  // path whose packets RACK resends elsewhere looks silent (adaptive's
  // trickle on its slowest path); a dead path's copy is answered only by
  // the resend, later than that.
  void on_late(uint32_t psn, uint64_t now) noexcept {
    for (uint32_t i = 0; i < n_; ++i) {
      const PerPath& p = p_[i];
      if (p.outstanding_since == 0 || p.s.acks == 0 || p.last_psn != psn) continue;
      if (now <= p.last_sent_at + spread_ns(i) + p.excused_ns) on_ack(i, 0, now);
    }
  }

  // The owner's loop did not run from `from` to `to` (its own clock): the
  // silence clocks stop for that time.
  void on_local_gap(uint64_t from, uint64_t to) noexcept {
    if (to <= from) return;
    excuse(to - from, to);
    // The quiet this gap explains is not excused twice by the first ACK after it.
    if (last_any_ack_ != 0) last_any_ack_ = std::max(last_any_ack_, to);
  }

  // Responder: the requester resent `psn`, which it had already been told
  // had arrived. If the ACKs that told it all went on one path (the latest
  // on each path carries the most; ACK PSNs only grow), and that long ago,
  // that path lost them.
  void on_duplicate(uint32_t psn, uint64_t now) noexcept {
    uint32_t culprit = n_, tellers = 0;
    bool latest = true;  // IRN, and each teller's latest ACK was of `psn` itself
    for (uint32_t i = 0; i < n_; ++i) {
      const PerPath& p = p_[i];
      if (p.last_sent_at == 0 || common::psn_lt(p.last_psn, psn)) continue;  // never told it
      culprit = i;
      ++tellers;
      latest = latest && p.echo_answered && p.last_psn == psn;
    }
    if (tellers == 0) return;
    if (latest && tellers <= 2) {
      // Latency-bound traffic (one request out: the duplicate is of the
      // newest PSN, told by its ACK and perhaps a credit kick or an answer
      // to an earlier retry). Echoes answer live ACK paths (IRN), so each
      // path keeps its own run of lost ACKs, as a data path does of losses:
      // an echo of a response sent after the lost one ends it (on_ack).
      // Several ACK paths may die at once (a fabric path carries several
      // ports of a set): one run shared by all paths, broken by each blame
      // of another, never took any out. A teller whose responses have all
      // been echoed since delivered its ACK.
      for (uint32_t i = 0; i < n_; ++i) {
        PerPath& p = p_[i];
        if (p.last_sent_at == 0 || p.last_psn != psn || p.unanswered == 0 ||
            now < p.last_sent_at + kAckLossAgeNs)
          continue;
        ++p.s.ack_losses;
        p.last_loss_sent = std::max(p.last_loss_sent, p.last_sent_at);
        if (p.down || ++p.consecutive_losses < kLossesToRemove || up_count() <= 1) continue;
        take_out(i, now);  // probed back, as a data path (tick)
      }
      return;
    }
    if (tellers > 1) return;  // told on two paths: not the ACK paths' fault
    if (now < p_[culprit].last_sent_at + kAckLossAgeNs) return;
    PerPath& p = p_[culprit];
    ++p.s.ack_losses;
    // A duplicate may also follow a spurious retransmission whose ACK was
    // still on its way (the responder does not know the RTT): such blames
    // fall on whichever path carried the newest ACK, a broken path's fall
    // on it every time. Out after kLossesToRemove in a row on one path.
    blame_run_ = blame_path_ == culprit ? blame_run_ + 1 : 1;
    blame_path_ = culprit;
    if (blame_run_ < kLossesToRemove || p.down || up_count() <= 1) return;
    blame_run_ = 0;
    // Losing again within a hold time of its return: still broken, hold longer.
    if (p.s.last_returned_ns != 0 && now < p.s.last_returned_ns + (kAckHoldNs << p.hold_shift))
      p.hold_shift = std::min(p.hold_shift + 1, kMaxHoldShift);
    else
      p.hold_shift = 0;
    take_out(culprit, now);
    p.next_probe = now + (kAckHoldNs << p.hold_shift);
  }

 private:
  // Four cache lines: p_[i] is a shift, not a multiply, on the per-packet paths.
  struct alignas(64) PerPath {
    PathStats s;
    uint64_t outstanding_since = 0;  // 0: nothing sent since the last ack
    uint64_t silent_after = 0;       // outstanding_since + its silence time
    uint64_t next_probe = 0;
    uint64_t removed_at = 0;
    uint64_t srtt = 0;        // this path's smoothed RTT (EWMA 1/8) and
    uint64_t rttvar = 0;      // mean deviation (1/4), as TCP's RTO
    uint64_t acked_sent = 0;  // send time of the latest-sent acknowledged packet
    uint64_t last_loss_sent = 0;  // send time of the latest-sent counted loss
    uint64_t last_sent_at = 0;
    uint64_t last_loss_at = 0;  // when a loss was last reported (confirmed or not)
    uint64_t excused_ns = 0;  // stall time added to silent_after since the clock started
    uint64_t third_sent_at = 0;   // when the kLossesToRemove-th unanswered packet went out
    uint64_t color_since = 0;     // responder: when the color last flipped
    uint32_t last_psn = 0;
    uint32_t consecutive_losses = 0;
    uint32_t unanswered = 0;  // packets sent on it since its last answer (or removal)
    uint32_t hold_shift = 0;
    uint8_t probe_shift = 0;      // out: the probe interval is silence_ns << this
    bool down = false;
    bool excused = false;     // this silence was counted in stall_excused
    bool lost_since_ack = false;  // a loss (unconfirmed) moved the silence clock since the last ACK
    bool loss_since_ack = false;  // any loss reported since the last ACK (answering())
    bool echo_answered = false;   // a responder's ACK path, answered by echoes (on_echo)
    bool color = false;           // responder: the color its responses carry (irn_wire.h)
  };
  static_assert(sizeof(PerPath) == 256);
  // The peer answered at `now`: the first answer after every path was quiet
  // ends a stall of the peer (or the fabric); the quiet time is nobody's fault.
  [[gnu::always_inline]] void note_answer_time(uint64_t now) noexcept {
    if (last_any_ack_ != 0 && now > last_any_ack_ + kAllQuietNs) excuse(now - last_any_ack_ - kAllQuietNs, now);
    last_any_ack_ = std::max(last_any_ack_, now);
  }
  // Moves every running silence deadline by `ns` of stall ending at `end`.
  void excuse(uint64_t ns, uint64_t end) noexcept {
    for (uint32_t k = 0; k < n_; ++k) {
      PerPath& p = p_[k];
      if (p.outstanding_since == 0) continue;
      p.silent_after += ns;
      p.excused_ns += ns;
    }
    stall_end_ = std::max(stall_end_, end);
  }
  bool silent(uint32_t i, uint64_t now) const noexcept {
    const PerPath& p = p_[i];
    return p.s.acks > 0 && p.outstanding_since != 0 && p.unanswered >= kLossesToRemove &&
           now > p.silent_after && (!p.echo_answered || echoes_passed(i));
  }
  // The last 2 x size() echoes taken answered responses sent after path i's
  // third unanswered one had had its RTT spread: i's would have come.
  bool echoes_passed(uint32_t i) const noexcept {
    const uint64_t k = 2 * n_;
    if (echoes_ok_ < k) return false;
    const uint64_t after = p_[i].third_sent_at + spread_ns(i);
    for (uint64_t e = echoes_ok_ - k; e < echoes_ok_; ++e)
      if (echo_sent_[e % echo_sent_.size()] <= after) return false;
    return true;
  }
  // Most other live paths have had a packet acknowledged that was sent
  // after `t`: the peer answers, and not only on one fast path (a healed,
  // empty path overtakes queued ones; a stalled receiver answers none).
  bool most_answer_since(uint32_t i, uint64_t t) const noexcept {
    uint32_t others = 0, answer = 0;
    for (uint32_t k = 0; k < n_; ++k) {
      if (k == i || p_[k].down) continue;
      ++others;
      answer += p_[k].acked_sent > t;
    }
    return 2 * answer > others;
  }
  // Fewer than half of the other live paths are silent too or have lately
  // been reported losing (late or lost): packets overtaken on most paths
  // mean reordering, e.g. a healed, empty path overtaking queued ones.
  bool alone_troubled(uint32_t i, uint64_t now) const noexcept {
    uint32_t others = 0, troubled = 0;
    for (uint32_t k = 0; k < n_; ++k) {
      if (k == i || p_[k].down) continue;
      ++others;
      troubled += silent(k, now) || (p_[k].last_loss_at != 0 && now < p_[k].last_loss_at + silence_ns(k));
    }
    return 2 * troubled < others || others == 0;
  }
  // Fewer than half of the other live paths are losing right now.
  bool alone_losing(uint32_t i) const noexcept {
    uint32_t others = 0, losing = 0;
    for (uint32_t k = 0; k < n_; ++k) {
      if (k == i || p_[k].down) continue;
      ++others;
      losing += p_[k].consecutive_losses > 0;
    }
    return 2 * losing < others || others == 0;
  }
  void take_out(uint32_t i, uint64_t now) noexcept {
    PerPath& p = p_[i];
    p.down = true;
    ++p.s.removals;
    if (p.s.first_removed_ns == 0) p.s.first_removed_ns = now ? now : 1;
    p.removed_at = now;
    p.consecutive_losses = 0;
    p.outstanding_since = 0;
    p.unanswered = 0;
    p.probe_shift = 0;
    p.next_probe = now + probe_interval_ns(i);
  }
  static void bring_back(PerPath& p, uint64_t now) noexcept {
    p.down = false;
    ++p.s.returns;
    p.s.last_returned_ns = now ? now : 1;
  }

  std::array<PerPath, kMaxPaths> p_{};
  uint32_t n_ = 1;
  uint32_t blame_path_ = kMaxPaths;  // responder: the path the last lost ACK went on
  uint32_t blame_run_ = 0;           // ... and how many in a row
  uint64_t last_any_ack_ = 0;        // the latest ACK on any path
  uint64_t stall_end_ = 0;           // when the latest excused stall ended
  // Responder: when the responses answered by the latest echoes taken were
  // sent, at the earliest (ring, by echoes_ok_).
  std::array<uint64_t, 2 * kMaxPaths> echo_sent_{};
  uint64_t echoes_ok_ = 0;
};

}  // namespace tandem::rnic
