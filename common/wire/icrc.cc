#include "common/wire/icrc.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/log/log.h"
#include "common/wire/headers.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TANDEM_CRC_CLMUL 1
#include <immintrin.h>
#endif

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(TANDEM_HAVE_ISAL)
#include <isa-l/crc.h>
#else
#include <zlib.h>
#endif

namespace tandem::common {

namespace {

uint32_t crc32_library(uint32_t crc, const uint8_t* data, std::size_t len) noexcept {
  // zlib's crc32(crc, NULL, 0) is its initial value 0, not crc: an empty
  // part of a chain (data() of an empty vector) must leave the CRC alone.
  if (len == 0) return crc;
#if defined(TANDEM_HAVE_ISAL)
  return crc32_gzip_refl(crc, data, len);
#else
  return static_cast<uint32_t>(::crc32(crc, data, static_cast<uInt>(len)));
#endif
}

#if defined(TANDEM_CRC_CLMUL)
// CRC-32 by carry-less multiplication (the folding of Intel's "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ", bit-reflected), for
// the short buffers of packets: a library kernel folds one 16-byte block
// after the other, each fold waiting for the last (~6 cycles), so a
// 150-byte frame's CRC is a chain of ~10 of them. Here, for up to kDirect
// blocks, every block is multiplied by the power of x that moves it to the
// end at once and the products are XORed: the multiplications are
// independent and the chain is one multiplication and the final reduction.
// Only with AVX-512 VPCLMULQDQ (four blocks per multiplication): with
// 128-bit PCLMUL alone this took ~80 more instructions per frame than
// ISA-L's kernel (callgrind), so those CPUs keep the library.
//
// kFold[d] moves a 128-bit block d blocks (128*d bits) on: low half
// x^(128d+32) mod P, high half x^(128d-32) mod P, both bit-reflected (33
// bits), P the CRC-32 polynomial 0x104C11DB7. kFold[1] and kFold[4] are the
// constants of Linux's crc32-pclmul and ISA-L.
constexpr std::size_t kDirect = 16;
// Streams of more than kDirect blocks first fold four 512-bit lanes (16
// blocks) 256 bytes a step, as ISA-L does; what the lanes hold and the
// blocks left are then each at most 2 * kDirect - 1 blocks from the end.
// icrc4_512 (bursts) takes packets below kBurstBelow bytes.
constexpr std::size_t kBurstBelow = 256;
static_assert((8 + kBurstBelow) / 16 <= kDirect);
alignas(16) constexpr uint64_t kFold[2 * kDirect][2] = {
    {0, 0},
    {0x1751997d0, 0x0ccaa009e},
    {0x0f1da05aa, 0x15a546366},
    {0x03db1ecdc, 0x174359406},
    {0x154442bd4, 0x1c6e41596},
    {0x1c7569e54, 0x0ae0b5394},
    {0x0df068dc2, 0x18cb44e58},
    {0x1ea89367e, 0x1d7cfc6ac},
    {0x1e88ef372, 0x14a7fe880},
    {0x1fdc60a7c, 0x03f41287a},
    {0x0e3543be0, 0x14b57d3f0},
    {0x1816ab61c, 0x10aae2566},
    {0x1821d8bc0, 0x12e958ac4},
    {0x1b35adb0e, 0x1e7146aac},
    {0x19159bb02, 0x125f17dfc},
    {0x1db06f64c, 0x1c47d2a9c},
    {0x11542778a, 0x1322d1430},
    {0x0a749e894, 0x16269a506},
    {0x1f7228078, 0x1aaa44c18},
    {0x032b0733c, 0x0ff6f2fc2},
    {0x00e9bd5cc, 0x115b87256},
    {0x1ad568056, 0x1c712203a},
    {0x11e6a95a2, 0x12af2c15a},
    {0x07eaed122, 0x09b9bdbd0},
    {0x1f79525b0, 0x0d31343ea},
    {0x150fc8004, 0x04470ac44},
    {0x04b700aa8, 0x0eea395c4},
    {0x13484efdc, 0x0f9d9c7ee},
    {0x0ad0d2bb2, 0x0cd669a40},
    {0x144c76d92, 0x1b631f204},
    {0x119adc226, 0x145972f08},
    {0x0398e2ff2, 0x1cf247394},
};
constexpr uint64_t kR5 = 0x163cd6124;     // x^64 mod P, reflected: 64 -> 32 bits
constexpr uint64_t kPoly = 0x1db710641;   // P, reflected
constexpr uint64_t kMu = 0x1f7011641;     // floor(x^64 / P), reflected (Barrett)
// pshufb indices: 16 bytes at +r shift a block up by 16 - r bytes, at
// +16 + r down by r bytes (0x80 = a zero byte).
alignas(16) constexpr uint8_t kShift[48] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};

#define TANDEM_CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

TANDEM_CLMUL_TARGET inline __m128i load16(const uint8_t* p) noexcept {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
// The CRC register from the accumulator of the stream's whole blocks (in the
// last one's place) and its partial last block (see crc_stream512).
TANDEM_CLMUL_TARGET inline uint32_t crc_finish(__m128i acc, const uint8_t* p, std::size_t n) noexcept {
  const unsigned r = static_cast<unsigned>(n % 16);
  const __m128i k1 = _mm_load_si128(reinterpret_cast<const __m128i*>(kFold[1]));
  if (r != 0) {
    // The last r bytes: the accumulator's first r bytes fall out of the
    // final 16-byte window and are folded one block on; the rest of it
    // moves down r bytes, and the tail takes the window's top r bytes.
    const __m128i up = load16(kShift + r);
    const __m128i down = load16(kShift + 16 + r);
    const __m128i out = _mm_shuffle_epi8(acc, up);
    const __m128i w = _mm_blendv_epi8(_mm_shuffle_epi8(acc, down), load16(p + n - 16), down);
    acc = _mm_xor_si128(w, _mm_xor_si128(_mm_clmulepi64_si128(out, k1, 0x00),
                                         _mm_clmulepi64_si128(out, k1, 0x11)));
  }
  // 128 -> 64 -> 32 bits, then Barrett reduction (as Linux's crc32-pclmul).
  const __m128i mask32 = _mm_setr_epi32(-1, 0, 0, 0);
  acc = _mm_xor_si128(_mm_srli_si128(acc, 8), _mm_clmulepi64_si128(acc, k1, 0x10));
  const __m128i hi = _mm_srli_si128(acc, 4);
  acc = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(acc, mask32),
                                           _mm_set_epi64x(0, static_cast<long long>(kR5)), 0x00),
                      hi);
  const __m128i ru = _mm_set_epi64x(static_cast<long long>(kMu), static_cast<long long>(kPoly));
  __m128i t = _mm_clmulepi64_si128(_mm_and_si128(acc, mask32), ru, 0x10);
  t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), ru, 0x00);
  return static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(t, acc), 1));
}

#define TANDEM_ZMM_TARGET __attribute__((target("pclmul,sse4.1,avx2,avx512f,vpclmulqdq")))
// GCC 12 warns about the "undefined" pass-through operand inside its own
// AVX-512 intrinsics (_mm512_shuffle_i64x2, ...): a false positive.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// kFold upside down and three rows of zeros after it: 64 bytes from row
// kRows - 1 - d are the constants for d, d - 1, d - 2, d - 3 (zero below 1).
// (Rows are 16 bytes: loaded unaligned.)
constexpr std::size_t kRows = 2 * kDirect;
struct FoldRev {
  alignas(64) uint64_t k[kRows + 3][2] = {};
  constexpr FoldRev() {
    for (std::size_t d = 0; d < kRows; ++d) {
      k[kRows - 1 - d][0] = kFold[d][0];
      k[kRows - 1 - d][1] = kFold[d][1];
    }
  }
};
constexpr FoldRev kFoldRev;

// A group of four blocks whose first lies d0 (< kRows) blocks before the
// stream's last, each moved there.
TANDEM_ZMM_TARGET inline __m512i fold4(__m512i b, std::size_t d0) noexcept {
  const __m512i k = _mm512_loadu_si512(kFoldRev.k[kRows - 1 - d0]);
  return _mm512_xor_si512(_mm512_clmulepi64_epi128(b, k, 0x00), _mm512_clmulepi64_epi128(b, k, 0x11));
}

// crc_stream512 for streams of more than kDirect whole blocks.
template <bool kCopy>
TANDEM_ZMM_TARGET uint32_t crc_long512(const __m128i* h, std::size_t nh, const uint8_t* p, std::size_t n,
                                       uint8_t* dst) noexcept {
  const std::size_t q = nh + n / 16;
  const uint8_t* mem = p - 16 * nh;
  uint8_t* const dmem = kCopy ? dst - 16 * nh : nullptr;  // where mem's bytes go (kCopy)
  const auto m0 = static_cast<__mmask8>(0xFF & ~((1u << (2 * nh)) - 1));
  __m512i a0 = _mm512_maskz_loadu_epi64(m0, mem);
  if constexpr (kCopy) _mm512_mask_storeu_epi64(dmem, m0, a0);
  if (nh > 0) a0 = _mm512_inserti32x4(a0, h[0], 0);
  if (nh > 1) a0 = _mm512_inserti32x4(a0, h[1], 1);
  if (nh > 2) a0 = _mm512_inserti32x4(a0, h[2], 2);
  __m512i a1 = _mm512_loadu_si512(mem + 64), a2 = _mm512_loadu_si512(mem + 128), a3 = _mm512_loadu_si512(mem + 192);
  if constexpr (kCopy) {
    _mm512_storeu_si512(dmem + 64, a1);
    _mm512_storeu_si512(dmem + 128, a2);
    _mm512_storeu_si512(dmem + 192, a3);
  }
  // Four lanes of four blocks, each moved on 16 blocks and the next 256
  // bytes added.
  const __m512i k16 = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kFold[16])));
  std::size_t i = 16;
  for (; q - i >= 16; i += 16) {
    const uint8_t* b = mem + 16 * i;
    const __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64), b2 = _mm512_loadu_si512(b + 128),
                  b3 = _mm512_loadu_si512(b + 192);
    if constexpr (kCopy) {
      uint8_t* d = dmem + 16 * i;
      _mm512_storeu_si512(d, b0);
      _mm512_storeu_si512(d + 64, b1);
      _mm512_storeu_si512(d + 128, b2);
      _mm512_storeu_si512(d + 192, b3);
    }
    a0 = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a0, k16, 0x00), _mm512_clmulepi64_epi128(a0, k16, 0x11),
                                   b0, 0x96);
    a1 = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a1, k16, 0x00), _mm512_clmulepi64_epi128(a1, k16, 0x11),
                                   b1, 0x96);
    a2 = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a2, k16, 0x00), _mm512_clmulepi64_epi128(a2, k16, 0x11),
                                   b2, 0x96);
    a3 = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a3, k16, 0x00), _mm512_clmulepi64_epi128(a3, k16, 0x11),
                                   b3, 0x96);
  }
  // The lanes stand for blocks i - 16 .. i - 1, the k < 16 blocks left are
  // i .. q - 1: every one straight to the last one's place.
  const std::size_t k = q - i;
  __m512i acc = _mm512_ternarylogic_epi64(fold4(a0, k + 15), fold4(a1, k + 11), fold4(a2, k + 7), 0x96);
  acc = _mm512_xor_si512(acc, fold4(a3, k + 3));
  __m512i last = a3;
  std::size_t last_lane = 3;
  for (std::size_t g = 0; 4 * g < k; ++g) {
    const std::size_t lanes = k - 4 * g < 4 ? k - 4 * g : 4;
    const auto m = static_cast<__mmask8>((1u << (2 * lanes)) - 1);
    last = _mm512_maskz_loadu_epi64(m, mem + 16 * (i + 4 * g));
    if constexpr (kCopy) _mm512_mask_storeu_epi64(dmem + 16 * (i + 4 * g), m, last);
    last_lane = lanes - 1;
    acc = _mm512_xor_si512(acc, fold4(last, k - 1 - 4 * g));
  }
  // The last block stays where it is (its constant row is zero).
  acc = _mm512_xor_si512(acc, _mm512_maskz_mov_epi64(static_cast<__mmask8>(3u << (2 * last_lane)), last));
  const __m256i a256 = _mm512_castsi512_si256(_mm512_xor_si512(acc, _mm512_shuffle_i64x2(acc, acc, 0x4E)));
  return crc_finish(_mm_xor_si128(_mm256_castsi256_si128(a256), _mm256_extracti128_si256(a256, 1)), p, n);
}

// The CRC register (no pre/post inversion) after the stream made of the
// `nh` blocks in h[] (nh <= 3) and then `n` bytes at p, the initial register
// value already XORed into the stream's first four bytes (so the register
// starts at zero). The stream is 16 bytes to kDirect whole blocks (and a
// partial one); when it does not end on a block, its last 16 bytes are
// loaded from p + n - 16, which may lie before p (bytes the caller
// guarantees readable; only those from p on are used). Four blocks, each
// with its own distance, per 512-bit multiplication. kCopy: p[0..n) is
// copied to dst[0..n) as it is read (crc32_copy; dst - 16 * nh on must be
// writable, the caller's blocks' place).
template <bool kCopy>
TANDEM_ZMM_TARGET uint32_t crc_stream512(const __m128i* h, std::size_t nh, const uint8_t* p, std::size_t n,
                                         uint8_t* dst = nullptr) noexcept {
  const std::size_t q = nh + n / 16;  // whole blocks
  const uint8_t* mem = p - 16 * nh;
  uint8_t* const dmem = kCopy ? dst - 16 * nh : nullptr;
  if constexpr (kCopy) {
    // The partial last block, the bytes crc_finish reads from p + n - 16:
    // copied as the 16 bytes ending there (p - 16 on is the caller's and
    // goes to dst - 16 on, so an overlap writes what is there already).
    if (n % 16 != 0) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + n - 16), load16(p + n - 16));
  }
  if (q > kDirect) return crc_long512<kCopy>(h, nh, p, n, dst);
  __m512i acc = _mm512_setzero_si512();
  __m512i b = acc;
  const std::size_t groups = (q + 3) / 4;
  std::size_t lanes = 0;
  for (std::size_t g = 0; g < groups; ++g) {
    lanes = q - 4 * g < 4 ? q - 4 * g : 4;
    const __mmask8 m = static_cast<__mmask8>((1u << (2 * lanes)) - 1);
    if (g == 0 && nh > 0) {
      // The caller's blocks in the first lanes, memory (from p) after them.
      const auto mm = static_cast<__mmask8>(m & ~((1u << (2 * nh)) - 1));
      b = _mm512_maskz_loadu_epi64(mm, mem);
      if constexpr (kCopy) _mm512_mask_storeu_epi64(dmem, mm, b);
      b = _mm512_inserti32x4(b, h[0], 0);
      if (nh > 1) b = _mm512_inserti32x4(b, h[1], 1);
      if (nh > 2) b = _mm512_inserti32x4(b, h[2], 2);
    } else {
      b = _mm512_maskz_loadu_epi64(m, mem + 64 * g);
      if constexpr (kCopy) _mm512_mask_storeu_epi64(dmem + 64 * g, m, b);
    }
    const __m512i k = _mm512_loadu_si512(kFoldRev.k[kRows - 1 - (q - 1 - 4 * g)]);
    acc = _mm512_ternarylogic_epi64(acc, _mm512_clmulepi64_epi128(b, k, 0x00),
                                    _mm512_clmulepi64_epi128(b, k, 0x11), 0x96);  // a ^ b ^ c
  }
  // The last block stays where it is (its constant row is zero).
  acc = _mm512_xor_si512(acc, _mm512_maskz_mov_epi64(static_cast<__mmask8>(3u << (2 * (lanes - 1))), b));
  const __m256i a256 = _mm512_castsi512_si256(_mm512_xor_si512(acc, _mm512_shuffle_i64x2(acc, acc, 0x4E)));
  const __m128i a128 = _mm_xor_si128(_mm256_castsi256_si128(a256), _mm256_extracti128_si256(a256, 1));
  return crc_finish(a128, p, n);
}

// The first 48 bytes of the ICRC's stream of an option-less packet (8 of
// LRH, IPv4, UDP, BTH) with the variant fields set to ones, as three blocks
// made in registers, the initial register (ones) already XORed in: the
// LRH's first four bytes of ones become zeros.
inline void masked_head(const uint8_t* ip, __m128i h[3]) noexcept {
  uint64_t w0;
  std::memcpy(&w0, ip, 8);
  w0 |= 0xFFull << 8;  // TOS
  const __m128i m1 = _mm_setr_epi8(-1, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);  // TTL, checksum
  const __m128i m2 = _mm_setr_epi8(0, 0, -1, -1, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0);  // UDP csum, BTH[4]
  h[0] = _mm_set_epi64x(static_cast<long long>(w0), static_cast<long long>(0xFFFFFFFF00000000ull));
  h[1] = _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ip + 8)), m1);
  h[2] = _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ip + 24)), m2);
}

// Four option-less packets' ICRC registers at once, each 40 <= len <
// kBurstBelow bytes from its IPv4 header: crc_stream512's steps, lane by
// lane within each step, so that four independent chains of
// multiplications are in flight instead of one (a burst's ICRCs one after
// the other overlap only as far as the CPU looks ahead).
TANDEM_ZMM_TARGET void icrc4_512(const uint8_t* const* ip, const std::size_t* len, uint32_t* out) noexcept {
  constexpr int kLanes = 4;
  __m512i acc[kLanes], last[kLanes];
  std::size_t q[kLanes], n[kLanes];
  const uint8_t* mem[kLanes];
  std::size_t groups = 0;
#pragma GCC unroll 4
  for (int l = 0; l < kLanes; ++l) {
    n[l] = len[l] - 40;
    q[l] = 3 + n[l] / 16;
    mem[l] = ip[l] + 40 - 48;  // block j >= 3 of the stream is at mem + 16 * j
    groups = std::max(groups, (q[l] + 3) / 4);
    __m128i h[3];
    masked_head(ip[l], h);
    const __mmask8 m = static_cast<__mmask8>(((1u << (2 * std::min<std::size_t>(q[l], 4))) - 1) & ~0x3Fu);
    __m512i b = _mm512_maskz_loadu_epi64(m, mem[l]);
    b = _mm512_inserti32x4(b, h[0], 0);
    b = _mm512_inserti32x4(b, h[1], 1);
    b = _mm512_inserti32x4(b, h[2], 2);
    last[l] = b;
    const __m512i k = _mm512_loadu_si512(kFoldRev.k[kRows - 1 - (q[l] - 1)]);
    acc[l] = _mm512_xor_si512(_mm512_clmulepi64_epi128(b, k, 0x00), _mm512_clmulepi64_epi128(b, k, 0x11));
  }
  for (std::size_t g = 1; g < groups; ++g) {
#pragma GCC unroll 4
    for (int l = 0; l < kLanes; ++l) {
      if (4 * g >= q[l]) continue;  // this lane has no more blocks
      const std::size_t lanes = std::min<std::size_t>(q[l] - 4 * g, 4);
      const __m512i b = _mm512_maskz_loadu_epi64(static_cast<__mmask8>((1u << (2 * lanes)) - 1), mem[l] + 64 * g);
      const __m512i k = _mm512_loadu_si512(kFoldRev.k[kRows - 1 - (q[l] - 1 - 4 * g)]);
      acc[l] = _mm512_ternarylogic_epi64(acc[l], _mm512_clmulepi64_epi128(b, k, 0x00),
                                         _mm512_clmulepi64_epi128(b, k, 0x11), 0x96);
      last[l] = b;
    }
  }
  const __m128i k1 = _mm_load_si128(reinterpret_cast<const __m128i*>(kFold[1]));
  const __m128i mask32 = _mm_setr_epi32(-1, 0, 0, 0);
  const __m128i r5 = _mm_set_epi64x(0, static_cast<long long>(kR5));
  const __m128i ru = _mm_set_epi64x(static_cast<long long>(kMu), static_cast<long long>(kPoly));
  __m128i a[kLanes];
#pragma GCC unroll 4
  for (int l = 0; l < kLanes; ++l) {
    // The last block stays where it is; lanes to 128 bits.
    __m512i x = _mm512_xor_si512(acc[l], _mm512_maskz_mov_epi64(static_cast<__mmask8>(3u << (2 * ((q[l] - 1) % 4))), last[l]));
    x = _mm512_xor_si512(x, _mm512_shuffle_i64x2(x, x, 0x4E));
    const __m256i y = _mm512_castsi512_si256(x);
    a[l] = _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
  }
#pragma GCC unroll 4
  for (int l = 0; l < kLanes; ++l) {
    // The partial last block, without a branch: with r == 0 the tables
    // make `out` zero and `w` the accumulator itself.
    const unsigned r = static_cast<unsigned>(n[l] % 16);
    const __m128i up = load16(kShift + r);
    const __m128i down = load16(kShift + 16 + r);
    const __m128i o = _mm_shuffle_epi8(a[l], up);
    const __m128i w = _mm_blendv_epi8(_mm_shuffle_epi8(a[l], down), load16(ip[l] + len[l] - 16), down);
    a[l] = _mm_xor_si128(w, _mm_xor_si128(_mm_clmulepi64_si128(o, k1, 0x00), _mm_clmulepi64_si128(o, k1, 0x11)));
  }
#pragma GCC unroll 4
  for (int l = 0; l < kLanes; ++l)
    a[l] = _mm_xor_si128(_mm_srli_si128(a[l], 8), _mm_clmulepi64_si128(a[l], k1, 0x10));
#pragma GCC unroll 4
  for (int l = 0; l < kLanes; ++l)
    a[l] = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a[l], mask32), r5, 0x00), _mm_srli_si128(a[l], 4));
#pragma GCC unroll 4
  for (int l = 0; l < kLanes; ++l) {
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(a[l], mask32), ru, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), ru, 0x00);
    out[l] = ~static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(t, a[l]), 1));
  }
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The same folding with 256-bit VPCLMULQDQ (VEX, no AVX-512: AMD Zen 3/4
// client parts, Intel Alder Lake and later client cores): two blocks per
// multiplication instead of four, so streams of over kDirect blocks fold
// eight 256-bit lanes (16 blocks, 256 bytes) a step, as crc_long512's four
// 512-bit ones do; no ternary logic, so two XORs, and no masked loads
// needed, since a partial group is one 16-byte block.
#define TANDEM_YMM_TARGET __attribute__((target("pclmul,sse4.1,avx,avx2,vpclmulqdq")))

// Two blocks whose first lies d0 (1 <= d0 < kRows) blocks before the
// stream's last, each moved there (d0 == 1: the second is the last and its
// zero constant drops it).
TANDEM_YMM_TARGET inline __m256i fold2(__m256i b, std::size_t d0) noexcept {
  const __m256i k = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kFoldRev.k[kRows - 1 - d0]));
  return _mm256_xor_si256(_mm256_clmulepi64_epi128(b, k, 0x00), _mm256_clmulepi64_epi128(b, k, 0x11));
}
TANDEM_YMM_TARGET inline __m128i fold_to_128(__m256i a) noexcept {
  return _mm_xor_si128(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
}
TANDEM_YMM_TARGET inline __m256i load32(const uint8_t* p) noexcept {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// A lane moved on 16 blocks, `next` (the next 256 bits) added.
TANDEM_YMM_TARGET inline __m256i step16(__m256i a, __m256i k16, __m256i next) noexcept {
  return _mm256_xor_si256(
      _mm256_xor_si256(_mm256_clmulepi64_epi128(a, k16, 0x00), _mm256_clmulepi64_epi128(a, k16, 0x11)), next);
}
TANDEM_YMM_TARGET inline void store32(uint8_t* p, __m256i v) noexcept {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}
TANDEM_YMM_TARGET inline void store16(uint8_t* p, __m128i v) noexcept {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
}

// crc_stream256 for streams of more than kDirect whole blocks.
template <bool kCopy>
TANDEM_YMM_TARGET uint32_t crc_long256(const __m128i* h, std::size_t nh, const uint8_t* p, std::size_t n,
                                       uint8_t* dst) noexcept {
  const std::size_t q = nh + n / 16;
  const uint8_t* mem = p - 16 * nh;
  uint8_t* const dmem = kCopy ? dst - 16 * nh : nullptr;  // where mem's bytes go (kCopy)
  // Lanes of two blocks: the caller's blocks in the first (nh <= 3; the
  // memory before p is not read).
  __m256i b0, b1;
  if (nh == 0) {
    b0 = load32(mem);
    if constexpr (kCopy) store32(dmem, b0);
  } else {
    const __m128i m1 = nh > 1 ? h[1] : load16(mem + 16);
    if constexpr (kCopy)
      if (nh == 1) store16(dmem + 16, m1);
    b0 = _mm256_set_m128i(m1, h[0]);
  }
  if (nh > 2) {
    const __m128i m3 = load16(mem + 48);
    if constexpr (kCopy) store16(dmem + 48, m3);
    b1 = _mm256_set_m128i(m3, h[2]);
  } else {
    b1 = load32(mem + 32);
    if constexpr (kCopy) store32(dmem + 32, b1);
  }
  __m256i a0 = b0, a1 = b1;
  __m256i a2 = load32(mem + 64), a3 = load32(mem + 96), a4 = load32(mem + 128), a5 = load32(mem + 160),
          a6 = load32(mem + 192), a7 = load32(mem + 224);
  if constexpr (kCopy) {
    store32(dmem + 64, a2);
    store32(dmem + 96, a3);
    store32(dmem + 128, a4);
    store32(dmem + 160, a5);
    store32(dmem + 192, a6);
    store32(dmem + 224, a7);
  }
  const __m256i k16 = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kFold[16])));
  std::size_t i = 16;
  for (; q - i >= 16; i += 16) {
    const uint8_t* b = mem + 16 * i;
    __m256i x[8];
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      x[l] = load32(b + 32 * l);
      if constexpr (kCopy) store32(dmem + 16 * i + 32 * l, x[l]);
    }
    a0 = step16(a0, k16, x[0]);
    a1 = step16(a1, k16, x[1]);
    a2 = step16(a2, k16, x[2]);
    a3 = step16(a3, k16, x[3]);
    a4 = step16(a4, k16, x[4]);
    a5 = step16(a5, k16, x[5]);
    a6 = step16(a6, k16, x[6]);
    a7 = step16(a7, k16, x[7]);
  }
  // The lanes stand for blocks i - 16 .. i - 1, the k < 16 blocks left are
  // i .. q - 1: every one straight to the last one's place.
  const std::size_t k = q - i;
  __m256i acc = _mm256_xor_si256(_mm256_xor_si256(fold2(a0, k + 15), fold2(a1, k + 13)),
                                 _mm256_xor_si256(fold2(a2, k + 11), fold2(a3, k + 9)));
  acc = _mm256_xor_si256(acc, _mm256_xor_si256(_mm256_xor_si256(fold2(a4, k + 7), fold2(a5, k + 5)),
                                               _mm256_xor_si256(fold2(a6, k + 3), fold2(a7, k + 1))));
  std::size_t j = i;
  for (; j + 2 < q; j += 2) {
    const __m256i x = load32(mem + 16 * j);
    if constexpr (kCopy) store32(dmem + 16 * j, x);
    acc = _mm256_xor_si256(acc, fold2(x, q - 1 - j));
  }
  if (j + 1 < q) {
    const __m128i x = load16(mem + 16 * j);
    if constexpr (kCopy) store16(dmem + 16 * j, x);
    acc = _mm256_xor_si256(acc, fold2(_mm256_zextsi128_si256(x), q - 1 - j));
  }
  // The last block stays where it is.
  __m128i last;
  if (k == 0) {
    last = _mm256_extracti128_si256(a7, 1);
  } else {
    last = load16(mem + 16 * (q - 1));
    if constexpr (kCopy) store16(dmem + 16 * (q - 1), last);
  }
  return crc_finish(_mm_xor_si128(fold_to_128(acc), last), p, n);
}

// Block j of a stream: the caller's (h) or memory's (copied to dmem, kCopy).
template <bool kCopy>
TANDEM_YMM_TARGET inline __m128i block256(const __m128i* h, std::size_t nh, const uint8_t* mem, uint8_t* dmem,
                                          std::size_t j) noexcept {
  if (j < nh) return h[j];
  const __m128i x = load16(mem + 16 * j);
  if constexpr (kCopy) store16(dmem + 16 * j, x);
  return x;
}

// crc_stream512's contract, two blocks per 256-bit multiplication.
template <bool kCopy>
TANDEM_YMM_TARGET uint32_t crc_stream256(const __m128i* h, std::size_t nh, const uint8_t* p, std::size_t n,
                                         uint8_t* dst = nullptr) noexcept {
  const std::size_t q = nh + n / 16;  // whole blocks, at least one
  const uint8_t* mem = p - 16 * nh;
  uint8_t* const dmem = kCopy ? dst - 16 * nh : nullptr;
  if constexpr (kCopy) {
    // The partial last block (see crc_stream512).
    if (n % 16 != 0) store16(dst + n - 16, load16(p + n - 16));
  }
  if (q > kDirect) return crc_long256<kCopy>(h, nh, p, n, dst);
  // Blocks 0 .. q - 2 moved to the last one's place, two at a time; the
  // caller's blocks (j < nh) come from h.
  __m256i acc = _mm256_setzero_si256();
  std::size_t j = 0;
  for (; j + 2 < q && j < nh; j += 2) {
    const __m128i lo = h[j];
    acc = _mm256_xor_si256(acc, fold2(_mm256_set_m128i(block256<kCopy>(h, nh, mem, dmem, j + 1), lo), q - 1 - j));
  }
  for (; j + 2 < q; j += 2) {
    const __m256i x = load32(mem + 16 * j);
    if constexpr (kCopy) store32(dmem + 16 * j, x);
    acc = _mm256_xor_si256(acc, fold2(x, q - 1 - j));
  }
  if (j + 1 < q)
    acc = _mm256_xor_si256(acc, fold2(_mm256_zextsi128_si256(block256<kCopy>(h, nh, mem, dmem, j)), q - 1 - j));
  const __m128i last = block256<kCopy>(h, nh, mem, dmem, q - 1);
  return crc_finish(_mm_xor_si128(fold_to_128(acc), last), p, n);
}

bool cpu_has_zmm_clmul() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
}
bool cpu_has_ymm_clmul() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("vpclmulqdq");
}

TANDEM_ZMM_TARGET uint32_t crc32_zmm(uint32_t crc, const uint8_t* data, std::size_t len) noexcept {
  const __m128i b0 = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data)),
                                   _mm_cvtsi32_si128(static_cast<int>(~crc)));
  return ~crc_stream512<false>(&b0, 1, data + 16, len - 16);
}
// crc32_zmm while copying data to dst.
TANDEM_ZMM_TARGET uint32_t crc32_copy_zmm(uint32_t crc, uint8_t* dst, const uint8_t* data, std::size_t len) noexcept {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), raw);
  const __m128i b0 = _mm_xor_si128(raw, _mm_cvtsi32_si128(static_cast<int>(~crc)));
  return ~crc_stream512<true>(&b0, 1, data + 16, len - 16, dst + 16);
}
TANDEM_YMM_TARGET uint32_t crc32_ymm(uint32_t crc, const uint8_t* data, std::size_t len) noexcept {
  const __m128i b0 = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data)),
                                   _mm_cvtsi32_si128(static_cast<int>(~crc)));
  return ~crc_stream256<false>(&b0, 1, data + 16, len - 16);
}
TANDEM_YMM_TARGET uint32_t crc32_copy_ymm(uint32_t crc, uint8_t* dst, const uint8_t* data, std::size_t len) noexcept {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), raw);
  const __m128i b0 = _mm_xor_si128(raw, _mm_cvtsi32_si128(static_cast<int>(~crc)));
  return ~crc_stream256<true>(&b0, 1, data + 16, len - 16, dst + 16);
}
#endif

bool supported(CrcKernel k) noexcept {
#if defined(TANDEM_CRC_CLMUL)
  if (k == CrcKernel::kAvx512) return cpu_has_zmm_clmul();
  if (k == CrcKernel::kAvx2) return cpu_has_ymm_clmul();
#endif
  return k == CrcKernel::kLibrary;
}

// The best kernel the CPU has, unless the environment names one; a name
// this CPU or build cannot run is reported once and the best one used.
CrcKernel initial_kernel() noexcept {
  CrcKernel best = CrcKernel::kLibrary;
  if (supported(CrcKernel::kAvx512)) best = CrcKernel::kAvx512;
  else if (supported(CrcKernel::kAvx2)) best = CrcKernel::kAvx2;
  if (std::getenv("TANDEM_CRC_NO_AVX512") != nullptr) best = CrcKernel::kLibrary;
  const char* want = std::getenv("TANDEM_ICRC_KERNEL");
  if (want == nullptr || *want == '\0') return best;
  const std::string_view w(want);
  for (CrcKernel k : kCrcKernels) {
    if (w == crc_kernel_name(k) || (k == CrcKernel::kLibrary && w == "library")) {
      if (supported(k)) return k;
      break;
    }
  }
  common::log::warn("TANDEM_ICRC_KERNEL={} is not one this CPU and build can run (avx512, avx2, library/{}); using {}",
                    want, crc_kernel_name(CrcKernel::kLibrary), crc_kernel_name(best));
  return best;
}
CrcKernel g_kernel = initial_kernel();


}  // namespace

uint32_t crc32_update(uint32_t crc, const uint8_t* data, std::size_t len) noexcept {
#if defined(TANDEM_CRC_CLMUL)
  if (len >= 16) {
    if (g_kernel == CrcKernel::kAvx512) return crc32_zmm(crc, data, len);
    if (g_kernel == CrcKernel::kAvx2) return crc32_ymm(crc, data, len);
  }
#endif
  return crc32_library(crc, data, len);
}

uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, std::size_t len) noexcept {
#if defined(TANDEM_CRC_CLMUL)
  if (len >= 16) {
    if (g_kernel == CrcKernel::kAvx512) return crc32_copy_zmm(crc, dst, src, len);
    if (g_kernel == CrcKernel::kAvx2) return crc32_copy_ymm(crc, dst, src, len);
  }
#endif
  // The library's CRC and a copy: two passes (short parts, CPUs without
  // VPCLMULQDQ).
  if (len != 0) std::memcpy(dst, src, len);
  return crc32_library(crc, src, len);
}

const char* crc32_backend() noexcept {
#if defined(TANDEM_HAVE_ISAL)
#define TANDEM_CRC_LIB "isa-l"
#else
#define TANDEM_CRC_LIB "zlib"
#endif
  switch (g_kernel) {
    case CrcKernel::kAvx512: return "vpclmulqdq-512 from 16 B, else " TANDEM_CRC_LIB;
    case CrcKernel::kAvx2: return "vpclmulqdq-256 from 16 B, else " TANDEM_CRC_LIB;
    case CrcKernel::kLibrary: break;
  }
  return TANDEM_CRC_LIB;
#undef TANDEM_CRC_LIB
}

const char* crc_kernel_name(CrcKernel k) noexcept {
  switch (k) {
    case CrcKernel::kAvx512: return "avx512";
    case CrcKernel::kAvx2: return "avx2";
    case CrcKernel::kLibrary: break;
  }
#if defined(TANDEM_HAVE_ISAL)
  return "isal";
#else
  return "zlib";
#endif
}

bool crc_kernel_supported(CrcKernel k) noexcept { return supported(k); }

CrcKernel crc_kernel() noexcept { return g_kernel; }

bool select_crc_kernel(CrcKernel k) noexcept {
  if (!supported(k)) return false;
  g_kernel = k;
  return true;
}

uint32_t icrc_headers(const uint8_t* ip, std::size_t hdr_len) noexcept {
  if (hdr_len < kIpv4HdrLen) return 0;
  const std::size_t ihl = static_cast<std::size_t>(ip[0] & 0x0F) * 4;
  const std::size_t masked = ihl + kUdpHdrLen + kBthLen;
  if (ihl < kIpv4HdrLen || hdr_len < masked) return 0;
#if defined(TANDEM_CRC_CLMUL)
  if (ihl == kIpv4HdrLen && g_kernel != CrcKernel::kLibrary) {
    // The usual case, no IP options: the 48 masked bytes made in registers
    // and fed to the folding as its first three blocks.
    __m128i h[3];
    masked_head(ip, h);
    if (g_kernel == CrcKernel::kAvx512) return ~crc_stream512<false>(h, 3, ip + 40, hdr_len - 40);
    return ~crc_stream256<false>(h, 3, ip + 40, hdr_len - 40);
  }
#endif
#if defined(__SSE2__)
  if (ihl == kIpv4HdrLen) {
    // The usual case, no IP options: the 48 masked bytes (8 of LRH, IPv4,
    // UDP, BTH) built as three 16-byte stores at the offsets the CRC kernel
    // loads them from. Byte stores into the copy made those loads wait for
    // failed store-to-load forwards, about half of a small packet's ICRC.
    static_assert(8 + kIpv4HdrLen + kUdpHdrLen + kBthLen == 48);
    alignas(16) uint8_t buf[48];
    uint64_t w0;
    std::memcpy(&w0, ip, 8);
    w0 |= 0xFFull << 8;  // TOS
    const __m128i m1 = _mm_setr_epi8(-1, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);  // TTL, checksum
    const __m128i m2 = _mm_setr_epi8(0, 0, -1, -1, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0);  // UDP csum, BTH[4]
    _mm_store_si128(reinterpret_cast<__m128i*>(buf), _mm_set_epi64x(static_cast<long long>(w0), -1));
    _mm_store_si128(reinterpret_cast<__m128i*>(buf + 16),
                    _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ip + 8)), m1));
    _mm_store_si128(reinterpret_cast<__m128i*>(buf + 32),
                    _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ip + 24)), m2));
    return crc32_update(crc32_update(0, buf, sizeof buf), ip + 40, hdr_len - 40);
  }
#endif

  // 8 (LRH) + up to 60 (IPv4 with options) + 8 (UDP) + 12 (BTH).
  uint8_t buf[8 + 60 + kUdpHdrLen + kBthLen];
  std::memset(buf, 0xFF, 8);
  std::memcpy(buf + 8, ip, masked);
  uint8_t* m = buf + 8;
  m[1] = 0xFF;                     // TOS
  m[8] = 0xFF;                     // TTL
  m[10] = m[11] = 0xFF;            // header checksum
  m[ihl + 6] = m[ihl + 7] = 0xFF;  // UDP checksum
  m[ihl + kUdpHdrLen + 4] = 0xFF;  // FECN, BECN, reserved
  uint32_t crc = crc32_update(0, buf, 8 + masked);
  return crc32_update(crc, ip + masked, hdr_len - masked);
}

void roce_icrc_burst(const uint8_t* const* ip, const std::size_t* len, uint32_t* out, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(TANDEM_CRC_CLMUL)
  if (g_kernel == CrcKernel::kAvx512) {
    auto fits = [&](std::size_t j) {
      return len[j] >= kIpv4HdrLen + kUdpHdrLen + kBthLen && len[j] < kBurstBelow && (ip[j][0] & 0x0F) == 5;
    };
    while (i + 4 <= n) {
      if (fits(i) && fits(i + 1) && fits(i + 2) && fits(i + 3)) {
        icrc4_512(ip + i, len + i, out + i);
        i += 4;
      } else {
        out[i] = roce_icrc(ip[i], len[i]);
        ++i;
      }
    }
  }
#endif
  for (; i < n; ++i) out[i] = roce_icrc(ip[i], len[i]);
}

}  // namespace tandem::common
