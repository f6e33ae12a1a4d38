#include "common/fabric/ecn.h"

namespace tandem::common {

EcnMark mark_ce_ipv4(uint8_t* ip, std::size_t avail) noexcept {
  if (avail < 20 || (ip[0] >> 4) != 4 || (ip[0] & 0x0F) < 5) return EcnMark::kNotIpv4;
  const uint8_t ecn = ip[1] & 0x03;
  if (ecn == 0) return EcnMark::kNotEct;
  if (ecn == 0x03) return EcnMark::kAlreadyCe;
  // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), m being the 16-bit word that
  // holds version/IHL and TOS.
  const uint16_t old_word = static_cast<uint16_t>(ip[0] << 8 | ip[1]);
  ip[1] |= 0x03;
  const uint16_t new_word = static_cast<uint16_t>(ip[0] << 8 | ip[1]);
  const uint16_t hc = static_cast<uint16_t>(ip[10] << 8 | ip[11]);
  uint32_t sum = static_cast<uint16_t>(~hc) + static_cast<uint16_t>(~old_word) + uint32_t{new_word};
  sum = (sum & 0xFFFF) + (sum >> 16);
  sum = (sum & 0xFFFF) + (sum >> 16);
  const uint16_t out = static_cast<uint16_t>(~sum);
  ip[10] = static_cast<uint8_t>(out >> 8);
  ip[11] = static_cast<uint8_t>(out);
  return EcnMark::kMarked;
}

}  // namespace tandem::common
