#!/usr/bin/python3
"""The lab in a box (run by scripts/demo.sh): two hosts' RNIC workers through
tandem-fabric with 4 paths of different delays, tandem-perf write_bw --verify
with per-packet spraying and credit-based congestion control, one path failed
and healed mid-run. Prints goodput, packets per path over time, reorder depth,
retransmissions and drops by reason. Everything it starts is stopped by PID,
and its hugepage files, runtime dirs and sockets are removed, also on Ctrl-C.

usage: lab_demo.py BUILD_DIR [--seconds N] [--spray P] [--cc P] [--keep]"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from tandem_harness import (Lab, Telemetry, free_port, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            path_ports, wait_for, write_lab_tables)

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("build")
ap.add_argument("--seconds", type=float, default=24, help="length of the write_bw run (default 24)")
ap.add_argument("--spray", default="round_robin", help="tandem-rnic --spray (default round_robin)")
ap.add_argument("--cc", default="credit", help="tandem-rnic --cc (default credit)")
ap.add_argument("--keep", action="store_true", help="keep the logs directory")
ap.add_argument("--png", default="/tmp/tandem-lab-paths.png",
                help="where to draw per-path delivery over time, failure window marked (default "
                     "/tmp/tandem-lab-paths.png; '' for none)")
args = ap.parse_args()

FABRIC = f"{args.build}/apps/tandem-fabric/tandem-fabric"
RNIC = f"{args.build}/apps/tandem-rnic/tandem-rnic"
PERF = f"{args.build}/apps/tandem-perf/tandem-perf"
TAG = f"demo{os.getpid()}"
PATHS = ["delay_us=5", "delay_us=10", "delay_us=20,loss=0.002", "delay_us=40"]


def on_signal(signum):
    print("\ninterrupted: stopping the lab")
    return 130


lab = Lab(tmp_prefix="tandem-lab-", graceful=True, keep=args.keep, on_signal=on_signal)
D = lab.d
start, text, cleanup = lab.start, lab.text, lab.cleanup


def fabric_paths(tel):
    """Per-path counters, in path order ({"0": {...}, "1": {...}} over telemetry)."""
    r = tel.cmd("/tandem/fabric/paths") or {}
    return [r[k] for k in sorted(r, key=int)]


def path_delivered(paths):
    return [p.get("packets", 0) for p in paths]  # accepted for delivery; drops are counted apart


def dead_path_removals(rows):
    """Removals of fabric path 1 by all of a worker's QPs (their core ports map onto
    the fabric's paths as (port - 0xC000) mod 4, as the worker's egress route does)."""
    n = 0
    for q in rows.values():
        try:
            fab = [(int(p) - 0xC000) % len(PATHS) for p in q["path_ports"].split("/")]
            rem = [int(x) for x in q["path_removals_per_path"].split("/")]
        except (KeyError, ValueError, TypeError, AttributeError):
            continue
        n += sum(r for f, r in zip(fab, rem) if f == 1)
    return n


def draw_paths(png, series, failed_at, healed_at):
    """Per-path delivery over time with the failure window shaded (matplotlib, no display)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("   (no matplotlib: no picture; scripts/setup.sh installs python3-matplotlib)")
        return
    if not series:
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    for k in range(len(series[0][1])):
        ax.plot([t for t, _ in series], [r[k] / 1000 for _, r in series], marker="o", label=f"path {k}")
    if failed_at is not None:
        ax.axvspan(failed_at, healed_at if healed_at is not None else series[-1][0], color="red", alpha=0.12,
                   label="path 1 down")
    ax.set_xlabel("seconds")
    ax.set_ylabel("delivered (k packets/s)")
    ax.set_title("tandem lab: per-path delivery, write_bw sprayed over 4 paths")
    ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(png, dpi=100)
        print(f"\n   picture: {png} (per-path delivery over time, failure window shaded)")
    except OSError as e:
        print(f"\n   (could not write {png}: {e})")
    plt.close(fig)


def stock_write_bw():
    """Debian's ib_write_bw between the two workers' vNIC devices (rnic/verbs); one result line."""
    run = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tandem-run")
    env = dict(os.environ, TANDEM_DEVICES=f"{D}/devices", TANDEM_BUILD=os.path.abspath(args.build))
    port = ["-p", str(free_port()), "-s", "65536", "-n", "500", "-q", "2"]
    srv = subprocess.Popen([run, "ib_write_bw", "-d", "tandem_A_v1"] + port, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    try:
        out = subprocess.run([run, "ib_write_bw", "-d", "tandem_B_v1"] + port + ["127.0.0.1"], env=env,
                             capture_output=True, text=True, timeout=60).stdout
        srv.wait(30)
    except (subprocess.TimeoutExpired, OSError) as e:
        srv.kill()
        return f"FAILED ({e})"
    row = next((ln.split() for ln in out.splitlines() if ln.split()[:1] == ["65536"]), None)
    if not row or srv.returncode != 0:
        return "FAILED: " + " ".join(out.split()[-12:])
    return f"{row[1]} x 64 KiB over 2 QPs, {float(row[3]) * 8 / 1000:.3f} Gb/s average (exit 0 on both sides)"


def main():
    b = ("10.0.0.2", "192.168.7.2")  # host B: underlay, overlay
    write_lab_tables(D, lambda me, peer: path_ports(me[1], peer[1], len(PATHS)))

    print("== lab: tandem-fabric (memif server, 2 host ports, 4 ECMP paths)")
    for k, spec in enumerate(PATHS):
        print(f"   path {k}: {spec}")
    fab_pre = f"{TAG}-fab"
    flags = ["--stats-json", f"{D}/fabric.json"]
    for k, spec in enumerate(PATHS):
        flags += ["--path", f"{k}:{spec}"]
    fab = start(lab_fabric_argv(FABRIC, fab_pre, D, flags), "fabric", fab_pre)
    wait_for(lambda: "tandem-fabric:" in text("fabric") or fab.poll() is not None,
             "timed out waiting for the fabric", poll=0.1)
    if fab.poll() is not None:
        raise RuntimeError("tandem-fabric exited:\n" + text("fabric"))
    ftel = Telemetry(fab_pre)

    print(f"== two RNIC workers (memif clients): spray {args.spray}, cc {args.cc}, IRN reordering, MTU 4096")
    workers = {}
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        pre = f"{TAG}-{n.lower()}"
        workers[n] = (start(lab_worker_argv(RNIC, n, pre, D, sock, [
            "--spray", args.spray, "--cc", args.cc, "--mtu", "4096", "--timeout-us", "20000",
            "--stats-json", f"{D}/{n}.json"]), f"worker-{n}", pre), pre)
    wait_for(lambda: all(os.path.exists(f"{D}/{n}.rnic") for n in workers)
             or any(p.poll() is not None for p, _ in workers.values()),
             "timed out waiting for the workers' host sockets", poll=0.1)
    for n, (p, _) in workers.items():
        if p.poll() is not None:
            raise RuntimeError(f"worker {n} exited:\n" + text(f"worker-{n}"))
    wtel = {n: Telemetry(pre) for n, (_, pre) in workers.items()}

    secs = args.seconds
    print(f"== tandem-perf write_bw --verify: 64 KiB messages, 2 QPs, {secs:.0f} s "
          f"(path 1 fails at {secs / 4:.0f} s and heals at {secs / 2:.0f} s)")
    port = str(free_port())
    common = ["write_bw", "-p", port, "--json", "--timeout", "30", "--verify", "-s", "65536", "-q", "2", "-t", "16"]
    srv = start([PERF] + common + ["--device", f"{D}/A.rnic", "--gid", b[1].replace("7.2", "7.1")], "perf-server")
    time.sleep(0.3)
    cli = start([PERF] + common + ["-D", str(int(secs)), "--device", f"{D}/B.rnic", "--gid", b[1], "127.0.0.1"],
                "perf-client")

    print("\n   time   delivered per path in the last interval (packets)      event")
    print("   ----   path0     path1     path2     path3")
    t0 = time.time()
    last = path_delivered(fabric_paths(ftel))
    failed_at = healed_at = time_to_remove = None
    interval = max(1.0, secs / 12)
    qps = {n: {} for n in wtel}
    series = []  # (seconds, [packets per second per path])
    while cli.poll() is None:
        time.sleep(interval)
        now = time.time() - t0
        event = ""
        if failed_at is None and now >= secs / 4:
            before = dead_path_removals(wtel["B"].cmd("/tandem/rnic/qps") or {})
            r = ftel.cmd("/tandem/fabric/path_set,1,down")
            t_fail = time.time()
            failed_at, event = now, f"path 1 DOWN ({r.get('applied')})"
            # How soon the sender takes it out: B's QP rows polled every 5 ms
            # (an upper bound: the telemetry round trip is in it).
            while time.time() - t_fail < 2 and dead_path_removals(wtel["B"].cmd("/tandem/rnic/qps") or {}) <= before:
                time.sleep(0.005)
            out_ms = (time.time() - t_fail) * 1000
            time_to_remove = out_ms if out_ms < 2000 else None
        elif failed_at is not None and healed_at is None and now >= secs / 2:
            r = ftel.cmd("/tandem/fabric/path_set,1,up")
            healed_at, event = now, f"path 1 UP ({r.get('applied')})"
        cur = path_delivered(fabric_paths(ftel))
        delta = [c - l for c, l in zip(cur, last)]
        last = cur
        series.append((now, [d / interval for d in delta]))
        print(f"   {now:4.0f}s " + "".join(f"{d:>9} " for d in delta) + f"  {event}", flush=True)
        for n, t in wtel.items():  # QPs go away with the application: keep the last view
            q = t.cmd("/tandem/rnic/qps")
            if q:
                qps[n] = q
        if now > secs + 60:
            raise RuntimeError("write_bw did not finish")
    srv.wait(30)
    if args.png:
        draw_paths(args.png, series, failed_at, healed_at)
    paths = fabric_paths(ftel)
    stock = stock_write_bw()


    for p, _ in workers.values():
        p.send_signal(signal.SIGINT)
    for p, _ in workers.values():
        p.wait(15)
    fab.send_signal(signal.SIGINT)
    fab.wait(15)

    def load(name):
        try:
            with open(f"{D}/{name}") as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    try:
        cj = json.loads(text("perf-client"))
        sj = json.loads(text("perf-server"))
    except ValueError:
        print(text("perf-client"), text("perf-server"))
        raise RuntimeError("tandem-perf did not print its JSON")

    print("\n== results")
    print(f"   write_bw: {cj.get('iterations')} x {cj.get('size')} B messages, "
          f"{cj.get('bw_avg_gbps', 0):.3f} Gb/s average, {cj.get('bw_peak_gbps', 0):.3f} Gb/s peak, "
          f"verify: client {cj.get('verify')}, server {sj.get('verify')}")
    print("   (goodput on a 2-core VM where 5 polling processes share 2 cores: read it relative, "
          "see benchmarks/RESULTS.md)")
    print("\n   fabric paths:                    delivered   dropped   (by reason)")
    for k, (p, d) in enumerate(zip(paths, path_delivered(paths))):
        drops = {r[5:]: v for r, v in p.items() if r.startswith("drop") and v}
        print(f"     path {k} ({PATHS[k]:<22}) {d:>10} {sum(drops.values()):>9}   {drops or ''}")
    print("\n   per QP (receiver A, sender B):  reorder depth max   retransmitted pkts   SACKs rx   timeouts"
          "   paths out/back")
    for n in ("A", "B"):
        for qpn, q in sorted(qps[n].items()):
            print(f"     {n} qp {qpn:>8}   {q.get('reorder_depth_max', '-'):>17} "
                  f"{q.get('retx_pkts', 0):>20} {q.get('sacks_rx', 0):>10} {q.get('timeouts', 0):>10}"
                  f"   {q.get('path_removals', 0):>6}/{q.get('path_returns', 0)}")
    print("   (timeouts: mostly the short tail timer, IRN's RTO_low, not the QP's 20 ms one; paths out/back:\n"
          "    times the sender's path health took one of its paths out, and a probe brought it back)")
    # A QP's 16 core source ports map onto the table's 4 (one per fabric path)
    # as the worker's egress route does: (port - 0xC000) mod 4.
    print("   path health removals by fabric path 0/1/2/3, by cause: loss evidence / silence (/ ACK path);\n"
          "   stall-excused: silences a host stall explained (no removal); receivers: their ACK paths")
    totals = {"loss": [0] * len(PATHS), "silence": [0] * len(PATHS), "all": [0] * len(PATHS),
              "excused": [0] * len(PATHS)}
    for n in ("A", "B"):
        for qpn, q in sorted(qps[n].items()):
            try:
                fab = [(int(p) - 0xC000) % len(PATHS) for p in q["path_ports"].split("/")]
                cols = {"all": q["path_removals_per_path"], "silence": q["path_silent_removals_per_path"],
                        "loss": q.get("path_loss_removals_per_path", ""),
                        "excused": q.get("path_stall_excused_per_path", "")}
                cols = {c: [int(x) for x in v.split("/")] if v else [0] * len(fab) for c, v in cols.items()}
            except (KeyError, ValueError):
                continue
            by = {c: [sum(r for f, r in zip(fab, v) if f == k) for k in range(len(PATHS))] for c, v in cols.items()}
            for c in totals:  # the sender's (B's) path health: the receiver's are its ACK paths
                if n == "B":
                    totals[c] = [a + b for a, b in zip(totals[c], by[c])]
            fmt = lambda v: "/".join(map(str, v))  # noqa: E731
            print(f"     {n} qp {qpn:>8}   all {fmt(by['all'])}   loss {fmt(by['loss'])}   silence {fmt(by['silence'])}"
                  f"   stall-excused {fmt(by['excused'])}")
    live = sum(v for k, v in enumerate(totals["all"]) if k != 1)
    print(f"   sender B: removals of live paths (0, 2, 3): {live} of {sum(totals['all'])} "
          f"(loss {sum(v for k, v in enumerate(totals['loss']) if k != 1)}, "
          f"silence {sum(v for k, v in enumerate(totals['silence']) if k != 1)}); "
          f"of the failed path 1: {totals['all'][1]}; stall-excused silences: {sum(totals['excused'])}")
    print("   dead path 1 out " + (f"{time_to_remove:.0f} ms after its failure (sender B, polled every 5 ms)"
                                   if time_to_remove is not None else "not within 2 s of its failure"))
    print("\n   worker drops by stage and reason:")
    for n in ("A", "B"):
        st = load(f"{n}.json")
        drops = st.get("drops", {})
        flat = {f"{stage}.{r}": v for stage, rs in drops.items() if isinstance(rs, dict) for r, v in rs.items() if v}
        w = st.get("worker", {})
        print(f"     {n}: tx {w.get('tx_packets', 0)} frames ({w.get('tx_retransmits', 0)} retransmissions), "
              f"rx accepted {w.get('rx_accepted', 0)}; drops: {flat or 'none'}")
    print(f"\n   stock ib_write_bw (Debian's perftest, unmodified, via scripts/tandem-run): {stock}")
    ok = cj.get("verify") == "ok" and sj.get("verify") == "ok" and cli.returncode == 0 and "exit 0" in stock
    print("\n== " + ("every byte verified: OK" if ok else "FAILED: see logs"))
    return 0 if ok else 1


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    except Exception as e:  # a clear line, then the logs' tails, then cleanup
        print(f"lab demo failed: {e}")
        for name in ("fabric", "worker-A", "worker-B", "perf-server", "perf-client"):
            t = text(name)
            if t:
                print(f"--- {name} (last lines) ---\n" + "\n".join(t.splitlines()[-8:]))
    finally:
        cleanup()
    sys.exit(rc)
