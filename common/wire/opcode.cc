#include "common/wire/opcode.h"

namespace tandem::common {

int opcode_from_name(std::string_view name) noexcept {
  constexpr std::string_view kPrefix = "IBV_OPCODE_";
  if (name.substr(0, kPrefix.size()) == kPrefix) name.remove_prefix(kPrefix.size());
  for (int i = 0; i < 256; ++i) {
    if (!kOpcodeTable[i].name.empty() && kOpcodeTable[i].name == name) return i;
  }
  return -1;
}

}  // namespace tandem::common
