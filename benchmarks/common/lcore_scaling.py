"""scaling_2_lcores for the pipeline drivers (tx-pipeline, rx-pipeline): the
same bench with --lcores 1 and --lcores 2, back to back, a few pairs."""
import json
import subprocess


def run_json(argv):
    """The bench's last output line, parsed."""
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def scaling_pairs(bench, seconds, extra, pairs):
    """--lcores 1 then --lcores 2, `pairs` times; returns (the fastest 2-lcore
    run's Mpps over the fastest 1-lcore run's, those runs, each pair's ratio)."""
    runs = []
    for _ in range(pairs):
        one, two = (run_json([bench, "--seconds", str(seconds), "--lcores", str(n)] + extra) for n in (1, 2))
        runs.append((two["mpps"] / one["mpps"] if one["mpps"] else 0.0, one, two))
    # Other work on the 2 CPUs only ever slows a run: the fastest run of each
    # is the closest to the undisturbed rate.
    one = max((r[1] for r in runs), key=lambda r: r["mpps"])
    two = max((r[2] for r in runs), key=lambda r: r["mpps"])
    ratio = two["mpps"] / one["mpps"] if one["mpps"] else 0.0
    return ratio, one, two, [round(r[0], 3) for r in runs]
