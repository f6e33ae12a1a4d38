// libFuzzer target: the fused CRC-and-copy kernel (crc32_copy, the receive
// path's ICRC checked while the payload is placed) of every CRC kernel this
// CPU has against the reference, crc32_update and memcpy, on arbitrary
// bytes: from a running CRC, at arbitrary source and destination alignments
// (guard bytes either side must stay), and chained over two parts as the
// core chains a SEND's scatter entries. Exact-size heap buffers too, so a
// kernel reading or writing past either end is caught (ASan).
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/wire/icrc.h"

using namespace tandem::common;

namespace {
uint32_t zlib_crc(uint32_t crc, const uint8_t* p, std::size_t n) {
  if (n == 0) return crc;
  return static_cast<uint32_t>(::crc32(crc, p, static_cast<uInt>(n)));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  // Byte 0: source alignment, byte 1: destination alignment, bytes 2-3: the
  // split point, 4-7: the running CRC; the rest is the payload.
  const std::size_t sa = data[0] % 64, da = data[1] % 64;
  const std::size_t split_seed = static_cast<std::size_t>(data[2]) << 8 | data[3];
  uint32_t start;
  std::memcpy(&start, data + 4, 4);
  const std::size_t n = size - 8;
  const std::vector<uint8_t> exact(data + 8, data + size);
  const uint32_t ref = zlib_crc(start, exact.data(), n);
  const std::size_t split = split_seed % (n + 1);
  constexpr std::size_t kGuard = 64;
  constexpr uint8_t kFill = 0x5A;
  std::vector<uint8_t> src_store(n + 64), dst_store(n + 64 + 2 * kGuard);
  uint8_t* const src = src_store.data() + sa;
  if (n != 0) std::memcpy(src, exact.data(), n);

  const CrcKernel initial = crc_kernel();
  for (CrcKernel k : kCrcKernels) {
    if (!select_crc_kernel(k)) continue;
    if (crc32_update(start, exact.data(), n) != ref) std::abort();
    // Aligned as the input says, inside guard bytes.
    std::memset(dst_store.data(), kFill, dst_store.size());
    uint8_t* const dst = dst_store.data() + kGuard + da;
    if (crc32_copy(start, dst, src, n) != ref) std::abort();
    if (n != 0 && std::memcmp(dst, src, n) != 0) std::abort();
    for (const uint8_t* g = dst_store.data(); g < dst; ++g)
      if (*g != kFill) std::abort();
    for (const uint8_t* g = dst + n; g < dst_store.data() + dst_store.size(); ++g)
      if (*g != kFill) std::abort();
    // Exact-size buffers, in two chained parts.
    std::vector<uint8_t> head(split), tail(n - split);
    uint32_t c = crc32_copy(start, head.data(), exact.data(), split);
    c = crc32_copy(c, tail.data(), exact.data() + split, n - split);
    if (c != ref) std::abort();
    if ((split != 0 && std::memcmp(head.data(), exact.data(), split) != 0) ||
        (n - split != 0 && std::memcmp(tail.data(), exact.data() + split, n - split) != 0))
      std::abort();
  }
  if (!select_crc_kernel(initial)) std::abort();
  return 0;
}
