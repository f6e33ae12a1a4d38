#!/usr/bin/env python3
"""Seed inputs for fuzz_host_server: op records (an op byte, the application
byte, then the op's operands, as fuzz_host_server.cc reads them) of
applications that attach, register MRs, create CQs, QPs and an SRQ, bring
QPs to RTS and post good send, receive and SRQ WQEs, so fuzzing starts past
the handshake with WQEs that reach the transport; one that takes shares to
their limits next to silent connections, a clock and pokes at the worker page; a protocol v2
one registers its event ring and raises each kind of asynchronous event."""
import os
import struct
import sys

(HELLO, ALLOC_PD, DEALLOC_PD, REG_MR, DEREG_MR, CREATE_CQ, DESTROY_CQ, CREATE_QP, MODIFY_QP,
 DESTROY_QP, CREATE_SRQ, DESTROY_SRQ, QUERY_QP, RAW, WRITE_SQ, WRITE_RQ, WRITE_SRQ, POST,
 SET_INDEX, DOORBELL, STEP, COMPLETE, FETCH, TRANSLATE, CLOSE, DRAIN_CQ, QP_ERROR, ARM_CQ,
 POLL, SILENT, CLOCK, POKE_PAGE, ASYNC_EVENTS, MODIFY_SRQ, SRQ_LIMIT, PORT_STATE, EVENT_INDEX) = range(37)

MR_ADDR = 0x10000


def rec(op, app, *fields):
    out = bytes([op, app])
    for f in fields:
        out += f
    return out


def b(*v):
    return bytes(v)


def u16(v):
    return struct.pack("<H", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def setup(app, srq=False, channel=False, version=1):
    s = rec(HELLO, app, b(1, version, 0, 1, 0, 0))
    s += rec(ALLOC_PD, app)
    s += rec(REG_MR, app, b(0, 0x07, 0, 0), u64(MR_ADDR), b(0))          # 4 KiB, rw
    s += rec(CREATE_CQ, app, b(4, 0 if channel else 1, 0, 0, 0))         # depth 16, no timestamps
    if srq:
        s += rec(CREATE_SRQ, app, b(0, 4, 0, 0, 0))                      # depth 16, no limit
    s += rec(CREATE_QP, app, b(0, 0, 0, 4, 4, 0, 1 if srq else 0, 0, 0))  # 16 x 16
    s += rec(MODIFY_QP, app, b(0, 1, 0x07))                              # INIT
    s += rec(MODIFY_QP, app, b(0, 2, 0x07), u16(0x1234), u16(100))       # RTR
    s += rec(MODIFY_QP, app, b(0, 3, 0x07), u16(200))                    # RTS
    return s


def sge(offset, length):
    return b(0) + u16(offset) + u16(length)  # own MR 0


def send_wqe(app, slot, opcode, flags, sges, inline=None):
    body = b(0) + u16(slot) + b(0) + u32(slot + 1) + b(opcode, flags) + u64(MR_ADDR) + u32(0x100) + u32(0)
    if inline is not None:
        body += b(len(inline)) + inline
    else:
        body += b(len(sges)) + b"".join(sges)
    return bytes([WRITE_SQ, app]) + body


def recv_wqe(op, app, slot, sges):
    return bytes([op, app]) + b(0) + u16(slot) + b(0) + u32(100 + slot) + b(len(sges)) + b"".join(sges)


def step():
    return rec(STEP, 0, b(31, 63))


def complete(n, recv=False):
    items = b""
    for i in range(n):
        items += b(i) + ((u32(64) + u32(0) + u32(0x1234)) if recv else b"")
    return rec(COMPLETE, 0, b(n), items)


def main(out):
    os.makedirs(out, exist_ok=True)
    seeds = {}
    s = setup(0)
    s += send_wqe(0, 0, 0, 2, [sge(0, 64), sge(128, 256)])   # RDMA WRITE, signaled
    s += send_wqe(0, 1, 2, 2, [sge(512, 1024)])              # SEND
    s += send_wqe(0, 2, 4, 2, [sge(2048, 512)])              # RDMA READ
    s += send_wqe(0, 3, 2, 2 | 8, [], inline=b"hello inline")
    s += rec(POST, 0, b(0, 0, 4)) + step() + complete(4) + rec(DRAIN_CQ, 0, b(0))
    seeds["sq"] = s
    s = setup(0, channel=True)
    s += recv_wqe(WRITE_RQ, 0, 0, [sge(0, 4096)]) + recv_wqe(WRITE_RQ, 0, 1, [sge(0, 100), sge(200, 100)])
    s += rec(ARM_CQ, 0, b(0, 1)) + rec(POST, 0, b(1, 0, 2)) + step() + complete(2, recv=True)
    s += rec(TRANSLATE, 0, b(0, 0), u64(MR_ADDR + 64), u16(512), b(1))
    s += rec(QUERY_QP, 0, b(0)) + rec(DESTROY_QP, 0, b(0)) + rec(DESTROY_CQ, 0, b(0))
    s += rec(DEREG_MR, 0, b(0)) + rec(DEALLOC_PD, 0, b(0)) + rec(POLL, 0)
    seeds["rq"] = s
    s = setup(0, srq=True)
    s += recv_wqe(WRITE_SRQ, 0, 0, [sge(0, 1024)]) + recv_wqe(WRITE_SRQ, 0, 1, [sge(1024, 1024)])
    s += rec(POST, 0, b(2, 0, 2)) + step() + complete(2, recv=True)
    s += rec(DESTROY_QP, 0, b(0)) + rec(DESTROY_SRQ, 0, b(0)) + rec(CLOSE, 0)
    seeds["srq"] = s
    # Two applications: B tries A's lkey; A dies while its work is held.
    s = setup(0) + setup(1)
    s += bytes([WRITE_SQ, 1]) + b(0) + u16(0) + b(0) + u32(9) + b(2, 2) + u64(0) + u32(0) + u32(0) + b(1) + b(0x80) + u16(0) + u16(64)
    s += rec(POST, 1, b(0, 0, 1)) + send_wqe(0, 0, 2, 2, [sge(0, 64)]) + rec(POST, 0, b(0, 0, 1))
    s += step() + rec(CLOSE, 0) + complete(2) + rec(QP_ERROR, 1, b(0)) + rec(FETCH, 1, b(0, 0)) + step()
    seeds["two_apps"] = s
    # Corrupt indices and a raw request.
    s = setup(0) + rec(SET_INDEX, 0, b(0, 0, 0x81), u32(0x7FFFFFFF)) + rec(POST, 0, b(0, 0, 1)) + step()
    s += rec(SET_INDEX, 0, b(3, 0, 0x82), u32(1000)) + rec(DOORBELL, 0, u16(0x8000), u64(~0 & (2**64 - 1)))
    s += rec(RAW, 0, bytes(sizeof_request_plus_16()), b(0x07)) + step()
    seeds["corrupt"] = s
    # Shares to their limits: deep QPs (queue_bytes), SRQs past the server's room, silent
    # connections past the per-uid cap and the hello timeout, every way to write the worker page.
    s = setup(0, srq=True)
    for _ in range(4):
        s += rec(CREATE_SRQ, 0, b(0, 7, 0, 0))                                  # depth 128
        s += rec(CREATE_QP, 0, b(0, 0, 0, 7, 7, 0, 0, 0, 0))                    # 128 x 128
    for _ in range(3):
        s += rec(SILENT, 0)
    s += rec(CLOCK, 0, b(7)) + rec(SILENT, 1) + rec(CLOCK, 0, b(3))
    s += rec(POKE_PAGE, 0, b(0)) + rec(POKE_PAGE, 0, b(1)) + rec(POKE_PAGE, 0, b(2)) + rec(POKE_PAGE, 0, b(3))
    s += rec(CLOSE, 0) + setup(1) + rec(CREATE_QP, 1, b(0, 0, 0, 7, 7, 0, 0, 0, 0))
    seeds["shares"] = s
    # Protocol v2: the event ring; an SRQ limit armed by modify and at creation, then reached; QP
    # fatal and last WQE reached; the port down and up; the ring read, then lied about.
    s = setup(0, srq=True, version=2) + rec(ASYNC_EVENTS, 0, b(0, 0))
    s += rec(MODIFY_SRQ, 0, b(0, 0, 8)) + rec(POLL, 0) + rec(SRQ_LIMIT, 0, b(0), u16(2))
    s += rec(CREATE_SRQ, 0, b(0, 4, 1), u16(4), b(0, 0)) + rec(POLL, 0) + rec(SRQ_LIMIT, 0, b(1), u16(3))
    s += rec(CREATE_CQ, 0, b(1, 1, 200, 0, 0))                            # depth 2, timestamps
    s += rec(QP_ERROR, 0, b(0)) + rec(PORT_STATE, 0, b(0)) + rec(PORT_STATE, 0, b(1)) + rec(POLL, 0)
    s += rec(EVENT_INDEX, 0, b(0)) + rec(EVENT_INDEX, 0, b(1), u32(0x7FFFFFFF)) + rec(QP_ERROR, 0, b(0))
    s += rec(DESTROY_QP, 0, b(0)) + rec(DESTROY_SRQ, 0, b(0)) + rec(CLOSE, 0)
    seeds["async_events"] = s
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


def sizeof_request_plus_16():
    return 72 + 16  # sizeof(Request) + 16, the raw buffer fuzz_host_server reads


if __name__ == "__main__":
    main(sys.argv[1])
