#!/usr/bin/python3
"""Bar charts of a tandem-sim run: one PNG per metric, one bar per policy.

    tandem-sim run reorder-4paths --json > r.json
    rnic/sim/plot.py r.json --out plots/      (or: ... --json | rnic/sim/plot.py - --out plots/)
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

METRICS = [
    ("fct_us_mean", "mean completion time (us)"),
    ("fct_us_p99", "p99 completion time (us)"),
    ("goodput_gbps", "goodput (Gb/s)"),
    ("retx_bytes", "retransmitted bytes"),
    ("drops", "fabric drops (frames)"),
    ("reorder_depth_max", "max reorder depth (PSNs)"),
    ("max_queue_bytes", "deepest switch queue (bytes)"),
    ("timeouts", "retransmission timeouts"),
    ("path_removals", "paths taken out by path health"),
    ("credit_stalls", "times a sender waited for credit"),
    ("rate_cuts", "DCQCN rate cuts"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="JSON from `tandem-sim run ... --json`, or - for stdin")
    ap.add_argument("--out", default=".", help="directory for the PNG files")
    args = ap.parse_args()
    try:
        data = json.load(sys.stdin if args.input == "-" else open(args.input))
        results = data["results"]
        scenario = data["scenario"]
    except (OSError, ValueError, KeyError) as e:
        print(f"plot.py: cannot read tandem-sim JSON: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    policies = [r["policy"] for r in results]
    written = []
    for key, label in METRICS:
        if not all(key in r for r in results):
            continue
        values = [r[key] for r in results]
        if key in ("path_removals", "credit_stalls", "rate_cuts") and not any(values):
            continue  # the scenario's policies do not use this mechanism
        fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(policies) + 2), 3.6))
        colors = ["tab:blue" if r.get("data_ok") else "tab:red" for r in results]
        bars = ax.bar(policies, values, color=colors)
        ax.bar_label(bars, labels=[f"{v:.4g}" for v in values], fontsize=8)
        ax.set_ylabel(label)
        ax.set_title(f"{scenario}: {label}", fontsize=10)
        ax.margins(y=0.15)
        fig.tight_layout()
        path = os.path.join(args.out, f"{scenario}-{key}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
