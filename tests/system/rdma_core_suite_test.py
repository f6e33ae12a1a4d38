"""rdma-core's own Python test suite on a Tandem device: the tests/ folder of linux-rdma/rdma-core
at v44.0 (what Debian 12 ships; kept outside the repository, at ../shared/rdma-core-tests beside it
or $TANDEM_RDMA_CORE_TESTS), run with Debian's python3-pyverbs through scripts/tandem-run against
one tandem-rnic worker whose table routes its vNIC to itself (the suite connects QPs of one device,
as on a NIC that loops back), module by module, each with a time limit.

Judged: no test fails or errors, no module hangs (its time limit is a failure), at least
MIN_PASSES tests pass (what Tandem passed when this was written; the goal is rxe's 86 of the same
suite), and every skip gives a reason KNOWN_SKIPS lists (rnic/verbs/README.md, "rdma-core's test
suite", sums them up). A test that fails is run once more on its own: passing then, it counts as
passed and is reported as flaky (seen on a loaded machine: a UD message or a zero-length WRITE's
completion not arriving within pyverbs' 10 s poll limit); failing twice fails the run.

Skipped with one clear line (exit 77) when the suite's folder or pyverbs is absent.

usage: rdma_core_suite_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_RUN [--json] [--module NAME ...]
(NAME may be a module or one test, e.g. test_mr.MRTest.test_mr_rereg_pd; TANDEM_KEEP_LOGS=1 keeps
the run directory with the worker's log and says where.)"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            wait_fabric_started)

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.environ.get("TANDEM_RDMA_CORE_TESTS",
                       os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "rdma-core-tests")))
PYTHON = "/usr/bin/python3"  # Debian's, where python3-pyverbs lives
MIN_PASSES = 89  # measured with this release; rxe in a guest passes 86 (the goal)
MODULE_TIMEOUT_S = 240
RETRY_TIMEOUT_S = 60

# Every module of the suite that does not need a vendor's device (mlx5, EFA) or a GPU: those
# skip themselves on any other device and are not run here (README: "rdma-core's test suite").
MODULES = ["test_addr", "test_atomic", "test_cq", "test_cq_events", "test_cqex", "test_device",
           "test_flow", "test_fork", "test_mr", "test_odp", "test_parent_domain", "test_pd", "test_qp",
           "test_qpex", "test_rdmacm", "test_relaxed_ordering", "test_rss_traffic", "test_shared_pd",
           "test_tag_matching"]

# Why a test may skip on Tandem (the reason unittest prints, matched as a prefix): anything else
# skipping is reported as unexplained.
KNOWN_SKIPS = {
    "ODP is not supported": "on-demand paging needs page faults the kernel takes for the NIC",
    "Device memory is not supported": "device memory is a NIC's on-chip memory (mlx5)",
    "Allocating dmabuf is not supported": "dma-buf MRs export GPU memory (a GPU driver)",
    "Create QP type 8 is not supported": "XRC QPs are not built",
    "Create XRCD is not supported": "XRC domains are not built",
    "Create Raw Packet QP": "raw Ethernet QPs would give a tenant the port itself",
    "To Create RAW QP": "raw Ethernet QPs would give a tenant the port itself",
    "Create UC QP": "UC QPs are not built",
    "Reg MR with MW access is not supported": "memory windows are not built",
    "Create memory window of type 3": "no such memory window type (the test's bad flow)",
    "Create custom mr with additional access flags": "memory windows are not built (MW_BIND access)",
    "Extended QP is not supported": "an extended QP with ops Tandem does not execute",
    "Create Extended CQ is not supported": "an extended CQ with fields Tandem does not report",
    "Extended CQ is not supported": "an extended CQ with fields Tandem does not report",
    "All gid indices populated": "one GID per vNIC: no unused index to query",
    "Can not run the test over non MLX5 device": "mlx5 vendor test",
    "Could not open mlx5 context": "mlx5 vendor test",
    "Can not run the test over non EFA device": "EFA vendor test",
    "cuda-python": "GPU test",
    "PCI device must be passed": "VFIO test (a PCI function)",
    "Query device real time is not supported": "the worker publishes no TSC clock (non-x86)",
    "Multicast is not supported": "UD multicast is not built (ibv_attach_mcast, rdma_join_multicast)",
    "Importing a device is not supported": "kernel-only: a context shared through the uverbs command fd",
    "Create UD QP": "UD QP variant not built",
    "Flow": "steering flows are raw Ethernet (not offered to tenants)",
    "RSS": "RSS is raw Ethernet (not offered to tenants)",
    "Tag matching": "tag matching is an mlx5 offload",
}

# Tests known to fail on Tandem, with why: reported on their own line, never counted as passed,
# and a known failure that passes is reported so the list stays true.
KNOWN_FAILURES = {}

# Modules that look up the device's address through its netdev (base.py _get_ip_mac): run with
# a tap per device in a private network namespace (TANDEM_NETDEV=1, apps/tandem-sysfs --netdev).
NETDEV_MODULES = {"test_rdmacm"}

RESULT = re.compile(r" \.\.\. (ok|FAIL|ERROR|skipped (.*)|expected failure|unexpected success)$")
TEST_ID = re.compile(r"^(\w+) \((tests\.[\w.]+)\)")


def parse(out):
    """{test id: (verdict, skip reason)} from unittest -v output (a docstring puts the verdict on
    the next line)."""
    results, current = {}, None
    for line in out.splitlines():
        m = TEST_ID.match(line)
        if m:
            current = m.group(2)
        r = RESULT.search(line)
        if r and current:
            verdict = r.group(1).split()[0]
            reason = r.group(2).strip("'\"") if r.group(2) else ""
            results[current] = (verdict, reason)
            current = None
    return results


def known(reason):
    return next((why for k, why in KNOWN_SKIPS.items() if reason.startswith(k) or k in reason), None)


def table_yaml():
    """One host whose vNIC routes to itself (through the fabric, back to its own port)."""
    return """underlay:
  ip: 10.0.0.1
  mac: 02:00:00:00:00:01
  gateway_mac: 02:00:00:00:00:fe
vnics:
  - {id: 1, ip: 192.168.7.1, mac: 02:00:00:00:01:01, vni: 100}
egress:
  - {vnic: 1, remote_ip: 192.168.7.1, underlay_ip: 10.0.0.1, paths: 4}
ingress:
  - {vnic: 1, underlay_src: 10.0.0.1, remote_ip: 192.168.7.1}
"""


def main():
    argv = [a for a in sys.argv[1:] if not a.startswith("--")]
    want_json = "--json" in sys.argv
    only = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "--module" and i + 1 < len(sys.argv)]
    argv = [a for a in argv if a not in only]
    FABRIC, RNIC, RUN = argv[:3]
    if not os.path.isfile(os.path.join(SUITE, "run_tests.py")):
        print(f"SKIP rdma_core_suite: rdma-core's tests/ not found at {SUITE} (set TANDEM_RDMA_CORE_TESTS)")
        sys.exit(77)
    if subprocess.run([PYTHON, "-c", "import pyverbs"], capture_output=True).returncode != 0:
        print("SKIP rdma_core_suite: Debian's python3-pyverbs is not installed (scripts/setup.sh)")
        sys.exit(77)

    tag = f"rdmacoresuite{os.getpid()}"
    lab = Lab(tmp_prefix="tandem-rdmacore-", keep=os.environ.get("TANDEM_KEEP_LOGS") == "1")
    d = lab.d
    checks = Checks()
    summary = {"modules": {}, "passed": 0, "failed": [], "flaky": [], "hung": [], "skipped": {},
               "unexplained_skips": [], "known_failures": [], "known_failures_passing": []}
    try:
        with open(f"{d}/A.yaml", "w") as f:
            f.write(table_yaml())
        fab = lab.start(lab_fabric_argv(FABRIC, f"{tag}-fab", d), "fabric", f"{tag}-fab")
        wait_fabric_started(lab, fab)
        worker = lab.start(lab_worker_argv(RNIC, "A", f"{tag}-a", d, "h0.sock", ["--mtu", "1024"]), "A",
                           f"{tag}-a")
        t0 = time.time()
        while not os.path.exists(f"{d}/devices/tandem_A_v1.dev"):
            if time.time() - t0 > 30 or worker.poll() is not None:
                raise RuntimeError("the worker did not register its verbs device")
            time.sleep(0.1)
        env = dict(os.environ, TANDEM_DEVICES=f"{d}/devices")

        def passes_alone(test):
            """Runs one failed test (tests.MODULE.CLASS.NAME) again on its own."""
            try:
                r = subprocess.run([RUN, PYTHON, os.path.join(SUITE, "run_tests.py"), "--dev", "tandem_A_v1",
                                    "--gid", "0", "-v", test.removeprefix("tests.")],
                                   env=dict(env, TANDEM_NETDEV="1") if test.split(".")[1] in NETDEV_MODULES else env,
                                   capture_output=True, text=True, timeout=RETRY_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return False
            return parse(r.stdout + r.stderr).get(test, ("",))[0] == "ok"

        for mod in only or MODULES:
            t = time.time()
            menv = dict(env, TANDEM_NETDEV="1") if mod.split(".")[0] in NETDEV_MODULES else env
            try:
                r = subprocess.run([RUN, PYTHON, os.path.join(SUITE, "run_tests.py"), "--dev", "tandem_A_v1",
                                    "--gid", "0", "-v", mod], env=menv, capture_output=True, text=True,
                                   timeout=MODULE_TIMEOUT_S)
                out, hung = r.stdout + r.stderr, False
            except subprocess.TimeoutExpired as e:
                out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
                hung = True
            res = parse(out)
            counts = {"ok": 0, "FAIL": 0, "ERROR": 0, "skipped": 0}
            for test, (verdict, reason) in sorted(res.items()):
                if test in KNOWN_FAILURES:
                    if verdict == "ok":
                        summary["known_failures_passing"].append(test)
                    elif verdict != "skipped":
                        summary["known_failures"].append(test)
                        print(f"{test}: known failure: {KNOWN_FAILURES[test]}", flush=True)
                        continue
                if verdict == "ok":
                    counts["ok"] += 1
                elif verdict == "skipped":
                    counts["skipped"] += 1
                    summary["skipped"].setdefault(reason, []).append(test)
                    if known(reason) is None:
                        summary["unexplained_skips"].append(f"{test}: {reason}")
                elif not hung and passes_alone(test):
                    counts["ok"] += 1
                    summary["flaky"].append(test)
                    print(f"{test}: failed in its module, passed on its own (flaky)", flush=True)
                else:
                    counts["FAIL" if verdict in ("FAIL", "unexpected") else "ERROR"] += 1
                    summary["failed"].append(test)
            if hung:
                summary["hung"].append(mod)
            if not res and not hung and "Ran 0 tests" not in out:
                summary["failed"].append(f"{mod} (no results: {out.strip()[-300:]})")
            summary["passed"] += counts["ok"]
            summary["modules"][mod] = dict(counts, seconds=round(time.time() - t, 1), hung=hung)
            print(f"{mod:24s} ok {counts['ok']:3d}  fail {counts['FAIL']:2d}  error {counts['ERROR']:2d}  "
                  f"skipped {counts['skipped']:3d}  {time.time() - t:5.1f} s{'  HUNG' if hung else ''}", flush=True)
            if counts["FAIL"] or counts["ERROR"] or hung:  # known failures are not counted there
                print(out[-4000:])
        check = checks.check
        check(not summary["failed"], f"no test fails or errors: {summary['failed']}")
        check(not summary["hung"], f"no module hangs ({MODULE_TIMEOUT_S} s each): {summary['hung']}")
        if not only:
            check(summary["passed"] >= MIN_PASSES, f"{summary['passed']} tests pass (at least {MIN_PASSES}; rxe passes 86)")
        check(not summary["unexplained_skips"], f"every skip has a listed reason: {summary['unexplained_skips']}")
        check(not summary["known_failures_passing"],
              f"no known failure passes (else take it off KNOWN_FAILURES): {summary['known_failures_passing']}")
        check(worker.poll() is None, "the worker survived the suite")
    except Exception as e:
        checks.check(False, f"set-up: {e}")
    finally:
        lab.cleanup()
    if want_json:
        print(json.dumps(summary, indent=1, sort_keys=True))
    print("rdma_core_suite: " + (f"{len(checks.failed)} check(s) failed" if checks.failed else "all checks passed"))
    sys.exit(1 if checks.failed else 0)


main()
