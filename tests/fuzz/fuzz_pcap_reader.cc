// libFuzzer target: the pcap reader on arbitrary bytes. It may only return
// records inside the buffer or throw PcapError; each record then goes through
// parse_roce as tandem-wire decode would.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/pcap/pcap_reader.h"
#include "common/wire/roce_packet.h"

using namespace tandem::common;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::vector<uint8_t> buf(data, data + size);
  try {
    PcapReader reader(buf, "fuzz.pcap");
    PcapRecord rec;
    while (reader.next(rec)) {
      if (rec.data.data() < buf.data() || rec.data.data() + rec.data.size() > buf.data() + buf.size()) {
        std::abort();
      }
      if (rec.orig_len < rec.data.size()) std::abort();
      RocePacket pkt;
      parse_roce(rec.data.data(), rec.data.size(), pkt);
    }
  } catch (const PcapError&) {
  }
  return 0;
}
