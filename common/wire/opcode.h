// BTH opcodes, named as in rdma-core's <infiniband/opcode.h>, and what each
// one carries after the BTH. The RC opcodes, UD's two SEND_ONLY opcodes and
// CNP are accepted by the parser; UC/RD ones are reported as unknown.
#pragma once

#include <infiniband/opcode.h>

#include <array>
#include <cstdint>
#include <string_view>

namespace tandem::common {

inline constexpr uint8_t kOpcodeCnp = 0x81;

enum OpcodeFlag : uint32_t {
  kOpReth = 1u << 0,        // RETH follows the BTH
  kOpAeth = 1u << 1,        // AETH follows
  kOpImm = 1u << 2,         // ImmDt follows
  kOpAtomicEth = 1u << 3,   // AtomicETH (28 bytes)
  kOpAtomicAck = 1u << 4,   // AtomicAckETH (8 bytes) after the AETH
  kOpFirst = 1u << 5,
  kOpMiddle = 1u << 6,
  kOpLast = 1u << 7,
  kOpPayload = 1u << 8,     // may carry payload
  kOpRequest = 1u << 9,     // requester -> responder
  kOpSend = 1u << 10,
  kOpWrite = 1u << 11,
  kOpReadReq = 1u << 12,
  kOpReadResp = 1u << 13,
  kOpAck = 1u << 14,
  kOpCnp = 1u << 15,
  kOpDeth = 1u << 16,       // DETH follows the BTH (UD)
};

struct OpcodeInfo {
  std::string_view name;  // empty: not an opcode Tandem accepts
  uint32_t flags;
};

namespace detail {
constexpr std::array<OpcodeInfo, 256> make_opcode_table() {
  std::array<OpcodeInfo, 256> t{};
  constexpr uint32_t kSendF = kOpSend | kOpRequest | kOpPayload;
  constexpr uint32_t kWriteF = kOpWrite | kOpRequest | kOpPayload;
  constexpr uint32_t kReadF = kOpReadResp | kOpPayload;
  t[IBV_OPCODE_RC_SEND_FIRST] = {"RC_SEND_FIRST", kSendF | kOpFirst};
  t[IBV_OPCODE_RC_SEND_MIDDLE] = {"RC_SEND_MIDDLE", kSendF | kOpMiddle};
  t[IBV_OPCODE_RC_SEND_LAST] = {"RC_SEND_LAST", kSendF | kOpLast};
  t[IBV_OPCODE_RC_SEND_LAST_WITH_IMMEDIATE] = {"RC_SEND_LAST_WITH_IMMEDIATE", kSendF | kOpLast | kOpImm};
  t[IBV_OPCODE_RC_SEND_ONLY] = {"RC_SEND_ONLY", kSendF | kOpFirst | kOpLast};
  t[IBV_OPCODE_RC_SEND_ONLY_WITH_IMMEDIATE] = {"RC_SEND_ONLY_WITH_IMMEDIATE",
                                               kSendF | kOpFirst | kOpLast | kOpImm};
  t[IBV_OPCODE_RC_RDMA_WRITE_FIRST] = {"RC_RDMA_WRITE_FIRST", kWriteF | kOpFirst | kOpReth};
  t[IBV_OPCODE_RC_RDMA_WRITE_MIDDLE] = {"RC_RDMA_WRITE_MIDDLE", kWriteF | kOpMiddle};
  t[IBV_OPCODE_RC_RDMA_WRITE_LAST] = {"RC_RDMA_WRITE_LAST", kWriteF | kOpLast};
  t[IBV_OPCODE_RC_RDMA_WRITE_LAST_WITH_IMMEDIATE] = {"RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
                                                     kWriteF | kOpLast | kOpImm};
  t[IBV_OPCODE_RC_RDMA_WRITE_ONLY] = {"RC_RDMA_WRITE_ONLY", kWriteF | kOpFirst | kOpLast | kOpReth};
  t[IBV_OPCODE_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE] = {
      "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kWriteF | kOpFirst | kOpLast | kOpReth | kOpImm};
  t[IBV_OPCODE_RC_RDMA_READ_REQUEST] = {"RC_RDMA_READ_REQUEST",
                                        kOpReadReq | kOpRequest | kOpReth | kOpFirst | kOpLast};
  t[IBV_OPCODE_RC_RDMA_READ_RESPONSE_FIRST] = {"RC_RDMA_READ_RESPONSE_FIRST", kReadF | kOpFirst | kOpAeth};
  t[IBV_OPCODE_RC_RDMA_READ_RESPONSE_MIDDLE] = {"RC_RDMA_READ_RESPONSE_MIDDLE", kReadF | kOpMiddle};
  t[IBV_OPCODE_RC_RDMA_READ_RESPONSE_LAST] = {"RC_RDMA_READ_RESPONSE_LAST", kReadF | kOpLast | kOpAeth};
  t[IBV_OPCODE_RC_RDMA_READ_RESPONSE_ONLY] = {"RC_RDMA_READ_RESPONSE_ONLY",
                                              kReadF | kOpFirst | kOpLast | kOpAeth};
  t[IBV_OPCODE_RC_ACKNOWLEDGE] = {"RC_ACKNOWLEDGE", kOpAck | kOpAeth};
  t[IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE] = {"RC_ATOMIC_ACKNOWLEDGE", kOpAck | kOpAeth | kOpAtomicAck};
  t[IBV_OPCODE_RC_COMPARE_SWAP] = {"RC_COMPARE_SWAP", kOpRequest | kOpAtomicEth | kOpFirst | kOpLast};
  t[IBV_OPCODE_RC_FETCH_ADD] = {"RC_FETCH_ADD", kOpRequest | kOpAtomicEth | kOpFirst | kOpLast};
  // UD: one packet per message, a DETH (Q_Key, source QP) after the BTH.
  t[IBV_OPCODE_UD_SEND_ONLY] = {"UD_SEND_ONLY", kSendF | kOpFirst | kOpLast | kOpDeth};
  t[IBV_OPCODE_UD_SEND_ONLY_WITH_IMMEDIATE] = {"UD_SEND_ONLY_WITH_IMMEDIATE",
                                               kSendF | kOpFirst | kOpLast | kOpDeth | kOpImm};
  t[kOpcodeCnp] = {"CNP", kOpCnp};
  return t;
}
}  // namespace detail

inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::make_opcode_table();

constexpr const OpcodeInfo& opcode_info(uint8_t opcode) noexcept { return kOpcodeTable[opcode]; }
constexpr bool opcode_known(uint8_t opcode) noexcept { return !kOpcodeTable[opcode].name.empty(); }
constexpr bool opcode_has(uint8_t opcode, uint32_t flag) noexcept {
  return (kOpcodeTable[opcode].flags & flag) != 0;
}

// Parses "RC_RDMA_WRITE_ONLY" (or with an "IBV_OPCODE_" prefix); -1 if unknown.
int opcode_from_name(std::string_view name) noexcept;

}  // namespace tandem::common
