"""write-bw: tandem-perf write_bw goodput through the lab path (tandem-fabric as
memif server, zero impairment, 4 paths; two tandem-rnic workers as memif
clients, one lcore each, MTU 4096) against raw dpdk-testpmd txonly -> rxonly
over the same path at the same frame size, measured in the same run.

Rows (each measured over the same window at the receiving side B):
  ours      tandem-perf client on worker A -> fabric -> worker B (server app).
  baseline  testpmd A (txonly) -> the same tandem-fabric -> testpmd B (rxonly):
            the same memif vdev arguments as the workers, the same fabric
            command line and routing (txonly's underlay dst IP 10.0.0.2 is
            routed to B's port), frames as long as ours' data frames at B.
  direct    testpmd A (txonly, memif client) -> testpmd B (rxonly, memif
            server), one memif link, no fabric (reference).
  loopback  tandem-perf over a loopback worker (memcpy, no packets):
            the host-interface ceiling (reference, optional).

Goodput of a testpmd row is its frame rate times the payload one of ours'
data frames carries (message size / frames per message), so ratio =
ours' goodput / that = ours' frame rate share. Processes are pinned with
--cores (CPU of A, B, fabric): ours' workers and the fabric idle adaptively
(rte_pause, then 50 us sleeps), testpmd busy-polls (its main lcore, which
only prints stats once a second, shares the forwarding lcore's CPU); the
tandem-perf applications float at nice --perf-nice. Every memif client
(workers, testpmd) gets the same devargs (--memif, default bsize=8192 so a
4 KB frame is one memif buffer; the lab's default 2048 chains three).
Ours runs with --cc-window (default 4 MiB, tandem-rnic's own default is
1 MiB): with adaptive idling the lab's RTT is about a millisecond, so a
1 MiB window caps one QP near 8 Gb/s whatever the CPUs could do.

Everything started is stopped by PID; hugepage files and runtime dirs of the
file prefixes used are removed, also on failure."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib"))
from tandem_harness import (Lab, Telemetry, free_port, lab_fabric_argv, lab_memif_vdev,  # noqa: E402
                            lab_worker_argv, wait_fabric_started, wait_for, write_lab_tables)

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--fabric", required=True)
ap.add_argument("--rnic", required=True)
ap.add_argument("--perf", required=True)
ap.add_argument("--loopback", default="", help="perf_loopback_worker: adds the loopback reference row")
ap.add_argument("--testpmd", default=shutil.which("dpdk-testpmd") or "dpdk-testpmd")
ap.add_argument("--json", action="store_true")
ap.add_argument("--seconds", type=float, default=3.0, help="measurement window of each row")
ap.add_argument("--warmup", type=float, default=1.0, help="seconds after B's first frame before the window")
ap.add_argument("--size", type=int, default=65536, help="tandem-perf message size")
ap.add_argument("--qps", type=int, default=1)
ap.add_argument("--mtu", type=int, default=4096)
ap.add_argument("--cores", default="0,1,0", help="CPU of side A, side B and the fabric (default 0,1,0)")
ap.add_argument("--rnic-flag", action="append", default=[],
                help="extra tandem-rnic flag for both workers, e.g. --rnic-flag=--cc-window=4194304")
ap.add_argument("--cc-window", type=int, default=4 << 20,
                help="bytes in flight per QP for ours (tandem-rnic --cc-window; default 4 MiB: the lab's "
                     "~1 ms RTT under adaptive idling times ~30 Gb/s; 1 MiB caps one QP near 8 Gb/s)")
ap.add_argument("--memif", default="bsize=8192",
                help="extra memif devargs of every client (workers and testpmd alike); default bsize=8192: "
                     "a 4 KB frame fits one buffer. --memif= gives the lab default, bsize 2048: 3 descriptors a frame")
ap.add_argument("--perf-nice", type=int, default=19,
                help="nice value of the two tandem-perf processes (default 19: the client busy-polls its CQ "
                     "and, at nice 0, can starve the worker and fabric sharing its CPU)")
ap.add_argument("--rows", default="ours,baseline,direct,loopback", help="rows to run (comma list)")
ap.add_argument("--repeat", type=int, default=3,
                help="rounds of every row, interleaved; each row reports its median round (default 3)")
args = ap.parse_args()
CPU_A, CPU_B, CPU_F = args.cores.split(",")
ROWS = args.rows.split(",")
FRAMES_PER_MSG = -(-args.size // args.mtu)
PAYLOAD_PER_FRAME = args.size / FRAMES_PER_MSG
# tandem-rnic's mbufs hold a 4 KB frame in one segment (rnic/dpdk/worker.cc:
# headroom + max(2048, mtu + 256)); testpmd gets the same data room.
MBUF_SIZE = 128 + max(2048, args.mtu + 256)

TAG = f"wbw{os.getpid()}"
ROUND = [0]  # file prefixes differ per round
lab = Lab(tmp_prefix="tandem-write-bw-")
D = lab.d
stop, text = lab.stop, lab.text
HZ = os.sysconf("SC_CLK_TCK")


def start(argv, name, prefix=None):
    return lab.start(argv, name, prefix, separate_stderr=True, stdin=subprocess.DEVNULL)


def proc_cpu(p):
    """(CPU seconds of the whole process, voluntary context switches of its main thread = the lcore loop)."""
    try:
        with open(f"/proc/{p.pid}/stat") as f:
            s = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{p.pid}/status") as f:
            vol = next(int(ln.split()[1]) for ln in f if ln.startswith("voluntary_ctxt_switches"))
        return (int(s[11]) + int(s[12])) / HZ, vol
    except (OSError, StopIteration):
        return 0.0, 0


def measure(rx_counter, procs, alive, around=lambda: None):
    """Waits for B's first frame and the warm-up, then reads rx_counter() -> (frames, bytes) and
    every process's CPU over the window (around() is called just before and just after it, for
    counter snapshots). Returns frames/s, bytes/s and per-process CPU %, sleeps/s."""
    t0 = time.time()
    while rx_counter()[0] == 0:
        if time.time() - t0 > 30 or not alive():
            raise RuntimeError("B received nothing")
        time.sleep(0.1)
    time.sleep(args.warmup)
    a0 = around()
    c0 = {k: proc_cpu(p) for k, p in procs.items()}
    n0, t0 = rx_counter(), time.monotonic()
    time.sleep(args.seconds)
    n1, t1 = rx_counter(), time.monotonic()
    c1 = {k: proc_cpu(p) for k, p in procs.items()}
    a1 = around()
    dt = t1 - t0
    frames, nbytes = n1[0] - n0[0], n1[1] - n0[1]
    cpu = {k: {"cpu_pct": round((c1[k][0] - c0[k][0]) / dt * 100, 1),
               "vol_switches_per_s": round((c1[k][1] - c0[k][1]) / dt)} for k in procs}
    m = {"mpps": frames / dt / 1e6, "wire_gbps": nbytes * 8 / dt / 1e9,
         "frame_bytes": nbytes / frames if frames else 0.0, "window_s": round(dt, 3), "cpu": cpu}
    if a0 is not None:
        m["counters"] = diff(a0, a1)
    return m


def start_fabric(name):
    pre = f"{TAG}r{ROUND[0]}-{name}"
    fab = start(lab_fabric_argv(args.fabric, pre, D, lcore=CPU_F), name, pre)
    wait_fabric_started(lab, fab, name=name, timeout=30)
    return fab, Telemetry(pre, ready="/tandem/fabric/ports")


def diff(a, b):
    """b - a for every integer counter that moved (one level of nesting)."""
    out = {}
    for k, v in b.items():
        if isinstance(v, dict):
            d = diff(a.get(k, {}), v)
            if d:
                out[k] = d
        elif isinstance(v, int) and not isinstance(v, bool) and v - a.get(k, 0):
            out[k] = v - a.get(k, 0)
    return out


# ---- ours ---------------------------------------------------------------------

def run_ours():
    write_lab_tables(D)
    fab, tel_f = start_fabric("fabric")
    workers, tel = {}, {}
    flags = ["--mtu", str(args.mtu), f"--cc-window={args.cc_window}"] + args.rnic_flag
    for n, cpu, sock in (("A", CPU_A, "h0.sock"), ("B", CPU_B, "h1.sock")):
        pre = f"{TAG}r{ROUND[0]}-{n}"
        workers[n] = start(lab_worker_argv(args.rnic, n, pre, D, sock, flags, lcore=cpu, memif=args.memif), n, pre)
    wait_for(lambda: os.path.exists(f"{D}/A.rnic") and os.path.exists(f"{D}/B.rnic"), "workers did not start")
    for n in workers:
        tel[n] = Telemetry(f"{TAG}r{ROUND[0]}-{n}", ready="/tandem/rnic/stats")
    port = free_port()
    common = ["write_bw", "-p", str(port), "--json", "--timeout", "30", "--mtu", str(args.mtu)]
    run_s = args.warmup + args.seconds + 2.5
    nice = ["nice", "-n", str(args.perf_nice)] if args.perf_nice else []
    srv = start(nice + [args.perf] + common + ["--device", f"{D}/B.rnic", "--gid", "192.168.7.2"], "ours-srv")
    cli = start(nice + [args.perf] + common + ["--device", f"{D}/A.rnic", "--gid", "192.168.7.1", "-s", str(args.size),
                                        "-q", str(args.qps), "-D", f"{run_s:g}", "127.0.0.1"], "ours-cli")
    procs = {"fabric": fab, "A": workers["A"], "B": workers["B"], "perf-cli": cli, "perf-srv": srv}

    def snap():
        return {"A": tel["A"].cmd("/tandem/rnic/stats"), "B": tel["B"].cmd("/tandem/rnic/stats"),
                "A_qps": tel["A"].cmd("/tandem/rnic/qps"), "fabric_ports": tel_f.cmd("/tandem/fabric/ports"),
                "fabric_paths": tel_f.cmd("/tandem/fabric/paths")}

    def rx_b():
        s = tel["B"].cmd("/tandem/rnic/stats") or {}
        return s.get("rx_packets", 0), s.get("rx_bytes", 0)

    m = measure(rx_b, procs, lambda: cli.poll() is None, around=snap)
    # A run that stops making progress: read the counters while the QP still exists (tandem-perf
    # gives up after --timeout 30 s without a completion).
    last, since, stalled = rx_b()[0], time.time(), None
    while cli.poll() is None and time.time() < since + run_s + 60:
        time.sleep(0.5)
        now = rx_b()[0]
        if now != last:
            last, since = now, time.time()
        elif time.time() - since > 5 and stalled is None:
            stalled = snap()
    for p in (cli, srv):
        p.wait(60)
    if cli.returncode != 0 or srv.returncode != 0:
        raise RuntimeError(f"ours: tandem-perf failed:\n{text('ours-cli', 'err')}{text('ours-srv', 'err')}"
                           + (f"counters 5 s into the stall (totals): {json.dumps(stalled)}\n" if stalled else ""))
    perf = json.loads(text("ours-cli"))
    for w in workers.values():
        stop(w)
    stop(fab)
    m.update(goodput_gbps=perf["bw_avg_gbps"], perf=perf)
    return m


# ---- testpmd rows ----------------------------------------------------------------

def testpmd(name, cpu, vdev, mode, frame=0):
    """One testpmd on one CPU: main lcore 0 (stats every second) and forwarding lcore 1 both on `cpu`."""
    pre = f"{TAG}r{ROUND[0]}-{name}"
    argv = [args.testpmd, f"--lcores=0@{cpu},1@{cpu}", "--no-pci", f"--file-prefix={pre}", "-m", "128",
            "--log-level=lib.eal:error", vdev, "--", f"--forward-mode={mode}", "--nb-cores=1",
            "--total-num-mbufs=4096", f"--mbuf-size={MBUF_SIZE}", "--stats-period=1"]
    if mode == "txonly":
        # The lab's underlay addresses: A's 10.0.0.1 -> B's 10.0.0.2, which the fabric routes to B's port.
        argv += [f"--txpkts={frame}", "--tx-ip=10.0.0.1,10.0.0.2", "--tx-udp=49152,4791"]
    return start(argv, name, pre), pre


def run_testpmd(row, frame):
    procs = {}
    tel_f = None
    if row == "baseline":
        procs["fabric"], tel_f = start_fabric("tp-fabric")
        procs["B"], pre_b = testpmd("tp-B", CPU_B, lab_memif_vdev(D, "h1.sock", extra=args.memif), "rxonly")
        procs["A"], _ = testpmd("tp-A", CPU_A, lab_memif_vdev(D, "h0.sock", extra=args.memif), "txonly", frame)
    else:
        # A memif client fails to start without its server: B (the server) must be forwarding first.
        procs["B"], pre_b = testpmd("dir-B", CPU_B, lab_memif_vdev(D, "direct.sock", "server"), "rxonly")
        tel_b = Telemetry(pre_b, ready="/ethdev/stats,0")  # its port exists, so its memif socket listens
        time.sleep(0.5)
        procs["A"], _ = testpmd("dir-A", CPU_A, lab_memif_vdev(D, "direct.sock", extra=args.memif), "txonly", frame)
    if row == "baseline":
        tel_b = Telemetry(pre_b, ready="/ethdev/stats,0")

    def rx_b():
        s = tel_b.cmd("/ethdev/stats,0") or {}
        return s.get("ipackets", 0), s.get("ibytes", 0)

    around = (lambda: {"fabric_ports": tel_f.cmd("/tandem/fabric/ports")}) if tel_f else (lambda: None)
    try:
        m = measure(rx_b, procs, lambda: all(p.poll() is None for p in procs.values()), around)
    except RuntimeError as e:
        names = [n for n in ("tp-fabric", "tp-A", "tp-B", "dir-A", "dir-B") if os.path.exists(lab.path(n + ".log"))]
        raise RuntimeError(f"{row}: {e}\n" + "".join(f"--- {n} ---\n{text(n)[-1500:]}{text(n, 'err')[-1500:]}"
                                                     for n in names))
    for k in ("A", "B", "fabric"):  # the sender first: the receiver's stats vanish when its peer goes
        if k in procs:
            stop(procs[k])
    m["goodput_gbps"] = m["mpps"] * 1e6 * PAYLOAD_PER_FRAME * 8 / 1e9
    return m


def run_loopback():
    lb = start([args.loopback, f"{D}/lb.sock"], "loopback")
    wait_for(lambda: os.path.exists(f"{D}/lb.sock"), "loopback worker did not start")
    port = free_port()
    common = ["write_bw", "-p", str(port), "--json", "--timeout", "30"]
    nice = ["nice", "-n", str(args.perf_nice)] if args.perf_nice else []
    srv = start(nice + [args.perf] + common + ["--device", f"{D}/lb.sock"], "lb-srv")
    cli = start(nice + [args.perf] + common + ["--device", f"{D}/lb.sock", "-s", str(args.size), "-q", str(args.qps),
                                        "-D", f"{args.seconds:g}", "127.0.0.1"], "lb-cli")
    for p in (cli, srv):
        p.wait(args.seconds + 60)
    stop(lb)
    if cli.returncode != 0 or srv.returncode != 0:
        raise RuntimeError(f"loopback: tandem-perf failed:\n{text('lb-cli', 'err')}{text('lb-srv', 'err')}")
    perf = json.loads(text("lb-cli"))
    return {"goodput_gbps": perf["bw_avg_gbps"], "mpps": None, "wire_gbps": None, "frame_bytes": None}


LABELS = {
    "ours": "ours: tandem-perf, A -> fabric -> B, 2 x tandem-rnic",
    "baseline": "baseline: testpmd txonly -> fabric -> rxonly",
    "direct": "reference: testpmd txonly -> rxonly, one memif",
    "loopback": "reference: loopback worker (memcpy, no packets)",
}


def main():
    samples = {}
    frame = None
    for r in range(args.repeat):
        ROUND[0] = r
        if "ours" in ROWS:
            samples.setdefault("ours", []).append(run_ours())
            # The frame testpmd sends: as long as ours' data frames at B (their average: every frame
            # of a message is full, the first also carries the RETH).
            frame = frame or round(samples["ours"][0]["frame_bytes"])
        frame = frame or 14 + 20 + 8 + 12 + 24 + args.mtu + 4
        for row in ("baseline", "direct"):
            if row in ROWS:
                samples.setdefault(row, []).append(run_testpmd(row, frame))
        if "loopback" in ROWS and args.loopback:
            samples.setdefault("loopback", []).append(run_loopback())
    res = {}
    for k, v in samples.items():  # each row's median round (by goodput), with every round's goodput
        res[k] = dict(sorted(v, key=lambda m: m["goodput_gbps"])[len(v) // 2])
        res[k]["rounds_gbps"] = [round(m["goodput_gbps"], 3) for m in v]

    base = res.get("baseline")
    o = res["ours"]["goodput_gbps"] if "ours" in res else 0.0
    b = base["goodput_gbps"] if base else 0.0
    ratio = o / b if b > 0 else 0.0
    rows = {k: {kk: (round(vv, 4) if isinstance(vv, float) else vv) for kk, vv in v.items() if kk != "perf"}
            for k, v in res.items()}
    if args.json:
        out = {"bench": "write-bw", "unit": "Gb/s goodput", "ours": round(o, 4), "baseline": round(b, 4),
               "baseline_name": "dpdk-testpmd txonly -> tandem-fabric -> rxonly, same memif links, same frame size",
               "ratio": round(ratio, 4), "size": args.size, "qps": args.qps, "mtu": args.mtu, "frame_bytes": frame,
               "payload_per_frame": PAYLOAD_PER_FRAME, "window_s": args.seconds, "cores_a_b_fabric": args.cores,
               "rnic_flags": args.rnic_flag, "cc_window": args.cc_window, "memif": args.memif, "perf_nice": args.perf_nice, "repeat": args.repeat, "load_avg": os.getloadavg()[0], "rows": rows}
        for k in ("direct", "loopback"):
            if k in res and res[k]["goodput_gbps"]:
                out[f"ratio_to_{k}"] = round(o / res[k]["goodput_gbps"], 4)
        print(json.dumps(out))
        return
    print(f"write-bw: tandem-perf write_bw {args.size} B messages, {args.qps} QP(s), MTU {args.mtu}, --cc-window {args.cc_window}; "
          f"testpmd frames {frame} B ({PAYLOAD_PER_FRAME:g} B payload each); window {args.seconds:g} s, "
          f"median of {args.repeat} interleaved round(s); "
          f"CPUs A,B,fabric = {args.cores}; load {os.getloadavg()[0]:.1f}")
    print(f"  {'path':<52} {'goodput Gb/s':>12} {'Mpps':>8} {'wire Gb/s':>9} {'frame B':>8} {'ratio':>7}  rounds (Gb/s)")
    for k in ("ours", "baseline", "direct", "loopback"):
        if k not in res:
            continue
        r = res[k]
        mpps = f"{r['mpps']:.4f}" if r["mpps"] is not None else "-"
        wire = f"{r['wire_gbps']:.3f}" if r["wire_gbps"] is not None else "-"
        rr = o / r["goodput_gbps"] if r["goodput_gbps"] else 0.0
        fb = f"{r['frame_bytes']:.1f}" if r["frame_bytes"] else "-"
        print(f"  {LABELS[k]:<52} {r['goodput_gbps']:>12.3f} {mpps:>8} {wire:>9} {fb:>8} {rr:>7.3f}  "
              + " ".join(f"{g:.2f}" for g in r["rounds_gbps"]))
    for k in ("ours", "baseline", "direct"):
        if k in res:
            print(f"  cpu {k}: " + ", ".join(f"{n} {c['cpu_pct']:.0f}% ({c['vol_switches_per_s']} sleeps/s)"
                                             for n, c in res[k]["cpu"].items()))
    if "ours" in res:
        print("  ours' counters over the window: " + json.dumps(res["ours"]["counters"]))


try:
    main()
    rc = 0
except Exception as e:
    print(f"write-bw: {e}", file=sys.stderr)
    for n in ("fabric", "A", "B"):
        if os.path.exists(lab.path(n + ".log")):
            sys.stderr.write(f"--- {n} ---\n{text(n)[-2000:]}{text(n, 'err')[-2000:]}")
    rc = 1
finally:
    lab.cleanup()
sys.exit(rc)
