// Trace units (CubeTrace-style): one record format for every stage that
// handles a packet in any Tandem process (fabric path, RNIC receive passes,
// core, transmit), so `tandemctl trace show` can merge the records of several
// processes into one timeline per packet. A record names the packet as the
// wire does (underlay source and destination, BTH destination QP, PSN,
// opcode), the path (UDP source port), the stage and its verdict; the IPv4
// id tells the transmissions (copies) of one packet apart.
#pragma once

#include <cstdint>
#include <string_view>

namespace tandem::common::trace {

#define TANDEM_FOREACH_TRACE_STAGE(X)                                              \
  X(kNone, "none")                                                                 \
  X(kTx, "tx")                      /* RNIC: frame encapsulated on its path */      \
  X(kFabricEnqueue, "fabric_enqueue") /* fabric: queued on path `aux` */            \
  X(kFabricDrop, "fabric_drop")     /* fabric: dropped on path `aux` (verdict: PathDrop) */ \
  X(kFabricDeliver, "fabric_deliver") /* fabric: left path `aux` for its port */    \
  X(kRxParse, "rx_parse")           /* RNIC: headers or ICRC refused */             \
  X(kRxIngress, "rx_ingress")       /* RNIC: tenant check (aux: table version) */   \
  X(kRxCore, "rx_core")             /* RNIC: the core's verdict (none: accepted; aux: table version) */ \
  X(kPunt, "punt")                  /* RNIC: a table miss asked of the agent (set-up record) */ \
  X(kAgentResolve, "agent_resolve") /* agent: the miss resolved from level 1, or refused (set-up record) */ \
  X(kTxnCommit, "txn_commit")       /* agent: the RNIC committed (or aborted) the entry (aux: table version) */

enum class Stage : uint8_t {
#define TANDEM_TRACE_STAGE_ENUM(name, str) name,
  TANDEM_FOREACH_TRACE_STAGE(TANDEM_TRACE_STAGE_ENUM)
#undef TANDEM_TRACE_STAGE_ENUM
      kCount
};

constexpr std::string_view stage_name(Stage s) noexcept {
  constexpr std::string_view kNames[] = {
#define TANDEM_TRACE_STAGE_STR(name, str) str,
      TANDEM_FOREACH_TRACE_STAGE(TANDEM_TRACE_STAGE_STR)
#undef TANDEM_TRACE_STAGE_STR
  };
  return static_cast<std::size_t>(s) < std::size(kNames) ? kNames[static_cast<std::size_t>(s)] : "?";
}

inline constexpr uint8_t kFlagRetransmit = 1;  // kTx: the core resent this PSN

// Set-up records (punt, agent_resolve, txn_commit) are about a flow's
// level-2 egress entry, not a packet: src_ip is the RNIC whose entry it is
// (the one that punted), dst_ip the remote underlay the agent resolved (0 at
// the punt: not known yet), dqpn the local vNIC id and psn the remote overlay
// address of the missed key; no opcode, port or IPv4 id.
constexpr bool is_setup_stage(Stage s) noexcept {
  return s == Stage::kPunt || s == Stage::kAgentResolve || s == Stage::kTxnCommit;
}

// A set-up record's verdict (0: passed on).
enum class SetupVerdict : uint8_t {
  kOk = 0,
  kOverBudget,  // punt: the vNIC's punt budget refused it (asked again later)
  kDuplicate,   // agent_resolve: already being installed
  kRefused,     // agent_resolve: no mapping, unknown vNIC
  kDenied,      // agent_resolve: isolation
  kOverQuota,   // agent_resolve: the tenant's flow quota on the RNIC
  kNoTarget,    // agent_resolve: the entry's RNIC has no channel (no longer given)
  kAborted,     // txn_commit: the RNIC aborted the transaction
  kForeignVnic, // agent_resolve: the vNIC is not on the punting RNIC (a confused or compromised worker)
  kCount
};

constexpr std::string_view setup_verdict_name(uint8_t v) noexcept {
  constexpr std::string_view kNames[] = {"ok", "over_budget", "duplicate", "refused", "denied",
                                         "over_quota", "no_target", "aborted", "foreign_vnic"};
  return v < std::size(kNames) ? kNames[v] : "?";
}

// 40 bytes. `verdict` is 0 when the stage passed the packet on; otherwise a
// common::DropReason (RNIC stages), a fabric PathDrop (kFabricDrop) or a
// SetupVerdict (set-up stages).
struct Record {
  uint64_t ts_ns = 0;  // the writer's clock; + the ring's clock_offset_ns = CLOCK_MONOTONIC_RAW
  uint32_t src_ip = 0, dst_ip = 0;  // underlay, host order
  uint32_t dqpn = 0;                // BTH destination QP as on the wire
  uint32_t psn = 0;
  uint32_t aux = 0;  // fabric: path index; rx_ingress, rx_core: the level-2 table version the check read (low 32 bits)
  uint16_t sport = 0;
  Stage stage = Stage::kNone;
  uint8_t opcode = 0;
  uint8_t verdict = 0;
  uint8_t flags = 0;
  uint16_t ip_id = 0;  // the frame's IPv4 id: which transmission (copy) a later record belongs to
  uint32_t seq = 0;  // the ring's write index (low 32 bits): a torn read is detected by it
};
static_assert(sizeof(Record) == 40);

}  // namespace tandem::common::trace
