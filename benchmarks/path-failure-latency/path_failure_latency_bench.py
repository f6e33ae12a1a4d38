"""path-failure-latency: one operation in flight across a dead path, against the same without.
Simulator (exact, deterministic): tandem-sim's latency-path-failure (10,000 64 B WRITEs, 16 paths,
path3 black-holed both ways at 1 ms) and latency-read-path-failure (10,000 64 B READs, 16 ports
hashed onto the lab's 4 paths, path0 dead at 1 ms), policy rr-credit; the baseline is the same
scenario with its failures removed. Lab (2-core machine, recorded, noisy): tandem-fabric and two
tandem-rnic workers as verbs_perftest runs them; stock ib_write_lat and ib_read_lat -s 2 -n ITERS
without a failure (baseline), then with fabric path 0 failed 1.5 s after the client started.
ours = sim WRITE p99 with the failure, baseline = the same without, ratio = ours / baseline;
every row has p50/p99/max and QPs in error (a perftest side that did not exit 0)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from tandem_harness import (Lab, Telemetry, free_port, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            wait_fabric_started, write_lab_tables)

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--build", default=os.environ.get("TANDEM_BUILD", "build"))
ap.add_argument("--json", action="store_true", help="print one JSON object")
ap.add_argument("--no-lab", action="store_true", help="the simulator only")
ap.add_argument("--iters", type=int, default=3000, help="perftest iterations per lab run (default 3000; the failure comes 1.5 s after the client starts, so a run must last longer)")
ap.add_argument("--policy", default="rr-credit", help="the simulator's policy row (default rr-credit)")
ap.add_argument("--progs", default="ib_write_lat,ib_read_lat", help="lab programs (default ib_write_lat,ib_read_lat)")
args = ap.parse_args()
B = os.path.abspath(args.build)
SIM = f"{B}/apps/tandem-sim/tandem-sim"


def log(msg):
    print(msg, file=sys.stderr if args.json else sys.stdout, flush=True)


def sim_rows():
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for sc, op in (("latency-path-failure", "write"), ("latency-read-path-failure", "read")):
            text = open(os.path.join(ROOT, "rnic", "sim", "scenarios", f"{sc}.yaml")).read()
            # The baseline: the same file without its failures: list.
            lines, out, skip = text.splitlines(), [], False
            for ln in lines:
                if ln.startswith("failures:"):
                    skip = True
                    continue
                if skip and ln.startswith("  "):
                    continue
                skip = False
                out.append(ln)
            base = os.path.join(tmp, f"{sc}-nofail.yaml")
            with open(base, "w") as f:
                f.write("\n".join(out).replace(f"name: {sc}", f"name: {sc}-nofail") + "\n")
            res = {}
            for kind, what in (("failed", sc), ("baseline", base)):
                r = json.loads(subprocess.run([SIM, "run", what, "--json"], capture_output=True, text=True,
                                              check=True).stdout)
                res[kind] = next(x for x in r["results"] if x["policy"] == args.policy)
            f, b = res["failed"], res["baseline"]
            rows.append(dict(where="sim", scenario=sc, op=op, policy=args.policy,
                             p50_us=f["fct_us_p50"], p99_us=f["fct_us_p99"], max_us=f["fct_us_max"],
                             base_p50_us=b["fct_us_p50"], base_p99_us=b["fct_us_p99"], base_max_us=b["fct_us_max"],
                             p50_ratio=f["fct_us_p50"] / b["fct_us_p50"], p99_ratio=f["fct_us_p99"] / b["fct_us_p99"],
                             qps_in_error=int(f["error_completions"] > 0) + int(b["error_completions"] > 0),
                             completed=f"{f['completed']}/{f['messages']}", timeouts=f["timeouts"],
                             data_ok=f["data_ok"] and b["data_ok"]))
    return rows


def lab_rows():
    run = os.path.join(ROOT, "scripts", "tandem-run")
    lab = Lab(tmp_prefix="tandem-pflat-")
    d = lab.d
    env = dict(os.environ, TANDEM_DEVICES=f"{d}/devices", TANDEM_BUILD=B)
    tag = f"pflat{os.getpid()}"
    rows = []
    try:
        write_lab_tables(d)
        fab = lab.start(lab_fabric_argv(f"{B}/apps/tandem-fabric/tandem-fabric", f"{tag}-fab", d,
                                        ["--path", "1:delay_us=20", "--path", "2:loss=0.01"]), "fabric", f"{tag}-fab")
        wait_fabric_started(lab, fab)
        for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
            lab.start(lab_worker_argv(f"{B}/apps/tandem-rnic/tandem-rnic", n, f"{tag}-{n.lower()}", d, sock, [
                "--mtu", "1024", "--spray", "round_robin", "--cc", "credit", "--timeout-us", "20000"]),
                n, f"{tag}-{n.lower()}")
        t0 = time.time()
        while not all(os.path.exists(f"{d}/devices/tandem_{n}_v1.dev") for n in "AB"):
            if time.time() - t0 > 30:
                raise RuntimeError("workers did not register their verbs devices")
            time.sleep(0.1)
        ftel = Telemetry(f"{tag}-fab")

        def one(prog, fail):
            port = ["-p", str(free_port()), "-s", "2", "-n", str(args.iters)]
            srv = subprocess.Popen([run, f"/usr/bin/{prog}", "-d", "tandem_A_v1"] + port, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(0.5)
            cli = subprocess.Popen([run, f"/usr/bin/{prog}", "-d", "tandem_B_v1"] + port + ["127.0.0.1"], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            applied = None
            if fail:
                time.sleep(1.5)
                applied = cli.poll() is None and (ftel.cmd("/tandem/fabric/path_set,0,down") or {}).get("applied")
            outs = []
            for p in (cli, srv):
                try:
                    o, _ = p.communicate(timeout=120)
                except subprocess.TimeoutExpired:
                    p.kill()
                    o, _ = p.communicate()
                outs.append((p.returncode, o))
            if fail:
                ftel.cmd("/tandem/fabric/path_set,0,up")
            row = None
            for line in outs[0][1].splitlines():
                f = line.split()
                if len(f) >= 9 and f[0] == "2" and all(x.replace(".", "").isdigit() for x in f[1:9]):
                    row = [float(x) for x in f[1:9]]  # iters, min, max, typical, avg, stdev, 99%, 99.9%
            errors = sum(1 for rc, _ in outs if rc != 0)
            if errors or row is None:
                log(f"--- {prog} {'with' if fail else 'without'} the failure: exit {outs[0][0]}/{outs[1][0]}\n"
                    f"--- client ---\n{outs[0][1][-600:]}\n--- server ---\n{outs[1][1][-600:]}")
            return row, errors, applied

        for prog in args.progs.split(","):
            b, b_err, _ = one(prog, False)
            f, f_err, applied = one(prog, True)
            log(f"lab {prog}: baseline {b} (sides failed {b_err}); failed path 0 ({applied}): {f} (sides failed {f_err})")
            ok = b is not None and f is not None
            rows.append(dict(where="lab", scenario="fabric path 0 of 4 failed 1.5 s in", op=prog, policy="round_robin+credit",
                             failure_applied=bool(applied),
                             p50_us=f[3] if f else None, p99_us=f[6] if f else None, max_us=f[2] if f else None,
                             base_p50_us=b[3] if b else None, base_p99_us=b[6] if b else None,
                             base_max_us=b[2] if b else None,
                             p50_ratio=f[3] / b[3] if ok else None, p99_ratio=f[6] / b[6] if ok else None,
                             qps_in_error=b_err + f_err, iters=args.iters))
    finally:
        lab.cleanup()
    return rows


if not os.path.exists(SIM):
    subprocess.run(["ninja", "-C", B, "apps/tandem-sim/tandem-sim"], check=True, stdout=subprocess.DEVNULL)
rows = sim_rows()
if not args.no_lab:
    rows += lab_rows()
w = rows[0]
result = dict(bench="path-failure-latency", unit="us p99 (sim, one WRITE in flight, 1 of 16 paths dead)",
              ours=w["p99_us"], baseline=w["base_p99_us"], baseline_name="the same scenario with no path failing",
              ratio=w["p99_ratio"], qps_in_error=sum(r["qps_in_error"] or 0 for r in rows), rows=rows)
if args.json:
    print(json.dumps(result))
    sys.exit(0)
print("| where | case | op | p50 us (no failure) | p99 us (no failure) | max us (no failure) | p99 ratio | QPs in error |")
print("|---|---|---|---|---|---|---:|---:|")
for r in rows:
    def v(a, b):
        return "-" if r[a] is None else f"{r[a]:.1f} ({r[b]:.1f})"
    ratio = "-" if r["p99_ratio"] is None else f"{r['p99_ratio']:.2f}"
    print(f"| {r['where']} | {r['scenario']} | {r['op']} | {v('p50_us', 'base_p50_us')} | {v('p99_us', 'base_p99_us')} | "
          f"{v('max_us', 'base_max_us')} | {ratio} | {r['qps_in_error']} |")
