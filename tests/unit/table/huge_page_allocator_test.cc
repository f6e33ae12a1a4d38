#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "common/channel/huge_page_allocator.h"

using tandem::common::HugePageAllocator;
using tandem::common::kHugePageBytes;

namespace {
struct alignas(64) Line {
  uint64_t w[8];
};
}  // namespace

TEST_CASE("huge page allocator: a large block is 2 MiB aligned, zeroed and usable to its end") {
  HugePageAllocator<uint64_t> a;
  const std::size_t n = 3 * kHugePageBytes / sizeof(uint64_t) + 5;  // not a multiple of 2 MiB
  uint64_t* p = a.allocate(n);
  REQUIRE(reinterpret_cast<std::uintptr_t>(p) % kHugePageBytes == 0);
  for (std::size_t i = 0; i < n; i += 4096 / sizeof(uint64_t)) REQUIRE(p[i] == 0);
  REQUIRE(p[n - 1] == 0);
  for (std::size_t i = 0; i < n; ++i) p[i] = i;
  REQUIRE(p[n - 1] == n - 1);
  a.deallocate(p, n);
}

TEST_CASE("huge page allocator: small blocks keep the type's alignment") {
  HugePageAllocator<Line> a;
  for (std::size_t n : {1, 7, 1000}) {
    Line* p = a.allocate(n);
    REQUIRE(reinterpret_cast<std::uintptr_t>(p) % alignof(Line) == 0);
    p[n - 1].w[7] = 1;
    a.deallocate(p, n);
  }
}

TEST_CASE("huge page allocator: a vector grows across the 2 MiB threshold and keeps its contents") {
  std::vector<uint32_t, HugePageAllocator<uint32_t>> v;
  for (uint32_t i = 0; i < (3u << 20); ++i) v.push_back(i * 7);  // 12 MiB, several reallocations
  bool same = true;
  for (uint32_t i = 0; i < v.size(); ++i) same = same && v[i] == i * 7;
  REQUIRE(same);
  auto w = v;  // copy through the allocator too
  REQUIRE(w == v);
  v.clear();
  v.shrink_to_fit();
  REQUIRE(w.back() == ((3u << 20) - 1) * 7);
}
