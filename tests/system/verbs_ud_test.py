"""UD QPs and address handles with Debian's binaries, unmodified, on the drop-in libibverbs
(rnic/verbs), between two tandem-rnic workers through tandem-fabric (4 paths, round_robin
spraying and credit CC for the RC QPs perftest also opens):
  * ibv_ud_pingpong (ibverbs-utils) with its buffer check (-c), and with completion events (-e):
    exit 0 on both sides; the worker counted the datagrams it placed;
  * ib_send_bw -c UD and ib_send_lat -c UD (perftest): exit 0 with a result row;

usage: verbs_ud_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_RUN BINDIR"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Telemetry, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started, write_lab_tables)
import perftest_pair  # noqa: E402
from perftest_pair import result_row  # noqa: E402

FABRIC, RNIC, RUN, BINDIR = sys.argv[1:5]
TAG = f"verbsud{os.getpid()}"
lab = Lab(tmp_prefix="tandem-verbsud-")
D = lab.d
checks = Checks()
check = checks.check
ENV = dict(os.environ, TANDEM_DEVICES=f"{D}/devices")


def pair(prog, args, timeout=60):
    return perftest_pair.pair(RUN, BINDIR, ENV, prog, args, timeout)


def main():
    write_lab_tables(D)
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D), "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    prefixes = {}
    workers = {}
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        prefixes[n] = f"{TAG}-{n.lower()}"
        workers[n] = lab.start(lab_worker_argv(RNIC, n, prefixes[n], D, sock, [
            "--mtu", "1024", "--spray", "round_robin", "--cc", "credit"]), n, prefixes[n])
    t0 = time.time()
    while not all(os.path.exists(f"{D}/devices/tandem_{n}_v1.dev") for n in workers):
        if time.time() - t0 > 30 or any(w.poll() is not None for w in workers.values()):
            raise RuntimeError("workers did not register their verbs devices")
        time.sleep(0.1)
    tel = Telemetry(prefixes["A"], ready="/tandem/rnic/stats")

    for args in (["-g", "0", "-s", "512", "-n", "200", "-c"], ["-g", "0", "-s", "1000", "-n", "100", "-e"]):
        rx0 = tel.cmd("/tandem/rnic/stats")["rx_accepted"]
        (cc, co), (sc, so) = pair("ibv_ud_pingpong", args)
        ok = cc == 0 and sc == 0 and "iters in" in co and "iters in" in so
        check(ok, f"ibv_ud_pingpong {' '.join(args)} (exit {cc}/{sc}): {' '.join(co.split()[-10:])}")
        if not ok:
            print(f"--- client ---\n{co[-1500:]}\n--- server ---\n{so[-1500:]}")
        rx1 = tel.cmd("/tandem/rnic/stats")["rx_accepted"]
        want = int(args[args.index("-n") + 1])
        check(rx1 - rx0 >= want, f"worker A took the client's {want} datagrams ({rx0} -> {rx1})")

    for prog, size in (("ib_send_bw", 512), ("ib_send_lat", 2)):
        args = ["-c", "UD", "-s", str(size), "-n", "100"]
        (cc, co), (sc, so) = pair(prog, args)
        row = result_row(co, size)
        ok = cc == 0 and sc == 0 and row is not None and max(row[1:]) > 0
        check(ok, f"stock {prog} {' '.join(args)}: exit {cc}/{sc}, result {row}")
        if not ok:
            print(f"--- client ---\n{co[-1500:]}\n--- server ---\n{so[-1500:]}")
    if checks.failed:
        print(f"--- A log ---\n{lab.text('A')}\n--- B log ---\n{lab.text('B')}")


run_checked("verbs_ud", main, checks, lab)
