// RoCEv2 invariant CRC (IBA Annex A17.3.3): CRC-32 (the Ethernet/zlib
// polynomial) over 8 bytes of 0xFF standing for the masked LRH, then the
// IPv4 header with TOS, TTL and checksum set to ones, the UDP header with its
// checksum set to ones, the BTH with its FECN/BECN/reserved byte set to ones,
// and everything after it up to the ICRC. On the wire the CRC value is stored
// least-significant byte first (as rxe and scapy do).
//
// The CRC is chainable the way zlib's crc32() is, so a header part and
// scattered payload parts can be fed separately (zero-copy transmit).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::common {

// Plain CRC-32 (zlib semantics): crc32_update(0, p, n) is the CRC of p[0..n).
uint32_t crc32_update(uint32_t crc, const uint8_t* data, std::size_t len) noexcept;

// crc32_update(crc, src, len) while copying src[0..len) to dst[0..len)
// (not overlapping): the receive path checks a payload's ICRC in the pass
// that places it, reading each byte once. The VPCLMULQDQ kernels store each
// block they load (from 16 bytes; the library: a memcpy and its CRC).
uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, std::size_t len) noexcept;

// CRC of the masked pseudo-header: `ip` points at the IPv4 header, and
// `hdr_len` covers IPv4 + UDP + BTH and any transport headers after it
// (at least IPv4 + UDP + BTH). Continue with crc32_update over the payload
// and pad. Returns 0 if hdr_len is too short for the IHL it finds.
uint32_t icrc_headers(const uint8_t* ip, std::size_t hdr_len) noexcept;

// ICRC of a contiguous packet: `len` bytes from the IPv4 header up to (not
// including) the ICRC field.
inline uint32_t roce_icrc(const uint8_t* ip, std::size_t len) noexcept {
  return icrc_headers(ip, len);
}

// The ICRCs of n packets, out[i] = roce_icrc(ip[i], len[i]), computed four
// at a time with their CRC chains interleaved where the CPU allows
// (AVX-512 VPCLMULQDQ): a transmit burst's ICRCs.
void roce_icrc_burst(const uint8_t* const* ip, const std::size_t* len, uint32_t* out, std::size_t n) noexcept;

// Name of the CRC implementation in use: our carry-less multiplication
// from 16 bytes on CPUs with VPCLMULQDQ ("vpclmulqdq-512 ..." with
// AVX-512, "vpclmulqdq-256 ..." with AVX2 only), the library (isa-l or
// zlib) otherwise.
const char* crc32_backend() noexcept;

// The CRC kernels. The best one the CPU has is chosen at start-up (CPUID);
// TANDEM_ICRC_KERNEL=avx512|avx2|library (or isal / zlib, whichever the
// build links) forces one, so that a CPU with AVX-512 can run and measure
// the AVX2 kernel. TANDEM_CRC_NO_AVX512=1 means library (older name).
enum class CrcKernel : uint8_t { kLibrary, kAvx2, kAvx512 };
inline constexpr CrcKernel kCrcKernels[] = {CrcKernel::kLibrary, CrcKernel::kAvx2, CrcKernel::kAvx512};

// "avx512", "avx2", "isal" or "zlib" (the library this build links).
const char* crc_kernel_name(CrcKernel k) noexcept;
bool crc_kernel_supported(CrcKernel k) noexcept;
CrcKernel crc_kernel() noexcept;
// Switches the whole process to `k` (tests, fuzzers and benchmarks compare
// kernels in one run); not thread-safe: call before other threads hash.
// Returns false, changing nothing, if the CPU or build lacks `k`.
bool select_crc_kernel(CrcKernel k) noexcept;

}  // namespace tandem::common
