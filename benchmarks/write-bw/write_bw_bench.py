"""write-bw: tandem-perf write_bw through the real path (tandem-fabric as memif
server, zero impairment, 4 paths; two tandem-rnic workers, one lcore each)
against the same tool over a loopback worker (WQEs executed by memcpy between
the two applications' memory: the host interface alone, no transport, no
packets), measured in the same run. The ratio is the share of the
host-interface ceiling the transport + DPDK + fabric path delivers here.

Everything started is stopped by PID; hugepage files and runtime dirs of the
file prefixes used are removed, also on failure."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib"))
from tandem_harness import (Lab, free_port, lab_fabric_argv, lab_worker_argv, wait_fabric_started,  # noqa: E402
                            wait_for, write_lab_tables)

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--fabric", required=True)
ap.add_argument("--rnic", required=True)
ap.add_argument("--perf", required=True)
ap.add_argument("--loopback", required=True)
ap.add_argument("--json", action="store_true")
ap.add_argument("--seconds", type=float, default=3.0)
ap.add_argument("--size", type=int, default=65536)
ap.add_argument("--qps", type=int, default=1)
args = ap.parse_args()

TAG = f"wbw{os.getpid()}"
lab = Lab(tmp_prefix="tandem-write-bw-")
D = lab.d
stop, text, cleanup = lab.stop, lab.text, lab.cleanup


def start(argv, name, prefix=None):
    return lab.start(argv, name, prefix, separate_stderr=True)


def write_bw(name, sock_a, sock_b, gid_a=None, gid_b=None):
    port = free_port()
    common = ["write_bw", "-p", str(port), "--json", "--timeout", "30"]
    srv = start([args.perf] + common + ["--device", sock_a] + (["--gid", gid_a] if gid_a else []), f"{name}-srv")
    cli = start([args.perf] + common + ["--device", sock_b, "-s", str(args.size), "-q", str(args.qps),
                                        "-D", str(args.seconds)] + (["--gid", gid_b] if gid_b else [])
                + ["127.0.0.1"], f"{name}-cli")
    for p in (cli, srv):
        p.wait(args.seconds + 90)
    if cli.returncode != 0 or srv.returncode != 0:
        raise RuntimeError(f"{name}: tandem-perf failed:\n{text(name + '-cli', 'err')}{text(name + '-srv', 'err')}")
    return json.loads(text(f"{name}-cli"))


def main():
    # Baseline: the loopback worker.
    lb = start([args.loopback, f"{D}/lb.sock"], "loopback")
    wait_for(lambda: os.path.exists(f"{D}/lb.sock"), "loopback worker did not start")
    base = write_bw("base", f"{D}/lb.sock", f"{D}/lb.sock")
    stop(lb)

    # Ours: fabric + two workers.
    write_lab_tables(D)
    fab_pre, a_pre, b_pre = f"{TAG}-fab", f"{TAG}-a", f"{TAG}-b"
    fab = start(lab_fabric_argv(args.fabric, fab_pre, D), "fabric", fab_pre)
    wait_fabric_started(lab, fab, timeout=30)
    workers = []
    for n, pre, sock in (("A", a_pre, "h0.sock"), ("B", b_pre, "h1.sock")):
        workers.append(start(lab_worker_argv(args.rnic, n, pre, D, sock, ["--mtu", "4096"]), n, pre))
    wait_for(lambda: os.path.exists(f"{D}/A.rnic") and os.path.exists(f"{D}/B.rnic"), "workers did not start")
    ours = write_bw("ours", f"{D}/A.rnic", f"{D}/B.rnic", "192.168.7.1", "192.168.7.2")
    for w in workers:
        stop(w)
    stop(fab)

    o, b = ours["bw_avg_gbps"], base["bw_avg_gbps"]
    ratio = o / b if b > 0 else 0.0
    if args.json:
        print(json.dumps({"bench": "write-bw", "unit": "Gb/s", "ours": round(o, 4), "baseline": round(b, 4),
                          "baseline_name": "tandem-perf over the loopback worker (memcpy, no transport)",
                          "ratio": round(ratio, 4), "size": args.size, "qps": args.qps, "seconds": args.seconds,
                          "ours_mpps": ours["msg_rate_mpps"], "baseline_mpps": base["msg_rate_mpps"],
                          "ours_peak_gbps": ours["bw_peak_gbps"], "ours_messages": ours["messages"]}))
    else:
        print(f"write-bw: tandem-perf write_bw, {args.size} B messages, {args.qps} QP(s), {args.seconds:g} s each")
        print(f"  {'path':<58} {'Gb/s avg':>9} {'Mpps':>9}")
        print(f"  {'tandem-fabric + 2 x tandem-rnic, memif, MTU 4096 (ours)':<58} {o:>9.3f} {ours['msg_rate_mpps']:>9.4f}")
        print(f"  {'loopback worker, memcpy, no transport (baseline)':<58} {b:>9.3f} {base['msg_rate_mpps']:>9.4f}")
        print(f"  {'ratio ours/baseline':<58} {ratio:>9.3f}")


try:
    main()
    rc = 0
except Exception as e:
    print(f"write-bw: {e}", file=sys.stderr)
    for n in ("fabric", "A", "B"):
        sys.stderr.write(f"--- {n} ---\n{text(n)}{text(n, 'err')}")
    rc = 1
finally:
    cleanup()
sys.exit(rc)
