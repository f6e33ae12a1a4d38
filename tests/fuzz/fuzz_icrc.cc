// libFuzzer target: every CRC kernel this CPU has (common/wire/icrc.h)
// against zlib and ISA-L on arbitrary bytes: the plain CRC from a running
// value, chained at a split point, a packet's ICRC against its definition,
// and a burst of ICRCs against each packet's. Exact-size heap copies, so a
// kernel reading past either end is caught (ASan).
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(TANDEM_HAVE_ISAL)
#include <isa-l/crc.h>
#endif

#include "common/wire/icrc.h"

using namespace tandem::common;

namespace {
uint32_t zlib_crc(uint32_t crc, const uint8_t* p, std::size_t n) {
  if (n == 0) return crc;  // zlib gives its initial value 0 for a NULL buffer
  return static_cast<uint32_t>(::crc32(crc, p, static_cast<uInt>(n)));
}
// The ICRC by its definition (IBA A17.3.3), on a copy.
uint32_t icrc_by_definition(const uint8_t* ip, std::size_t len) {
  std::vector<uint8_t> m(8 + len, 0xFF);
  std::memcpy(m.data() + 8, ip, len);
  const std::size_t ihl = static_cast<std::size_t>(ip[0] & 0x0F) * 4, o = 8;
  m[o + 1] = m[o + 8] = m[o + 10] = m[o + 11] = 0xFF;
  m[o + ihl + 6] = m[o + ihl + 7] = 0xFF;
  m[o + ihl + 8 + 4] = 0xFF;
  return zlib_crc(0, m.data(), m.size());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 6) return 0;
  // Two bytes choose the split point, four the running CRC; the rest is the data.
  const std::size_t split_seed = static_cast<std::size_t>(data[0]) << 8 | data[1];
  uint32_t start;
  std::memcpy(&start, data + 2, 4);
  const std::vector<uint8_t> buf(data + 6, data + size);
  const std::size_t n = buf.size();
  const std::size_t split = n == 0 ? 0 : split_seed % (n + 1);
  const uint32_t ref = zlib_crc(start, buf.data(), n);
#if defined(TANDEM_HAVE_ISAL)
  if (crc32_gzip_refl(start, buf.data(), n) != ref) std::abort();
#endif
  // A packet: the data with a sane IHL where it has room for the headers.
  std::vector<uint8_t> pkt(buf);
  const bool is_packet = n >= 40;
  if (is_packet) {
    const std::size_t ihl_words = std::min<std::size_t>(5 + (pkt[0] & 0x0F) % 11, (n - 20) / 4);
    pkt[0] = static_cast<uint8_t>(0x40 | ihl_words);
  }
  const uint32_t icrc_ref = is_packet ? icrc_by_definition(pkt.data(), n) : 0;

  const CrcKernel initial = crc_kernel();
  for (CrcKernel k : kCrcKernels) {
    if (!select_crc_kernel(k)) continue;
    if (crc32_update(start, buf.data(), n) != ref) std::abort();
    const std::vector<uint8_t> head(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(split));
    const std::vector<uint8_t> tail(buf.begin() + static_cast<std::ptrdiff_t>(split), buf.end());
    if (crc32_update(crc32_update(start, head.data(), head.size()), tail.data(), tail.size()) != ref) std::abort();
    if (is_packet) {
      if (roce_icrc(pkt.data(), n) != icrc_ref) std::abort();
      // A burst of prefixes of the packet (each an exact copy), lengths from 40 up.
      std::vector<std::vector<uint8_t>> parts;
      std::vector<const uint8_t*> ips;
      std::vector<std::size_t> lens;
      const std::size_t hdr = (pkt[0] & 0x0F) * 4u + 20;
      for (std::size_t i = 0; i < 9; ++i) {
        const std::size_t len = hdr + (split_seed * (i + 1)) % (n - hdr + 1);
        parts.emplace_back(pkt.begin(), pkt.begin() + static_cast<std::ptrdiff_t>(len));
      }
      for (const auto& p : parts) {
        ips.push_back(p.data());
        lens.push_back(p.size());
      }
      std::vector<uint32_t> out(parts.size());
      roce_icrc_burst(ips.data(), lens.data(), out.data(), parts.size());
      for (std::size_t i = 0; i < parts.size(); ++i)
        if (out[i] != icrc_by_definition(parts[i].data(), parts[i].size())) std::abort();
    }
  }
  if (!select_crc_kernel(initial)) std::abort();
  return 0;
}
