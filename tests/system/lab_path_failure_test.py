"""System test: a fabric path fails silently under load and traffic keeps
flowing on the others. The lab of ./scripts/demo.sh (tandem-fabric with 4
paths, two tandem-rnic workers spraying round robin with receiver-driven
credits and a 20 ms timeout), tandem-perf write_bw --verify for 9 s; path 1
goes down at 2 s and comes back at 6 s:

  * write_bw completes, every byte verified on both sides;
  * the fabric dropped frames on the dead path (the failure was real);
  * from 1 s after the failure until the heal, the three live paths kept
    delivering: at least 1,000 frames (a healthy second here carries
    5,000-40,000; the stall this guards against carried ~75 per second:
    every new packet waited for a doubling retransmission timeout);
  * after the heal the path carries traffic again (probes brought it back).

usage: lab_path_failure_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_PERF
Everything started is stopped by PID; hugepage files, runtime dirs and
sockets of the file prefixes used are removed, also on failure."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Telemetry, free_port, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            path_ports, run_checked, wait_fabric_started, wait_for, write_lab_tables)

FABRIC, RNIC, PERF = sys.argv[1:4]
TAG = f"pfail{os.getpid()}"
PATHS = ["delay_us=5", "delay_us=10", "delay_us=20", "delay_us=40"]
SECS, FAIL_AT, HEAL_AT = 9, 2.0, 6.0
lab = Lab(tmp_prefix="tandem-path-failure-")
D = lab.d
checks = Checks()
check = checks.check
start, stop, log = lab.start, lab.stop, lab.text


def delivered(tel):
    r = tel.cmd("/tandem/fabric/paths") or {}
    keys = sorted(r, key=int)
    return [r[k].get("packets", 0) for k in keys], [r[k].get("drop_path_down", 0) for k in keys]


def main():
    write_lab_tables(D, lambda me, peer: path_ports(me[1], peer[1], len(PATHS)))
    fab_pre = f"{TAG}-fab"
    flags = []
    for k, spec in enumerate(PATHS):
        flags += ["--path", f"{k}:{spec}"]
    fab = start(lab_fabric_argv(FABRIC, fab_pre, D, flags), "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    ftel = Telemetry(fab_pre, ready="/tandem/fabric/paths")

    workers = []
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        pre = f"{TAG}-{n.lower()}"
        workers.append(start(lab_worker_argv(RNIC, n, pre, D, sock, [
            "--spray", "round_robin", "--cc", "credit", "--mtu", "4096", "--timeout-us", "20000"]), n, pre))
    wait_for(lambda: all(os.path.exists(f"{D}/{n}.rnic") for n in "AB")
             or any(p.poll() is not None for p in workers), "workers did not open their host sockets")
    check(all(p.poll() is None for p in workers), "fabric and both workers run")

    port = str(free_port())
    common = ["write_bw", "-p", port, "--json", "--timeout", "30", "--verify", "-s", "65536", "-q", "2", "-t", "16"]
    srv = start(["nice", "-n", "19", PERF] + common + ["--device", f"{D}/A.rnic", "--gid", "192.168.7.1"],
                "perf-server", separate_stderr=True)
    time.sleep(0.3)
    cli = start(["nice", "-n", "19", PERF] + common + ["-D", str(SECS), "--device", f"{D}/B.rnic",
                                                       "--gid", "192.168.7.2", "127.0.0.1"],
                "perf-client", separate_stderr=True)

    t0 = time.time()
    while time.time() - t0 < FAIL_AT:
        time.sleep(0.05)
    r = ftel.cmd("/tandem/fabric/path_set,1,down")
    check(bool(r) and r.get("applied") == "down", f"path 1 failed at {FAIL_AT:.0f} s ({r})")
    time.sleep(1.0)
    before, _ = delivered(ftel)
    while time.time() - t0 < HEAL_AT:
        time.sleep(0.05)
    during, drops = delivered(ftel)
    r = ftel.cmd("/tandem/fabric/path_set,1,up")
    check(bool(r) and r.get("applied") == "up", f"path 1 healed at {HEAL_AT:.0f} s ({r})")
    live = sum(during[k] - before[k] for k in (0, 2, 3))
    window = HEAL_AT - FAIL_AT - 1.0
    check(drops[1] > 0, f"the fabric dropped {drops[1]} frames on the dead path")
    check(during[1] == before[1], f"nothing was delivered on the dead path ({during[1] - before[1]} frames)")
    check(live >= 1000, f"the live paths delivered {live} frames in the {window:.0f} s of failure "
                        f"after detection ({live / window:.0f}/s): traffic went on without the path")

    results = []
    for p, side in ((cli, "client"), (srv, "server")):
        try:
            code = p.wait(SECS + 60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            code = None
        try:
            results.append((code, json.loads(log(f"perf-{side}"))))
        except ValueError:
            results.append((code, {}))
    (cc, cj), (sc, sj) = results
    if cc != 0 or sc != 0:
        print(log("perf-client", "err") + log("perf-server", "err"))
    check(cc == 0 and sc == 0 and cj.get("verify") == "ok" and sj.get("verify") == "ok" and cj.get("errors") == 0,
          f"write_bw through the failure: exit {cc}/{sc}, verify {cj.get('verify')}/{sj.get('verify')}, "
          f"{cj.get('iterations')} x 64 KiB, {cj.get('bw_avg_gbps', 0):.3f} Gb/s average")
    after, _ = delivered(ftel)
    check(after[1] > during[1], f"after the heal path 1 carried traffic again ({after[1] - during[1]} frames)")
    for p in workers:
        check(stop(p) == 0, "worker stops cleanly on SIGINT")
    stop(fab)


run_checked("lab_path_failure", main, checks, lab, logs=("fabric", "A", "B", "perf-client", "perf-server"))
