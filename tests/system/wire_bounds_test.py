"""Bounds on the wire side (issue 30): crafted RoCEv2 packets from scapy against a real tandem-rnic.

A standalone worker on `--vdev net_af_packet0,iface=w0` (one end of a veth pair in a network
namespace of its own); scapy sends and sniffs on the other end (s0) as the worker's peer, which
the worker's table marks `peer: roce`, so its QPs there are plain go-back-N RoCE (as toward rxe,
tests/lib/rxe_lab.py). A tenant (wire_bounds_app, on rnic/host) registers one MR over a sparse
memfd of 4 GiB + 1 MiB and connects four RC QPs to made-up remote QPNs. Then, each packet
built by scapy with its ICRC and every frame the worker sends back counted:

  1. READ requests the IBA forbids: DMA length 0xFFFFFFFF (> 2^31) gets a NAK invalid request,
     va + len wrapping past 2^64 and a range past the MR's end a NAK remote access error; one
     frame each, the drop counted (invalid_request, access_violation), and the QP that NAKed
     sends nothing for the requests that follow (bad_qp_state);
  2. READs and their duplicates (IBA 9.7.5.1.3): real READs (one at 4 GiB + 4 KiB into the MR:
     64-bit offsets) are answered with the MR's bytes; a duplicate asking for 2 GiB - 1 bytes
     is answered with the original 4 KiB, one from the middle of a READ with that READ's rest;
     duplicates at a PSN outside the responder's record (before the first READ, with another
     address or R_Key, or of a READ pushed out of the record) get nothing and count as
     unknown_read, and a duplicate of a READ still in the record is answered until 64
     later READs have pushed it out;
  3. ACKs, NAKs, a READ response and an atomic ACK for PSNs the QP never sent: no frame back,
     each counted as unsent_psn, and the QP unharmed: a real RDMA WRITE posted afterwards goes
     out at the QP's first PSN, the crafter ACKs it and the tenant gets IBV_WC_SUCCESS;
  and in all, the worker sent a bounded number of bytes (a few dozen frames), still runs, exits
  cleanly, and no process died by a signal.

usage: wire_bounds_test.py TANDEM_RNIC WIRE_BOUNDS_APP"""
import ctypes
import logging
import os
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, Telemetry, run_checked, wait_for  # noqa: E402
import rxe_lab  # noqa: E402

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import AsyncSniffer, Ether, IP, UDP, Raw, raw, sendp  # noqa: E402
from scapy.contrib.roce import BTH, AETH  # noqa: E402

RNIC, APP = (os.path.abspath(a) for a in sys.argv[1:3])
WORKER_IP, WORKER_MAC = rxe_lab.WORKER_IP, rxe_lab.WORKER_MAC
PEER_IP, PEER_MAC = rxe_lab.GUEST_IP, rxe_lab.GUEST_MAC
MR_BYTES = (4 << 30) + (1 << 20)
HIGH = (4 << 30) + 4096  # the app's second pattern: past 4 GiB into the MR
RECORD = 4 * 16  # READs a responder QP remembers (below)
MTU = 1024
TAG = f"wb{os.getpid()}"
NS, PREFIX = f"{TAG}ns", f"{TAG}-w"
OP = {"READ": 0x0C, "RESP_FIRST": 0x0D, "RESP_MIDDLE": 0x0E, "RESP_LAST": 0x0F, "RESP_ONLY": 0x10,
      "ACK": 0x11, "ATOMIC_ACK": 0x12, "WRITE_ONLY": 0x0A}
NAK_INVALID, NAK_ACCESS, NAK_SEQ = 0x61, 0x62, 0x60

lab = Lab(tmp_prefix="tandem-wire-bounds-")
D = lab.d
checks = Checks()
check = checks.check
_cleanup = lab.cleanup


def cleanup():
    _cleanup()
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)


lab.cleanup = cleanup


def pattern(n):
    """wire_bounds_app's pattern: what offsets 0 and HIGH of the MR hold (8 KiB each)."""
    return bytes(((i * 7 + 3) ^ (i >> 8)) & 0xFF for i in range(n))


def enter_namespace():
    """A namespace with a veth pair (w0: the worker's port, s0: scapy's), IPv6 off so nothing
    but our frames crosses it; this process (and so every process it starts) moves into it."""
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
    run("ip", "netns", "add", NS)
    run("ip", "-n", NS, "link", "add", "w0", "type", "veth", "peer", "name", "s0")
    run("ip", "netns", "exec", NS, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1", "net.ipv6.conf.w0.disable_ipv6=1", "net.ipv6.conf.s0.disable_ipv6=1")
    for dev in ("w0", "s0", "lo"):
        run("ip", "-n", NS, "link", "set", dev, "up")
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{NS}", os.O_RDONLY)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        raise RuntimeError(f"setns: {os.strerror(ctypes.get_errno())}")
    os.close(fd)


# ---- the crafter's packets and the worker's frames --------------------------------

def frame(op, qpn, psn, reth=None, aeth=None, payload=b"", ackreq=1):
    """A RoCEv2 frame from the peer to the worker; scapy computes the ICRC."""
    pad = (4 - len(payload) % 4) % 4
    layers = BTH(opcode=op, padcount=pad, pkey=0xFFFF, dqpn=qpn, ackreq=ackreq, psn=psn & 0xFFFFFF)
    if reth is not None:
        layers = layers / Raw(struct.pack("!QII", reth[0] & (2**64 - 1), reth[1], reth[2]))
    if aeth is not None:
        layers = layers / AETH(syndrome=aeth[0], msn=aeth[1])
    if payload or pad:
        layers = layers / Raw(payload + b"\0" * pad)
    return (Ether(src=PEER_MAC, dst=WORKER_MAC) / IP(src=PEER_IP, dst=WORKER_IP, flags="DF") /
            UDP(sport=0xC123, dport=4791, chksum=0) / layers)


class Wire:
    """Every frame the worker puts on w0, as (opcode, dqpn, psn, syndrome, payload, frame bytes)."""

    def __init__(self):
        self.frames = []
        self.lock = threading.Lock()
        ready = threading.Event()
        self.sniffer = AsyncSniffer(iface="s0", store=False, prn=self._take,
                                    lfilter=lambda p: p.haslayer(Ether) and p[Ether].src == WORKER_MAC,
                                    started_callback=ready.set)
        self.sniffer.start()
        if not ready.wait(10):
            raise RuntimeError("the sniffer did not start")

    def _take(self, p):
        b = raw(p[UDP].payload) if p.haslayer(UDP) and p[UDP].dport == 4791 else b""
        row = (-1, 0, 0, None, b"", len(raw(p)))
        if len(b) >= 16:
            op, pad = b[0], (b[1] >> 4) & 3
            hdr = 12 + (4 if op in (0x0D, 0x0F, 0x10, 0x11, 0x12) else 0) + (16 if op in (0x06, 0x0A, 0x0C) else 0)
            syn = b[12] if op in (0x0D, 0x0F, 0x10, 0x11, 0x12) else None
            row = (op, int.from_bytes(b[5:8], "big"), int.from_bytes(b[9:12], "big"), syn,
                   b[hdr:len(b) - 4 - pad], len(raw(p)))
        with self.lock:
            self.frames.append(row)

    def mark(self):
        with self.lock:
            return len(self.frames)

    def since(self, m):
        with self.lock:
            return list(self.frames[m:])

    def exchange(self, frames, want=0, settle=0.4, timeout=5.0):
        """Sends frames, waits for `want` frames back (or timeout), then `settle` s more for
        anything else the worker might send; returns what it sent meanwhile."""
        m = self.mark()
        sendp(frames, iface="s0", verbose=False)
        t0 = time.time()
        while len(self.since(m)) < want and time.time() - t0 < timeout:
            time.sleep(0.005)
        time.sleep(settle)
        return self.since(m)

    def stop(self):
        try:
            self.sniffer.stop()
        except Exception:  # noqa: BLE001 (already stopped)
            pass


def describe(rows):
    return ", ".join(f"op 0x{r[0]:02x} psn {r[2]}" + (f" syn 0x{r[3]:02x}" if r[3] is not None else "") +
                     (f" {len(r[4])} B" if r[4] else "") for r in rows[:12]) + (" ..." if len(rows) > 12 else "")


def main():
    enter_namespace()
    os.makedirs(f"{D}/devices")
    with open(f"{D}/T.yaml", "w") as f:
        f.write(rxe_lab.table_yaml("roce", paths=1))
    worker = lab.start([RNIC, "--name", "T", "--host-socket", f"{D}/T.rnic", "--table", f"{D}/T.yaml",
                        "--idle", "adaptive", "--device-dir", f"{D}/devices", "--stats-json", f"{D}/T.stats.json",
                        "--", "--no-pci", f"--file-prefix={PREFIX}", "-l", "1", "-m", "128",
                        "--log-level=lib.eal:error", "--vdev=net_af_packet0,iface=w0"], "T", PREFIX)
    wait_for(lambda: os.path.exists(f"{D}/devices/{rxe_lab.DEV}.dev") or worker.poll() is not None,
             "the worker did not register its device", timeout=30)
    if worker.poll() is not None:
        raise RuntimeError("the worker exited at start:\n" + lab.text("T"))
    tel = Telemetry(PREFIX, ready="/tandem/rnic/stats")

    def drops():
        s = tel.cmd("/tandem/rnic/stats") or {}
        return {k[len("drop_core_"):]: v for k, v in s.items() if k.startswith("drop_core_")}

    wire = Wire()
    t_reg = time.time()
    app = lab.start([APP, f"{D}/T.rnic", D, PEER_IP, str(MR_BYTES)], "app")
    wait_for(lambda: os.path.exists(f"{D}/app.qp") or app.poll() is not None, "the app did not publish its QPs",
             timeout=90)
    if app.poll() is not None:
        raise RuntimeError(f"the app exited (code {app.returncode}):\n" + lab.text("app"))
    f = open(f"{D}/app.qp").read().split()
    rkey, va, mr_len = int(f[0]), int(f[1]), int(f[2])
    qpn = [int(x) for x in f[3:]]
    rss = int(subprocess.run(["ps", "-o", "rss=", "-p", str(worker.pid)], capture_output=True, text=True).stdout or 0)
    check(mr_len == MR_BYTES and len(qpn) == 4,
          f"the tenant registered a {mr_len / 2**30:.3f} GiB MR on a sparse memfd and connected {len(qpn)} QPs "
          f"({time.time() - t_reg:.1f} s; worker RSS {rss // 1024} MiB)")

    def resp_bytes(rows, psn, n):
        """The payload of READ responses psn..psn+n-1, in order, or None if the frames are not those."""
        if len(rows) != n or [r[2] for r in rows] != [(psn + i) & 0xFFFFFF for i in range(n)]:
            return None
        ops = [r[0] for r in rows]
        want = [OP["RESP_ONLY"]] if n == 1 else [OP["RESP_FIRST"]] + [OP["RESP_MIDDLE"]] * (n - 2) + [OP["RESP_LAST"]]
        return b"".join(r[4] for r in rows) if ops == want else None

    q0 = qpn[0]
    # ---- 2. READs and duplicates on QP 0 (ePSN 1000) ----------------------------------------
    rows = wire.exchange([frame(OP["READ"], q0, 1000, reth=(va, rkey, 4096))], want=4)
    check(resp_bytes(rows, 1000, 4) == pattern(4096),
          f"a READ of 4 KiB at the MR's start: 4 responses with the MR's bytes ({describe(rows)})")
    rows = wire.exchange([frame(OP["READ"], q0, 1004, reth=(va + HIGH, rkey, 2048))], want=2)
    check(resp_bytes(rows, 1004, 2) == pattern(2048),
          f"a READ at MR offset 4 GiB + 4 KiB: the bytes there, not at a 32-bit truncated offset ({describe(rows)})")
    d0 = drops()
    rows = wire.exchange([frame(OP["READ"], q0, 1000, reth=(va, rkey, 0x7FFFFFFF))], want=4)
    check(resp_bytes(rows, 1000, 4) == pattern(4096),
          f"a duplicate of the first READ asking 2 GiB - 1: answered with its original 4 KiB, 4 frames ({describe(rows)})")
    rows = wire.exchange([frame(OP["READ"], q0, 1002, reth=(va + 2 * MTU, rkey, 0xFFFFFFFF))], want=2)
    check(resp_bytes(rows, 1002, 2) == pattern(4096)[2 * MTU:],
          f"a duplicate from the READ's third packet asking 4 GiB - 1: that READ's last 2 KiB ({describe(rows)})")
    dup = drops().get("duplicate", 0) - d0.get("duplicate", 0)
    check(dup == 2, f"both re-executed duplicates counted (duplicate +{dup})")

    d0 = drops()
    outside = [("PSN 999, before any READ", 999, va, rkey),
               ("PSN 1001 with the first packet's address", 1001, va, rkey),
               ("PSN 1000 with another R_Key", 1000, va, rkey ^ 0x100),
               ("PSN 1005 (the second READ's) with the first READ's address", 1005, va, rkey)]
    for what, psn, a, k in outside:
        rows = wire.exchange([frame(OP["READ"], q0, psn, reth=(a, k, 0xFFFFFFFF))], settle=0.3)
        check(not rows, f"a duplicate READ at {what}, asking 4 GiB - 1: nothing sent ({describe(rows)})")
    n = drops().get("unknown_read", 0) - d0.get("unknown_read", 0)
    check(n == len(outside), f"each counted as unknown_read (+{n} of {len(outside)})")

    # The record holds 4 x max_dest_rd_atomic READs (rnic/core transport.cc), and the worker gives
    # every QP 16 READ responder resources (rnic/port port_logic.cc): 64. With 62 more one-packet
    # READs the first READ is its oldest entry and still answered; two more push both out of it.
    def small_reads(first, count):
        got = 0
        for i in range(first, first + count):
            rows = wire.exchange([frame(OP["READ"], q0, 1006 + i, reth=(va + 8 * i, rkey, 8))], want=1, settle=0.0)
            got += len(rows) == 1 and rows[0][2] == 1006 + i and rows[0][4] == pattern(8 * i + 8)[8 * i:]
        return got

    got = small_reads(0, RECORD - 2)
    rows = wire.exchange([frame(OP["READ"], q0, 1000, reth=(va, rkey, 4096))], want=4)
    check(got == RECORD - 2 and resp_bytes(rows, 1000, 4) == pattern(4096),
          f"{got} more 8-byte READs answered with the MR's bytes; the first READ, now the oldest of the "
          f"{RECORD} recorded, still answered when duplicated ({describe(rows)})")
    got = small_reads(RECORD - 2, 2)
    d0 = drops()
    rows = wire.exchange([frame(OP["READ"], q0, 1000, reth=(va, rkey, 4096)),
                          frame(OP["READ"], q0, 1004, reth=(va + HIGH, rkey, 2048))], settle=0.4)
    n = drops().get("unknown_read", 0) - d0.get("unknown_read", 0)
    check(got == 2 and not rows and n == 2,
          f"two READs more: duplicates of the first two READs, now out of the record, get nothing, "
          f"unknown_read +{n} of 2 ({describe(rows)})")

    # ---- 1. READs the IBA forbids, each on a fresh QP ----------------------------------------
    d0 = drops()
    rows = wire.exchange([frame(OP["READ"], qpn[1], 2000, reth=(va, rkey, 0xFFFFFFFF))], want=1)
    check(len(rows) == 1 and rows[0][0] == OP["ACK"] and rows[0][3] == NAK_INVALID and rows[0][2] == 2000,
          f"a READ with DMA length 0xFFFFFFFF on the {mr_len / 2**30:.2f} GiB MR: one NAK invalid request "
          f"({describe(rows)})")
    rows = wire.exchange([frame(OP["READ"], qpn[1], 2001, reth=(va, rkey, 4096)),
                          frame(OP["READ"], qpn[1], 2000, reth=(va, rkey, 0xFFFFFFFF))], settle=0.4)
    check(not rows, f"the QP that NAKed answers nothing more, a valid READ nor the bad one again ({describe(rows)})")
    rows = wire.exchange([frame(OP["READ"], qpn[2], 3000, reth=(2**64 - 16, rkey, 32))], want=1)
    check(len(rows) == 1 and rows[0][0] == OP["ACK"] and rows[0][3] == NAK_ACCESS and rows[0][2] == 3000,
          f"a READ whose va + len wraps past 2^64 (va 2^64 - 16, 32 B): one NAK remote access ({describe(rows)})")
    rows = wire.exchange([frame(OP["READ"], qpn[3], 4000, reth=(va + mr_len - 1024, rkey, 4096))], want=1)
    check(len(rows) == 1 and rows[0][0] == OP["ACK"] and rows[0][3] == NAK_ACCESS and rows[0][2] == 4000,
          f"a READ running 3 KiB past the end of the MR: one NAK remote access ({describe(rows)})")
    dd = {k: drops().get(k, 0) - d0.get(k, 0) for k in ("invalid_request", "access_violation", "bad_qp_state")}
    check(dd["invalid_request"] == 1 and dd["access_violation"] == 2 and dd["bad_qp_state"] == 2,
          f"counted: invalid_request +1, access_violation +2, bad_qp_state +2 ({dd})")

    # ---- 3. responses for PSNs QP 0 never sent (its SQ PSN is 5000, nothing posted yet) -----
    d0 = drops()
    forged = [("an ACK for PSN 5100", frame(OP["ACK"], q0, 5100, aeth=(0x1F, 7))),
              ("a NAK PSN sequence error for PSN 5100", frame(OP["ACK"], q0, 5100, aeth=(NAK_SEQ, 7))),
              ("a NAK remote access error for PSN 5000", frame(OP["ACK"], q0, 5000, aeth=(NAK_ACCESS, 7))),
              ("a READ response for PSN 5050", frame(OP["RESP_ONLY"], q0, 5050, aeth=(0x1F, 7), payload=b"x" * 64)),
              ("an atomic ACK for PSN 5001", frame(OP["ATOMIC_ACK"], q0, 5001, aeth=(0x1F, 7), payload=b"\0" * 8))]
    rows = wire.exchange([p for _, p in forged], settle=0.5)
    n = drops().get("unsent_psn", 0) - d0.get("unsent_psn", 0)
    check(not rows and n == len(forged),
          f"{', '.join(w for w, _ in forged)}: nothing sent back, unsent_psn +{n} of {len(forged)} ({describe(rows)})")

    # The QP is unharmed: a real WRITE goes out at PSN 5000, the crafter ACKs it, the tenant completes it.
    m = wire.mark()
    open(f"{D}/go", "w").close()
    wait_for(lambda: any(r[0] == OP["WRITE_ONLY"] for r in wire.since(m)), "the tenant's WRITE never went out",
             timeout=15)
    w = [r for r in wire.since(m) if r[0] == OP["WRITE_ONLY"]][0]
    sendp(frame(OP["ACK"], q0, w[2], aeth=(0x1F, 1)), iface="s0", verbose=False)
    wait_for(lambda: os.path.exists(f"{D}/done") or app.poll() is not None, "the tenant never finished", timeout=20)
    early, status = (int(x) for x in (open(f"{D}/done").read().split() or ["-1", "-1"]))
    check(w[2] == 5000 and w[1] == 0x100 and w[4] == pattern(64) and status == 0 and early == 0,
          f"QP 0 unharmed: the tenant's WRITE left at PSN {w[2]} to QPN 0x{w[1]:x} with its 64 bytes, the crafted "
          f"ACK completed it (status {status}; {early} completions before it)")

    allrows = wire.since(0)
    total = sum(r[5] for r in allrows)
    check(len(allrows) <= 2 * 90 and total < 128 * 1024,  # 85 answers, the WRITE and a resend or so
          f"the worker sent {len(allrows)} frames, {total} bytes in all, for a test that asked 2^31 - 1 and "
          f"2^32 - 1 bytes of it")
    wire.stop()
    open(f"{D}/exit", "w").close()
    try:
        code = app.wait(30)
    except subprocess.TimeoutExpired:
        code = None
    check(code == 0, f"the tenant exited cleanly (exit {code})")
    check(worker.poll() is None, "the worker still runs")
    code = lab.stop(worker)
    check(code == 0, f"the worker exited cleanly on SIGINT (exit {code})")
    if checks.failed:
        print(f"--- worker log ---\n{lab.text('T')[-3000:]}\n--- app log ---\n{lab.text('app')[-2000:]}")


run_checked("wire_bounds", main, checks, lab, logs=("T", "app"))
