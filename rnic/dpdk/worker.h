// The tandem-rnic worker: one DPDK port, one transport core, one host
// interface, one loop. run() (worker_config.h) starts the EAL, the port and
// its mempools, builds the worker and loops.
//
// The worker's logic (QP directory, host glue, route waits, vNIC following,
// completions, counters, the bursts) is rnic/port's PortWorker, here over
// DpdkIo (dpdk_io.h: rte_eth_rx/tx_burst, TxEncap's mbufs, the TSC clock).
// This file's worker adds what needs DPDK: the loop around it (idle modes,
// signals, the memif unmap guard), the DPU agent's channel rings, telemetry
// registration, device mappings for MRs, and run().
#pragma once

#include "rnic/dpdk/worker_config.h"
