"""cm-connect: how fast does rdma_cm set up RC connections on Tandem?
One lab (tandem-fabric, 4 paths; two tandem-rnic workers), then alternating rounds on the same workers:
  ours     = N connections through rdma_cm (rdma_resolve_addr .. ESTABLISHED; REQ/REP/RTU on QP1),
             K client threads at once, the server accepting on worker A
  baseline = N RC connections set up over TCP (connect, QP to INIT, exchange QPN/PSN/GID, RTR, RTS),
             the same K threads, the same verbs library and workers (what perftest does without -R)
ratio = median rdma_cm connections/s / median TCP-exchange connections/s; p50/p99 set-up latency of each."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from tandem_harness import Lab, free_port, lab_fabric_argv, lab_worker_argv, wait_fabric_started, write_lab_tables  # noqa

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--build", default="build")
ap.add_argument("--json", action="store_true", help="print one JSON object")
ap.add_argument("--connections", type=int, default=200, help="connections per run (default 200)")
ap.add_argument("--parallel", type=int, default=8, help="client threads, each connecting back to back (default 8)")
ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
args = ap.parse_args()
B = os.path.abspath(args.build)
BENCH = f"{B}/benchmarks/cm-connect/cm_connect_bench"
lab = Lab(tmp_prefix="tandem-cmbench-")
D = lab.d
ENV = dict(os.environ, TANDEM_DEVICES=f"{D}/devices", TANDEM_BUILD=B)


def log(msg):
    print(msg, file=sys.stderr if args.json else sys.stdout, flush=True)


def one(mode):
    port = free_port()
    srv = subprocess.Popen([BENCH, "server", mode, "192.168.7.1", str(port), str(args.connections)], env=ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = srv.stdout.readline()
    if "READY" not in line:
        srv.kill()
        raise RuntimeError(f"{mode} server: {line}{srv.stdout.read()[-300:]}")
    r = subprocess.run([BENCH, "client", mode, "192.168.7.2", "192.168.7.1", str(port), str(args.connections),
                        str(args.parallel)], env=ENV, capture_output=True, text=True, timeout=300)
    try:
        srv.wait(60)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv.wait()
    if r.returncode != 0:
        raise RuntimeError(f"{mode} client exit {r.returncode}: {r.stdout[-300:]}{r.stderr[-300:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    write_lab_tables(D)
    fab = lab.start(lab_fabric_argv(f"{B}/apps/tandem-fabric/tandem-fabric", "cmb", D), "fabric", "cmb")
    wait_fabric_started(lab, fab)
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        lab.start(lab_worker_argv(f"{B}/apps/tandem-rnic/tandem-rnic", n, f"cmb{n}", D, sock, ["--mtu", "1024"]),
                  n, f"cmb{n}")
    t0 = time.time()
    while not all(os.path.exists(f"{D}/devices/tandem_{n}_v1.dev") for n in "AB"):
        if time.time() - t0 > 30:
            raise RuntimeError("workers did not register their devices")
        time.sleep(0.1)
    runs = {"rdma_cm": [], "tcp": []}
    for r in range(args.rounds):
        for mode in ("cm", "tcp"):
            res = one(mode)
            runs[res["mode"]].append(res)
        c, t = runs["rdma_cm"][-1], runs["tcp"][-1]
        log(f"round {r + 1}: rdma_cm {c['conn_per_s']:.0f} conn/s (p50 {c['p50_us']:.0f} us, p99 {c['p99_us']:.0f} us); "
            f"TCP exchange {t['conn_per_s']:.0f} conn/s (p50 {t['p50_us']:.0f} us, p99 {t['p99_us']:.0f} us)")
    m = statistics.median

    def med(mode, k):
        return m(x[k] for x in runs[mode])
    res = {"bench": "cm-connect", "unit": "connections/s", "ours": med("rdma_cm", "conn_per_s"),
           "baseline": med("tcp", "conn_per_s"),
           "baseline_name": f"RC set-up over a TCP exchange, {args.parallel} threads",
           "ratio": med("rdma_cm", "conn_per_s") / med("tcp", "conn_per_s"),
           "p50_us": med("rdma_cm", "p50_us"), "p99_us": med("rdma_cm", "p99_us"),
           "baseline_p50_us": med("tcp", "p50_us"), "baseline_p99_us": med("tcp", "p99_us"),
           "connections": args.connections, "parallel": args.parallel, "rounds": args.rounds,
           "runs": runs}
    if args.json:
        print(json.dumps(res))
    else:
        print(f"{'':24}{'rdma_cm':>12}{'TCP exchange':>14}{'ratio':>8}")
        print(f"{'connections/s (median)':24}{res['ours']:>12.0f}{res['baseline']:>14.0f}{res['ratio']:>8.2f}")
        print(f"{'set-up p50, us':24}{res['p50_us']:>12.0f}{res['baseline_p50_us']:>14.0f}")
        print(f"{'set-up p99, us':24}{res['p99_us']:>12.0f}{res['baseline_p99_us']:>14.0f}")
    return 0


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        lab.cleanup()
    sys.exit(rc)
