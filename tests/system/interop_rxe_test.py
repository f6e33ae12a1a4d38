"""Interop with a RoCE stack Tandem did not write: Linux's rxe in a QEMU TCG guest
(scripts/rxe-peer.sh) on a tap, and a standalone tandem-rnic on the same tap (net_af_packet) whose
route to the guest is marked `peer: roce` while the worker itself runs IRN with round-robin spraying
and credits (so the route, not --mode, makes it plain RoCE). One guest boots (~12 s idle, much more
on a loaded host); everything runs in it:

  * each pair with rxe as the server and Tandem as the client, then the other way round:
    rdma_verify (tests/system/rdma_verify.c: RDMA WRITE, RDMA READ and SEND_WITH_IMM of 1 B to 16 KiB
    each way, every byte checked on both sides), ibv_rc_pingpong -c and ibv_ud_pingpong -c (their
    buffer checks), stock ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat (exit 0, a result row);
  * stock rping -v -C 10 and ib_write_bw -R both ways over rdma_cm (Tandem's CM MADs against the
    kernel's ib_cm: REQ, REP, RTU, then DREQ/DREP), every ping's data printed by both sides (each
    side's QP sends from the PSN the other's REQ/REP announced, as Linux's rdma_cm does);
  * the worker counted its QPs to the guest as standard-peer QPs (qps_roce_peer) and, captured on
    the tap during an rdma_verify pair, sent nothing Tandem-only: no RC_ATOMIC_ACKNOWLEDGE (IRN's
    SACK), every ACK's AETH credit field "invalid" (no credits), no data packet longer than its
    message needs (no IRN placement header), and no ACK covering a READ before its response;
  * no process died by a signal.

usage: interop_rxe_test.py TANDEM_RNIC TANDEM_RUN RXE_PEER RDMA_VERIFY"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, run_checked  # noqa: E402
import rxe_lab  # noqa: E402
from rxe_lab import RxeLab, compat_cases, judge  # noqa: E402

RNIC, RUN, PEER, VERIFY = (os.path.abspath(a) for a in sys.argv[1:5])  # the guest runs VERIFY from its own cwd
TAG = f"rxei{os.getpid()}"
lab = Lab(tmp_prefix="tandem-interop-rxe-")
checks = Checks()
check, failed = checks.check, checks.failed
rx = RxeLab(lab, RNIC, PEER, RUN, TAG, ["--spray", "round_robin", "--cc", "credit", "--mode", "irn"])
_cleanup = lab.cleanup


def cleanup():
    rx.stop()
    _cleanup()


lab.cleanup = cleanup


def tandem_frames(pcap):
    """(opcode, psn, aeth syndrome, udp length) of every RoCE frame the worker sent, in order."""
    r = subprocess.run(["tshark", "-r", pcap, "-Y", f"ip.src == {rxe_lab.WORKER_IP} && udp.dstport == 4791",
                        "-T", "fields", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn",
                        "-e", "infiniband.aeth.syndrome", "-e", "udp.length", "-e", "infiniband.bth.padcnt"],
                       capture_output=True, text=True, timeout=60)
    rows = []
    for line in r.stdout.splitlines():
        f = line.split("\t")
        if len(f) >= 4 and f[0]:
            rows.append((int(f[0]), int(f[1]), int(f[2]) if f[2] else None, int(f[3]), int(f[4] or 0)))
    return rows


def guest_frames(pcap):
    r = subprocess.run(["tshark", "-r", pcap, "-Y", f"ip.src == {rxe_lab.GUEST_IP} && udp.dstport == 4791",
                        "-T", "fields", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn",
                        "-e", "infiniband.reth.dmalen"], capture_output=True, text=True, timeout=60)
    return [line.split("\t") for line in r.stdout.splitlines() if line.strip()]


def main():
    print(rx.start_guest())
    code, out = rx.guest("ibv_devinfo -d rxe0 | grep -E 'state|active_mtu'; cat /sys/class/infiniband/rxe0/ports/1/gids/1")
    check(code == 0 and "PORT_ACTIVE" in out and "ffff:0a63:0002" in out,
          f"the guest's rxe0 is ACTIVE with GID ::ffff:{rxe_lab.GUEST_IP}: {' '.join(out.split())}")
    rx.start_worker(capture=True)

    # The wire, captured on the tap while one data-checked pair runs (Tandem the client).
    pcap = f"{lab.d}/verify.pcap"
    cap = subprocess.Popen(["ip", "netns", "exec", rx.ns, "tshark", "-i", rx.tap, "-w", pcap, "-q", "-f", "udp port 4791"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    results = {}
    for name, prog, args, kind in compat_cases(VERIFY):
        for server in ("rxe", "tandem"):
            cli, srv, secs = rx.pair(prog, args, server)
            ok, what = judge(kind, cli, srv)
            if not ok and "(hung" not in cli[1] + srv[1]:
                # KNOWN FLAKE (open): on this loaded 2-core host (a TCG guest, builds) the worker's control
                # thread has missed the drop-in's 5 s control timeout ("Couldn't allocate PD",
                # "ibv_open_device: Connection timed out"); printed, run once more.
                print(f"--- {name} server {server}: first attempt failed ({what}), retried ---\n"
                      f"--- client ---\n{cli[1][-800:]}\n--- server ---\n{srv[1][-800:]}")
                cli, srv, secs = rx.pair(prog, args, server)
                ok, what = judge(kind, cli, srv)
                what += "; retried"
            client = "tandem" if server == "rxe" else "rxe"
            results[(name, server)] = ok
            check(ok, f"{name}: client {client}, server {server}: {what} ({secs:.1f} s)")
            if not ok:
                print(f"--- client ---\n{cli[1][-1500:]}\n--- server ---\n{srv[1][-1500:]}")
            if name == "rdma_verify" and server == "rxe":
                time.sleep(1)
                cap.terminate()
                cap.wait(10)

    # rdma_cm on the wire against the kernel's CM: stock rping both ways.
    for server in ("rxe", "tandem"):
        cli, srv, secs, nc, ns = rx.rping(server, count=10, port=7174 + (server == "tandem"))
        client = "tandem" if server == "rxe" else "rxe"
        ok = cli[0] == 0 and srv[0] == 0 and nc == 10 and ns == 10
        check(ok, f"rping -v -C 10: client {client}, server {server}: exit {cli[0]}/{srv[0]}, "
                  f"{nc}/{ns} pings printed ({secs:.1f} s)")
        if not ok:
            print(f"--- client ---\n{cli[1][-1500:]}\n--- server ---\n{srv[1][-1500:]}")

    # perftest's rdma_cm mode (-R): its exchange and connection through the CM, both ways.
    for server in ("rxe", "tandem"):
        cli, srv, secs = rx.perftest_cm("ib_write_bw", ["-s", "65536", "-n", "100"], server,
                                        18600 + (server == "tandem"))
        client = "tandem" if server == "rxe" else "rxe"
        row = rxe_lab.perftest_row(cli[1], 65536)
        ok = cli[0] == 0 and srv[0] == 0 and row is not None and row[0] == 100
        check(ok, f"ib_write_bw -R: client {client}, server {server}: exit {cli[0]}/{srv[0]}, "
                  f"{'%.1f Gb/s' % row[2] if row else 'no result row'} ({secs:.1f} s)")
        if not ok:
            print(f"--- client ---\n{cli[1][-1500:]}\n--- server ---\n{srv[1][-1500:]}")

    # What the worker put on the wire toward rxe: standard RoCE only.
    frames = tandem_frames(pcap)
    requests = guest_frames(pcap)
    check(len(frames) > 20 and len(requests) > 20,
          f"captured the rdma_verify pair: {len(frames)} frames from the worker, {len(requests)} from rxe")
    sacks = [f for f in frames if f[0] == 0x12]
    credit_acks = [f for f in frames if f[0] == 0x11 and f[2] is not None and f[2] >> 5 == 0 and f[2] & 0x1F != 31]
    check(not sacks and not credit_acks,
          f"no SACK (RC_ATOMIC_ACKNOWLEDGE: {len(sacks)}) and no credits in ACKs ({len(credit_acks)} of "
          f"{sum(1 for f in frames if f[0] == 0x11)} ACKs carried a credit count) toward rxe")
    # UDP length = 8 + BTH 12 + [RETH 16] + [ImmDt 4] + payload + pad + ICRC 4; at MTU 1024 an IRN
    # packet would be up to 24 bytes longer than any standard one.
    hdr = {0x06: 16, 0x0A: 16, 0x0B: 20, 0x09: 4, 0x03: 4, 0x05: 4, 0x0D: 4, 0x0F: 4, 0x10: 4}
    longest = max([f[3] - 8 - 12 - hdr.get(f[0], 0) - 4 - f[4] for f in frames if f[0] <= 0x10] or [0])
    check(0 < longest <= 1024, f"no data packet toward rxe carries more than the path MTU of data "
                               f"(largest payload {longest} B: no IRN placement header)")
    read_psns = {int(r[1]) for r in requests if r[0] == "12"}
    answered, covering = set(), 0
    for op, psn, *_ in frames:
        if op in (0x0D, 0x10) and psn in read_psns:
            answered.add(psn)
        if op == 0x11 and any(rp <= psn and rp not in answered for rp in read_psns):
            covering += 1
    check(read_psns and covering == 0,
          f"no ACK covered one of rxe's {len(read_psns)} READ requests before its response ({covering})")

    st = {}
    code = rx.stop()
    try:
        with open(f"{lab.d}/T.stats.json") as f:
            st = json.load(f)
    except (OSError, ValueError):
        pass
    flat = json.dumps(st)
    import re
    m = re.search(r'"qps_roce_peer":\s*(\d+)', flat)
    n = int(m.group(1)) if m else -1
    check(n >= 10, f"the worker counted its QPs to rxe as standard-peer QPs (qps_roce_peer {n})")
    check(code == 0, f"the worker exited cleanly (exit {code})")
    if failed:
        print(f"--- worker log ---\n{lab.text('T')[-3000:]}")
        try:
            print("--- guest console (tail) ---\n" + open(f"{rx.gdir}/console.log").read()[-2000:])
        except OSError:
            pass


run_checked("interop_rxe", main, checks, lab)
