#!/usr/bin/python3
"""RoCEv2 conformance: tandem-wire against scapy and tshark.

1. scapy (scapy.contrib.roce BTH/AETH; RETH, ImmDt, AtomicETH as raw bytes)
   builds every RC opcode with payloads of 0..4096 bytes, plus corrupted-ICRC
   and truncated copies; `tandem-wire decode` must report the same fields, the
   same carried ICRC and the right icrc_ok / drop_reason.
2. `tandem-wire encode` builds the same set (and VLAN / VXLAN variants);
   scapy must dissect the same header fields and, recomputing the ICRC, get
   the value tandem-wire stored (and a different one for bad_icrc packets).
3. tshark must dissect the encoded packets as InfiniBand with the same
   opcode, destination QP, PSN (and RETH / AETH / ImmDt fields).

Usage: roce_conformance.py PATH/TO/tandem-wire. Files go to a temp dir.
"""
import json
import logging
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Ether, IP, UDP, Dot1Q, Raw, raw, rdpcap  # noqa: E402
from scapy.layers.vxlan import VXLAN  # noqa: E402
from scapy.contrib.roce import BTH, AETH  # noqa: E402

# opcode: (name, carries RETH, AETH, ImmDt, AtomicETH, AtomicAckETH, payload)
RC_OPCODES = {
    0x00: ("RC_SEND_FIRST", 0, 0, 0, 0, 0, 1),
    0x01: ("RC_SEND_MIDDLE", 0, 0, 0, 0, 0, 1),
    0x02: ("RC_SEND_LAST", 0, 0, 0, 0, 0, 1),
    0x03: ("RC_SEND_LAST_WITH_IMMEDIATE", 0, 0, 1, 0, 0, 1),
    0x04: ("RC_SEND_ONLY", 0, 0, 0, 0, 0, 1),
    0x05: ("RC_SEND_ONLY_WITH_IMMEDIATE", 0, 0, 1, 0, 0, 1),
    0x06: ("RC_RDMA_WRITE_FIRST", 1, 0, 0, 0, 0, 1),
    0x07: ("RC_RDMA_WRITE_MIDDLE", 0, 0, 0, 0, 0, 1),
    0x08: ("RC_RDMA_WRITE_LAST", 0, 0, 0, 0, 0, 1),
    0x09: ("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 0, 0, 1, 0, 0, 1),
    0x0A: ("RC_RDMA_WRITE_ONLY", 1, 0, 0, 0, 0, 1),
    0x0B: ("RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 1, 0, 1, 0, 0, 1),
    0x0C: ("RC_RDMA_READ_REQUEST", 1, 0, 0, 0, 0, 0),
    0x0D: ("RC_RDMA_READ_RESPONSE_FIRST", 0, 1, 0, 0, 0, 1),
    0x0E: ("RC_RDMA_READ_RESPONSE_MIDDLE", 0, 0, 0, 0, 0, 1),
    0x0F: ("RC_RDMA_READ_RESPONSE_LAST", 0, 1, 0, 0, 0, 1),
    0x10: ("RC_RDMA_READ_RESPONSE_ONLY", 0, 1, 0, 0, 0, 1),
    0x11: ("RC_ACKNOWLEDGE", 0, 1, 0, 0, 0, 0),
    0x12: ("RC_ATOMIC_ACKNOWLEDGE", 0, 1, 0, 0, 1, 0),
    0x13: ("RC_COMPARE_SWAP", 0, 0, 0, 1, 0, 0),
    0x14: ("RC_FETCH_ADD", 0, 0, 0, 1, 0, 0),
}
PAYLOAD_LENS = [0, 1, 2, 3, 4, 5, 63, 256, 1023, 1024, 4095, 4096]

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def expect_eq(got, want, what):
    return check(got == want, f"{what}: tandem-wire {got!r}, expected {want!r}")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


class Case:
    """One packet: what it carries, as a scapy frame and as a tandem-wire spec."""

    def __init__(self, rnd, op, plen, vlan=None, vxlan=None):
        self.op, self.plen, self.vlan, self.vxlan = op, plen, vlan, vxlan
        name, reth, aeth, imm, atomic, atomic_ack, _ = RC_OPCODES[op]
        self.name = name
        self.src = f"10.{rnd.randrange(256)}.{rnd.randrange(256)}.{rnd.randrange(1, 255)}"
        self.dst = f"10.{rnd.randrange(256)}.{rnd.randrange(256)}.{rnd.randrange(1, 255)}"
        self.sport = rnd.randrange(0xC000, 0x10000)
        self.dqpn = rnd.randrange(1 << 24)
        self.psn = rnd.randrange(1 << 24)
        self.ack_req = bool(rnd.getrandbits(1))
        self.se = bool(rnd.getrandbits(1))
        # The BTH's 7 reserved bits: 0 in standard RoCE, Tandem's IRN path
        # feedback otherwise (rnic/core/irn_wire.h); covered by the ICRC.
        self.resv7 = rnd.getrandbits(7) if rnd.getrandbits(1) else 0
        self.pkey = rnd.choice([0xFFFF, 0x8001, 0x7FFF])
        self.reth = ({"va": rnd.getrandbits(64), "rkey": rnd.getrandbits(32),
                      "len": rnd.getrandbits(32)} if reth else None)
        self.aeth = ({"syndrome": rnd.choice([0x1F, 0x00, 0x60, 0x61, 0x2E]),
                      "msn": rnd.getrandbits(24)} if aeth else None)
        self.imm = rnd.getrandbits(32) if imm else None
        self.atomic = ({"va": rnd.getrandbits(64), "rkey": rnd.getrandbits(32),
                        "swap_add": rnd.getrandbits(64), "compare": rnd.getrandbits(64)}
                       if atomic else None)
        self.atomic_ack = rnd.getrandbits(64) if atomic_ack else None
        self.payload = bytes(rnd.getrandbits(8) for _ in range(plen))
        self.pad = (4 - plen % 4) % 4

    def ext_bytes(self):
        b = b""
        if self.reth:
            b += struct.pack("!QII", self.reth["va"], self.reth["rkey"], self.reth["len"])
        if self.atomic:
            a = self.atomic
            b += struct.pack("!QIQQ", a["va"], a["rkey"], a["swap_add"], a["compare"])
        return b

    def scapy_frame(self):
        """The packet built by scapy (it computes the ICRC)."""
        bth = BTH(opcode=self.op, solicited=int(self.se), padcount=self.pad, pkey=self.pkey,
                  dqpn=self.dqpn, ackreq=int(self.ack_req), resv7=self.resv7, psn=self.psn)
        layers = bth
        if self.ext_bytes():
            layers = layers / Raw(self.ext_bytes())
        if self.aeth:
            layers = layers / AETH(syndrome=self.aeth["syndrome"], msn=self.aeth["msn"])
        tail = b""
        if self.atomic_ack is not None:
            tail += struct.pack("!Q", self.atomic_ack)
        if self.imm is not None:
            tail += struct.pack("!I", self.imm)
        tail += self.payload + b"\0" * self.pad
        if tail:
            layers = layers / Raw(tail)
        l2 = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        if self.vlan is not None:
            l2 = l2 / Dot1Q(vlan=self.vlan)
        return l2 / IP(src=self.src, dst=self.dst, flags="DF") / \
            UDP(sport=self.sport, dport=4791, chksum=0) / layers

    def spec(self):
        s = {"opcode": self.name if self.op % 2 else self.op, "src": self.src, "dst": self.dst,
             "sport": self.sport, "dqpn": self.dqpn, "psn": self.psn, "ack_req": self.ack_req,
             "resv7": self.resv7, "se": self.se, "pkey": self.pkey, "payload_hex": self.payload.hex()}
        for k in ("reth", "aeth", "imm", "atomic", "atomic_ack", "vlan"):
            if getattr(self, k) is not None:
                s[k] = getattr(self, k)
        if self.vxlan is not None:
            s["outer"] = {"vni": self.vxlan, "src": "192.168.1.1", "dst": "192.168.1.2"}
        return s

    def expected(self):
        e = {"src": self.src, "dst": self.dst, "sport": self.sport, "dport": 4791,
             "opcode": self.op, "opcode_name": self.name, "dqpn": self.dqpn, "psn": self.psn,
             "ack_req": self.ack_req, "se": self.se, "pkey": self.pkey,
             "payload_len": self.plen}
        if self.resv7:
            e["resv7"] = self.resv7
        for k in ("reth", "aeth", "imm", "atomic", "atomic_ack"):
            if getattr(self, k) is not None:
                e[k] = getattr(self, k)
        return e


def write_pcap_be_ns(path, frames):
    """A big-endian, nanosecond pcap: the byte order and timestamp unit our
    writer never produces, so the reader's other branch is exercised too."""
    with open(path, "wb") as f:
        f.write(struct.pack(">IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        for i, b in enumerate(frames):
            f.write(struct.pack(">IIII", 1700000000 + i, 123456789, len(b), len(b)))
            f.write(b)


def decode(tool, path):
    r = run([tool, "decode", path])
    if not check(r.returncode == 0, f"decode {path} exited {r.returncode}: {r.stderr.strip()}"):
        return []
    return [json.loads(line) for line in r.stdout.splitlines()]


def make_cases(rnd):
    cases = []
    for op, info in RC_OPCODES.items():
        for plen in (PAYLOAD_LENS if info[6] else [0]):
            cases.append(Case(rnd, op, plen))
    return cases


def part1_scapy_to_decode(tool, tmp, rnd):
    """scapy builds, tandem-wire decodes."""
    cases = make_cases(rnd)
    cases += [Case(rnd, op, 16 if RC_OPCODES[op][6] else 0, vlan=rnd.randrange(1, 4095))
              for op in rnd.sample(list(RC_OPCODES), 4)]
    frames, want = [], []
    for c in cases:
        b = raw(c.scapy_frame())
        carried = int.from_bytes(b[-4:], "little")
        frames.append(b)
        want.append(("good", c, carried))
        if rnd.random() < 0.35:  # corrupt the ICRC itself, or a covered byte
            bad = bytearray(b)
            if c.plen and rnd.getrandbits(1):  # a payload bit: covered by the ICRC
                bad[len(b) - 4 - c.pad - 1 - rnd.randrange(c.plen)] ^= 1 << rnd.randrange(8)
            else:
                bad[-1 - rnd.randrange(4)] ^= 1 << rnd.randrange(8)
            frames.append(bytes(bad))
            want.append(("bad_icrc", c, int.from_bytes(bad[-4:], "little")))
        if rnd.random() < 0.35:
            cut = rnd.randrange(1, len(b))
            frames.append(b[:cut])
            want.append(("truncated", c, cut))
    path = os.path.join(tmp, "scapy.pcap")
    write_pcap_be_ns(path, frames)
    got = decode(tool, path)
    if not expect_eq(len(got), len(frames), "packets decoded from the scapy pcap"):
        return len(frames)
    for i, (g, (kind, c, extra)) in enumerate(zip(got, want)):
        what = f"scapy pkt {i + 1} ({c.name}, payload {c.plen}, {kind})"
        expect_eq(g["index"], i + 1, what + " index")
        if kind == "truncated":
            expect_eq(g["ok"], False, what + " ok")
            expect_eq(g["drop_reason"], "truncated", what + " drop_reason")
            check("icrc" not in g and "payload_len" not in g, what + ": ICRC/payload of a cut frame shown")
            # Whatever it still shows must be the real value.
            for k, v in c.expected().items():
                if k in g:
                    expect_eq(g[k], v, f"{what} {k}")
            continue
        for k, v in c.expected().items():
            expect_eq(g.get(k), v, f"{what} {k}")
        for k in ("reth", "aeth", "imm", "atomic", "atomic_ack"):
            if getattr(c, k) is None:
                check(k not in g, f"{what}: {k} shown for an opcode without it")
        expect_eq(g.get("icrc"), "0x%08x" % extra, what + " icrc")
        if c.vlan is not None:
            expect_eq(g.get("vlan"), c.vlan, what + " vlan")
        good = kind == "good"
        expect_eq(g["ok"], good, what + " ok")
        expect_eq(g["icrc_ok"], good, what + " icrc_ok")
        expect_eq(g["drop_reason"], None if good else "bad_icrc", what + " drop_reason")
    return len(frames)


def tshark_fields(path, fields):
    cmd = ["tshark", "-r", path, "-T", "fields", "-E", "separator=|", "-E", "occurrence=l",
           "-d", "udp.port==4791,infiniband"]
    for f in fields:
        cmd += ["-e", f]
    r = run(cmd)
    if not check(r.returncode == 0, f"tshark exited {r.returncode}: {r.stderr.strip()[:300]}"):
        return []
    return [line.split("|") for line in r.stdout.splitlines()]


def tshark_int(s):
    s = s.strip()
    if not s:
        return None
    return int(s, 16) if s.lower().startswith("0x") else int(s)


def part2_encode_to_scapy_and_tshark(tool, tmp, rnd):
    """tandem-wire encodes; scapy and tshark dissect."""
    cases = make_cases(rnd)
    cases += [Case(rnd, op, rnd.choice([0, 7, 512]) if RC_OPCODES[op][6] else 0,
                   vlan=rnd.randrange(1, 4095)) for op in rnd.sample(list(RC_OPCODES), 4)]
    cases += [Case(rnd, op, 100 if RC_OPCODES[op][6] else 0, vxlan=rnd.randrange(1 << 24))
              for op in (0x04, 0x0A, 0x11, 0x0C)]
    specs, bad = [], []
    for c in cases:
        s = c.spec()
        specs.append(s)
        bad.append(False)
        if rnd.random() < 0.2:
            specs.append(dict(s, bad_icrc=True))
            bad.append(True)
    spec_path = os.path.join(tmp, "spec.jsonl")
    with open(spec_path, "w") as f:
        for s in specs:
            f.write(json.dumps(s) + "\n")
    out = os.path.join(tmp, "encoded.pcap")
    r = run([tool, "encode", spec_path, out])
    if not check(r.returncode == 0, f"encode exited {r.returncode}: {r.stderr.strip()}"):
        return 0
    pkts = rdpcap(out)
    if not expect_eq(len(pkts), len(specs), "packets in the encoded pcap"):
        return 0

    # Our own decoder agrees with the spec (the encoder round trip).
    got = decode(tool, out)
    for i, (g, s, is_bad) in enumerate(zip(got, specs, bad)):
        expect_eq(g["ok"], not is_bad, f"encoded pkt {i + 1} ok")
        expect_eq(g["dqpn"], s["dqpn"], f"encoded pkt {i + 1} dqpn")

    # scapy: same fields, and its ICRC equals ours (or differs for bad_icrc).
    case_of = []
    for c in cases:
        case_of.append(c)
        if len(case_of) < len(specs) and specs[len(case_of)].get("bad_icrc"):
            case_of.append(c)
    for i, (p, s, is_bad, c) in enumerate(zip(pkts, specs, bad, case_of)):
        what = f"encoded pkt {i + 1} ({c.name}, payload {c.plen}{', bad_icrc' if is_bad else ''})"
        if not check(BTH in p, what + ": scapy found no BTH"):
            continue
        b = p[BTH]
        expect_eq(b.opcode, c.op, what + " scapy opcode")
        expect_eq(b.dqpn, c.dqpn, what + " scapy dqpn")
        expect_eq(b.psn, c.psn, what + " scapy psn")
        expect_eq(b.padcount, c.pad, what + " scapy padcount")
        expect_eq(b.ackreq, int(c.ack_req), what + " scapy ackreq")
        expect_eq(b.resv7, c.resv7, what + " scapy resv7")
        expect_eq(p[BTH].underlayer.underlayer.src, c.src, what + " scapy inner src")
        if c.vxlan is not None:
            check(VXLAN in p and p[VXLAN].vni == c.vxlan, what + ": scapy VXLAN VNI")
        original = raw(p)
        again = p.copy()
        again[BTH].icrc = None
        rebuilt = raw(again)
        check(len(rebuilt) == len(original) and rebuilt[:-4] == original[:-4],
              what + ": scapy rebuild changed bytes before the ICRC")
        same = rebuilt[-4:] == original[-4:]
        check(same != is_bad, what + f": scapy ICRC {rebuilt[-4:].hex()} vs carried "
              f"{original[-4:].hex()}")

    # tshark: dissected as InfiniBand with the same opcode, QP, PSN, RETH, AETH, ImmDt.
    fields = ["frame.number", "infiniband.bth.opcode", "infiniband.bth.destqp",
              "infiniband.bth.psn", "infiniband.bth.padcnt", "infiniband.reth.va",
              "infiniband.reth.r_key", "infiniband.reth.dmalen", "infiniband.aeth.msn",
              "infiniband.immdt", "ip.src", "infiniband.bth.reserved7"]
    rows = tshark_fields(out, fields)
    if not expect_eq(len(rows), len(specs), "packets tshark listed"):
        return len(specs)
    for i, (row, c) in enumerate(zip(rows, case_of)):
        what = f"tshark pkt {i + 1} ({c.name}, payload {c.plen})"
        v = dict(zip(fields, row))
        expect_eq(tshark_int(v["infiniband.bth.opcode"]), c.op, what + " opcode")
        expect_eq(tshark_int(v["infiniband.bth.destqp"]), c.dqpn, what + " destqp")
        expect_eq(tshark_int(v["infiniband.bth.psn"]), c.psn, what + " psn")
        expect_eq(tshark_int(v["infiniband.bth.padcnt"]), c.pad, what + " padcnt")
        expect_eq(tshark_int(v["infiniband.bth.reserved7"]), c.resv7, what + " reserved7")
        if c.reth:
            expect_eq(tshark_int(v["infiniband.reth.va"]), c.reth["va"], what + " reth.va")
            expect_eq(tshark_int(v["infiniband.reth.r_key"]), c.reth["rkey"], what + " reth.r_key")
            expect_eq(tshark_int(v["infiniband.reth.dmalen"]), c.reth["len"], what + " reth.dmalen")
        if c.aeth:
            expect_eq(tshark_int(v["infiniband.aeth.msn"]), c.aeth["msn"], what + " aeth.msn")
        if c.imm is not None:
            expect_eq(int(v["infiniband.immdt"].replace(":", ""), 16), c.imm,  # shown as bytes
                      what + " immdt")
    return len(specs)


def part3_cli_errors(tool, tmp):
    """Bad input: exit 2 and exactly one error line naming the file (and line)."""
    text = os.path.join(tmp, "notes.txt")
    with open(text, "w") as f:
        f.write("not a capture\n")
    spec = os.path.join(tmp, "bad.jsonl")
    with open(spec, "w") as f:
        f.write('{"opcode": "RC_SEND_ONLY"}\n{"opcode": "RC_SEND_ONLY", "psn": "soon"}\n')
    cases = [
        ([tool, "decode", os.path.join(tmp, "missing.pcap")], "missing.pcap: cannot open"),
        ([tool, "decode", text], "notes.txt: not a pcap file"),
        ([tool, "encode", spec, os.path.join(tmp, "o.pcap")], "bad.jsonl:2: field 'psn'"),
        ([tool, "decode"], "file is required"),
        ([tool, "transmogrify"], "tandem-wire:"),
    ]
    for cmd, want in cases:
        r = run(cmd)
        what = "cli " + " ".join(os.path.basename(c) for c in cmd[1:])
        expect_eq(r.returncode, 2, what + " exit code")
        lines = r.stderr.splitlines()
        check(len(lines) == 1 and want in lines[0], f"{what}: stderr {r.stderr!r} lacks {want!r}")
    r = run([tool, "--help"])
    check(r.returncode == 0 and "truncate" in r.stdout and "--summary" in r.stdout,
          "--help does not explain the encode fields and decode flags")
    return len(cases) + 1


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    tool = os.path.abspath(sys.argv[1])
    rnd = random.Random(int(os.environ.get("TANDEM_CONFORMANCE_SEED", "4791")))
    tmp = tempfile.mkdtemp(prefix="tandem-conformance-")
    try:
        n1 = part1_scapy_to_decode(tool, tmp, rnd)
        n2 = part2_encode_to_scapy_and_tshark(tool, tmp, rnd)
        n3 = part3_cli_errors(tool, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures[:40]:
        print("FAIL:", f)
    if len(failures) > 40:
        print(f"... and {len(failures) - 40} more")
    print(f"conformance: {n1} scapy-built packets decoded, {n2} encoded packets checked "
          f"with scapy and tshark, {n3} command-line checks: {len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
