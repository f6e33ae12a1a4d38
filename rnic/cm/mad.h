// IB CM messages (IBA vol. 1 chapter 12, the layouts of the kernel's
// include/rdma/ibta_vol1_c12.h) as 256-byte MADs on QP1, and the rdma_cm IP
// header that RoCE rdma_cm puts at the start of a REQ's private data (the
// kernel's cma.c `struct cma_hdr`). Decoding never reads past the 256 bytes
// and says why a MAD is refused; encoding writes the bytes a kernel CM sends.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace tandem::rnic::cm {

inline constexpr uint32_t kMadLen = 256;
inline constexpr uint32_t kMadHdrLen = 24;
inline constexpr uint32_t kGsiQpn = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000;
inline constexpr uint8_t kMgmtClassCm = 0x07;
inline constexpr uint8_t kCmClassVersion = 2;
inline constexpr uint8_t kMethodSend = 0x03;

enum class Attr : uint16_t {
  kReq = 0x0010, kMra = 0x0011, kRej = 0x0012, kRep = 0x0013, kRtu = 0x0014,
  kDreq = 0x0015, kDrep = 0x0016, kSidrReq = 0x0017, kSidrRep = 0x0018, kLap = 0x0019, kApr = 0x001A,
};
std::string_view attr_name(Attr a) noexcept;

// Private data each message carries (bytes).
inline constexpr uint32_t kReqPrivate = 92, kMraPrivate = 222, kRejPrivate = 148, kRepPrivate = 196,
                          kRtuPrivate = 224, kDreqPrivate = 220, kDrepPrivate = 224, kSidrReqPrivate = 216,
                          kSidrRepPrivate = 136;

// REJ reasons (IBA table 109; the kernel's enum ib_cm_rej_reason).
enum class RejReason : uint16_t {
  kNoQp = 1, kNoResources = 3, kTimeout = 4, kUnsupported = 5, kInvalidCommId = 6, kInvalidCommInstance = 7,
  kInvalidServiceId = 8, kInvalidTransportType = 9, kStaleConn = 10, kInvalidGid = 12, kInvalidMtu = 26,
  kConsumerDefined = 28, kDuplicateLocalCommId = 30, kInvalidClassVersion = 31,
};
// MRA/REJ "message" field: which message is MRA'd or rejected.
enum class MsgKind : uint8_t { kReq = 0, kRep = 1, kOther = 2 };

// SIDR_REP status (IBA table 121).
enum class SidrStatus : uint8_t { kSuccess = 0, kNoQp = 1, kRejected = 2, kNoMatch = 3, kRedirect = 4 };

using Gid = std::array<uint8_t, 16>;
Gid gid_of_ipv4(uint32_t ip) noexcept;  // ::ffff:a.b.c.d (RoCEv2 IPv4 GID)
// The IPv4 address of an IPv4-mapped GID, or 0 if it is not one.
uint32_t ipv4_of_gid(const Gid& g) noexcept;

struct MadHeader {
  uint8_t base_version = 1;
  uint8_t mgmt_class = kMgmtClassCm;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMethodSend;
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t tid = 0;
  Attr attr = Attr::kReq;
  uint32_t attr_mod = 0;
};

// Every CM message's fields, host order; which are meaningful follows the attribute.
struct CmMsg {
  MadHeader hdr;
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  // REQ / REP
  uint64_t service_id = 0;
  uint64_t ca_guid = 0;
  uint32_t qkey = 0;
  uint32_t qpn = 0;            // local QPN (REQ, REP); remote QPN (DREQ); SIDR_REP QPN
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t remote_cm_timeout = 0;  // 5 bits: 4.096 us * 2^x
  uint8_t transport = 0;          // 0 RC, 1 UC, 3 RD
  bool flow_control = false;
  uint32_t starting_psn = 0;
  uint8_t local_cm_timeout = 0;
  uint8_t retry_count = 0;        // 3 bits
  uint16_t pkey = 0xFFFF;
  uint8_t path_mtu = 3;           // ibv_mtu (3 = 1024)
  uint8_t rnr_retry_count = 0;
  uint8_t max_cm_retries = 0;     // 4 bits
  bool srq = false;
  uint16_t local_lid = 0xFFFF, remote_lid = 0xFFFF;
  Gid local_gid{}, remote_gid{};
  uint32_t flow_label = 0;
  uint8_t packet_rate = 0, traffic_class = 0, hop_limit = 64, sl = 0;
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0;
  // REP
  uint8_t target_ack_delay = 0;
  uint8_t failover = 0;
  // MRA / REJ
  MsgKind msg = MsgKind::kReq;
  uint8_t service_timeout = 0;
  RejReason reason = RejReason::kConsumerDefined;
  uint8_t ari_len = 0;
  // SIDR
  uint8_t sidr_status = 0;
  // Private data (its length is the message's: bytes past what the sender gave are zero).
  std::array<uint8_t, kRtuPrivate> priv{};
  uint32_t priv_len = 0;
};

enum class MadError : uint8_t {
  kNone, kTruncated, kBadBaseVersion, kNotCm, kBadClassVersion, kBadMethod, kUnknownAttr, kUnsupportedAttr,
};
std::string_view mad_error_name(MadError e) noexcept;

// Decodes a CM MAD (at least kMadLen bytes at p). kUnsupportedAttr: LAP/APR
// (alternate paths), which Tandem does not do.
MadError decode_mad(const uint8_t* p, uint32_t len, CmMsg& out) noexcept;
// Encodes out[0..256): header, the attribute's fields, its private data.
void encode_mad(const CmMsg& m, uint8_t* out) noexcept;
uint32_t private_capacity(Attr a) noexcept;

// ---- rdma_cm's IP header (the first 36 bytes of a REQ's private data)
inline constexpr uint32_t kCmaHdrLen = 36;
inline constexpr uint16_t kPsTcp = 0x0106, kPsUdp = 0x0111, kPsIb = 0x013F, kPsIpoib = 0x0002;
// rdma_cm's service ID for a port space and port: ps << 16 | port.
constexpr uint64_t service_id(uint16_t ps, uint16_t port) noexcept { return (uint64_t{ps} << 16) | port; }
constexpr uint16_t service_port(uint64_t sid) noexcept { return static_cast<uint16_t>(sid); }
constexpr uint16_t service_ps(uint64_t sid) noexcept { return static_cast<uint16_t>(sid >> 16); }
// The IBA's range of service IDs rdma_cm uses: 0x0000000001xxyyyy.
constexpr bool is_rdma_cm_service(uint64_t sid) noexcept { return (sid >> 24) == 1; }

struct CmaHdr {
  uint32_t src_ip = 0;   // the active side's address, host order
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
};
void write_cma_hdr(const CmaHdr& h, uint8_t* out) noexcept;
// False unless version 0 and IPv4.
bool read_cma_hdr(const uint8_t* p, CmaHdr& out) noexcept;

}  // namespace tandem::rnic::cm
