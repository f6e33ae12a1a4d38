// Tandem's wire extension for receiver-side reordering (IRN mode): the
// placement header every request data packet carries, and the selective ACK.
// Both are built from what a standard RoCEv2 parser already accepts, so
// common::parse_roce, Wireshark and scapy decode every frame unchanged.
//
// Placement header (XETH, 24 bytes). In IRN mode every SEND_* and
// RDMA_WRITE_* packet carries it as the first 24 bytes of the BTH payload,
// after the standard transport headers (RETH, ImmDt) of its opcode; the BTH
// pad and ICRC cover it like payload. It makes each packet placeable on its
// own, whatever arrived before it:
//
//   byte  0      magic 0xE1 (extension version 1; anything else is dropped)
//   bytes 1-3    recv_idx: ordinal (mod 2^24) of the message among the QP's
//                RECV-consuming messages (SEND*, WRITE_WITH_IMM), so the
//                responder picks the right posted RECV even out of order
//   bytes 4-7    msg_offset: byte offset of this packet's data in the message
//   bytes 8-11   msg_len: total length of the message
//   bytes 12-15  rkey (WRITE; 0 for SEND)
//   bytes 16-23  va: remote address of the message's first byte (WRITE)
//   (all big-endian)
//
// Whether a QP uses it is a QP attribute both ends agree on out of band (like
// the path MTU), as IRN proposes; GoBackN mode sends standard RoCE only. The
// data of a packet is still at most one path MTU; the header is extra.
//
// Selective ACK (SACK). Sent by the responder, in IRN mode only, as an
// RC_ATOMIC_ACKNOWLEDGE packet (the only standard ACK with a 64-bit field)
// marked in a reserved BTH bit, so it is never taken for the answer to an
// atomic, which is the same opcode unmarked:
//
//   BTH.resv7    kSackMark (bit 6 of the BTH's byte 8, covered by the ICRC;
//                IBA has it sent as 0 and ignored on receive)
//   BTH.psn      cumulative ACK: every PSN up to and including it arrived
//   AETH         ACK syndrome (0x1F: no credit information), current MSN
//   AtomicAckETH bits 63-40: base PSN (24 bits), a PSN after a gap;
//                bits 39-0: bitmap, bit i set = PSN base+i arrived.
//
// A real atomic response (IBA 9.5: PSN of the atomic request, AtomicAckETH =
// the original value) leaves the bit clear. A go-back-N QP never sends a SACK,
// so a standard peer sees standard atomic ACKs only. A requester in IRN mode
// that has sent no atomic yet takes an unmarked one as a SACK too: a peer of a
// release before atomics sends its SACKs unmarked (and answers no atomics).
//
// One SACK event emits up to a few SACK packets, each chunk starting at a
// gap, so the requester learns of several gaps per round trip. A PSN not set
// in a chunk is presumed lost by the requester only if a packet it sent later
// is marked arrived (a RACK-like rule that keeps retransmissions from being
// retransmitted again while still in flight).
//
// Path feedback (IRN mode only), in the BTH's 7 reserved bits after AckReq
// (common::Bth::resv7; 0 in standard RoCE, so a GoBackN QP sends and reads
// none; the ICRC covers them). Each end sprays over its own path set, whose
// source ports the other end cannot map to indices; so:
//
//   responses (ACK, SACK, NAK, READ response), responder -> requester:
//     bits 0-4   the index of the path this response was sent on (in the
//                responder's path set; 0 without one; paths 32-63 of a set
//                get no feedback and send 0x1F with color 1: "none")
//     bit 5      the path's color: flipped by the responder each time an
//                echo of the current color comes back, so an echo can be
//                matched to the responses sent since the last one (a late
//                echo of an older arrival is not taken for a newer one)
//     bit 6      kRespDup: a request that had already arrived arrived again
//                since the last response (the requester's earlier copy was
//                not lost: the response to it was)
//   requests (SEND, WRITE, READ request), requester -> responder:
//     bit 6      kReqEcho: bits 0-5 are valid
//     bits 0-5   the index and color of a path a response arrived on with
//                that color since that was last echoed: the requester keeps
//                the set of such (path, color) pairs and each request
//                carries one, in turn (a request with none waiting carries
//                0). The responder learns which of its ACK
//                paths deliver: a dead one goes unanswered, as a dead data
//                path does for the requester. An echo only ever says
//                responses arrived; one lost with its request is a miss.
//
// Atomics (if they come) must keep RC_ATOMIC_ACKNOWLEDGE's SACK meaning apart
// from this: the path bits are in the BTH, not the AtomicAckETH.
#pragma once

#include <cstdint>

#include "common/wire/byte_order.h"

namespace tandem::rnic {

inline constexpr uint8_t kXethMagic = 0xE1;
inline constexpr uint32_t kXethLen = 24;
inline constexpr uint32_t kSackBits = 40;
inline constexpr uint8_t kPathBitsMask = 0x1F;  // resv7: a path index
inline constexpr uint32_t kEchoPaths = 32;      // paths 0-31 of a set get path feedback
inline constexpr uint8_t kNoEchoPath = 0x3F;    // index 31 with color 1 on a path >= 32: none
inline constexpr uint8_t kPathColor = 0x20;     // resv7: the path's color
inline constexpr uint8_t kRespDup = 0x40;       // resv7 of a response: a duplicate request arrived
inline constexpr uint8_t kReqEcho = 0x40;       // resv7 of a request: bits 0-5 echo a response's path

// resv7 of a response sent on path `path` with its color (dup: a duplicate
// request arrived).
constexpr uint8_t resp_path_bits(uint32_t path, bool color, bool dup) noexcept {
  return static_cast<uint8_t>((path < kEchoPaths ? path | (color ? kPathColor : 0) : kNoEchoPath) |
                              (dup ? kRespDup : 0));
}
// resv7 of a request echoing path `path` of the responder and its `color`.
constexpr uint8_t req_echo_bits(uint32_t path, bool color) noexcept {
  return static_cast<uint8_t>(kReqEcho | (path & kPathBitsMask) | (color ? kPathColor : 0));
}
// On RC_ATOMIC_ACKNOWLEDGE bit 6 is kSackMark instead of kRespDup: set on a
// SACK, clear on an atomic's answer (the dup flag waits for another response).
inline constexpr uint8_t kSackMark = 0x40;

struct Xeth {
  uint32_t recv_idx = 0;  // 24 bits
  uint32_t msg_offset = 0;
  uint32_t msg_len = 0;
  uint32_t rkey = 0;
  uint64_t va = 0;
};

inline void write_xeth(uint8_t* p, const Xeth& x) noexcept {
  common::store_be32(p, uint32_t{kXethMagic} << 24 | (x.recv_idx & 0xFFFFFF));  // magic, recv_idx
  common::store_be32(p + 4, x.msg_offset);
  common::store_be32(p + 8, x.msg_len);
  common::store_be32(p + 12, x.rkey);
  common::store_be64(p + 16, x.va);
}

// False if `len` is short or the magic is wrong.
inline bool read_xeth(const uint8_t* p, uint32_t len, Xeth& x) noexcept {
  if (len < kXethLen) return false;
  // The magic and recv_idx as one 32-bit load (three byte loads cost more).
  const uint32_t w0 = common::load_be32(p);
  if ((w0 >> 24) != kXethMagic) return false;
  x.recv_idx = w0 & 0xFFFFFF;
  x.msg_offset = common::load_be32(p + 4);
  x.msg_len = common::load_be32(p + 8);
  x.rkey = common::load_be32(p + 12);
  x.va = common::load_be64(p + 16);
  return true;
}

constexpr uint64_t sack_encode(uint32_t base_psn, uint64_t bitmap) noexcept {
  return (uint64_t{base_psn & 0xFFFFFF} << kSackBits) | (bitmap & ((1ull << kSackBits) - 1));
}
constexpr uint32_t sack_base(uint64_t v) noexcept {
  return static_cast<uint32_t>(v >> kSackBits) & 0xFFFFFF;
}
constexpr uint64_t sack_bitmap(uint64_t v) noexcept { return v & ((1ull << kSackBits) - 1); }

}  // namespace tandem::rnic
