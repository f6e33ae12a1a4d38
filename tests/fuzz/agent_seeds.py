#!/usr/bin/env python3
"""Seed inputs for fuzz_agent_channel: a worker that attaches (BAR state, instance,
a beating heartbeat), answers HELLO and commits, then scribbles on the file, so the
fuzzer starts from an ACTIVE channel (op records as in fuzz_agent_channel.cc)."""
import os
import struct
import sys


def bar(line, value):
    return bytes([6, line]) + struct.pack("<Q", value)


def step():
    return bytes([4])


def event(body):
    return bytes([1]) + body.ljust(64, b"\0")


def hello_ack(seq, capacity=1024):
    # header (type 0x41, seq), chosen 4, oldest 1, current 4, reserved, agent instance 1, capacity,
    # committed version 0, digest 0, count 0
    return struct.pack("<BBHIHHHHIIQQI", 0x41, 0, 0, seq, 4, 1, 4, 0, 1, capacity, 0, 0, 0)


def committed(seq, txn, version):
    return struct.pack("<BBHIIIQQI", 0x42, 0, 0, seq, txn, 0, version, 0, 0)


def attach():
    out = bar(0, 1) + bar(2, 5)  # AWAIT_HELLO, instance 5
    for hb in range(1, 4):
        out += bar(1, hb) + step()
    return out + event(hello_ack(0)) + bar(1, 9) + step() + bar(0, 3) + step()


def main(out):
    os.makedirs(out, exist_ok=True)
    seeds = {
        "attach": attach(),
        "attach-put": attach() + bytes([5]) + struct.pack("<BxxxII", 1, 1, 2) + bytes(24) + step() +
        event(committed(1, 1, 1)) + step(),
        "scribble-header": attach() + bytes([0]) + struct.pack("<HB", 48, 16) + b"\xff" * 16 + step(),
        "evt-index": attach() + bytes([2]) + struct.pack("<I", 0x80000000) + step(),
        "cmd-index": attach() + bytes([5]) + bytes(36) + bytes([3]) + struct.pack("<I", 77) + step(),
        "punt-slot": attach() + event(struct.pack("<BBHIIIHH", 0x44, 0, 0, 1, 999, 1, 100, 0)) + step(),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1])
