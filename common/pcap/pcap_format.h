// Classic pcap file layout (the libpcap "savefile" format, not pcapng): a
// 24-byte global header, then per packet a 16-byte record header and the
// captured bytes. Only LINKTYPE_ETHERNET is used by Tandem.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::common {

inline constexpr uint32_t kPcapMagicMicro = 0xA1B2C3D4;  // timestamps in microseconds
inline constexpr uint32_t kPcapMagicNano = 0xA1B23C4D;   // timestamps in nanoseconds
inline constexpr uint32_t kLinktypeEthernet = 1;
inline constexpr std::size_t kPcapFileHeaderLen = 24;
inline constexpr std::size_t kPcapRecordHeaderLen = 16;
inline constexpr uint32_t kPcapDefaultSnaplen = 262144;
// Largest record we accept: libpcap's own limit for Ethernet captures.
inline constexpr uint32_t kPcapMaxRecordLen = 262144;

}  // namespace tandem::common
