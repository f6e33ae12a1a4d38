"""rx-pipeline benchmark driver: runs rx_pipeline_bench for 64 B and 1 KiB
WRITEs and prints a table (or one JSON object) with two baselines measured in
the same run: mbuf fill + parse_roce with ICRC check, nothing else, same frames
(in process); and dpdk-testpmd io forwarding on one net_null port (copy=1, so
the PMD writes every received frame, at the same frame size), the issue's
"the same way as tx-pipeline" baseline."""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib"))
from tandem_harness import Lab, measure_testpmd_io  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    a = ap.parse_args()
    testpmd = shutil.which("dpdk-testpmd")
    if not os.access(a.bench, os.X_OK):
        sys.exit(f"rx-pipeline: need {a.bench} (build it)")
    res = {}
    for p in (64, 1024):
        r = subprocess.run([a.bench, "--seconds", str(a.seconds), "--payload", str(p)], check=True,
                           capture_output=True, text=True)
        res[p] = json.loads(r.stdout.strip().splitlines()[-1])
    pmd = {}
    if testpmd is not None:
        lab = Lab()
        try:
            for p in (64, 1024):
                pmd[p] = measure_testpmd_io(lab, testpmd, res[p]["frame_bytes"], a.seconds, a.warmup,
                                            "rxbench-pmd", copy=True)
        finally:
            lab.cleanup()
    r64 = res[64]
    # The headline baseline is the issue's: dpdk-testpmd io forwarding on the
    # same vdev type. The in-process parse-only baseline is kept alongside: it
    # isolates the transport work from getting and validating the frame.
    out = {"bench": "rx-pipeline", "unit": "Mpps", "ours": round(r64["mpps"], 3),
           "ours_1024_mpps": round(res[1024]["mpps"], 3),
           "parse_only_mpps": round(r64["baseline_mpps"], 3),
           "ratio_vs_parse_only": round(r64["mpps"] / r64["baseline_mpps"], 3) if r64["baseline_mpps"] else None,
           "parse_only_1024_mpps": round(res[1024]["baseline_mpps"], 3), "seconds": a.seconds,
           "ours_ns_per_packet_cpu": r64.get("ns_per_packet_cpu"),
           "parse_only_ns_per_packet_cpu": r64.get("baseline_ns_per_packet_cpu")}
    if pmd:
        out.update({"baseline": round(pmd[64], 3),
                    "baseline_name": f"dpdk-testpmd io fwd, net_null copy=1, {r64['frame_bytes']} B frames",
                    "ratio": round(r64["mpps"] / pmd[64], 3) if pmd[64] else None,
                    "testpmd_io_1024_mpps": round(pmd[1024], 3),
                    "ratio_1024": round(res[1024]["mpps"] / pmd[1024], 3) if pmd[1024] else None})
    else:
        out.update({"baseline": out["parse_only_mpps"], "ratio": out["ratio_vs_parse_only"],
                    "baseline_name": "mbuf fill + parse_roce (ICRC) only (dpdk-testpmd not found)"})
    if a.json:
        print(json.dumps(out))
        return
    print(f"{'receive path (one lcore)':<58} {'Mpps':>8} {'ratio':>7} {'CPU ns/pkt':>11}")
    for p in (64, 1024):
        r = res[p]
        if p in pmd:
            label = f"dpdk-testpmd io fwd, net_null copy=1, {r['frame_bytes']} B frames"
            print(f"{label:<58} {pmd[p]:>8.3f} {r['mpps'] / pmd[p]:>7.2f}  (ratio: ours / this, the issue's)")
        print(f"{f'mbuf fill + parse_roce/ICRC only, {p} B WRITEs':<58} {r['baseline_mpps']:>8.3f} "
              f"{r['mpps'] / r['baseline_mpps']:>7.2f} {r.get('baseline_ns_per_packet_cpu', ''):>11}"
              "  (ratio: ours / this)")
        print(f"{f'tandem-rnic RX pipeline, {p} B WRITEs, pairs reordered':<58} {r['mpps']:>8.3f} {'':>7} "
              f"{r.get('ns_per_packet_cpu', ''):>11}")


if __name__ == "__main__":
    main()
