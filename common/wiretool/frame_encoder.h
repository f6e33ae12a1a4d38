// Builds one RoCEv2 frame from a JSON packet spec (one line of the file
// `tandem-wire encode` reads). The spec uses the field names decode prints,
// so a decoded packet (with --payload) encodes back to the same bytes.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "common/wiretool/frame_decoder.h"

namespace tandem::common {

// A spec that cannot be built; the message names the field at fault.
class SpecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Byte i of a generated payload ("payload_len" without "payload_hex").
constexpr uint8_t spec_payload_byte(std::size_t i) noexcept { return static_cast<uint8_t>(i); }

// Throws SpecError. Lengths, the IPv4 checksum and the ICRC come out right
// unless the spec asks otherwise ("bad_icrc", "icrc", "truncate").
std::vector<uint8_t> encode_frame(const Json& spec);

}  // namespace tandem::common
