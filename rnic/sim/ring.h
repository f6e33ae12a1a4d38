// A FIFO on a power-of-two ring that only grows (doubling): what the fabric
// keeps per port, with no allocation once it has reached its peak size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::rnic::sim {

template <class T>
class Ring {
 public:
  bool empty() const noexcept { return head_ == tail_; }
  std::size_t size() const noexcept { return tail_ - head_; }
  T& front() noexcept { return buf_[head_ & mask_]; }
  const T& front() const noexcept { return buf_[head_ & mask_]; }
  T& back() noexcept { return buf_[(tail_ - 1) & mask_]; }
  // The i-th element from the front.
  const T& operator[](std::size_t i) const noexcept { return buf_[(head_ + i) & mask_]; }
  void pop_front() noexcept { ++head_; }
  void push_back(const T& v) {
    if (size() == buf_.size()) grow();
    buf_[tail_++ & mask_] = v;
  }
  void clear() noexcept { head_ = tail_ = 0; }

 private:
  void grow() {
    std::vector<T> next(buf_.empty() ? 16 : buf_.size() * 2);
    const std::size_t n = size();
    for (std::size_t i = 0; i < n; ++i) next[i] = (*this)[i];
    buf_.swap(next);
    mask_ = buf_.size() - 1;
    head_ = 0;
    tail_ = n;
  }

  std::vector<T> buf_;
  std::size_t mask_ = 0;
  std::size_t head_ = 0, tail_ = 0;
};

}  // namespace tandem::rnic::sim
