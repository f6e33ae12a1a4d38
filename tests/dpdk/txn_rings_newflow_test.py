"""A test-sized run of the new-flow set-up path over the real channel rings
(benchmarks/txn-rings --part newflow: a worker process punts misses through
DpuLink, the agent resolves them from level 1 and commits them by transaction,
the worker sees each flow in its own table). It fails loudly if the flows are
not installed: on main before this test, the worker's default punt budget
(1,000 punts/s per vNIC) held a one-vNIC run to a thousand flows a second, so
`scripts/bench.sh new-flow` ran into its 120 s limit and nobody noticed.

usage: txn_rings_newflow_test.py TXN_RINGS_BENCH"""
import json
import os
import signal
import subprocess
import sys
import time

FLOWS = 65536  # ~0.2 s at today's rate; 65 s at one vNIC's default punt budget
LIMIT_S = 40


def main() -> int:
    exe = sys.argv[1]
    cmd = [exe, "--part", "newflow", "--flows", str(FLOWS), "--reps", "1", "--json"]
    t0 = time.monotonic()
    # Its own session: on a timeout the agent and its forked worker go together.
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        for f in (f"/dev/shm/tandem-txnbench-{p.pid}.chan", f"/dev/shm/tandem-txnbench-pp-{p.pid}.chan"):
            if os.path.exists(f):
                os.unlink(f)
        print(f"FAIL: {FLOWS} new flows not set up within {LIMIT_S} s: {stderr.strip()[-400:]}")
        return 1
    wall = time.monotonic() - t0
    sys.stderr.write(stderr)
    if p.returncode != 0:
        print(f"FAIL: txn-rings newflow exited {p.returncode}: {stderr.strip()[-400:]}")
        return 1
    out = json.loads(stdout.strip().splitlines()[-1])
    nf = out["newflow"]
    checks = {
        "every flow installed": nf["installed"] == FLOWS,
        "no punt refused by a budget": nf["punts_over_budget"] == 0,
        "no resolution lost (re-punts < 1%)": nf["repunts"] < FLOWS // 100,
    }  # the agent's shadow against the worker's table: the bench exits non-zero if they differ
    print(f"{FLOWS} new flows in {wall:.1f} s wall: {nf['ours_M_flows_per_s']:.3f} M flows/s over the rings, "
          f"{nf['in_memory_M_flows_per_s']:.3f} in memory; {nf['txns']} txns, {nf['repunts']} re-punts, "
          f"miss->installed p99 {nf['miss_to_install_us']['p99']:.0f} us")
    bad = [k for k, ok in checks.items() if not ok]
    for k in checks:
        print(f"  {'ok  ' if checks[k] else 'FAIL'} {k}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
