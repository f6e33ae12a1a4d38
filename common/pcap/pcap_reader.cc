#include "common/pcap/pcap_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace tandem::common {

namespace {

uint32_t raw_le32(const uint8_t* p) noexcept {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

PcapReader::PcapReader(std::span<const uint8_t> bytes, std::string name)
    : bytes_(bytes), name_(std::move(name)) {
  if (bytes_.size() < 4) {
    throw PcapError(name_ + ": not a pcap file (only " + std::to_string(bytes_.size()) +
                    " bytes, a pcap header has 24)");
  }
  const uint32_t magic = raw_le32(bytes_.data());
  if (magic == kPcapMagicMicro || magic == kPcapMagicNano) {
    swapped_ = false;
  } else if (__builtin_bswap32(magic) == kPcapMagicMicro ||
             __builtin_bswap32(magic) == kPcapMagicNano) {
    swapped_ = true;
  } else if (magic == 0x0A0D0D0A) {
    throw PcapError(name_ + ": is a pcapng file; only classic pcap is supported "
                    "(convert with: editcap -F pcap IN OUT)");
  } else {
    throw PcapError(name_ + ": not a pcap file (bad magic " + hex32(magic) + ")");
  }
  nano_ = (swapped_ ? __builtin_bswap32(magic) : magic) == kPcapMagicNano;
  if (bytes_.size() < kPcapFileHeaderLen) {
    throw PcapError(name_ + ": truncated pcap header (" + std::to_string(bytes_.size()) +
                    " of 24 bytes)");
  }
  snaplen_ = u32(16);
  linktype_ = u32(20) & 0x0FFFFFFF;  // upper bits carry FCS-length flags
  if (linktype_ != kLinktypeEthernet) {
    throw PcapError(name_ + ": unsupported link type " + std::to_string(linktype_) +
                    " (only Ethernet, LINKTYPE_ETHERNET=1)");
  }
}

uint32_t PcapReader::u32(std::size_t off) const noexcept {
  const uint32_t v = raw_le32(bytes_.data() + off);
  return swapped_ ? __builtin_bswap32(v) : v;
}

bool PcapReader::next(PcapRecord& rec) {
  if (off_ == bytes_.size()) return false;
  const std::string where = name_ + ": record " + std::to_string(index_ + 1) +
                            " (byte offset " + std::to_string(off_) + ")";
  if (bytes_.size() - off_ < kPcapRecordHeaderLen) {
    throw PcapError(where + ": truncated record header (" + std::to_string(bytes_.size() - off_) +
                    " of 16 bytes)");
  }
  const uint32_t sec = u32(off_);
  const uint32_t frac = u32(off_ + 4);
  const uint32_t incl = u32(off_ + 8);
  const uint32_t orig = u32(off_ + 12);
  if (incl > kPcapMaxRecordLen) {
    throw PcapError(where + ": impossible captured length " + std::to_string(incl) +
                    " (corrupt file?)");
  }
  if (bytes_.size() - off_ - kPcapRecordHeaderLen < incl) {
    throw PcapError(where + ": truncated record (header says " + std::to_string(incl) +
                    " bytes, file has " +
                    std::to_string(bytes_.size() - off_ - kPcapRecordHeaderLen) + ")");
  }
  rec.ts_ns = uint64_t{sec} * 1'000'000'000ull + (nano_ ? uint64_t{frac} : uint64_t{frac} * 1000);
  rec.orig_len = orig < incl ? incl : orig;
  rec.data = bytes_.subspan(off_ + kPcapRecordHeaderLen, incl);
  off_ += kPcapRecordHeaderLen + incl;
  ++index_;
  return true;
}

std::vector<uint8_t> PcapFile::load(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw PcapError(path + ": cannot open: " + std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t buf[65536];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) bytes.insert(bytes.end(), buf, buf + n);
  if (std::ferror(f.get())) throw PcapError(path + ": read error: " + std::strerror(errno));
  return bytes;
}

PcapFile::PcapFile(const std::string& path) : bytes_(load(path)), reader_(bytes_, path) {}

}  // namespace tandem::common
