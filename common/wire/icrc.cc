#include "common/wire/icrc.h"

#include <cstring>

#include "common/wire/headers.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(TANDEM_HAVE_ISAL)
#include <isa-l/crc.h>
#else
#include <zlib.h>
#endif

namespace tandem::common {

uint32_t crc32_update(uint32_t crc, const uint8_t* data, std::size_t len) noexcept {
#if defined(TANDEM_HAVE_ISAL)
  return crc32_gzip_refl(crc, data, len);
#else
  return static_cast<uint32_t>(::crc32(crc, data, static_cast<uInt>(len)));
#endif
}

const char* crc32_backend() noexcept {
#if defined(TANDEM_HAVE_ISAL)
  return "isa-l";
#else
  return "zlib";
#endif
}

uint32_t icrc_headers(const uint8_t* ip, std::size_t hdr_len) noexcept {
  if (hdr_len < kIpv4HdrLen) return 0;
  const std::size_t ihl = static_cast<std::size_t>(ip[0] & 0x0F) * 4;
  const std::size_t masked = ihl + kUdpHdrLen + kBthLen;
  if (ihl < kIpv4HdrLen || hdr_len < masked) return 0;
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

}  // namespace tandem::common
