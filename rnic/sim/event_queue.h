// The discrete-event queue: events ordered by (time, insertion sequence), so
// two events at the same nanosecond always run in the order they were
// scheduled and a run is bit-for-bit repeatable.
//
// A calendar queue (Brown, CACM 1988) rather than a heap: a ring of buckets
// `width` ns wide covering one "year"; an event goes to its bucket's vector
// in O(1) and the next bucket with events is found from a bitmap. The
// bucket being drained is sorted once by (time, sequence), and what is
// scheduled into it meanwhile is inserted in order. Events beyond the year
// wait in a heap and move into the ring as it turns. The width follows the
// load (a few events per bucket): it halves when buckets run full and
// doubles when the ring runs mostly empty, re-filing what is queued. Vectors
// keep their capacity, so the steady state allocates nothing per event.
// HeapEventQueue (a binary heap) is the same interface, kept as a baseline.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

namespace tandem::rnic::sim {

enum class EventKind : uint8_t {
  kLinkTxDone,    // a port finished serializing a frame: start the next one
  kLinkArrive,    // a frame reaches the far end of a link
  kHostTimer,     // the transport core asked to be called at this time
  kHostNicReady,  // the host NIC finished a frame: pull the next one from the core
  kHostPost,      // the workload posts a message
  kLinkState,     // a link fails or recovers
  kRouteUpdate,   // switches stop (or resume) hashing onto a link
  kHostDelayedTx, // a host's delayed frame (credit-loop jitter) enters its port
  kHostStall,     // a host's loop stalls (b 0), resumes (b 1) or works its RX backlog (b 2)
  kHostApp,       // a host's late application reaps its completions
  kDpu,           // the DPU model (sim/dpu_loop): a, b are its own
  kUser,          // tests and benchmarks
};

struct Event {
  uint64_t time = 0;
  uint64_t seq = 0;
  EventKind kind = EventKind::kUser;
  uint32_t a = 0;  // the object the event is for (port, link, host)
  uint64_t b = 0;  // an argument (frame id, generation, flag)
};

inline bool event_before(const Event& x, const Event& y) noexcept {
  return x.time != y.time ? x.time < y.time : x.seq < y.seq;
}

class HeapEventQueue {
 public:
  void reserve(std::size_t n) { heap_.reserve(n); }

  void push(uint64_t time, EventKind kind, uint32_t a, uint64_t b = 0) {
    heap_.push_back(Event{time, next_seq_++, kind, a, b});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }

  bool empty() const noexcept { return heap_.empty(); }
  std::size_t size() const noexcept { return heap_.size(); }
  const Event& top() noexcept { return heap_.front(); }

  Event pop() noexcept {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    Event e = heap_.back();
    heap_.pop_back();
    return e;
  }

  uint64_t scheduled() const noexcept { return next_seq_; }

 private:
  struct Later {
    bool operator()(const Event& x, const Event& y) const noexcept { return event_before(y, x); }
  };
  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;
};

class EventQueue {
 public:
  static constexpr uint32_t kBuckets = 1u << 13;  // the ring; a year is kBuckets * width

  EventQueue() : ring_(kBuckets), used_(kBuckets / 64, 0) {}

  void reserve(std::size_t n) { far_.reserve(std::min<std::size_t>(n, 1u << 16)); }

  void push(uint64_t time, EventKind kind, uint32_t a, uint64_t b = 0) {
    file(Event{time, next_seq_++, kind, a, b});
    ++size_;
  }

  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }
  uint64_t scheduled() const noexcept { return next_seq_; }
  uint64_t width_ns() const noexcept { return uint64_t{1} << shift_; }

  // The next event (the queue must not be empty); it may turn the ring.
  const Event& top() noexcept {
    if (head_ == cur_.size()) advance();
    return cur_[head_];
  }

  Event pop() noexcept {
    if (head_ == cur_.size()) advance();
    --size_;
    ++popped_;
    return cur_[head_++];
  }

 private:
  uint64_t bucket_of(uint64_t t) const noexcept { return t >> shift_; }

  void file(const Event& e) {
    const uint64_t b = bucket_of(e.time);
    if (b <= cur_bucket_) {
      // The bucket being drained (or, after a peek ran ahead, an earlier
      // time, still before everything filed): insert in order.
      auto it = std::upper_bound(cur_.begin() + static_cast<std::ptrdiff_t>(head_), cur_.end(), e, event_before);
      cur_.insert(it, e);
    } else if (b < cur_bucket_ + kBuckets) {
      const uint32_t i = static_cast<uint32_t>(b & (kBuckets - 1));
      ring_[i].push_back(e);
      used_[i >> 6] |= uint64_t{1} << (i & 63);
      ++in_ring_;
    } else {
      far_.push_back(e);
      std::push_heap(far_.begin(), far_.end(), Later{});
    }
  }

  // Moves to the next bucket with events: the ring's next used bucket, or
  // the far heap's earliest event's if that comes first.
  void advance() noexcept {
    cur_.clear();
    head_ = 0;
    tune();
    for (;;) {
      // Far events that the turning ring now covers come in first.
      while (!far_.empty() && bucket_of(far_.front().time) < cur_bucket_ + kBuckets) {
        std::pop_heap(far_.begin(), far_.end(), Later{});
        const Event e = far_.back();
        far_.pop_back();
        if (bucket_of(e.time) <= cur_bucket_) {
          cur_.push_back(e);
        } else {
          const uint32_t i = static_cast<uint32_t>(bucket_of(e.time) & (kBuckets - 1));
          ring_[i].push_back(e);
          used_[i >> 6] |= uint64_t{1} << (i & 63);
          ++in_ring_;
        }
      }
      if (!cur_.empty()) break;
      if (in_ring_ == 0) {
        if (far_.empty()) return;  // empty (callers check first)
        cur_bucket_ = bucket_of(far_.front().time);  // jump the ring to it
        continue;
      }
      const uint64_t next = next_used(cur_bucket_ + 1);
      cur_bucket_ = next;
      const uint32_t i = static_cast<uint32_t>(next & (kBuckets - 1));
      cur_.swap(ring_[i]);
      used_[i >> 6] &= ~(uint64_t{1} << (i & 63));
      in_ring_ -= cur_.size();
      ++visited_;
    }
    if (cur_.size() > 1) std::sort(cur_.begin(), cur_.end(), event_before);
  }

  // The first used bucket at or after absolute bucket `from` (one exists).
  uint64_t next_used(uint64_t from) const noexcept {
    const uint32_t start = static_cast<uint32_t>(from & (kBuckets - 1));
    uint32_t w = start >> 6;
    uint64_t bits = used_[w] & (~uint64_t{0} << (start & 63));
    for (uint32_t k = 0; k <= kBuckets / 64; ++k) {
      if (bits != 0) {
        const uint32_t i = (w << 6) + static_cast<uint32_t>(std::countr_zero(bits));
        return from + ((i - start) & (kBuckets - 1));
      }
      w = (w + 1) & (kBuckets / 64 - 1);
      bits = used_[w];
    }
    return from;
  }

  // Every 64k events: about 2-16 events per visited bucket is the aim.
  void tune() {
    if (popped_ < next_tune_) return;
    const uint64_t pops = popped_ - tuned_at_pops_, visits = visited_ - tuned_at_visits_;
    tuned_at_pops_ = popped_;
    tuned_at_visits_ = visited_;
    next_tune_ = popped_ + (1u << 16);
    if (visits == 0) return;
    const uint64_t per = pops / visits;
    uint32_t shift = shift_;
    if (per > 16 && shift > 0) {
      --shift;
    } else if (per < 2 && shift < 30) {
      ++shift;
    } else {
      return;
    }
    // Re-file the ring with the new width (the current bucket is empty here).
    std::vector<Event> all;
    all.reserve(in_ring_);
    for (uint32_t i = 0; i < kBuckets; ++i) {
      all.insert(all.end(), ring_[i].begin(), ring_[i].end());
      ring_[i].clear();
    }
    std::fill(used_.begin(), used_.end(), 0);
    in_ring_ = 0;
    const uint64_t now = cur_bucket_ << shift_;
    shift_ = shift;
    cur_bucket_ = now >> shift_;
    for (const Event& e : all) file(e);
  }

  struct Later {
    bool operator()(const Event& x, const Event& y) const noexcept { return event_before(y, x); }
  };

  std::vector<std::vector<Event>> ring_;
  std::vector<uint64_t> used_;  // bitmap of non-empty ring buckets
  std::vector<Event> cur_;      // the bucket being drained, sorted, from head_
  std::size_t head_ = 0;
  std::vector<Event> far_;      // beyond the year: a heap
  uint64_t cur_bucket_ = 0;     // absolute bucket number of cur_
  uint32_t shift_ = 6;          // width = 2^shift ns
  std::size_t size_ = 0, in_ring_ = 0;
  uint64_t next_seq_ = 0;
  uint64_t popped_ = 0, visited_ = 0, next_tune_ = 1u << 16, tuned_at_pops_ = 0, tuned_at_visits_ = 0;
};

}  // namespace tandem::rnic::sim
