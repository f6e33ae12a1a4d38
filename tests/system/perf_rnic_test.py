"""System test of tandem-perf through real tandem-rnic workers: the lab fabric
(memif server, 2 ports, 4 paths, one delayed, one lossy, one jittery) and two
RNIC workers (memif clients, adaptive idle, per-packet spraying over 4 paths)
carry tandem-perf's server (on worker A) and client (on worker B), which swap
QP details over TCP on 127.0.0.1 and run every test with --verify --json:

  * write_bw, send_bw, read_bw (2 QPs), write_lat, send_lat, read_lat: exit 0 on both
    sides, verify "ok" on both, the agreed message counts, numbers > 0;
  * write_bw with -D: both sides agree on the message count;
  * a client whose server was killed mid-run exits non-zero with an error.

usage: perf_rnic_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_PERF
Everything started is stopped by PID; hugepage files, runtime dirs and
sockets of the file prefixes used are removed, also on failure."""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, free_port, lab_fabric_argv, lab_perf_pair, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started, write_lab_tables)

FABRIC, RNIC, PERF = sys.argv[1:4]
TAG = f"perf{os.getpid()}"
lab = Lab(tmp_prefix="tandem-perf-lab-")
D = lab.d
checks = Checks()
check, failed = checks.check, checks.failed
start, stop, log = lab.start, lab.stop, lab.text


def perf_pair(name, test, flags, timeout=120):
    return lab_perf_pair(lab, PERF, D, name, test, flags, timeout)


def main():
    write_lab_tables(D)

    fab_pre, a_pre, b_pre = f"{TAG}-fab", f"{TAG}-a", f"{TAG}-b"
    fab = start(lab_fabric_argv(FABRIC, fab_pre, D, [
        "--path", "1:delay_us=20", "--path", "2:loss=0.01", "--path", "3:delay_us=5,jitter_us=5"]), "fabric", fab_pre)
    wait_fabric_started(lab, fab)

    def worker(n, pre, sock):
        return start(lab_worker_argv(RNIC, n, pre, D, sock, [
            "--mtu", "1024", "--stats-json", f"{D}/{n}.json",
            # The default 1 ms RTO (7 retries) runs out when five busy processes share
            # two cores (RETRY_EXC_ERR with MBs in flight): this test checks the tool.
            "--timeout-us", "20000"]), n, pre)

    wa = worker("A", a_pre, "h0.sock")
    wb = worker("B", b_pre, "h1.sock")
    t0 = time.time()
    while not (os.path.exists(f"{D}/A.rnic") and os.path.exists(f"{D}/B.rnic")):
        if time.time() - t0 > 30 or wa.poll() is not None or wb.poll() is not None:
            raise RuntimeError("workers did not open their host sockets")
        time.sleep(0.1)
    check(True, "fabric and both workers run")

    bw_flags = ["-s", "65536", "-n", "300", "-q", "2", "-t", "8", "--verify"]
    for test, flags, n in (("write_bw", bw_flags, 300), ("send_bw", bw_flags, 300), ("read_bw", bw_flags, 300),
                           ("write_lat", ["-s", "64", "-n", "500", "--verify"], 500),
                           ("send_lat", ["-s", "4096", "-n", "300", "--verify"], 300),
                           ("read_lat", ["-s", "3000", "-n", "300", "--verify"], 300)):
        cc, cj, sc, sj = perf_pair(test, test, flags)
        ok = (cc == 0 and sc == 0 and cj.get("verify") == "ok" and sj.get("verify") == "ok"
              and cj.get("iterations") == n and sj.get("iterations") == n and cj.get("errors") == 0)
        if "bw" in test:
            ok = ok and cj.get("bw_avg_gbps", 0) > 0
            nums = f"{cj.get('bw_avg_gbps', 0):.3f} Gb/s avg, {cj.get('msg_rate_mpps', 0):.4f} Mpps"
        else:
            ok = ok and cj.get("t_typical_us", 0) > 0
            nums = f"t_typical {cj.get('t_typical_us', 0):.1f} us, t_99 {cj.get('t_99_us', 0):.1f} us"
        check(ok, f"{test} {' '.join(flags)}: verified on both sides through tandem-rnic "
                  f"(exit {cc}/{sc}, verify {cj.get('verify')}/{sj.get('verify')}; {nums})")

    cc, cj, sc, sj = perf_pair("duration", "write_bw", ["-s", "16384", "-D", "1", "--verify"])
    check(cc == 0 and sc == 0 and cj.get("iterations", 0) > 0 and cj.get("iterations") == sj.get("iterations")
          and sj.get("verify") == "ok",
          f"write_bw -D 1: both sides agree on {cj.get('iterations')} messages, verified")

    # A server killed mid-run: the client notices and fails with an error.
    port = free_port()
    common = ["write_bw", "-p", str(port), "--json", "--timeout", "10", "-s", "65536"]
    srv = start([PERF] + common + ["--device", f"{D}/A.rnic", "--gid", "192.168.7.1"], "kill-server",
                separate_stderr=True)
    cli = start([PERF] + common + ["-D", "60", "--device", f"{D}/B.rnic", "--gid", "192.168.7.2", "127.0.0.1"],
                "kill-client", separate_stderr=True)
    time.sleep(2)
    srv.send_signal(signal.SIGKILL)
    srv.wait()
    try:
        code = cli.wait(40)
    except subprocess.TimeoutExpired:
        cli.kill()
        cli.wait()
        code = None
    err = log("kill-client", "err")
    check(code is not None and code != 0 and "tandem-perf:" in err,
          f"client fails when its server dies mid-run (exit {code}: {err.strip()[:120]})")

    check(stop(wa) == 0 and stop(wb) == 0, "workers stop cleanly on SIGINT")
    stop(fab)
    for n in ("A", "B"):
        try:
            with open(f"{D}/{n}.json") as f:
                j = json.load(f)
            w = j["worker"]
            print(f"     worker {n}: tx {w.get('tx_packets')} rx accepted {w.get('rx_accepted')} "
                  f"retransmits {w.get('tx_retransmits')} live QPs {j.get('live_qps')}")
            check(j.get("live_qps") == 0, f"worker {n} freed every tandem-perf QP")
        except (OSError, ValueError, KeyError) as e:
            check(False, f"worker {n} --stats-json readable: {e}")
    if failed:
        for n in ("fabric", "A", "B"):
            print(f"--- {n} log ---\n{log(n)}")


run_checked("perf_rnic", main, checks, lab)
