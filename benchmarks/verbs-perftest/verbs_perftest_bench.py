"""verbs-perftest: is a stock verbs application as fast on Tandem as Tandem's own client?
One lab (tandem-fabric, 4 paths; two tandem-rnic workers with round_robin spraying and credits,
MTU 4096), then alternating rounds on the same workers:
  ours     = Debian's ib_write_bw -s SIZE -q QPS -D SECONDS --report_gbits, through scripts/tandem-run
  baseline = tandem-perf write_bw with the same size, QPs and duration (rnic/host directly)
and the same for latency (ib_write_lat -s 2 vs tandem-perf write_lat -s 2, typical latency).
ratio = median ib_write_bw Gb/s / median tandem-perf Gb/s (goal >= 0.9);
lat_ratio = median ib_write_lat typical / median tandem-perf typical (goal <= 1.1).
Each round also runs ib_write_lat with TANDEM_POLL_YIELD=0 (the library spins in ibv_poll_cq
without ever yielding, rnic/verbs/README.md): lat_spin_ratio, the same ratio for that run.
Why they differ: for each latency run, the time the fabric and the two workers spent runnable
but waiting for a CPU (/proc/PID/schedstat, field 2), per iteration: *_lab_wait_us."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from tandem_harness import (Lab, free_port, lab_fabric_argv, lab_perf_pair, lab_worker_argv,  # noqa: E402
                            wait_fabric_started, write_lab_tables)

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--build", default="build")
ap.add_argument("--json", action="store_true", help="print one JSON object")
ap.add_argument("--seconds", type=float, default=4, help="length of each bandwidth run (default 4)")
ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of each pair (default 3)")
ap.add_argument("--qps", type=int, default=4, help="QPs of the bandwidth runs (default 4)")
ap.add_argument("--size", type=int, default=65536, help="bandwidth message size (default 65536)")
ap.add_argument("--lat-iters", type=int, default=300, help="latency iterations (default 300)")
args = ap.parse_args()
B = os.path.abspath(args.build)
RUN = os.path.join(ROOT, "scripts", "tandem-run")
PERF = f"{B}/apps/tandem-perf/tandem-perf"
lab = Lab(tmp_prefix="tandem-verbsbench-")
D = lab.d
ENV = dict(os.environ, TANDEM_DEVICES=f"{D}/devices", TANDEM_BUILD=B)


def log(msg):
    print(msg, file=sys.stderr if args.json else sys.stdout, flush=True)


def stock(prog, flags, timeout=120, env=None):
    """Debian's perftest `prog` between the workers' vNIC devices; the client's result numbers."""
    env = env or ENV
    port = ["-p", str(free_port())]
    srv = subprocess.Popen([RUN, prog, "-d", "tandem_A_v1"] + port + flags, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    r = subprocess.run([RUN, prog, "-d", "tandem_B_v1"] + port + flags + ["127.0.0.1"], env=env,
                       capture_output=True, text=True, timeout=timeout)
    srv.wait(30)
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0].isdigit() and all(x.replace(".", "").isdigit() for x in f[1:4]):
            return [float(x) for x in f[1:]]
    raise RuntimeError(f"{prog} printed no result (exit {r.returncode}): {r.stdout[-500:]}{r.stderr[-300:]}")


def runq_wait_ns(pids):
    """Nanoseconds these processes' threads have waited on a run queue (schedstat field 2)."""
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
    return total


def main():
    write_lab_tables(D)
    fab = lab.start(lab_fabric_argv(f"{B}/apps/tandem-fabric/tandem-fabric", "vbf", D), "fabric", "vbf")
    wait_fabric_started(lab, fab)
    workers = []
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        workers.append(lab.start(lab_worker_argv(f"{B}/apps/tandem-rnic/tandem-rnic", n, f"vb{n}", D, sock, [
            "--mtu", "4096", "--spray", "round_robin", "--cc", "credit", "--timeout-us", "20000"]), n, f"vb{n}"))
    pids = [fab.pid] + [w.pid for w in workers]
    t0 = time.time()
    while not all(os.path.exists(f"{D}/devices/tandem_{n}_v1.dev") for n in "AB"):
        if time.time() - t0 > 30:
            raise RuntimeError("workers did not register their devices")
        time.sleep(0.1)

    bw_ours, bw_base, lat_ours, lat_base, lat_spin = [], [], [], [], []
    spin_env = dict(ENV, TANDEM_POLL_YIELD="0")
    waits = {"ours": [], "baseline": [], "spin": []}

    def waited(series, t0):
        waits[series].append((runq_wait_ns(pids) - t0) / 1e3 / args.lat_iters)
    secs = str(int(args.seconds))
    for r in range(args.rounds):
        row = stock("ib_write_bw", ["-s", str(args.size), "-q", str(args.qps), "-D", secs, "--report_gbits"])
        bw_ours.append(row[2])  # BW average [Gb/sec]
        cc, cj, sc, _ = lab_perf_pair(lab, PERF, D, f"bw{r}", "write_bw",
                                      ["-s", str(args.size), "-q", str(args.qps), "-D", secs])
        if cc != 0 or sc != 0:
            raise RuntimeError(f"tandem-perf write_bw failed (exit {cc}/{sc})")
        bw_base.append(cj["bw_avg_gbps"])
        t0 = runq_wait_ns(pids)
        row = stock("ib_write_lat", ["-s", "2", "-n", str(args.lat_iters)])
        waited("ours", t0)
        lat_ours.append(row[3])  # t_typical [usec]
        t0 = runq_wait_ns(pids)
        cc, cj, sc, _ = lab_perf_pair(lab, PERF, D, f"lat{r}", "write_lat", ["-s", "2", "-n", str(args.lat_iters)])
        waited("baseline", t0)
        if cc != 0 or sc != 0:
            raise RuntimeError(f"tandem-perf write_lat failed (exit {cc}/{sc})")
        lat_base.append(cj["t_typical_us"])
        t0 = runq_wait_ns(pids)
        row = stock("ib_write_lat", ["-s", "2", "-n", str(args.lat_iters)], env=spin_env)
        waited("spin", t0)
        lat_spin.append(row[3])
        log(f"round {r + 1}: ib_write_bw {bw_ours[-1]:.3f} Gb/s, tandem-perf {bw_base[-1]:.3f} Gb/s; "
            f"ib_write_lat {lat_ours[-1]:.1f} us, tandem-perf {lat_base[-1]:.1f} us, "
            f"ib_write_lat without yield {lat_spin[-1]:.1f} us; fabric+workers' run-queue wait per iteration "
            f"{waits['ours'][-1]:.0f} / {waits['baseline'][-1]:.0f} / {waits['spin'][-1]:.0f} us")
    m = statistics.median
    res = {"bench": "verbs-perftest", "unit": "Gb/s", "ours": m(bw_ours), "baseline": m(bw_base),
           "baseline_name": f"tandem-perf write_bw -s {args.size} -q {args.qps}",
           "ratio": m(bw_ours) / m(bw_base) if m(bw_base) else None,
           "lat_ours_us": m(lat_ours), "lat_baseline_us": m(lat_base),
           "lat_ratio": m(lat_ours) / m(lat_base) if m(lat_base) else None,
           "lat_spin_us": m(lat_spin), "lat_spin_ratio": m(lat_spin) / m(lat_base) if m(lat_base) else None,
           "lat_spin_runs": lat_spin,
           "ours_lab_wait_us": m(waits["ours"]), "baseline_lab_wait_us": m(waits["baseline"]),
           "spin_lab_wait_us": m(waits["spin"]),
           "rounds": args.rounds, "seconds": args.seconds, "qps": args.qps, "size": args.size,
           "bw_ours_runs": bw_ours, "bw_baseline_runs": bw_base, "lat_ours_runs": lat_ours,
           "lat_baseline_runs": lat_base}
    if args.json:
        print(json.dumps(res))
    else:
        print(f"{'':28}{'ib_write_bw (stock)':>22}{'tandem-perf':>14}{'ratio':>8}")
        print(f"{'write bw, Gb/s (median)':28}{res['ours']:>22.3f}{res['baseline']:>14.3f}{res['ratio']:>8.2f}")
        print(f"{'write lat 2 B, us typical':28}{res['lat_ours_us']:>22.1f}{res['lat_baseline_us']:>14.1f}"
              f"{res['lat_ratio']:>8.2f}")
        print(f"{'  the same, no poll yield':28}{res['lat_spin_us']:>22.1f}{res['lat_baseline_us']:>14.1f}"
              f"{res['lat_spin_ratio']:>8.2f}")
    return 0


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        lab.cleanup()
    sys.exit(rc)
