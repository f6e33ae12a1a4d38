// Why a packet was not accepted. Every parser and every fast-path stage
// returns one of these instead of throwing; counters are indexed by it.
#pragma once

#include <cstdint>
#include <string_view>

namespace tandem::common {

#define TANDEM_FOREACH_DROP_REASON(X)                                  \
  X(kNone, "none")                                                     \
  X(kTruncated, "truncated")                                           \
  X(kNotIpv4, "not_ipv4")                                              \
  X(kBadIpHeader, "bad_ip_header")                                     \
  X(kBadIpChecksum, "bad_ip_checksum")                                 \
  X(kIpFragment, "ip_fragment")                                        \
  X(kNotUdp, "not_udp")                                                \
  X(kBadUdpLength, "bad_udp_length")                                   \
  X(kNotRoce, "not_roce_port")                                         \
  X(kBadVxlan, "bad_vxlan")                                            \
  X(kBadBthVersion, "bad_bth_version")                                 \
  X(kUnknownOpcode, "unknown_opcode")                                  \
  X(kBadPad, "bad_pad")                                                \
  X(kBadIcrc, "bad_icrc")                                              \
  X(kUnknownQpn, "unknown_qpn")                                        \
  X(kBadQpState, "bad_qp_state")                                       \
  X(kPsnOutOfWindow, "psn_out_of_window")                              \
  X(kDuplicate, "duplicate")                                           \
  X(kTenantMismatch, "tenant_mismatch")                                \
  X(kTableMiss, "table_miss")                                          \
  X(kNoCredits, "no_credits")                                          \
  X(kNoBuffer, "no_buffer")                                            \
  X(kAccessViolation, "access_violation")                              \
  X(kInvalidRequest, "invalid_request")                                \
  X(kPkeyViolation, "pkey_violation")                                  \
  X(kBadQkey, "bad_qkey")                                              \
  X(kNoRecvWqe, "no_recv_wqe")                                        \
  X(kRegionGone, "region_gone")                                        \
  X(kUnsentPsn, "unsent_psn")                                          \
  X(kUnknownRead, "unknown_read")                                      \
  X(kBadRecvWqe, "bad_recv_wqe") /* the receive it needed failed the host's checks */ \
  X(kConsumed, "consumed") /* not a drop: taken by the port (a CM MAD) */

enum class DropReason : uint8_t {
#define TANDEM_DROP_ENUM(name, str) name,
  TANDEM_FOREACH_DROP_REASON(TANDEM_DROP_ENUM)
#undef TANDEM_DROP_ENUM
  kCount
};

inline constexpr std::size_t kDropReasonCount = static_cast<std::size_t>(DropReason::kCount);

constexpr std::string_view drop_reason_name(DropReason r) noexcept {
  switch (r) {
#define TANDEM_DROP_NAME(name, str) \
  case DropReason::name:            \
    return str;
    TANDEM_FOREACH_DROP_REASON(TANDEM_DROP_NAME)
#undef TANDEM_DROP_NAME
    case DropReason::kCount:
      break;
  }
  return "invalid";
}

}  // namespace tandem::common
