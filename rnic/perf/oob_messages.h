// The out-of-band exchange of tandem-perf (perftest's TCP handshake): fixed
// little structs, host byte order, each checked by a magic. Order:
//   client -> server  Params
//   server -> client  Accept, then Params.qps x QpDest
//   client -> server  Params.qps x QpDest
//   both             Sync (ready), run, then
//   client -> server  Done; server -> client Result.
#pragma once

#include <cstdint>

namespace tandem::rnic::perf {

inline constexpr uint32_t kOobMagic = 0x54505246;  // "TPRF"
inline constexpr uint16_t kOobVersion = 1;

struct ParamsMsg {
  uint32_t magic;
  uint16_t version;
  uint8_t test;        // TestKind
  uint8_t verify;      // 1: --verify
  uint64_t size;
  uint64_t iterations; // 0 with a duration
  double duration_s;
  uint32_t qps;
  uint32_t tx_depth;
  uint32_t mtu;
  uint32_t slots;      // message slots per QP in each side's buffer
};

struct AcceptMsg {
  uint32_t magic;
  uint32_t ok;       // 0: refused, error says why
  char error[120];
};

// One QP's connect parameters: what ibv_query_qp/ibv_query_gid give perftest.
struct QpDest {
  uint32_t magic;
  uint32_t qpn;
  uint32_t psn;
  uint32_t rkey;
  uint64_t va;       // start of this QP's part of the registered buffer
  uint64_t length;   // bytes of it the peer may touch
  uint8_t gid[16];   // vNIC overlay address, IPv4-mapped IPv6 (RoCEv2 GID)
};

struct SyncMsg {
  uint32_t magic;
  uint32_t ready;
};

// The client finished: how many messages each QP moved and what it measured.
struct DoneMsg {
  uint32_t magic;
  uint32_t qps;
  uint64_t iterations[256];  // per QP (kMaxQps)
  uint64_t elapsed_ns;
  double bw_peak_gbps;
  double bw_avg_gbps;
  double msg_rate_mpps;
  uint32_t failed;           // 1: the client hit an error (the server reports it too)
  uint32_t verify;           // the client's own checks (read_bw, latency): 0 off, 1 ok, 2 failed
  uint32_t mm_qp;            // verify == 2: the first mismatch the client saw
  uint32_t mm_expected;
  uint32_t mm_got;
  uint64_t mm_iteration;
  uint64_t mm_offset;
};

// The server's verdict on what it received.
struct ResultMsg {
  uint32_t magic;
  uint32_t verify;           // 0 off, 1 ok, 2 failed
  uint32_t qp;               // first mismatch: QP index
  uint32_t reserved;
  uint64_t iteration;        // first mismatch: iteration (message number on that QP)
  uint64_t offset;           // first mismatch: byte offset in the message
  uint32_t expected;
  uint32_t got;
  uint64_t messages;         // messages the server checked or received
  uint32_t error;            // 1: the server hit an error other than a mismatch
  char text[124];
};

}  // namespace tandem::rnic::perf
