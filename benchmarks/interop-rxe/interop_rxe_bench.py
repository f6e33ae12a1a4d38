"""benchmarks/interop-rxe: Tandem against Linux's rxe (scripts/rxe-peer.sh), see run.sh.

Three TCG guests boot together: one on the worker's tap (tests/lib/rxe_lab.py: the worker's route
to it is `peer: roce`, the worker itself IRN with spraying and credits), two on a bridge of their
own (the rxe<->rxe baseline: the same emulated kernel stack on both ends). Prints a table, or with
--json one object: compat (each program, mode and direction with its result), and ib_write_bw
(64 KiB, MB/s) and ib_write_lat (2 B, typical us) for Tandem->rxe, rxe->Tandem and rxe->rxe."""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "lib"))
from tandem_harness import Lab  # noqa: E402
from rxe_lab import RxeLab, compat_cases, judge, perftest_row  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--json", action="store_true")
ap.add_argument("--iters", type=int, default=300, help="ib_write_bw / ib_write_lat iterations")
a = ap.parse_args()
top = os.path.abspath(os.path.join(here, "..", ".."))
B = os.path.abspath(a.build)
RNIC, RUN, PEER = f"{B}/apps/tandem-rnic/tandem-rnic", f"{top}/scripts/tandem-run", f"{top}/scripts/rxe-peer.sh"
VERIFY = f"{B}/tests/system/rdma_verify"
TAG = f"rxeb{os.getpid()}"
lab = Lab(tmp_prefix="tandem-bench-interop-rxe-")
rx = RxeLab(lab, RNIC, PEER, RUN, TAG, ["--spray", "round_robin", "--cc", "credit", "--mode", "irn"])
BR_NS = f"{TAG}br"
pair_dirs = [f"{lab.d}/g2", f"{lab.d}/g3"]
_cleanup = lab.cleanup


def cleanup():
    rx.stop()
    for d in pair_dirs:
        if os.path.exists(f"{d}/env"):
            subprocess.run([PEER, "-d", d, "stop"], capture_output=True, timeout=60)
    subprocess.run(["ip", "netns", "del", BR_NS], capture_output=True)
    _cleanup()


lab.cleanup = cleanup
log = sys.stderr if a.json else sys.stdout


def say(s):
    print(s, file=log, flush=True)


def boot_pair(errs):
    subprocess.run(["ip", "netns", "add", BR_NS], check=True)
    procs = [subprocess.Popen([PEER, "-d", d, "start", "--netns", BR_NS, "--tap", f"tb{i}", "--bridge", "br0",
                               "--ip", f"10.98.0.{i + 2}", "--fwd", str(18600 + i)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, d in enumerate(pair_dirs)]
    for p in procs:
        o, _ = p.communicate(timeout=500)
        if p.returncode != 0:
            errs.append(o)


def guest_pair(prog, args, timeout=300):
    """prog between the two bridged guests: server on g2 (10.98.0.2), client on g3."""
    base = [prog, "-d", "rxe0", "-x", "1"] + args + ["-p", "18700"]
    srv = subprocess.Popen([PEER, "-d", pair_dirs[0], "run", " ".join(base)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    time.sleep(1.5)
    cli = subprocess.Popen([PEER, "-d", pair_dirs[1], "run", " ".join(base + ["10.98.0.2"])],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    for p in (cli, srv):
        try:
            o, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, _ = p.communicate()
        out.append((p.returncode, o))
    return out


def main():
    errs = []
    t0 = time.time()
    th = threading.Thread(target=boot_pair, args=(errs,))
    th.start()
    say(rx.start_guest())
    th.join()
    if errs:
        raise RuntimeError("the rxe<->rxe guests did not start:\n" + "\n".join(errs))
    say(f"three guests up in {time.time() - t0:.0f} s")
    rx.start_worker()
    compat = []
    for name, prog, args, kind in compat_cases(VERIFY):
        for server in ("rxe", "tandem"):
            cli, srv, secs = rx.pair(prog, args, server, timeout=300)
            ok, what = judge(kind, cli, srv)
            client = "tandem" if server == "rxe" else "rxe"
            row = {"program": name, "args": " ".join(args), "client": client, "server": server,
                   "result": "pass" if ok else "fail", "data_checked": kind in ("verify", "pingpong"),
                   "detail": what, "seconds": round(secs, 1)}
            compat.append(row)
            say(f"{'pass' if ok else 'FAIL'}  {name:20s} client {client:6s} server {server:6s} {what} ({secs:.1f} s)")

    n = str(a.iters)
    perf = {}
    for label, server in (("tandem_to_rxe", "rxe"), ("rxe_to_tandem", "tandem")):
        cli, srv, _ = rx.pair("ib_write_bw", ["-s", "65536", "-n", n], server, timeout=300)
        row = perftest_row(cli[1], 65536)
        perf[f"write_bw_{label}_MBps"] = row[2] if row else None
        cli, srv, _ = rx.pair("ib_write_lat", ["-s", "2", "-n", n], server, timeout=300)
        row = perftest_row(cli[1], 2)
        perf[f"write_lat_{label}_typical_us"] = row[3] if row else None
    (cc, co), _ = guest_pair("ib_write_bw", ["-s", "65536", "-n", n])
    row = perftest_row(co, 65536)
    perf["write_bw_rxe_to_rxe_MBps"] = row[2] if row else None
    (cc, co), _ = guest_pair("ib_write_lat", ["-s", "2", "-n", n])
    row = perftest_row(co, 2)
    perf["write_lat_rxe_to_rxe_typical_us"] = row[3] if row else None

    ours, base = perf["write_bw_tandem_to_rxe_MBps"], perf["write_bw_rxe_to_rxe_MBps"]
    passed = sum(1 for r in compat if r["result"] == "pass")
    out = {"bench": "interop-rxe", "unit": "MB/s", "ours": ours, "baseline": base,
           "baseline_name": "ib_write_bw 64 KiB between two rxe guests (same TCG emulation)",
           "ratio": round(ours / base, 3) if ours and base else None,
           "compat_passed": passed, "compat_total": len(compat), "compat": compat, **perf,
           "note": "guests run under TCG emulation on a shared 2-core host: functional, not a speed goal"}
    if a.json:
        print(json.dumps(out))
    else:
        say(f"compat: {passed}/{len(compat)} pass")
        for k, v in perf.items():
            say(f"{k:40s} {v}")
        say(f"ib_write_bw Tandem->rxe / rxe->rxe: {out['ratio']}")


try:
    main()
finally:
    lab.cleanup()
