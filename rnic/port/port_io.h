// The I/O layer under the port logic (port_worker.h): bursts of frames in and
// out, frame buffers, and the clock. rnic/dpdk/dpdk_io.h implements it on an
// ethdev port and mbufs (TxEncap builds and attaches them), the unit tests on
// plain byte buffers with a settable clock and a TX that can refuse
// (tests/unit/port/fake_io.h). As eRPC keeps transport_impl/{dpdk,fake} behind
// one Transport and instantiates Rpc<Transport> at compile time, PortWorker is
// a template over this: every call below is resolved statically and inlines,
// so the hot path pays no indirect call for the abstraction.
#pragma once

#include <concepts>
#include <cstdint>

#include "rnic/core/tx_desc.h"
#include "rnic/port/encap_template.h"

namespace tandem::rnic::port {

template <class Io>
concept PortIo = requires(Io& io, typename Io::Buf* b, typename Io::Buf** bufs, uint16_t n, const TxDesc& d,
                          const EncapTemplate& t, uint8_t* scratch) {
  typename Io::Buf;
  // Clock (ns, monotonic): the only time the port logic knows.
  { io.now_ns() } -> std::convertible_to<uint64_t>;
  // Ports frames arrive on (port 0 also transmits); up to n received frames of one.
  { io.rx_ports() } -> std::convertible_to<uint16_t>;
  { io.rx_burst(uint16_t{0}, bufs, n) } -> std::convertible_to<uint16_t>;
  // Frames taken for sending (from the front; the rest stay with the caller).
  { io.tx_burst(bufs, n) } -> std::convertible_to<uint16_t>;
  // A frame for d from the QP's template with UDP source port `sport`: headers
  // written, payload attached or copied (nullptr: no buffer, counted by the
  // caller). Its ICRC may be left to finish(), which runs before tx_burst.
  { io.build(d, t, uint16_t{0}) } -> std::same_as<typename Io::Buf*>;
  io.finish();
  io.free_bulk(bufs, n);
  // What RxStage reads of a frame (static, inline).
  { Io::data(b) } -> std::same_as<uint8_t*>;
  { Io::len(b) } -> std::convertible_to<uint32_t>;
  { Io::segmented(b) } -> std::convertible_to<bool>;
  { Io::linearize(b, uint32_t{0}, scratch) } -> std::same_as<uint8_t*>;
  Io::prefetch(b);
};

}  // namespace tandem::rnic::port
