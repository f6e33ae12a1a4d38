"""Seeds for fuzz_cm: records of 1 selector byte + a 256-byte CM MAD (REQ to the listener on
192.168.7.1:7174 with rdma_cm's header, a REP, an RTU, a DREQ)."""
import os
import struct
import sys


def mad(attr, body):
    return struct.pack("!BBBBHHQHHI", 1, 7, 2, 3, 0, 0, 0x42, attr, 0, 0) + body + b"\0" * (232 - len(body))


gid = lambda ip: b"\0" * 10 + b"\xff\xff" + bytes(ip)  # noqa: E731
req = struct.pack("!I", 0x1234) + b"\0" * 4 + struct.pack("!QQ", 0x1061C06, 7) + b"\0" * 8 + \
    struct.pack("!IIIIIHBB", 0x100 << 8 | 1, 1, 16 << 3, 0x55 << 8 | (16 << 3) | 7, 0, 0x8001, 0x30, 0x80)[:24] + \
    struct.pack("!HH", 0xFFFF, 0xFFFF) + gid([192, 168, 7, 2]) + gid([192, 168, 7, 1]) + struct.pack("!IBBBB", 0, 0, 64, 0, 0)
req = req[:140] + b"\0" * (140 - len(req[:140]))
cma = bytes([0, 0x40]) + struct.pack("!H", 40000) + b"\0" * 12 + bytes([192, 168, 7, 2]) + b"\0" * 12 + bytes([192, 168, 7, 1])
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
seeds = {
    "req": bytes([0x17]) + mad(0x10, req[:140] + cma),
    "rep": bytes([0x03]) + mad(0x13, struct.pack("!IIII", 0x99, 1, 0, 0x200 << 8)),
    "rtu_dreq": bytes([0x23]) + mad(0x14, struct.pack("!II", 0x99, 1)) + bytes([0x43]) + mad(0x15, struct.pack("!II", 0x99, 1)),
}
for name, b in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(b)
