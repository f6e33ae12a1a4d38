#!/usr/bin/env python3
"""Seed inputs for fuzz_rnic_channel: well-formed command sequences in its record
format (byte 0: HELLO version choice; then per record a control byte and a
64-byte message), so the fuzzer starts from transactions that commit."""
import os
import struct
import sys

TYPES = {"begin": 2, "put": 3, "del": 4, "commit": 5, "heartbeat": 9}


def record(kind, body):
    ctl = ((TYPES[kind] - 1) << 2) | 1  # stamp the expected sequence number
    msg = struct.pack("<BBHI", TYPES[kind], 0, 0, 0) + body
    return bytes([ctl]) + msg.ljust(64, b"\0")


def key(kind, w0, w1):
    return struct.pack("<B3xII", kind, w0, w1)


def egress(w0, w1, dst):
    # EntryKey + EgressAction (src ip, dst ip, mac, path set, vni, base port, count, reserved)
    return key(1, w0, w1) + struct.pack("<II6sHIHBB", 0x0A000001, dst, b"\2\0\0\0\0\2", 0, 100, 49152, 4, 0)


def main(out):
    os.makedirs(out, exist_ok=True)
    for version in (0, 1, 2):  # HELLO offers v1, v2, v3
        seq = [record("heartbeat", struct.pack("<QQ", 1, 0)),
               record("begin", struct.pack("<IIQ", 1, 0, 0)),
               record("put", struct.pack("<II", 1, 0) + egress(1, 0xC0A80002, 0x0A000002)),
               record("put", struct.pack("<II", 1, 0) + egress(1, 0xC0A80003, 0x0A000003)),
               record("commit", struct.pack("<IIQQ", 1, 2, 1, 0)),
               record("begin", struct.pack("<IIQ", 2, 0, 1)),
               record("del", struct.pack("<II", 2, 0) + key(1, 1, 0xC0A80002)),
               record("commit", struct.pack("<IIQQ", 2, 1, 2, 0))]
        with open(os.path.join(out, f"txns-v{version + 1}"), "wb") as f:
            f.write(bytes([version]) + b"".join(seq))


if __name__ == "__main__":
    main(sys.argv[1])
