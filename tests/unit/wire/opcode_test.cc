#include <catch2/catch.hpp>

#include "common/wire/opcode.h"
#include "common/wire/roce_packet.h"

using namespace tandem::common;

TEST_CASE("opcode table follows rdma-core's numbering") {
  CHECK(opcode_info(IBV_OPCODE_RC_SEND_FIRST).name == "RC_SEND_FIRST");
  CHECK(opcode_info(IBV_OPCODE_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE).name ==
        "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
  CHECK(opcode_info(IBV_OPCODE_RC_ACKNOWLEDGE).name == "RC_ACKNOWLEDGE");
  CHECK(opcode_info(kOpcodeCnp).name == "CNP");
  CHECK(opcode_info(IBV_OPCODE_UD_SEND_ONLY).name == "UD_SEND_ONLY");
  CHECK(opcode_has(IBV_OPCODE_UD_SEND_ONLY_WITH_IMMEDIATE, kOpDeth | kOpImm));
  CHECK(transport_ext_len(IBV_OPCODE_UD_SEND_ONLY_WITH_IMMEDIATE) == kDethLen + kImmLen);
  CHECK_FALSE(opcode_known(IBV_OPCODE_UC_SEND_ONLY));
  CHECK_FALSE(opcode_known(0x15));
  int known = 0;
  for (int i = 0; i < 256; ++i) known += opcode_known(static_cast<uint8_t>(i));
  CHECK(known == 24);  // 21 RC opcodes, UD's two SEND_ONLY + CNP
}

TEST_CASE("opcode names parse back, with or without the IBV_OPCODE_ prefix") {
  for (int i = 0; i < 256; ++i) {
    if (!opcode_known(static_cast<uint8_t>(i))) continue;
    CHECK(opcode_from_name(opcode_info(static_cast<uint8_t>(i)).name) == i);
  }
  CHECK(opcode_from_name("IBV_OPCODE_RC_FETCH_ADD") == IBV_OPCODE_RC_FETCH_ADD);
  CHECK(opcode_from_name("RC_NOPE") == -1);
}

TEST_CASE("extension header lengths per opcode") {
  CHECK(transport_ext_len(IBV_OPCODE_RC_RDMA_WRITE_FIRST) == kRethLen);
  CHECK(transport_ext_len(IBV_OPCODE_RC_RDMA_WRITE_MIDDLE) == 0);
  CHECK(transport_ext_len(IBV_OPCODE_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE) == kRethLen + kImmLen);
  CHECK(transport_ext_len(IBV_OPCODE_RC_SEND_LAST_WITH_IMMEDIATE) == kImmLen);
  CHECK(transport_ext_len(IBV_OPCODE_RC_RDMA_READ_REQUEST) == kRethLen);
  CHECK(transport_ext_len(IBV_OPCODE_RC_RDMA_READ_RESPONSE_MIDDLE) == 0);
  CHECK(transport_ext_len(IBV_OPCODE_RC_RDMA_READ_RESPONSE_LAST) == kAethLen);
  CHECK(transport_ext_len(IBV_OPCODE_RC_ACKNOWLEDGE) == kAethLen);
  CHECK(transport_ext_len(IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE) == kAethLen + kAtomicAckLen);
  CHECK(transport_ext_len(IBV_OPCODE_RC_COMPARE_SWAP) == kAtomicEthLen);
  CHECK(transport_ext_len(kOpcodeCnp) == kCnpPadLen);
}
