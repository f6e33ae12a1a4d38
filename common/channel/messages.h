// Every message of the DPU <-> RNIC "PCIe" channel, the level-2 flow-table entry
// format, and the protocol version numbers. Shared by tandem-dpu and tandem-rnic,
// which never include each other: this header is the whole contract between them.
//
// Messages are fixed-size (kMessageSize bytes, one cache line) plain structs that
// travel through DPDK rings in element mode. Both processes run on the same host
// and are built from one tree, so native byte order and struct layout are the
// wire format; static_asserts below pin every offset so an accidental layout change
// fails to compile instead of silently corrupting the other side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/wire/headers.h"

namespace tandem::common {

// ---------------------------------------------------------------------------
// Protocol versions. The DPU agent and the RNIC "firmware" are upgraded at
// different times; each side speaks a range [oldest, current] and HELLO picks
// the highest version both speak (see negotiate.h).
//   v1: transactions (BEGIN/PUT/DEL/COMMIT/ABORT), full-replay SYNC, heartbeats.
//   v2: adds digest reconcile: COMMIT/SYNC_END carry the agent's expected table
//       digest (the RNIC aborts on mismatch) and SYNC may be skipped when the BAR's
//       committed version and digest equal the agent's.
//   v3: adds vNIC entries (EntryKind::kVnic): the agent programs the port's vNICs
//       into the table with the flows, so a worker learns them from the agent
//       instead of its YAML. Never sent on a channel that negotiated v1 or v2
//       (the RNIC refuses them there as kBadEntry).
//   v4: vNIC entries carry the tenant's partition key (VnicAction::pkey): the
//       RNIC stamps it into the BTH of every packet of the vNIC's QPs and drops
//       arriving packets whose P_Key is not their QP's (docs/partitions.md).
//       Below v4 the field is zero and the RNIC refuses an entry that sets it.
inline constexpr uint16_t kProtocolVersionCurrent = 4;
inline constexpr uint16_t kProtocolVersionOldest = 1;
inline constexpr uint16_t kProtocolVersionDigest = 2;  // first version with digest reconcile
inline constexpr uint16_t kProtocolVersionVnic = 3;    // first version with vNIC entries
inline constexpr uint16_t kProtocolVersionPkey = 4;    // first version with partition keys

inline constexpr std::size_t kMessageSize = 64;

// ---------------------------------------------------------------------------
// Level-2 entry format (what an RNIC's per-port table holds).

enum class EntryKind : uint8_t {
  kInvalid = 0,
  kEgress = 1,      // (local vNIC id, remote overlay IPv4) -> EgressAction
  kIngressVni = 2,  // (underlay src IPv4, VNI) -> IngressAction
  kIngressQpn = 3,  // (underlay src IPv4, local dst QPN) -> IngressAction
  kVnic = 4,        // v3: (vNIC id) -> VnicAction: a vNIC this RNIC port serves
};

// 12 bytes. Two 32-bit words whose meaning depends on kind; build keys with the
// functions below so no caller mixes them up. Reserved bytes are always zero.
struct EntryKey {
  EntryKind kind = EntryKind::kInvalid;
  uint8_t reserved[3] = {0, 0, 0};
  uint32_t word0 = 0;  // egress, vNIC: local vNIC id; ingress: underlay source IPv4 (host order)
  uint32_t word1 = 0;  // egress: remote overlay IPv4 (host order); ingress: VNI or dst QPN (24 bits);
                       // vNIC: 0

  friend constexpr bool operator==(const EntryKey& a, const EntryKey& b) noexcept {
    return a.kind == b.kind && a.word0 == b.word0 && a.word1 == b.word1;
  }
};
static_assert(sizeof(EntryKey) == 12);
static_assert(std::is_trivially_copyable_v<EntryKey>);

constexpr EntryKey egress_key(uint32_t local_vnic_id, uint32_t remote_overlay_ip) noexcept {
  EntryKey k;
  k.kind = EntryKind::kEgress;
  k.word0 = local_vnic_id;
  k.word1 = remote_overlay_ip;
  return k;
}
constexpr EntryKey ingress_key_vni(uint32_t underlay_src_ip, uint32_t vni) noexcept {
  EntryKey k;
  k.kind = EntryKind::kIngressVni;
  k.word0 = underlay_src_ip;
  k.word1 = vni & 0xFFFFFF;
  return k;
}
constexpr EntryKey ingress_key_qpn(uint32_t underlay_src_ip, uint32_t dst_qpn) noexcept {
  EntryKey k;
  k.kind = EntryKind::kIngressQpn;
  k.word0 = underlay_src_ip;
  k.word1 = dst_qpn & 0xFFFFFF;
  return k;
}

constexpr EntryKey vnic_key(uint32_t vnic_id) noexcept {
  EntryKey k;
  k.kind = EntryKind::kVnic;
  k.word0 = vnic_id;
  return k;
}

// 24 bytes: how to send a tenant packet to a remote overlay address.
struct EgressAction {
  uint32_t underlay_src_ip = 0;  // this RNIC's underlay (physical) IPv4
  uint32_t underlay_dst_ip = 0;  // the remote vNIC's RNIC underlay IPv4
  MacAddr dst_mac{};             // next-hop MAC on the underlay
  uint16_t path_set_id = 0;      // path set the sprayer uses toward this destination
  uint32_t vni = 0;              // tenant VNI (24 bits), stamped in VXLAN mode / checked on return
  uint16_t path_base_port = 0;   // first UDP source-port entropy value of the path set
  uint8_t path_count = 0;        // paths are path_base_port + [0, path_count); 0 = one path
  uint8_t flags = 0;             // kEgressPeer* (older agents send 0: a Tandem peer)
};
static_assert(sizeof(EgressAction) == 24);

// EgressAction::flags. The remote is a standard RoCEv2 RNIC (a kernel stack,
// a hardware NIC), not a Tandem worker: its QPs send nothing Tandem-only (no
// IRN placement header or SACKs, no credits in the AETH: go-back-N whatever
// the worker's --mode); spraying the UDP source port stays.
inline constexpr uint8_t kEgressPeerRoce = 0x01;

// 24 bytes: what an arriving underlay packet means on the overlay.
struct IngressAction {
  uint32_t overlay_src_ip = 0;  // remote vNIC's overlay IPv4
  uint32_t overlay_dst_ip = 0;  // local vNIC's overlay IPv4
  uint32_t vni = 0;             // owning tenant (24 bits); a mismatch is a tenant_mismatch drop
  uint32_t local_vnic_id = 0;   // vNIC that receives the packet
  MacAddr overlay_src_mac{};    // remote vNIC's overlay MAC, restored on delivery
  uint16_t reserved = 0;
};
static_assert(sizeof(IngressAction) == 24);

// 24 bytes (v3): one vNIC bound to this RNIC port, as the agent's level 1 has
// it. The worker's vNICs in DPU mode are exactly the vNIC entries of its
// committed table: QP routes, the addresses applications may bind to, counters.
struct VnicAction {
  uint32_t vnic_id = 0;         // agent-wide vNIC id, equal to key.word0 (egress keys name it)
  uint32_t overlay_ip = 0;      // the vNIC's overlay IPv4 (host order): what its applications bind to
  uint32_t vni = 0;             // owning tenant (24 bits)
  MacAddr overlay_mac{};        // the vNIC's overlay MAC
  uint16_t pkey = 0;            // v4: tenant's BTH P_Key (full member, 0x8001..0xFFFE); 0 = none (0xFFFF)
  uint32_t reserved2 = 0;       // zero
};
static_assert(sizeof(VnicAction) == 24);

// A partition key an entry may carry: none (0), or a full member's key of a
// real partition (not 0x8000, which is invalid, nor the default 0xFFFF).
constexpr bool valid_entry_pkey(uint16_t pkey) noexcept {
  return pkey == 0 || ((pkey & 0x8000) != 0 && (pkey & 0x7FFF) != 0 && (pkey & 0x7FFF) != 0x7FFF);
}
// The BTH P_Key a vNIC's packets carry: its tenant's, or the default partition.
constexpr uint16_t wire_pkey(uint16_t entry_pkey) noexcept { return entry_pkey ? entry_pkey : 0xFFFF; }
static_assert(offsetof(VnicAction, overlay_mac) == 12);

// 36 bytes (alignment 4): one level-2 table entry. Which action is valid follows key.kind.
struct Level2Entry {
  EntryKey key;
  union {
    EgressAction egress;
    IngressAction ingress;
    VnicAction vnic;
  };

  Level2Entry() noexcept : key(), egress() {}
};
static_assert(sizeof(Level2Entry) == 36);
static_assert(std::is_trivially_copyable_v<Level2Entry>);
static_assert(offsetof(Level2Entry, egress) == 12 && offsetof(Level2Entry, vnic) == 12);

inline bool operator==(const EgressAction& a, const EgressAction& b) noexcept {
  return a.underlay_src_ip == b.underlay_src_ip && a.underlay_dst_ip == b.underlay_dst_ip &&
         a.dst_mac == b.dst_mac && a.path_set_id == b.path_set_id && a.vni == b.vni &&
         a.path_base_port == b.path_base_port && a.path_count == b.path_count;
}
inline bool operator==(const IngressAction& a, const IngressAction& b) noexcept {
  return a.overlay_src_ip == b.overlay_src_ip && a.overlay_dst_ip == b.overlay_dst_ip &&
         a.vni == b.vni && a.local_vnic_id == b.local_vnic_id &&
         a.overlay_src_mac == b.overlay_src_mac;
}
inline bool operator==(const VnicAction& a, const VnicAction& b) noexcept {
  return a.vnic_id == b.vnic_id && a.overlay_ip == b.overlay_ip && a.vni == b.vni &&
         a.overlay_mac == b.overlay_mac && a.pkey == b.pkey;
}
inline bool operator==(const Level2Entry& a, const Level2Entry& b) noexcept {
  if (!(a.key == b.key)) return false;
  switch (a.key.kind) {
    case EntryKind::kEgress: return a.egress == b.egress;
    case EntryKind::kVnic: return a.vnic == b.vnic;
    default: return a.ingress == b.ingress;
  }
}

inline Level2Entry make_egress_entry(const EntryKey& key, const EgressAction& action) noexcept {
  Level2Entry e;
  e.key = key;
  e.egress = action;
  return e;
}
inline Level2Entry make_ingress_entry(const EntryKey& key, const IngressAction& action) noexcept {
  Level2Entry e;
  e.key = key;
  e.ingress = action;
  return e;
}
// The key is vnic_key(action.vnic_id).
inline Level2Entry make_vnic_entry(const VnicAction& action) noexcept {
  Level2Entry e;
  e.key = vnic_key(action.vnic_id);
  e.vnic = action;
  return e;
}

// ---------------------------------------------------------------------------
// Message types. Commands (DPU -> RNIC) are 0x01-0x3F, events (RNIC -> DPU) 0x40-0x7F.

enum class MessageType : uint8_t {
  kInvalid = 0,
  // commands
  kHello = 0x01,
  kBegin = 0x02,
  kPut = 0x03,
  kDel = 0x04,
  kCommit = 0x05,
  kAbort = 0x06,
  kSyncStart = 0x07,
  kSyncEnd = 0x08,
  kHeartbeat = 0x09,
  kReset = 0x0A,
  // events
  kHelloAck = 0x41,
  kCommitted = 0x42,
  kAborted = 0x43,
  kPunt = 0x44,
  kTableFull = 0x45,
  kError = 0x46,
};

constexpr bool is_command(MessageType t) noexcept {
  auto v = static_cast<uint8_t>(t);
  return v >= 0x01 && v <= 0x0A;
}
constexpr bool is_event(MessageType t) noexcept {
  auto v = static_cast<uint8_t>(t);
  return v >= 0x41 && v <= 0x46;
}

// Why the RNIC refused a transaction (ABORTED.reason).
enum class AbortReason : uint8_t {
  kNone = 0,
  kRequested = 1,        // the agent sent ABORT
  kTableFull = 2,        // a PUT did not fit (TABLE_FULL was sent too)
  kVersionMismatch = 3,  // BEGIN's base version or COMMIT's version is not the next one
  kDigestMismatch = 4,   // v2: the staged table's digest differs from the agent's
  kTxnMismatch = 5,      // PUT/DEL/COMMIT for a txn that is not open, or BEGIN while one is open
  kHeadless = 6,         // RNIC is headless/not synced and refuses new tenant state
  kBadEntry = 7,         // malformed entry (invalid kind, nonzero reserved bytes)
};

// Channel-level errors (ERROR.code): a command that cannot be processed at all.
enum class ChannelError : uint8_t {
  kNone = 0,
  kUnknownMessage = 1,   // type not understood at the negotiated version
  kNotNegotiated = 2,    // command before a successful HELLO
  kBadVersion = 3,       // HELLO with no common version
  kSequenceGap = 4,      // a command's seq is not previous + 1
};

// Every message starts with this 8-byte header.
struct MessageHeader {
  MessageType type = MessageType::kInvalid;
  uint8_t flags = 0;      // per-type flags, 0 unless stated
  uint16_t reserved = 0;
  uint32_t seq = 0;       // per-direction sequence number, +1 per message: a gap is a channel fault
};
static_assert(sizeof(MessageHeader) == 8);

// --- commands DPU -> RNIC ---------------------------------------------------

struct HelloMsg {
  MessageHeader hdr{MessageType::kHello};
  uint16_t oldest_version = kProtocolVersionOldest;    // oldest protocol version the agent speaks
  uint16_t current_version = kProtocolVersionCurrent;  // newest protocol version the agent speaks
  uint32_t agent_instance = 0;  // changes on every agent start: the RNIC sees a new agent
  uint8_t pad[48] = {};
};

struct BeginMsg {
  MessageHeader hdr{MessageType::kBegin};
  uint32_t txn = 0;           // transaction id chosen by the agent, unique per channel session
  uint32_t reserved = 0;
  uint64_t base_version = 0;  // committed version the txn applies on; must equal the RNIC's
  uint8_t pad[40] = {};
};

struct PutMsg {
  MessageHeader hdr{MessageType::kPut};
  uint32_t txn = 0;     // open transaction
  uint32_t reserved = 0;
  Level2Entry entry;    // inserted, or replaces the entry with the same key
  uint8_t pad[12] = {};
};

struct DelMsg {
  MessageHeader hdr{MessageType::kDel};
  uint32_t txn = 0;     // open transaction
  uint32_t reserved = 0;
  EntryKey key;         // entry to delete; deleting an absent key is not an error
  uint8_t pad[36] = {};
};

// COMMIT and SYNC_END share this body.
struct CommitMsg {
  MessageHeader hdr{MessageType::kCommit};
  uint32_t txn = 0;           // open transaction
  uint32_t entry_count = 0;   // v2: entries the table holds after the commit (checked)
  uint64_t version = 0;       // version the table takes on commit: base_version + 1
  uint64_t digest = 0;        // v2: expected table digest after the commit (entry_digest.h)
  uint8_t pad[32] = {};
};

struct AbortMsg {
  MessageHeader hdr{MessageType::kAbort};
  uint32_t txn = 0;  // transaction to discard
  uint8_t pad[52] = {};
};

// Starts a full replay: a transaction whose staged table starts empty instead of
// from the committed one, so SYNC_END switches atomically to exactly what was sent.
struct SyncStartMsg {
  MessageHeader hdr{MessageType::kSyncStart};
  uint32_t txn = 0;           // transaction id of the replay
  uint32_t reserved = 0;
  uint64_t base_version = 0;  // ignored by the RNIC (a replay replaces whatever it had)
  uint8_t pad[40] = {};
};

struct HeartbeatMsg {
  MessageHeader hdr{MessageType::kHeartbeat};
  uint64_t counter = 0;         // agent's heartbeat count, +1 per heartbeat
  uint64_t agent_version = 0;   // table version the agent believes is committed
  uint8_t pad[40] = {};
};

struct ResetMsg {
  MessageHeader hdr{MessageType::kReset};
  uint32_t reason = 0;  // agent-side reason code (informational, logged by the RNIC)
  uint8_t pad[52] = {};  // the RNIC drops any staged txn and waits for HELLO; committed table kept
};

// --- events RNIC -> DPU -----------------------------------------------------

struct HelloAckMsg {
  MessageHeader hdr{MessageType::kHelloAck};
  uint16_t chosen_version = 0;    // highest common version; 0 = none (agent must not proceed)
  uint16_t oldest_version = kProtocolVersionOldest;    // oldest version the RNIC speaks
  uint16_t current_version = kProtocolVersionCurrent;  // newest version the RNIC speaks
  uint16_t reserved = 0;
  uint32_t agent_instance = 0;    // echo of HELLO's, so a stale ack is recognised
  uint32_t table_capacity = 0;    // level-2 entries the RNIC can hold
  uint64_t committed_version = 0; // table version currently in use (0 = empty, never synced)
  uint64_t digest = 0;            // its digest (same as the BAR's)
  uint32_t entry_count = 0;       // entries in the committed table
  uint8_t pad[20] = {};
};

struct CommittedMsg {
  MessageHeader hdr{MessageType::kCommitted};
  uint32_t txn = 0;          // transaction that committed
  uint32_t entry_count = 0;  // entries in the table now
  uint64_t version = 0;      // version now visible to packets
  uint64_t digest = 0;       // digest of the table now
  uint8_t pad[32] = {};
};

struct AbortedMsg {
  MessageHeader hdr{MessageType::kAborted};
  uint32_t txn = 0;                       // transaction discarded
  AbortReason reason = AbortReason::kNone;
  uint8_t reserved[3] = {};
  uint32_t op_index = 0;                  // 0-based index of the PUT/DEL that failed, if any
  uint32_t reserved2 = 0;
  uint64_t committed_version = 0;         // version still in use (unchanged by the abort)
  uint8_t pad[32] = {};
};

// A packet missed the level-2 table; its headers are in slot `slot` of the slot
// area (valid while the slot's generation equals `generation`).
struct PuntMsg {
  MessageHeader hdr{MessageType::kPunt};
  uint32_t slot = 0;        // slot index in the slot area
  uint32_t generation = 0;  // slot generation when written; a different one means overwritten
  uint16_t length = 0;      // bytes of packet headers in the slot
  uint16_t port = 0;        // RNIC port the packet arrived on / was sent from
  uint32_t reserved = 0;
  EntryKey missed;          // the key that missed (egress or ingress)
  uint8_t pad[28] = {};
};

struct TableFullMsg {
  MessageHeader hdr{MessageType::kTableFull};
  uint32_t txn = 0;           // transaction whose PUT did not fit
  uint32_t capacity = 0;      // table capacity in entries
  uint32_t live_entries = 0;  // entries in the staged table when the PUT failed
  uint32_t reserved = 0;
  EntryKey key;               // key that did not fit
  uint8_t pad[28] = {};
};

struct ErrorMsg {
  MessageHeader hdr{MessageType::kError};
  ChannelError code = ChannelError::kNone;
  uint8_t reserved[3] = {};
  uint32_t offending_seq = 0;        // seq of the command that caused it
  MessageType offending_type = MessageType::kInvalid;
  uint8_t pad[47] = {};
};

// A message as it sits in a ring slot.
struct alignas(8) RawMessage {
  uint8_t bytes[kMessageSize] = {};

  MessageType type() const noexcept { return static_cast<MessageType>(bytes[0]); }
  uint32_t seq() const noexcept {
    uint32_t s;
    std::memcpy(&s, bytes + offsetof(MessageHeader, seq), sizeof s);
    return s;
  }
  void set_seq(uint32_t s) noexcept { std::memcpy(bytes + offsetof(MessageHeader, seq), &s, sizeof s); }
};
static_assert(sizeof(RawMessage) == kMessageSize);

template <class M>
constexpr bool kIsMessage = std::is_trivially_copyable_v<M> && sizeof(M) == kMessageSize;

template <class M>
RawMessage to_raw(const M& m) noexcept {
  static_assert(kIsMessage<M>);
  RawMessage r;
  std::memcpy(r.bytes, &m, kMessageSize);
  return r;
}

// The caller checks raw.type() first; as<> only reinterprets the bytes.
template <class M>
M as(const RawMessage& r) noexcept {
  static_assert(kIsMessage<M>);
  M m;
  std::memcpy(static_cast<void*>(&m), r.bytes, kMessageSize);
  return m;
}

// Pin every message's size and the offsets the other side relies on.
static_assert(kIsMessage<HelloMsg> && kIsMessage<BeginMsg> && kIsMessage<PutMsg> &&
              kIsMessage<DelMsg> && kIsMessage<CommitMsg> && kIsMessage<AbortMsg> &&
              kIsMessage<SyncStartMsg> && kIsMessage<HeartbeatMsg> && kIsMessage<ResetMsg>);
static_assert(kIsMessage<HelloAckMsg> && kIsMessage<CommittedMsg> && kIsMessage<AbortedMsg> &&
              kIsMessage<PuntMsg> && kIsMessage<TableFullMsg> && kIsMessage<ErrorMsg>);
static_assert(offsetof(HelloMsg, oldest_version) == 8 && offsetof(HelloMsg, agent_instance) == 12);
static_assert(offsetof(BeginMsg, base_version) == 16);
static_assert(offsetof(PutMsg, entry) == 16);
static_assert(offsetof(DelMsg, key) == 16);
static_assert(offsetof(CommitMsg, version) == 16 && offsetof(CommitMsg, digest) == 24);
static_assert(offsetof(HeartbeatMsg, counter) == 8);
static_assert(offsetof(HelloAckMsg, committed_version) == 24 && offsetof(HelloAckMsg, digest) == 32);
static_assert(offsetof(CommittedMsg, version) == 16 && offsetof(CommittedMsg, digest) == 24);
static_assert(offsetof(AbortedMsg, reason) == 12 && offsetof(AbortedMsg, committed_version) == 24);
static_assert(offsetof(PuntMsg, missed) == 24);
static_assert(offsetof(TableFullMsg, key) == 24);

}  // namespace tandem::common
