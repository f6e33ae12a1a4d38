"""noisy-neighbour: does a hostile tenant slow, corrupt or kill its neighbour on a shared RNIC?
The lab of tests/system/hostile/hostile_lab.py: tandem-fabric and two tandem-rnic workers, each
port with the victim tenant's vNIC 1 and the hostile tenant's vNIC 2. For each abuse of the
hostile suite (one C program each, through scripts/tandem-run, at nice 19 standing for cores of
its own), --rounds times: the victim's tandem-perf write_bw --verify (64 KiB, MTU 1024, client on
worker B, server on worker A) for --seconds alone, then again while the abuse runs.

  row ratio = median victim Gb/s under the abuse / median victim Gb/s alone (the runs just before)
  ours      = the worst row's ratio (goal >= 0.5 on every row)
  baseline  = the victim alone, median over every row's alone runs (Gb/s)
  worker_deaths, victim_bytes_wrong: totals (goal 0 each); a worker that died is restarted.
A victim run that fails its byte check counts as bytes wrong (tandem-perf stops at the first
mismatch, so it is a count of runs with wrong bytes, each >= 1 byte)."""
import argparse
import contextlib
import json
import os
import statistics
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "system", "hostile"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from hostile_lab import CASES, GOAL, HostileLab  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--build", default="build")
ap.add_argument("--json", action="store_true", help="print one JSON object")
ap.add_argument("--seconds", type=float, default=4, help="each victim run (default 4)")
ap.add_argument("--rounds", type=int, default=1, help="alone/abused pairs per abuse (default 1)")
ap.add_argument("--only", default="", help="comma-separated abuses (default: all)")
args = ap.parse_args()
B = os.path.abspath(args.build)
hl = HostileLab(f"{B}/apps/tandem-fabric/tandem-fabric", f"{B}/apps/tandem-rnic/tandem-rnic",
                f"{B}/apps/tandem-perf/tandem-perf", os.path.join(ROOT, "scripts", "tandem-run"),
                f"{B}/tests/system/hostile", f"noisy{os.getpid()}", seconds=args.seconds)


def log(msg):
    print(msg, file=sys.stderr if args.json else sys.stdout, flush=True)


def main():
    hl.start()
    hl.victim("warm-up")
    rows, deaths, wrong = [], 0, 0
    for case in [c for c in CASES if not args.only or c.name in args.only.split(",")]:
        alone, abused, row_deaths, row_wrong, verdicts = [], [], 0, 0, []
        for r in range(args.rounds):
            res = hl.run_case(case)
            if res["alone_gbps"]:
                alone.append(res["alone_gbps"])
            abused.append(res["victim_gbps"] or 0.0)
            row_deaths += len(res["deaths"])
            row_wrong += (not res["alone_ok"] and "mismatch" in res["alone_why"]) + \
                (not res["victim_ok"] and "mismatch" in res["victim_why"])
            verdicts.append(next((ln for ln in res["hostile_lines"] if ln.startswith("verdict")), "no verdict"))
            hl.restart_dead(excuse="a worker death under an abuse is this benchmark's data (worker_deaths)")
        a = statistics.median(alone) if alone else 0.0
        m = statistics.median(abused)
        row = {"abuse": case.name, "what": case.what, "alone_gbps": round(a, 3), "abused_gbps": round(m, 3),
               "ratio": round(m / a, 3) if a else 0.0, "worker_deaths": row_deaths, "victim_bytes_wrong": row_wrong,
               "hostile_verdict": verdicts[-1]}
        rows.append(row)
        deaths += row_deaths
        wrong += row_wrong
        log(f"{case.name:20} alone {a:6.3f} Gb/s  abused {m:6.3f}  ratio {row['ratio']:5.2f}  deaths {row_deaths}  "
            f"bytes wrong {row_wrong}  ({verdicts[-1]})")
    base = statistics.median([r["alone_gbps"] for r in rows if r["alone_gbps"]] or [0.0])
    worst = min(rows, key=lambda r: r["ratio"])
    res = {"bench": "noisy-neighbour", "unit": "ratio", "ours": worst["ratio"], "baseline": round(base, 3),
           "baseline_name": "victim write_bw alone (Gb/s, median)", "ratio": worst["ratio"], "goal": GOAL,
           "worst_abuse": worst["abuse"], "worker_deaths": deaths, "victim_bytes_wrong": wrong,
           "rows_below_goal": [r["abuse"] for r in rows if r["ratio"] < GOAL], "seconds": args.seconds,
           "rounds": args.rounds, "rows": rows}
    if args.json:
        print(json.dumps(res), file=REAL_STDOUT)
    else:
        print(f"\n{'abuse':20}{'alone Gb/s':>11}{'abused':>8}{'ratio':>7}{'deaths':>8}{'wrong':>7}")
        for r in rows:
            print(f"{r['abuse']:20}{r['alone_gbps']:>11.3f}{r['abused_gbps']:>8.3f}{r['ratio']:>7.2f}"
                  f"{r['worker_deaths']:>8}{r['victim_bytes_wrong']:>7}")
        print(f"worst ratio {worst['ratio']:.2f} ({worst['abuse']}), goal >= {GOAL}; worker deaths {deaths}; "
              f"victim bytes wrong {wrong}")
    return 0


REAL_STDOUT = sys.stdout
try:
    # With --json, stdout holds the one JSON object: whatever the lab prints on the way goes to stderr.
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
        code = main()
finally:
    hl.cleanup()
sys.exit(code or (1 if hl.lab.signal_failures else 0))
