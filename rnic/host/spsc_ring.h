// Single-producer / single-consumer views of a ring that lives in shared
// memory (RingControl + entries). Each side keeps its own index privately and
// only publishes it, so a peer that scribbles on the shared indices can make
// the ring look corrupt (reported) but cannot make this side index out of
// bounds.
#pragma once

#include <atomic>
#include <cstdint>

#include "rnic/host/queue_layout.h"

namespace tandem::rnic::host {

template <typename T>
class RingWriter {
 public:
  RingWriter() = default;
  RingWriter(RingControl* control, T* entries, uint32_t depth) noexcept
      : control_(control), entries_(entries), mask_(depth - 1), depth_(depth) {
    head_ = control_->producer.load(std::memory_order_relaxed);
    published_ = head_;
    tail_ = control_->consumer.load(std::memory_order_acquire);
  }

  // Next free entry (not yet visible to the consumer), or nullptr when full.
  T* claim() noexcept {
    if (head_ - tail_ >= depth_) {
      uint32_t t = control_->consumer.load(std::memory_order_acquire);
      if (head_ - t > depth_) {  // consumer index moved past what we produced
        corrupt_ = true;
        return nullptr;
      }
      tail_ = t;
      if (head_ - tail_ >= depth_) return nullptr;
    }
    return &entries_[head_++ & mask_];
  }

  // claim(), and also at most `depth` entries the consumer has not finished
  // (RingControl::completed): a work queue holds at most depth outstanding
  // WRs, as verbs' max_send_wr/max_recv_wr promise, however fast the worker
  // takes them off the ring.
  T* claim_outstanding() noexcept {
    if (head_ - control_->completed.load(std::memory_order_acquire) >= depth_) return nullptr;
    return claim();
  }

  // Makes every claimed entry visible: the doorbell write.
  void publish() noexcept {
    if (head_ != published_) {
      control_->producer.store(head_, std::memory_order_release);
      published_ = head_;
    }
  }

  uint32_t unpublished() const noexcept { return head_ - published_; }
  // The slot of an entry claim() returned (for arrays kept beside the ring).
  uint32_t slot_of(const T* e) const noexcept { return static_cast<uint32_t>(e - entries_); }
  // What the consumer reported finished (RingControl::completed) and the
  // entries up to what was published: read when the consumer is gone.
  uint32_t produced() const noexcept { return published_; }
  uint32_t completed() const noexcept { return control_->completed.load(std::memory_order_acquire); }
  // The consumer's published index (how far it has taken entries).
  uint32_t consumed() const noexcept { return control_->consumer.load(std::memory_order_acquire); }
  const T& at(uint32_t index) const noexcept { return entries_[index & mask_]; }
  // An empty ring whose indices start at `index` (a resized CQ continues the
  // old one's): only before the consumer has seen it.
  void restart_at(uint32_t index) noexcept {
    control_->producer.store(index, std::memory_order_relaxed);
    control_->consumer.store(index, std::memory_order_relaxed);
    control_->completed.store(index, std::memory_order_relaxed);
    head_ = published_ = tail_ = index;
  }
  uint32_t free_entries() noexcept {
    uint32_t t = control_->consumer.load(std::memory_order_acquire);
    if (head_ - t > depth_) {
      corrupt_ = true;
      return 0;
    }
    tail_ = t;
    return depth_ - (head_ - tail_);
  }
  bool corrupt() const noexcept { return corrupt_; }
  uint32_t depth() const noexcept { return depth_; }

 private:
  RingControl* control_ = nullptr;
  T* entries_ = nullptr;
  uint32_t mask_ = 0;
  uint32_t depth_ = 0;
  uint32_t head_ = 0;
  uint32_t published_ = 0;
  uint32_t tail_ = 0;
  bool corrupt_ = false;
};

template <typename T>
class RingReader {
 public:
  RingReader() = default;
  RingReader(RingControl* control, T* entries, uint32_t depth) noexcept
      : control_(control), entries_(entries), mask_(depth - 1), depth_(depth) {
    tail_ = control_->consumer.load(std::memory_order_relaxed);
    done_ = tail_;
  }

  // Entries published and not yet consumed (0 when the producer index is bogus).
  uint32_t available() noexcept {
    uint32_t h = control_->producer.load(std::memory_order_acquire);
    uint32_t d = h - tail_;
    if (d > depth_) {
      corrupt_ = true;
      return 0;
    }
    return d;
  }

  // i-th unconsumed entry; copy it out before trusting it.
  const T* peek(uint32_t i) const noexcept { return &entries_[(tail_ + i) & mask_]; }
  uint32_t slot(uint32_t i) const noexcept { return (tail_ + i) & mask_; }  // peek(i)'s slot

  void release(uint32_t n) noexcept {
    tail_ += n;
    control_->consumer.store(tail_, std::memory_order_release);
  }

  // Removes the published, unconsumed entries `drop` picks and keeps the
  // others in order (a QP moved to RESET: its completions leave its CQs).
  // The producer writes only past what it published, so this is safe beside
  // it; moved(from_slot, to_slot) is told of each move (arrays kept beside).
  template <class Drop, class Moved>
  uint32_t remove_if(Drop&& drop, Moved&& moved) noexcept {
    const uint32_t n = available();
    uint32_t freed = 0;
    for (uint32_t k = n; k-- > 0;) {
      const uint32_t i = tail_ + k;
      if (drop(entries_[i & mask_])) {
        ++freed;
      } else if (freed != 0) {
        entries_[(i + freed) & mask_] = entries_[i & mask_];
        moved(i & mask_, (i + freed) & mask_);
      }
    }
    if (freed != 0) release(freed);
    return freed;
  }

  // Drops everything published so far (QP reset).
  void discard() noexcept {
    uint32_t a = available();
    if (a != 0) release(a);
    done_ = tail_;
    control_->completed.store(done_, std::memory_order_release);
  }

  // Entries published and not yet finished (taken or not): at most depth.
  uint32_t outstanding() const noexcept {
    const uint32_t d = control_->producer.load(std::memory_order_acquire) - done_;
    return d > depth_ ? depth_ : d;
  }

  // n more consumed entries are finished (see RingControl::completed).
  void completed(uint32_t n) noexcept {
    done_ += n;
    control_->completed.store(done_, std::memory_order_release);
  }

  bool corrupt() const noexcept { return corrupt_; }
  uint32_t depth() const noexcept { return depth_; }

 private:
  RingControl* control_ = nullptr;
  T* entries_ = nullptr;
  uint32_t mask_ = 0;
  uint32_t depth_ = 0;
  uint32_t tail_ = 0;
  uint32_t done_ = 0;
  bool corrupt_ = false;
};

}  // namespace tandem::rnic::host
