#include "common/pcap/pcap_writer.h"

#include <cerrno>
#include <cstring>

#include "common/wire/byte_order.h"

namespace tandem::common {

PcapWriter::PcapWriter(const std::string& path, bool nanosecond, uint32_t snaplen)
    : path_(path), nano_(nanosecond), snaplen_(snaplen) {
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) throw PcapError(path + ": cannot create: " + std::strerror(errno));
  uint8_t h[kPcapFileHeaderLen] = {};
  store_le32(h, nano_ ? kPcapMagicNano : kPcapMagicMicro);
  h[4] = 2;  // version 2.4, little-endian 16-bit fields
  h[6] = 4;
  store_le32(h + 16, snaplen_);
  store_le32(h + 20, kLinktypeEthernet);
  put(h, sizeof h);
}

PcapWriter::~PcapWriter() {
  if (f_) std::fclose(f_);
}

void PcapWriter::put(const void* p, std::size_t n) {
  if (!f_) throw PcapError(path_ + ": write after close");
  if (n && std::fwrite(p, 1, n, f_) != n) {
    throw PcapError(path_ + ": write failed: " + std::strerror(errno));
  }
}

void PcapWriter::write(uint64_t ts_ns, std::span<const uint8_t> frame, uint32_t orig_len) {
  const uint32_t incl = frame.size() > snaplen_ ? snaplen_ : static_cast<uint32_t>(frame.size());
  uint8_t h[kPcapRecordHeaderLen];
  store_le32(h, static_cast<uint32_t>(ts_ns / 1'000'000'000ull));
  const uint64_t sub = ts_ns % 1'000'000'000ull;
  store_le32(h + 4, static_cast<uint32_t>(nano_ ? sub : sub / 1000));
  store_le32(h + 8, incl);
  store_le32(h + 12, orig_len ? orig_len : static_cast<uint32_t>(frame.size()));
  put(h, sizeof h);
  put(frame.data(), incl);
  ++count_;
}

void PcapWriter::close() {
  if (!f_) return;
  FILE* f = f_;
  f_ = nullptr;
  const bool bad = std::fflush(f) != 0 || std::ferror(f);
  const int err = errno;
  if (std::fclose(f) != 0 || bad) {
    throw PcapError(path_ + ": write failed: " + std::strerror(bad ? err : errno));
  }
}

}  // namespace tandem::common
