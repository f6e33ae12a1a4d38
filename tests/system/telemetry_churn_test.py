"""System test: telemetry read while QPs come and go. Three telemetry clients poll
/tandem/rnic/qps and /tandem/rnic/stats of both workers in tight loops while tandem-perf pairs
with 128 QPs start, run and end, every third pair killed mid-run (SIGKILL: the worker frees the
dead application's QPs). The telemetry callbacks used to read QP objects the worker lcore freed
(SIGSEGV within 5-10 rounds); they now read snapshots the lcore publishes on request.

  * both workers are still running after every round, and the pollers got answers throughout;
  * a last write_bw --verify through the same workers verifies on both sides;
  * the workers stop cleanly on SIGINT with no QP left.

usage: telemetry_churn_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_PERF [ROUNDS]
Everything started is stopped by PID; hugepage files, runtime dirs and sockets are removed."""
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Telemetry, free_port, lab_fabric_argv, lab_perf_pair,  # noqa: E402
                            lab_worker_argv, run_checked, wait_fabric_started, write_lab_tables)

FABRIC, RNIC, PERF = sys.argv[1:4]
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 9
TAG = f"telchurn{os.getpid()}"
lab = Lab(tmp_prefix="tandem-telchurn-")
D = lab.d
checks = Checks()
check, failed = checks.check, checks.failed


class Poller(threading.Thread):
    """One telemetry client asking `cmds` in turn, as fast as answers come, until stopped."""

    def __init__(self, prefix, cmds):
        super().__init__(daemon=True)
        self.tel = Telemetry(prefix, ready="/tandem/rnic/stats")
        self.cmds, self.answers, self.max_qps, self.error = cmds, 0, 0, None
        self.halt = threading.Event()

    def run(self):
        try:
            while not self.halt.is_set():
                for c in self.cmds:
                    r = self.tel.cmd(c)
                    if r is not None:
                        self.answers += 1
                        if c.endswith("/stats"):
                            self.max_qps = max(self.max_qps, r.get("live_qps", 0))
        except (OSError, ValueError) as e:  # a worker that crashed closes the socket
            self.error = repr(e)


def main():
    write_lab_tables(D)
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D), "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    workers, prefixes = {}, {}
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        prefixes[n] = f"{TAG}-{n.lower()}"
        workers[n] = lab.start(lab_worker_argv(RNIC, n, prefixes[n], D, sock, [
            "--mtu", "1024", "--timeout-us", "20000", "--stats-json", f"{D}/{n}.json"]), n, prefixes[n])
    t0 = time.time()
    while not all(os.path.exists(f"{D}/{n}.rnic") for n in workers):
        if time.time() - t0 > 30 or any(w.poll() is not None for w in workers.values()):
            raise RuntimeError("workers did not open their host sockets")
        time.sleep(0.1)
    # /qps from the start and from the middle (pages of 16 QPs), and /stats.
    both = ["/tandem/rnic/qps", "/tandem/rnic/qps,0x20", "/tandem/rnic/stats"]
    pollers = [Poller(prefixes["A"], both), Poller(prefixes["A"], both[::-1]), Poller(prefixes["B"], both)]
    for p in pollers:
        p.start()

    alive_rounds = 0
    for i in range(ROUNDS):
        port = free_port()
        common = ["write_bw", "-p", str(port), "--json", "--timeout", "20", "-s", "4096"]
        srv = lab.start([PERF] + common + ["--device", f"{D}/A.rnic", "--gid", "192.168.7.1"], f"r{i}-server",
                        separate_stderr=True)
        cli = lab.start([PERF] + common + ["-q", "128", "-t", "4", "-D", "1.5", "--device", f"{D}/B.rnic",
                                           "--gid", "192.168.7.2", "127.0.0.1"], f"r{i}-client", separate_stderr=True)
        if i % 3 == 2:
            time.sleep(1.0)
            cli.send_signal(signal.SIGKILL)
            srv.send_signal(signal.SIGKILL)
        for p in (cli, srv):
            try:
                p.wait(40)
            except Exception:  # noqa: BLE001 - a hung application is killed, the check below decides
                p.kill()
                p.wait()
        if all(w.poll() is None for w in workers.values()):
            alive_rounds += 1
        else:
            break
    check(alive_rounds == ROUNDS, f"both workers survived {alive_rounds} of {ROUNDS} rounds of 128-QP "
                                  f"applications (every third killed) under telemetry polling")
    for p in pollers:
        p.halt.set()
    for p in pollers:
        p.join(10)
    check(all(p.error is None and p.answers > 20 for p in pollers),
          "every poller kept getting answers: " + ", ".join(
              f"{p.answers} answers, up to {p.max_qps} QPs live, error {p.error}" for p in pollers))
    check(max(p.max_qps for p in pollers) >= 128, "the pollers saw the 128-QP applications' QPs live")
    # A page of /qps: at most 16 QPs, in host-QPN order, from the QPN asked for.
    tel = Telemetry(prefixes["A"], ready="/tandem/rnic/stats")
    page = tel.cmd("/tandem/rnic/qps,0x10")
    check(page is not None and tel.cmd("/tandem/rnic/qps,zz") is None, "/qps takes a first QPN and refuses garbage")

    if alive_rounds == ROUNDS:
        cc, cj, sc, sj = lab_perf_pair(lab, PERF, D, "last", "write_bw",
                                       ["-s", "65536", "-n", "100", "-q", "2", "-t", "8", "--verify"])
        check(cc == 0 and sc == 0 and cj.get("verify") == "ok" and sj.get("verify") == "ok",
              f"the last write_bw --verify after the churn: exit {cc}/{sc}, verify {cj.get('verify')}/{sj.get('verify')}")
    codes = {n: lab.stop(w) for n, w in workers.items()}
    check(all(c == 0 for c in codes.values()), f"workers stop cleanly on SIGINT (exit codes {codes})")
    lab.stop(fab)
    for n in workers:
        try:
            with open(f"{D}/{n}.json") as f:
                j = json.load(f)
            check(j.get("live_qps") == 0, f"worker {n}: no QP left ({j['worker']['qps_created']} created, "
                                          f"{j['worker']['qps_app_died']} freed after their application died)")
        except (OSError, ValueError, KeyError) as e:
            check(False, f"worker {n} --stats-json readable: {e}")
    if failed:
        for n in ("A", "B"):
            print(f"--- {n} log (tail) ---\n{lab.text(n)[-3000:]}")


run_checked("telemetry_churn", main, checks, lab)
