// The tandem-rnic worker: one DPDK port, one transport core, one host
// interface, one loop. run() (worker_config.h) builds a Worker and loops.
//
// Per iteration:
//   rx_burst(32) -> in passes over the burst (rx_stage.h): parse_roce of
//     every frame's headers on mbuf data (no copy, prefetching ahead) -> the
//     burst's ICRCs four at a time -> per frame: ingress check (the QP's
//     tenant: underlay source, VNI and remote must match the table, else
//     tenant_mismatch) -> RETH/XETH rkey+VA translated through
//     HostServer::translate_remote -> core.on_packet(now)
//   HostServer::apply_control -> what the control thread finished (sockets,
//     mmap and DMA registration live there, host_control.h) -> events (QP
//     create/modify/destroy, app death) onto the core's verbs -> new WQEs ->
//     core.post_send/post_recv
//   core.poll(now) -> TxQueue -> egress lookup (vNIC, remote overlay IP) ->
//     TxEncap (headers, zero-copy payload, chained ICRC) -> tx_burst
//   core.poll_cq -> HostServer completions
//
// Address spaces. The core sees one "identity" memory region covering the
// worker's address space (addr == host_ptr); every local SGE is a worker
// pointer HostServer already validated, and every remote access in a packet
// (RETH, and the IRN placement header) is re-validated by the host interface
// for the receiving QP's application and PD and rewritten to a worker pointer
// before the core sees it. A packet's own rkey therefore never reaches the
// core: an unknown one becomes key 0, which the core refuses with a NAK.
// QP numbers: applications use HostServer's QPNs on the wire (as they
// exchange them out of band); the worker maps them to core QPNs.
#pragma once

#include "rnic/dpdk/worker_config.h"
