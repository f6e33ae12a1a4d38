"""System test: registering a large MR does not stall the other QPs of the worker.

The lab fabric (memif, 2 ports, 4 clean paths), two RNIC workers A and B
(adaptive idle) and a third worker C on a net_null port, off the data path.
tandem-perf write_lat runs between A (server) and B (client) in windows of
SECONDS. In each round, three windows:
  quiet:     nothing else (printed only);
  elsewhere: an application (mr_churn_app) registers and deregisters a
             MIB-MiB buffer (1 GiB by default) on worker C, again and again
             (PAUSE_MS, 50 by default, between a dereg_mr and the next reg_mr:
             back to back, the application and the control thread starve this
             2-core VM so that even the baseline windows time out);
  here:      the same application, same buffer, on worker A.
"elsewhere" and "here" load the 2-core VM alike (the application, a worker's
control work, the kernel's page tables); they differ only in whose worker
does the registering, so this busy VM's noise falls on both. Rounds repeat
ROUNDS times, medians are compared.

Checks:
  * every write_lat run exits 0 with its bytes verified, every churn window
    did registrations (how many, and how long each took, is printed). A run
    whose QP ran out of retries (this VM, shared by a dozen busy processes,
    sometimes stalls for seconds, in quiet and "elsewhere" windows too) is
    counted as infinitely slow rather than failed: the medians absorb one;
  * median p99 of the "here" windows <= 2 x that of the "elsewhere" windows
    (the issue's criterion, against a like-for-like baseline);
  * the mean latency within 4x (weaker: the mean carries this VM's hiccups;
    but a stall of the lcore moves it most: a 2 s stall delays one sample
    by 2 s, which p99 may not see and the mean and t_max do).

usage: mr_registration_latency_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_PERF MR_CHURN_APP
       [--rounds N] [--seconds S] [--mib M] [--huge auto|on|off] [--pause-ms P] [--report-only]
--report-only prints the numbers and passes whatever they are (to show what
a build without the control thread gives). Everything started is stopped by
PID; hugepage files, runtime dirs and sockets are removed, also on failure."""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, lab_fabric_argv, lab_perf_pair, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started, write_lab_tables)

ap = argparse.ArgumentParser()
ap.add_argument("fabric")
ap.add_argument("rnic")
ap.add_argument("perf")
ap.add_argument("churn")
ap.add_argument("--rounds", type=int, default=4)
ap.add_argument("--seconds", type=float, default=3.0)
ap.add_argument("--mib", type=int, default=1024)
ap.add_argument("--huge", choices=("auto", "on", "off"), default="auto")
ap.add_argument("--pause-ms", type=int, default=50, help="between a dereg_mr and the next reg_mr")
ap.add_argument("--report-only", action="store_true")
args = ap.parse_args()

TAG = f"mrlat{os.getpid()}"
lab = Lab(tmp_prefix="tandem-mrlat-")
D = lab.d
checks = Checks()
check, failed = checks.check, checks.failed


def huge_free_mib():
    with open("/proc/meminfo") as f:
        m = dict(line.split(":", 1) for line in f)
    return int(m["HugePages_Free"].split()[0]) * int(m["Hugepagesize"].split()[0]) // 1024


INF = float("inf")


def write_lat(name):
    """(ok, JSON, timed_out): timed_out = the QP ran out of retries (this VM stalling for
    seconds, seen in every kind of window); the window then counts as infinitely slow."""
    cc, cj, sc, sj = lab_perf_pair(lab, args.perf, D, name, "write_lat",
                                   ["-s", "64", "-D", str(args.seconds), "--verify"], timeout=60 + args.seconds)
    ok = cc == 0 and sc == 0 and cj.get("verify") == "ok" and sj.get("verify") == "ok" and cj.get("iterations", 0) > 0
    timed_out = not ok and "retry counter exceeded" in lab.text(f"{name}-client", "err") + lab.text(f"{name}-server", "err")
    if timed_out:
        cj = {"t_99_us": INF, "t_avg_us": INF, "t_max_us": INF, "iterations": 0}
    return ok, cj, timed_out


def main():
    write_lab_tables(D)
    fab_pre, a_pre, b_pre = f"{TAG}-fab", f"{TAG}-a", f"{TAG}-b"
    fab = lab.start(lab_fabric_argv(args.fabric, fab_pre, D), "fabric", fab_pre)
    wait_fabric_started(lab, fab, timeout=60)  # a loaded 2-core box starts slowly
    # The default 1 ms RTO (7 retries) runs out when a dozen busy processes share two cores
    # (RETRY_EXC_ERR, in any window, even with 100 ms): this test is about stalls, not that.
    flags = ["--mtu", "1024", "--timeout-us", "300000"]
    wa = lab.start(lab_worker_argv(args.rnic, "A", a_pre, D, "h0.sock", flags), "A", a_pre)
    wb = lab.start(lab_worker_argv(args.rnic, "B", b_pre, D, "h1.sock", flags), "B", b_pre)
    c_pre = f"{TAG}-c"
    wc = lab.start([args.rnic, "--name", "C", "--host-socket", f"{D}/C.rnic", "--table", f"{D}/A.yaml",
                    "--idle", "adaptive", "--", "--no-pci", f"--file-prefix={c_pre}", "-l", "1", "-m", "128",
                    "--log-level=lib.eal:error", "--vdev=net_null0,no-rx=1"], "C", c_pre)
    t0 = time.time()
    while not all(os.path.exists(f"{D}/{n}.rnic") for n in "ABC"):
        if time.time() - t0 > 60 or any(w.poll() is not None for w in (wa, wb, wc)):
            raise RuntimeError("workers did not open their host sockets")
        time.sleep(0.1)

    # Huge pages only when the box has them to spare: other labs may be running.
    huge = args.huge == "on" or (args.huge == "auto" and huge_free_mib() >= args.mib + 512)
    print(f"     {args.mib} MiB buffer on {'huge pages' if huge else '4 KiB pages (plain memfd)'} "
          f"({huge_free_mib()} MiB of huge pages free)", flush=True)

    ok, _, _ = write_lat("warmup")
    check(ok, "warm-up write_lat verified")
    timeouts = {"quiet": 0, "elsewhere": 0, "here": 0}
    windows = {"quiet": [], "elsewhere": [], "here": []}
    for r in range(args.rounds):
        for kind in ("quiet", "elsewhere", "here"):
            name = f"{kind}{r}"
            ch = None
            if kind != "quiet":
                sock = f"{D}/{'C' if kind == 'elsewhere' else 'A'}.rnic"
                ch = lab.start([args.churn, sock, str(args.mib), str(args.seconds + 1.5), str(args.pause_ms),
                                "huge" if huge else "plain"], f"churn-{name}", separate_stderr=True)
                time.sleep(0.5)  # attached and registering before the window opens
            ok, w, timed_out = write_lat(name)
            cs, code = {}, 0
            if ch is not None:
                code = ch.wait(120)
                try:
                    cs = json.loads(lab.text(f"churn-{name}").strip().splitlines()[-1])
                except (ValueError, IndexError):
                    cs = {}
                ok = (ok or timed_out) and code == 0 and cs.get("registrations", 0) > 0
            what = (f"round {r} {kind:9}: write_lat verified (p99 {w.get('t_99_us', 0):.1f} us, "
                    f"avg {w.get('t_avg_us', 0):.1f} us, max {w.get('t_max_us', 0):.0f} us, "
                    f"{w.get('iterations', 0)} iterations)")
            if ch is not None:
                what += (f" while {cs.get('registrations', 0)} x {args.mib} MiB were registered on "
                         f"{'C' if kind == 'elsewhere' else 'A'} (reg {cs.get('reg_ms_avg', 0):.1f} ms avg / "
                         f"{cs.get('reg_ms_max', 0):.1f} max, dereg {cs.get('dereg_ms_avg', 0):.1f} ms avg / "
                         f"{cs.get('dereg_ms_max', 0):.1f} max; exit {code}"
                         f"{': ' + lab.text(f'churn-{name}', 'err').strip()[:200] if code else ''})")
            if timed_out:
                timeouts[kind] += 1
                what += " -- the QP ran out of retries: counted as infinitely slow"
            check(ok or timed_out, what)
            windows[kind].append(w)
    quiet, base, churn = windows["quiet"], windows["elsewhere"], windows["here"]

    def med(rows, k):
        return statistics.median(x.get(k, 0) for x in rows) if rows else 0

    def line(k, unit_fmt):
        q, b, c = med(quiet, k), med(base, k), med(churn, k)
        return q, b, c, (f"{k} quiet {q:{unit_fmt}} / elsewhere {b:{unit_fmt}} / here {c:{unit_fmt}} us "
                         f"(here/elsewhere x{c / b if b else 0:.2f})")

    _, bp99, cp99, l99 = line("t_99_us", ".1f")
    _, bavg, cavg, lavg = line("t_avg_us", ".1f")
    _, _, _, lmax = line("t_max_us", ".0f")
    print(f"     medians over {args.rounds} rounds: {l99}; {lavg}; {lmax}; windows whose QP ran out of "
          f"retries: {timeouts}", flush=True)
    if args.report_only:
        print("     --report-only: no latency assertion")
    else:
        # An infinite baseline (most "elsewhere" windows timed out) judges nothing: a failure too.
        check(0 < bp99 < INF and cp99 <= 2 * bp99, f"p99 while worker A registers within 2x of while C does ({l99})")
        # The mean carries this VM's multi-second hiccups (x1.9 seen with a healthy worker):
        # 4x still catches a stalling lcore (x79 on the worker before the control thread).
        check(0 < bavg < INF and cavg <= 4 * bavg, f"mean latency within 4x ({lavg})")
    check(lab.stop(wa) == 0 and lab.stop(wb) == 0 and lab.stop(wc) == 0, "workers stop cleanly on SIGINT")
    lab.stop(fab)
    if failed:
        for n in ("A", "B", "C"):
            print(f"--- {n} log ---\n{lab.text(n)}")


run_checked("mr_registration_latency", main, checks, lab)
