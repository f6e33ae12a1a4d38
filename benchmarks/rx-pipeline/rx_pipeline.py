"""rx-pipeline benchmark driver: runs rx_pipeline_bench for 64 B and 1 KiB
WRITEs and prints a table (or one JSON object) with the in-run baseline
(mbuf fill + parse_roce with ICRC check, nothing else, same frames)."""
import argparse
import json
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    if not os.access(a.bench, os.X_OK):
        sys.exit(f"rx-pipeline: need {a.bench} (build it)")
    res = {}
    for p in (64, 1024):
        r = subprocess.run([a.bench, "--seconds", str(a.seconds), "--payload", str(p)], check=True,
                           capture_output=True, text=True)
        res[p] = json.loads(r.stdout.strip().splitlines()[-1])
    r64 = res[64]
    out = {"bench": "rx-pipeline", "unit": "Mpps", "ours": round(r64["mpps"], 3),
           "baseline": round(r64["baseline_mpps"], 3),
           "baseline_name": "mbuf fill + parse_roce (ICRC) only, same 64 B WRITE frames",
           "ratio": round(r64["mpps"] / r64["baseline_mpps"], 3) if r64["baseline_mpps"] else None,
           "ours_1024_mpps": round(res[1024]["mpps"], 3), "baseline_1024_mpps": round(res[1024]["baseline_mpps"], 3),
           "seconds": a.seconds}
    if a.json:
        print(json.dumps(out))
        return
    print(f"{'receive path (one lcore)':<58} {'Mpps':>8} {'ratio':>7}")
    for p in (64, 1024):
        r = res[p]
        print(f"{f'mbuf fill + parse_roce/ICRC only, {p} B WRITEs (baseline)':<58} {r['baseline_mpps']:>8.3f} {1.0:>7.2f}")
        print(f"{f'tandem-rnic RX pipeline, {p} B WRITEs, pairs reordered':<58} {r['mpps']:>8.3f} "
              f"{r['mpps'] / r['baseline_mpps']:>7.2f}")


if __name__ == "__main__":
    main()
