// Turns one captured Ethernet frame into the JSON object `tandem-wire decode`
// prints: the RoCEv2 fields as far as the captured bytes go (a layer that is
// not there, or not what the layer below announced, is left out rather than
// guessed), plus the parser's verdict (ok / drop_reason) and the ICRC check.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace tandem::common {

using Json = nlohmann::ordered_json;

struct DecodeOptions {
  bool payload_hex = false;  // add the payload bytes as "payload_hex"
};

// `index` is the packet's 1-based position in its capture.
Json decode_frame(std::span<const uint8_t> frame, std::size_t index, const DecodeOptions& opts = {});

// One readable line for a decoded packet (what `decode --summary` prints).
std::string summarize_packet(const Json& pkt);

}  // namespace tandem::common
