#!/usr/bin/python3
"""Traffic profiles for line-rate tests: pcaps that pktgen (`-s P:file.pcap`)
or tcpreplay can replay at a tandem-rnic worker. Built by tandem-wire encode,
so every length, checksum and ICRC is right (or wrong on purpose).

  write-stream.pcap   RC_RDMA_WRITE_ONLY packets round-robin over --qps QPs and
                      --ports UDP source ports (entropy), --payload bytes each
  malformed.pcap      one of each kind a worker must drop and count: bad ICRC,
                      truncated, unknown opcode, unknown
                      QPN, foreign VNI (VXLAN)

usage: make_profiles.py TANDEM_WIRE OUTDIR [--qps 64] [--ports 16] [--payload 64]
       [--packets 4096] [--src 10.0.0.2] [--dst 10.0.0.1] [--dst-mac ..] [--first-qpn 0x10000]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("wire")
ap.add_argument("outdir")
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
unknown = {k: v for k, v in w.items() if k != "reth"}
bad = [dict(w, bad_icrc=True), dict(w, truncate=50), dict(unknown, opcode=0x15),
       dict(w, dqpn=0xFFFFFF), dict(w, outer={"src": a.src, "dst": a.dst, "vni": 999})]
encode("malformed.pcap", bad)
