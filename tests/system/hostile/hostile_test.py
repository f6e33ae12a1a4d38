"""System test: a tenant cannot take down the RNIC it shares (issue 30). The hostile-tenant
suite of tests/system/hostile/ (one C program per abuse, against the verbs API through
scripts/tandem-run) runs against two lab workers while a victim tenant's verified write_bw runs
on the same ports (hostile_lab.py says how). Every case checks:

  * both workers survive it (a crashed one is restarted for the next case);
  * the victim verified every byte and kept >= 0.5 of its goodput alone;
  * the hostile program got what verbs specifies (its own checks, its exit);
  * (srqs_until_refused) the victim still makes an SRQ and a QP on it meanwhile;
  * (silent_connections) the worker closed silent connections (silent_timeouts/evicted);
  * (max_depth_qps) worker A's resident memory grew by no more than its vNIC's queue_bytes share.

Cases in which the victim keeps less than 0.5 on today's code are listed in hostile_lab.XFAIL
with the reason: that shortfall alone is reported ("xfail"), not counted; everything else they
check still fails the test. A case that fails on the victim's side alone (this VM's load moves
single runs by 2x) is measured again, up to twice.

usage: hostile_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_PERF TANDEM_RUN PROGDIR [--seconds S]
       [--only CASE,...] [--keep] [--exhaust-hugepages]
--exhaust-hugepages: hugetlb_punch also takes every free huge page of the machine for 2 s after
the punch (the worker's SIGBUS, if it faults a punched page back in): never on a shared machine."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
from hostile_lab import CASES, XFAIL, HostileLab, judge  # noqa: E402
from tandem_harness import Checks, run_checked  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("fabric")
ap.add_argument("rnic")
ap.add_argument("perf")
ap.add_argument("run")
ap.add_argument("progdir")
ap.add_argument("--seconds", type=float, default=3.0, help="the victim's run per case (default 3)")
ap.add_argument("--only", default="", help="comma-separated cases (default: all)")
ap.add_argument("--keep", action="store_true", help="keep the lab directory and logs")
ap.add_argument("--exhaust-hugepages", action="store_true")
args = ap.parse_args()

hl = HostileLab(args.fabric, args.rnic, args.perf, args.run, args.progdir, f"hostile{os.getpid()}",
                seconds=args.seconds, keep=args.keep, exhaust_hugepages=args.exhaust_hugepages)
checks = Checks()
check = checks.check


def victim_only_failure(res):
    passed, _ = judge(res)
    return (not passed and not res["deaths"] and res["ready"] and res["hostile_exit"] == 0
            and res.get("probe", (0,))[0] == 0)


def main():
    hl.start()
    check("zero-copy" in hl.worker_log("A"), "worker A transmits zero-copy (dereg_zero_copy has mbufs in flight): "
          + next((ln for ln in hl.worker_log("A").splitlines() if "copy" in ln), "no tx mode line"))
    base0, ok0, why0 = hl.victim("victim-warm-up")  # new QPs, cold caches: not a baseline
    check(ok0 and base0, f"the victim alone (warm-up): {base0} Gb/s, verified {ok0} {why0}")
    cases = [c for c in CASES if not args.only or c.name in args.only.split(",")]
    results = []
    for case in cases:
        print(f"--- {case.name}: {case.what}", flush=True)
        res = hl.run_case(case)
        for _ in range(2):
            if case.name in XFAIL or not victim_only_failure(res):
                break
            # Workers alive, the hostile program satisfied, the victim short: this VM's load moves
            # single runs by 2x, so the case runs again (up to twice); every try prints.
            print(f"    victim side only ({'; '.join(judge(res)[1])}): measured again", flush=True)
            hl.restart_dead()
            res = dict(hl.run_case(case), first_try=res)
        for ln in res["hostile_lines"]:
            print("    " + ln)
        if "probe" in res:
            print(f"    victim's SRQ probe: exit {res['probe'][0]}: {res['probe'][1]}")
        if case.memory:
            print(f"    worker A grew by {res['rss_growth'] >> 20} MiB holding them (its vNIC's queue_bytes share: "
                  f"{(res['queue_share'] or 0) >> 20} MiB)")
        if case.silent:
            st = hl.stats("A")
            res["closed"] = st.get("host_silent_timeouts", 0) + st.get("host_silent_evicted", 0)
            print(f"    worker A closed silent connections: timed out {st.get('host_silent_timeouts')}, "
                  f"evicted {st.get('host_silent_evicted')}")
        results.append(res)
        hl.restart_dead()
    print(f"\n{'case':22}{'alone Gb/s':>11}{'abused':>8}{'ratio':>7}{'deaths':>8}  verdict")
    for res in results:
        passed, why = judge(res)
        if res["case"] == "silent_connections":
            if not res.get("closed"):
                passed, why = False, why + ["worker A closed no silent connection"]
        name = res["case"]
        tries, ft = [], res.get("first_try")
        while ft:
            tries.insert(0, ft)
            ft = ft.get("first_try")
        for ft in tries:
            print(f"{name:22}{ft['alone_gbps'] or 0:>11.3f}{ft['victim_gbps'] or 0:>8.3f}{ft['ratio']:>7.2f}"
                  f"{len(ft['deaths']):>8}  earlier try: {'; '.join(judge(ft)[1])}")
        line = (f"{name:22}{res['alone_gbps'] or 0:>11.3f}{res['victim_gbps'] or 0:>8.3f}{res['ratio']:>7.2f}"
                f"{len(res['deaths']):>8}  "
                + ("ok" if passed else "; ".join(why)))
        if name in XFAIL:
            other = [w for w in why if not w.startswith("victim kept")]
            if other:
                check(False, line)  # only the goodput shortfall is expected
            elif passed:
                print(f"xpass {line}\n      (listed in hostile_lab.XFAIL: {XFAIL[name]})")
            else:
                print(f"xfail {line}\n      expected: {XFAIL[name]}")
        else:
            check(passed, line)
        for n, tail in res.get("death_logs", {}).items():
            print(f"--- worker {n} log (died in {name}) ---\n{tail}")


run_checked("hostile", main, checks, hl.lab, logs=("fabric", "A1", "B1"))
