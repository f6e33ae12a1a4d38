#!/usr/bin/python3
"""IB CM MADs (rnic/cm) against tshark and scapy.

1. cm_mad_tool encodes REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP into RoCEv2 UD
   frames to QP1; tshark must dissect them as InfiniBand CM MADs with the same header (class 7,
   version 2, method Send, attribute) and the same fields (REQ: service ID, QPN, PSN, resources,
   P_Key, MTU, retry counts, timeouts, GIDs; REP; RTU, REJ, DREQ, DREP communication IDs).
2. scapy builds REQ, REP and RTU from IBA's tables (struct offsets written here, not ours) with its
   own ICRC; cm_mad_tool must decode them to the same fields, and refuse malformed ones with the reason.

Usage: cm_conformance.py PATH/TO/cm_mad_tool
"""
import json
import logging
import os
import struct
import subprocess
import sys
import tempfile

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Ether, IP, UDP, Raw, wrpcap  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402

TOOL = sys.argv[1]
failures = []
checked = 0


def expect_eq(got, want, what):
    global checked
    checked += 1
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")


def tint(s):
    s = s.strip()
    if s in ("", None):
        return None
    return int(s, 16) if s.lower().startswith("0x") else int(s)


ATTR = {"REQ": 0x10, "MRA": 0x11, "REJ": 0x12, "REP": 0x13, "RTU": 0x14, "DREQ": 0x15, "DREP": 0x16,
        "SIDR_REQ": 0x17, "SIDR_REP": 0x18}
FIELDS = ["infiniband.mad.mgmtclass", "infiniband.mad.classversion", "infiniband.mad.method",
          "infiniband.mad.attributeid", "infiniband.mad.transactionid",
          "infiniband.cm.req.serviceid", "infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn",
          "infiniband.cm.req.responderres", "infiniband.cm.req.initdepth", "infiniband.cm.req.pkey",
          "infiniband.cm.req.pppmtu", "infiniband.cm.req.retrcount", "infiniband.cm.req.rnrretrcount",
          "infiniband.cm.req.maxcmretr", "infiniband.cm.req.remoteresptout", "infiniband.cm.req.localresptout",
          "infiniband.cm.req.localcaguid", "infiniband.cm.req.prim_hoplim",
          "infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqpn", "infiniband.cm.rep.startpsn",
          "infiniband.cm.rep.respres", "infiniband.cm.rep.initdepth", "infiniband.cm.rep.rnrretrcount",
          "infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid",
          "infiniband.cm.rej.localcommid", "infiniband.cm.rej.remotecommid", "infiniband.cm.rej.reason",
          "infiniband.cm.rej.msgrej", "infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid",
          "infiniband.cm.drsp.localcommid", "infiniband.cm.drsp.remotecommid"]


def part1_tshark(tmp):
    pcap = os.path.join(tmp, "ours.pcap")
    r = subprocess.run([TOOL, "encode", pcap], capture_output=True, text=True, check=True)
    sent = [json.loads(l) for l in r.stdout.splitlines()]
    cmd = ["tshark", "-r", pcap, "-o", "infiniband.dissect_eoib:FALSE", "-T", "fields", "-E", "separator=|",
           "-E", "occurrence=f"]
    for f in FIELDS:
        cmd += ["-e", f]
    t = subprocess.run(cmd, capture_output=True, text=True)
    if t.returncode != 0:  # an older tshark without the preference
        cmd = [c for c in cmd if c not in ("-o", "infiniband.dissect_eoib:FALSE")]
        t = subprocess.run(cmd, capture_output=True, text=True)
    rows = [dict(zip(FIELDS, l.split("|"))) for l in t.stdout.splitlines()]
    expect_eq(len(rows), len(sent), "frames tshark listed")
    for m, v in zip(sent, rows):
        a = m["attr"]
        w = f"tshark {a}"
        expect_eq(tint(v["infiniband.mad.mgmtclass"]), 7, w + " mgmt class")
        expect_eq(tint(v["infiniband.mad.classversion"]), 2, w + " class version")
        expect_eq(tint(v["infiniband.mad.method"]), 3, w + " method")
        expect_eq(tint(v["infiniband.mad.attributeid"]), ATTR[a], w + " attribute")
        expect_eq(tint(v["infiniband.mad.transactionid"]), m["tid"], w + " transaction id")
        if a == "REQ":
            expect_eq(tint(v["infiniband.cm.req.serviceid"]), m["service_id"], w + " service id")
            expect_eq(tint(v["infiniband.cm.req.localqpn"]), m["qpn"], w + " local QPN")
            expect_eq(tint(v["infiniband.cm.req.startpsn"]), m["starting_psn"], w + " starting PSN")
            expect_eq(tint(v["infiniband.cm.req.responderres"]), m["responder_resources"], w + " responder res")
            expect_eq(tint(v["infiniband.cm.req.initdepth"]), m["initiator_depth"], w + " initiator depth")
            expect_eq(tint(v["infiniband.cm.req.pkey"]), m["pkey"], w + " P_Key")
            expect_eq(tint(v["infiniband.cm.req.pppmtu"]), m["path_mtu"], w + " path MTU")
            expect_eq(tint(v["infiniband.cm.req.retrcount"]), m["retry_count"], w + " retry count")
            expect_eq(tint(v["infiniband.cm.req.rnrretrcount"]), m["rnr_retry_count"], w + " RNR retry count")
            expect_eq(tint(v["infiniband.cm.req.maxcmretr"]), m["max_cm_retries"], w + " max CM retries")
            expect_eq(tint(v["infiniband.cm.req.remoteresptout"]), m["remote_cm_timeout"], w + " remote timeout")
            expect_eq(tint(v["infiniband.cm.req.localresptout"]), m["local_cm_timeout"], w + " local timeout")
            expect_eq(tint(v["infiniband.cm.req.localcaguid"]), m["ca_guid"], w + " CA GUID")
            expect_eq(tint(v["infiniband.cm.req.prim_hoplim"]), m["hop_limit"], w + " hop limit")
        elif a == "REP":
            expect_eq(tint(v["infiniband.cm.rep.remotecommid"]), m["remote_comm_id"], w + " remote comm id")
            expect_eq(tint(v["infiniband.cm.rep.localqpn"]), m["qpn"], w + " local QPN")
            expect_eq(tint(v["infiniband.cm.rep.startpsn"]), m["starting_psn"], w + " starting PSN")
            expect_eq(tint(v["infiniband.cm.rep.respres"]), m["responder_resources"], w + " responder res")
            expect_eq(tint(v["infiniband.cm.rep.initdepth"]), m["initiator_depth"], w + " initiator depth")
            expect_eq(tint(v["infiniband.cm.rep.rnrretrcount"]), m["rnr_retry_count"], w + " RNR retry count")
        elif a == "RTU":
            expect_eq(tint(v["infiniband.cm.rtu.localcommid"]), m["local_comm_id"], w + " local comm id")
            expect_eq(tint(v["infiniband.cm.rtu.remotecommid"]), m["remote_comm_id"], w + " remote comm id")
        elif a == "REJ":
            expect_eq(tint(v["infiniband.cm.rej.localcommid"]), m["local_comm_id"], w + " local comm id")
            expect_eq(tint(v["infiniband.cm.rej.remotecommid"]), m["remote_comm_id"], w + " remote comm id")
            expect_eq(tint(v["infiniband.cm.rej.reason"]), m["reason"], w + " reason")
            expect_eq(tint(v["infiniband.cm.rej.msgrej"]), m["msg"], w + " message rejected")
        elif a == "DREQ":
            expect_eq(tint(v["infiniband.cm.dreq.localcommid"]), m["local_comm_id"], w + " local comm id")
            expect_eq(tint(v["infiniband.cm.dreq.remotecommid"]), m["remote_comm_id"], w + " remote comm id")
        elif a == "DREP":
            expect_eq(tint(v["infiniband.cm.drsp.localcommid"]), m["local_comm_id"], w + " local comm id")
            expect_eq(tint(v["infiniband.cm.drsp.remotecommid"]), m["remote_comm_id"], w + " remote comm id")


def mad_hdr(attr, tid, class_version=2):
    return struct.pack("!BBBBHHQHHI", 1, 0x07, class_version, 0x03, 0, 0, tid, attr, 0, 0)


def gid4(ip):
    return b"\0" * 10 + b"\xff\xff" + bytes(int(x) for x in ip.split("."))


def scapy_req(tid):
    """IBA table 106, field by field."""
    b = struct.pack("!I", 0x11223344) + b"\0" * 4 + struct.pack("!QQ", 0x106_1C06, 0x0200000000000002)
    b += b"\0" * 4 + struct.pack("!I", 0)                              # reserved, local Q_Key
    b += struct.pack("!I", 0x0ABCDE << 8 | 5)                           # local QPN, responder resources
    b += struct.pack("!I", 0 << 8 | 3)                                  # local EECN, initiator depth
    b += struct.pack("!I", 0 << 8 | (18 << 3) | (0 << 1) | 1)           # remote EECN, timeout, RC, flow ctl
    b += struct.pack("!I", 0x654321 << 8 | (19 << 3) | 6)               # PSN, local timeout, retry count
    b += struct.pack("!HBB", 0xFFFF, (3 << 4) | 5, (7 << 4))            # P_Key, MTU|RNR retry, max CM retries
    b += struct.pack("!HH", 0xFFFF, 0xFFFF) + gid4("192.168.7.2") + gid4("192.168.7.1")
    b += struct.pack("!I", 0) + struct.pack("!BBBB", 0, 64, 0, 14 << 3)  # flow label/rate, TC, hop, SL, ACK tout
    b += b"\0" * 44                                                     # no alternate path
    cma = bytes([0, 0x40]) + struct.pack("!H", 40000) + b"\0" * 12 + bytes([192, 168, 7, 2]) + \
        b"\0" * 12 + bytes([192, 168, 7, 1])
    b += cma + b"\0" * (92 - len(cma))
    assert len(b) == 232
    return mad_hdr(0x10, tid) + b


def scapy_rep(tid):
    """IBA table 110."""
    b = struct.pack("!IIII", 0x55667788, 0x11223344, 0, 0x0BCDEF << 8) + struct.pack("!I", 0) + \
        struct.pack("!I", 0x0FEDCB << 8) + struct.pack("!BBBB", 2, 1, 0, 7 << 5) + struct.pack("!Q", 0x0200000000000001)
    b += b"\xcd" + b"\0" * 195
    assert len(b) == 232
    return mad_hdr(0x13, tid) + b


def scapy_rtu(tid):
    return mad_hdr(0x14, tid) + struct.pack("!II", 0x11223344, 0x55667788) + b"\0" * 224


def frame(mad, qkey=0x80010000, dqpn=1):
    deth = struct.pack("!II", qkey, 1)
    return Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01") / IP(src="10.0.0.2", dst="10.0.0.1", flags="DF") / \
        UDP(sport=0xC001, dport=4791, chksum=0) / BTH(opcode=0x64, pkey=0xFFFF, dqpn=dqpn, psn=7) / Raw(deth + mad)


def part2_scapy(tmp):
    pcap = os.path.join(tmp, "scapy.pcap")
    bad = bytearray(scapy_rtu(9))
    bad[2] = 1  # class version 1
    frames = [frame(scapy_req(0x77)), frame(scapy_rep(0x77)), frame(scapy_rtu(0x77)), frame(bytes(bad))]
    wrpcap(pcap, frames)
    r = subprocess.run([TOOL, "decode", pcap], capture_output=True, text=True, check=True)
    out = [json.loads(l) for l in r.stdout.splitlines()]
    expect_eq(len(out), 4, "frames decoded")
    if len(out) != 4:
        return
    for o in out:
        expect_eq(o["parse"], "ok", "scapy frame parses (ICRC, headers)")
    req, rep, rtu = (o.get("msg", {}) for o in out[:3])
    for o, name in ((out[0], "REQ"), (out[1], "REP"), (out[2], "RTU")):
        expect_eq(o.get("mad"), "ok", f"scapy {name} accepted")
    expect_eq(req.get("attr"), "REQ", "REQ attr")
    expect_eq(req.get("local_comm_id"), 0x11223344, "REQ local comm id")
    expect_eq(req.get("service_id"), 0x1061C06, "REQ service id")
    expect_eq(req.get("qpn"), 0x0ABCDE, "REQ QPN")
    expect_eq(req.get("responder_resources"), 5, "REQ responder resources")
    expect_eq(req.get("initiator_depth"), 3, "REQ initiator depth")
    expect_eq(req.get("remote_cm_timeout"), 18, "REQ remote CM timeout")
    expect_eq(req.get("starting_psn"), 0x654321, "REQ PSN")
    expect_eq(req.get("local_cm_timeout"), 19, "REQ local CM timeout")
    expect_eq(req.get("retry_count"), 6, "REQ retry count")
    expect_eq(req.get("path_mtu"), 3, "REQ MTU")
    expect_eq(req.get("rnr_retry_count"), 5, "REQ RNR retry count")
    expect_eq(req.get("max_cm_retries"), 7, "REQ max CM retries")
    expect_eq(req.get("local_gid_ip"), 0xC0A80702, "REQ local GID")
    expect_eq(req.get("remote_gid_ip"), 0xC0A80701, "REQ remote GID")
    expect_eq(req.get("hop_limit"), 64, "REQ hop limit")
    expect_eq(req.get("priv0"), 0, "REQ rdma_cm header version")
    expect_eq(rep.get("local_comm_id"), 0x55667788, "REP local comm id")
    expect_eq(rep.get("remote_comm_id"), 0x11223344, "REP remote comm id")
    expect_eq(rep.get("qpn"), 0x0BCDEF, "REP QPN")
    expect_eq(rep.get("starting_psn"), 0x0FEDCB, "REP PSN")
    expect_eq(rep.get("rnr_retry_count"), 7, "REP RNR retry count")
    expect_eq(rep.get("priv0"), 0xCD, "REP private data")
    expect_eq(rtu.get("remote_comm_id"), 0x55667788, "RTU remote comm id")
    expect_eq(out[3].get("mad"), "bad_class_version", "a MAD of class version 1 is refused")


def main():
    with tempfile.TemporaryDirectory(prefix="tandem-cmconf-") as tmp:
        part1_tshark(tmp)
        part2_scapy(tmp)
    for f in failures[:40]:
        print("FAIL:", f)
    print(f"cm conformance: {checked} field checks against tshark and scapy: {len(failures)} mismatches")
    print(f"{checked - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
