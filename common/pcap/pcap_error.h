// The one exception type of the pcap reader and writer: its message already
// names the file (and the record, when one is at fault).
#pragma once

#include <stdexcept>
#include <string>

namespace tandem::common {

class PcapError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tandem::common
