// The discrete-event queue: events ordered by (time, insertion sequence), so
// two events at the same nanosecond always run in the order they were
// scheduled and a run is bit-for-bit repeatable.
#pragma once

#include <algorithm>
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
  kUser,          // tests and benchmarks
};

struct Event {
  uint64_t time = 0;
  uint64_t seq = 0;
  EventKind kind = EventKind::kUser;
  uint32_t a = 0;  // the object the event is for (port, link, host)
  uint64_t b = 0;  // an argument (frame id, generation, flag)
};

class EventQueue {
 public:
  void reserve(std::size_t n) { heap_.reserve(n); }

  void push(uint64_t time, EventKind kind, uint32_t a, uint64_t b = 0) {
    heap_.push_back(Event{time, next_seq_++, kind, a, b});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }

  bool empty() const noexcept { return heap_.empty(); }
  std::size_t size() const noexcept { return heap_.size(); }
  const Event& top() const noexcept { return heap_.front(); }

  Event pop() noexcept {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    Event e = heap_.back();
    heap_.pop_back();
    return e;
  }

  uint64_t scheduled() const noexcept { return next_seq_; }

 private:
  struct Later {
    bool operator()(const Event& x, const Event& y) const noexcept {
      return x.time != y.time ? x.time > y.time : x.seq > y.seq;
    }
  };
  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace tandem::rnic::sim
