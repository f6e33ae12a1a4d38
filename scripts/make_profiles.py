#!/usr/bin/python3
"""Traffic profiles for line-rate tests: pcaps that pktgen (`-s P:file.pcap`)
or tcpreplay can replay at a tandem-rnic worker. Built by tandem-wire encode,
so every length, checksum and ICRC is right (or wrong on purpose).

With --from SINK.json (what `tandem-perf sink --out SINK.json` wrote) the
profiles are for QPs that exist on the worker, and it accepts them:

  write-stream.pcap   RC_RDMA_WRITE_ONLY, round-robin over the sink's QPs; QP i's
                      packet k has PSN expected_psn + k and writes --payload
                      bytes of the sink's pattern at its region's offset
                      k * payload (one pass covers --per-qp packets per QP)
  send-stream.pcap    RC_SEND_ONLY, round-robin, QP i's packet k at PSN
                      expected_psn + k, data = the sink's SEND pattern
  malformed.pcap      one of each kind the worker must drop and count: bad ICRC,
                      truncated, unknown opcode, unknown QPN, foreign VNI (VXLAN)
  profile.json        what was written (packets per QP, bytes, files), for the
                      benchmark and the test
In IRN mode (the sink's "mode") every request carries the XETH placement header
(rnic/core/irn_wire.h). A replay that loops repeats the PSNs: run the worker
with --bench-any-psn (docs/pktgen.md "Looped replays").

Without --from (addresses only, no worker QPs behind them; the worker drops
these as unknown_qpn):
  write-stream.pcap   RC_RDMA_WRITE_ONLY packets round-robin over --qps QPs and
                      --ports UDP source ports (entropy), --payload bytes each
  malformed.pcap      as above

usage: make_profiles.py TANDEM_WIRE OUTDIR --from SINK.json [--payload 64] [--per-qp N]
       make_profiles.py TANDEM_WIRE OUTDIR [--qps 64] [--ports 16] [--payload 64]
       [--packets 4096] [--src 10.0.0.2] [--dst 10.0.0.1] [--dst-mac ..] [--first-qpn 0x10000]"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("wire")
ap.add_argument("outdir")
ap.add_argument("--from", dest="sink", help="tandem-perf sink's parameters JSON")
ap.add_argument("--per-qp", type=int, default=0,
                help="--from: packets per QP in one pass (default: the QP's region once, at most 4096)")
ap.add_argument("--qps", type=int, default=64)
ap.add_argument("--ports", type=int, default=16)
ap.add_argument("--payload", type=int, default=64)
ap.add_argument("--packets", type=int, default=4096)
ap.add_argument("--src", default="10.0.0.2")
ap.add_argument("--dst", default="10.0.0.1")
ap.add_argument("--src-mac", default="02:00:00:00:00:fe")
ap.add_argument("--dst-mac", default="02:00:00:00:00:01")
ap.add_argument("--first-qpn", type=lambda s: int(s, 0), default=0x10000)
a = ap.parse_args()
os.makedirs(a.outdir, exist_ok=True)
base = {"src": a.src, "dst": a.dst, "src_mac": a.src_mac, "dst_mac": a.dst_mac}


def encode(name, specs):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for s in specs:
            f.write(json.dumps(s) + "\n")
    out = os.path.join(a.outdir, name)
    r = subprocess.run([a.wire, "encode", f.name, out])
    os.unlink(f.name)
    if r.returncode != 0:
        sys.exit(f"make_profiles: tandem-wire encode failed for {name}")
    print(f"{out}: {len(specs)} packets")
    return out


M64 = (1 << 64) - 1


def mix64(x):  # rnic/perf/pattern.h
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def pattern(key, length):
    """pattern_byte(key, 0, o) for o in 0..length-1 (little-endian words)."""
    b = mix64(((key << 40) & M64) ^ mix64(0))
    words = (length + 7) // 8
    return b"".join(struct.pack("<Q", mix64((b + w) & M64)) for w in range(words))[:length]


def xeth(recv_idx, msg_len, rkey, va):  # rnic/core/irn_wire.h
    return struct.pack(">IIIIQ", 0xE1 << 24 | (recv_idx & 0xFFFFFF), 0, msg_len, rkey, va)


def malformed(w):
    unknown = {k: v for k, v in w.items() if k != "reth"}
    outer = {"src": w["src"], "dst": w["dst"], "vni": 999}
    return [dict(w, bad_icrc=True), dict(w, truncate=50), dict(unknown, opcode=0x15),
            dict(w, dqpn=0xFFFFFF), dict(w, outer=outer)]


if not a.sink:
    psn = [0] * a.qps
    stream = []
    for i in range(a.packets):
        q = i % a.qps
        stream.append(dict(base, opcode="RC_RDMA_WRITE_ONLY", sport=0xC000 + (i // a.qps) % a.ports,
                           dqpn=a.first_qpn + q, psn=psn[q], ack_req=(psn[q] % 64 == 63),
                           reth={"va": 0x10000 + psn[q] * a.payload, "rkey": 0x100, "len": a.payload},
                           payload_len=a.payload))
        psn[q] += 1
    encode("write-stream.pcap", stream)
    w = dict(base, opcode="RC_RDMA_WRITE_ONLY", sport=0xC000, dqpn=a.first_qpn, psn=1,
             reth={"va": 0x10000, "rkey": 0x100, "len": 64}, payload_len=64)
    encode("malformed.pcap", malformed(w))
    sys.exit(0)

# --from: the sink's QPs.
with open(a.sink) as f:
    sink = json.load(f)
fr = sink["frames"]
irn = sink["mode"] == "irn"
qps = sink["qps"]
pay = a.payload
if pay <= 0 or pay % 8 or pay > sink["mtu"]:
    sys.exit(f"make_profiles: --payload must be a multiple of 8 and at most the sink's MTU {sink['mtu']}")
region = min(q["len"] for q in qps)
per_qp = a.per_qp or min(region // pay, 4096)
if per_qp <= 0 or per_qp * pay > region:
    sys.exit(f"make_profiles: --per-qp {per_qp} x --payload {pay} exceeds the sink's {region}-byte regions")
sports = fr["udp_sports"]
hdr = {"src": fr["src_ip"], "dst": fr["dst_ip"], "src_mac": fr["src_mac"], "dst_mac": fr["dst_mac"]}

write, send = [], []
wpat = {q["index"]: pattern(q["index"], per_qp * pay) for q in qps}
spat = {q["index"]: pattern(q["index"] | 1 << 31, pay) for q in qps}
send_ok = pay <= sink["recv"]["size"]
for k in range(per_qp):
    for q in qps:
        i = q["index"]
        psn = (q["expected_psn"] + k) & 0xFFFFFF
        sport = sports[(k * len(qps) + i) % len(sports)]
        va = q["va"] + k * pay
        data = wpat[i][k * pay:(k + 1) * pay]
        pre = xeth(0, pay, q["rkey"], va) if irn else b""
        write.append(dict(hdr, opcode="RC_RDMA_WRITE_ONLY", sport=sport, dqpn=q["qpn"], psn=psn,
                          ack_req=(k % 64 == 63), reth={"va": va, "rkey": q["rkey"], "len": pay},
                          payload_hex=(pre + data).hex()))
        if send_ok:
            pre = xeth(k, pay, 0, 0) if irn else b""
            send.append(dict(hdr, opcode="RC_SEND_ONLY", sport=sport, dqpn=q["qpn"], psn=psn,
                             ack_req=(k % 64 == 63), payload_hex=(pre + spat[i]).hex()))
files = {"write": encode("write-stream.pcap", write)}
if send_ok:
    files["send"] = encode("send-stream.pcap", send)
else:
    print(f"make_profiles: no send-stream.pcap: --payload {pay} exceeds the sink's receives "
          f"({sink['recv']['size']} bytes)")
q0 = qps[0]
w = dict(hdr, opcode="RC_RDMA_WRITE_ONLY", sport=sports[0], dqpn=q0["qpn"], psn=q0["expected_psn"],
         reth={"va": q0["va"], "rkey": q0["rkey"], "len": 64},
         payload_hex=((xeth(0, 64, q0["rkey"], q0["va"]) if irn else b"") + wpat[0][:64]).hex())
files["malformed"] = encode("malformed.pcap", malformed(w))
prof = {"from": os.path.abspath(a.sink), "mode": sink["mode"], "payload": pay, "qps": len(qps),
        "per_qp": per_qp, "packets": per_qp * len(qps), "write_bytes_per_pass": per_qp * pay * len(qps),
        "malformed_packets": 5, "files": files}
with open(os.path.join(a.outdir, "profile.json"), "w") as f:
    json.dump(prof, f, indent=1)
print(f"{os.path.join(a.outdir, 'profile.json')}: {per_qp} packets per QP, {len(qps)} QPs, {pay}-byte payloads")
