"""System test of the lab over virtio instead of memif: tandem-fabric with vhost-user backends
(net_vhost0/1) and each tandem-rnic worker on the virtio-user PMD (net_virtio_user0), as a VM or
container attaches to OVS-DPDK or any vhost-user switch. Regression for the finding "virtio ports:
zero-copy transmit delivers nothing": with the worker's default transmit (no --tx-copy), the
payload mbufs were external buffers in application memory, which the vhost-user backend cannot
map, so nothing arrived and the client failed with "transport retry counter exceeded".

  * each worker's start-up line says its transmit copies, and why (net_virtio_user);
  * tandem-perf write_bw and read_bw --verify (2 QPs, 64 KiB) verify on both sides;
  * --stats-json: zero_copy false with the reason, copied bytes counted, no segment attached.

usage: lab_virtio_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_PERF
Everything started is stopped by PID; hugepage files, runtime dirs and sockets are removed."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, lab_fabric_argv, lab_perf_pair, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started, write_lab_tables)

FABRIC, RNIC, PERF = sys.argv[1:4]
TAG = f"virtio{os.getpid()}"
lab = Lab(tmp_prefix="tandem-virtio-lab-")
D = lab.d
checks = Checks()
check, failed = checks.check, checks.failed


def main():
    write_lab_tables(D)
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D, transport="vhost"), "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    t0 = time.time()
    while not (os.path.exists(f"{D}/h0.sock") and os.path.exists(f"{D}/h1.sock")):
        if time.time() - t0 > 20 or fab.poll() is not None:
            raise RuntimeError("fabric did not create its vhost-user sockets:\n" + lab.text("fabric", "err"))
        time.sleep(0.1)

    workers = {}
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        pre = f"{TAG}-{n.lower()}"
        workers[n] = lab.start(lab_worker_argv(RNIC, n, pre, D, sock, [
            "--mtu", "1024", "--stats-json", f"{D}/{n}.json", "--timeout-us", "20000"], transport="virtio"), n, pre)
    t0 = time.time()
    while not all(os.path.exists(f"{D}/{n}.rnic") for n in workers):
        if time.time() - t0 > 30 or any(w.poll() is not None for w in workers.values()):
            raise RuntimeError("workers did not open their host sockets:\n" + lab.text("A", "err") + lab.text("B", "err"))
        time.sleep(0.1)
    for n in workers:
        def start_line():  # printed after the host socket opens: wait for it
            return next((x for x in lab.text(n).splitlines() if f" {n}: port 0 " in x), "")
        t0 = time.time()
        while not start_line() and time.time() - t0 < 10:
            time.sleep(0.1)
        line = start_line()
        tx = line[line.find(" tx "):line.find(", host socket")]
        check(tx.startswith(" tx copy (net_virtio_user:"), f"worker {n} says its transmit copies:{tx}")

    flags = ["-s", "65536", "-n", "200", "-q", "2", "-t", "8", "--verify"]
    for test in ("write_bw", "read_bw"):
        cc, cj, sc, sj = lab_perf_pair(lab, PERF, D, test, test, flags)
        check(cc == 0 and sc == 0 and cj.get("verify") == "ok" and sj.get("verify") == "ok"
              and cj.get("iterations") == 200,
              f"{test} {' '.join(flags)} over virtio-user/vhost-user, default transmit: exit {cc}/{sc}, "
              f"verify {cj.get('verify')}/{sj.get('verify')}, {cj.get('bw_avg_gbps', 0):.3f} Gb/s")

    check(all(lab.stop(w) == 0 for w in workers.values()), "workers stop cleanly on SIGINT")
    lab.stop(fab)
    for n in workers:
        try:
            with open(f"{D}/{n}.json") as f:
                e = json.load(f)["tx_encap"]
            check(not e["zero_copy"] and "vhost-user" in e["mode_reason"] and e["copied_bytes"] > 0
                  and e["zero_copy_segs"] == 0,
                  f"worker {n}: zero_copy {e['zero_copy']}, copied {e['copied_bytes']} B, "
                  f"attached {e['zero_copy_segs']} segments ({e['mode_reason']})")
        except (OSError, ValueError, KeyError) as ex:
            check(False, f"worker {n} --stats-json readable: {ex}")
    if failed:
        for n in ("fabric", "A", "B"):
            print(f"--- {n} log ---\n{lab.text(n)}{lab.text(n, 'err')}")


run_checked("lab_virtio", main, checks, lab)
