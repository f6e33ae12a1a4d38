"""The hostile-tenant lab (issue 30), shared by tests/system/hostile/hostile_test.py and
benchmarks/noisy-neighbour: tandem-fabric and two tandem-rnic workers, each port with two
vNICs of two tenants:

  victim  : vNIC 1, 192.168.7.x (VNI 100): tandem-perf write_bw --verify, client on worker B,
            server on worker A, bound to its vNICs;
  hostile : vNIC 2, 192.168.8.x (VNI 200), owned by uid 65534 (--device-owner 2=65534): one
            program of tests/system/hostile/ per abuse, through scripts/tandem-run, using
            devices tandem_A_v2 and tandem_B_v2 (the same two ports as the victim).

A case runs the victim alone for --seconds, then starts its hostile program, waits until the
abuse is under way (DIR/<prog>.ready), runs the victim again, stops the program (DIR/stop) and
looks: did both workers survive, did the victim verify every byte, what fraction of its goodput
alone (the run just before, on the same warm lab: the machine's load drifts too much for one
baseline of the whole run) did it keep, did the hostile program get what verbs specifies (its
exit). A worker that died is restarted for the next case.

The hostile program runs at nice 19: on this 2-core VM, where everything shares two cores, that
stands for a tenant on cores of its own; what the victim loses is then what the abuse costs
through the shared worker, not the scheduler's share of a spinning process."""
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "lib"))
from tandem_harness import (Lab, Telemetry, lab_fabric_argv, lab_perf_pair, lab_worker_argv,  # noqa: E402
                            signal_deaths, wait_fabric_started)

HOSTILE_UID = 65534
GOAL = 0.5  # the victim keeps at least half its goodput alone under every abuse


class Case:
    """One abuse: its program (hostile_<prog>), extra arguments, and how the runner judges it."""

    def __init__(self, name, what, extra=(), silent=False, probe=False, memory=False):
        self.name, self.what, self.extra, self.silent, self.probe = name, what, list(extra), silent, probe
        self.memory = memory  # worker A's resident memory grows by at most the vNIC's queue_bytes share


CASES = [
    Case("dereg_send_rnr", "dereg+free the MR of an 8 MiB SEND retried under RNR (the finding)"),
    Case("dereg_recv", "dereg the MR of a posted receive, churn MRs, then the peer sends (5 rounds)"),
    Case("dereg_read", "dereg+free a 32 MiB READ's source (responder) and sink (requester) mid-READ"),
    Case("dereg_zero_copy", "dereg+munmap the source of 4 x 8 MiB WRITEs just posted (zero-copy TX), 8 rounds",
         extra=["8"]),
    Case("hugetlb_punch", "FALLOC_FL_PUNCH_HOLE + MADV_REMOVE on a registered MAP_HUGETLB buffer under traffic"),
    Case("doorbell_storm", "32 QPs, zero-length WRITEs one post (one doorbell) each, SQs kept full"),
    Case("big_sends", "64 MiB SENDs in a loop, two outstanding"),
    Case("cq_never_polled", "8 QP pairs a round on 16-entry CQs never polled, then flushed to ERR"),
    Case("max_depth_qps", "32K x 32K QPs until refused, held", memory=True),
    Case("srqs_until_refused", "1024-entry SRQs until refused, held; the victim then makes one", probe=True),
    Case("silent_connections", "1,024 connections that never say hello (uid 65534), held", silent=True),
]

# The cases in which the victim keeps less than GOAL of its goodput on today's code, and why.
# Only that shortfall is excused (printed "xfail"): a worker death, a victim byte wrong or a
# hostile program that did not get what verbs specifies still fails the case. One that reaches
# the goal prints "xpass" without failing (one run on this VM proves nothing; the figures are
# the noisy-neighbour benchmark's): take it off when its fix lands. Never weaken a check instead.
XFAIL = {
    "doorbell_storm": "TX turns and packets in flight are now shared per application (0.004-0.31 before), but on a "
                      "quiet machine, where the victim alone runs at ~10 Gb/s, the storm still holds it to 0.29-0.48 "
                      "(0.53-0.65 under load, where the victim alone is slower): the storm's WQE fetches and "
                      "completions, one per packet, still cost the lcore more than its share (issue 30 item 3)",
    "big_sends": "a 64 MiB SEND loop on one QP of the same MTU is the victim's equal competitor, not an abuser: "
                 "with TX turns and the in-flight budget shared per application (Transport::poll, OwnerShare) each "
                 "gets half the port, so on a saturated port the fair ratio is 0.5 by construction and the victim's "
                 "own per-message costs (a WQE and a completion per 64 KiB) put it at 0.32-0.87, mostly 0.44-0.56; a goal of 0.5 on "
                 "this row asks for more than a fair share (issue 30 closing note)",
}


class HostileLab:
    def __init__(self, fabric, rnic, perf, run, progdir, tag, seconds=3.0, keep=False, exhaust_hugepages=False,
                 worker_flags=()):
        self.fabric, self.rnic, self.perf, self.run, self.progdir = fabric, rnic, perf, run, progdir
        self.tag, self.seconds, self.exhaust = tag, seconds, exhaust_hugepages
        self.lab = Lab(tmp_prefix="tandem-hostile-", keep=keep)
        self.d = self.lab.d
        self.worker_flags = list(worker_flags)
        self.workers, self.prefixes, self.starts = {}, {}, {"A": 0, "B": 0}
        self.env = dict(os.environ, TANDEM_DEVICES=f"{self.d}/devices",
                        TANDEM_BUILD=os.environ.get("TANDEM_BUILD", ""))
        if not self.env["TANDEM_BUILD"]:
            del self.env["TANDEM_BUILD"]

    # ---- the lab ------------------------------------------------------------------------
    def table(self, me, peer):
        i, u, pu = me[0], me[1], peer[1]
        return f"""underlay:
  ip: {u}
  mac: 02:00:00:00:00:0{i}
  gateway_mac: 02:00:00:00:00:fe
vnics:
  - {{id: 1, ip: 192.168.7.{i}, mac: 02:00:00:00:01:0{i}, vni: 100}}
  - {{id: 2, ip: 192.168.8.{i}, mac: 02:00:00:00:02:0{i}, vni: 200}}
egress:
  - {{vnic: 1, remote_ip: 192.168.7.{peer[0]}, underlay_ip: {pu}, paths: 4}}
  - {{vnic: 2, remote_ip: 192.168.8.{peer[0]}, underlay_ip: {pu}, paths: 4}}
ingress:
  - {{vnic: 1, underlay_src: {pu}, remote_ip: 192.168.7.{peer[0]}}}
  - {{vnic: 2, underlay_src: {pu}, remote_ip: 192.168.8.{peer[0]}}}
"""

    def start(self):
        a, b = (1, "10.0.0.1"), (2, "10.0.0.2")
        for me, peer, n in ((a, b, "A"), (b, a, "B")):
            with open(f"{self.d}/{n}.yaml", "w") as f:
                f.write(self.table(me, peer))
        os.chmod(self.d, 0o711)  # uid 65534 reaches the sockets by path, lists nothing
        pre = f"{self.tag}-fab"
        fab = self.lab.start(lab_fabric_argv(self.fabric, pre, self.d), "fabric", pre)
        wait_fabric_started(self.lab, fab)
        for n in ("A", "B"):
            self.start_worker(n)

    def start_worker(self, n):
        self.starts[n] += 1
        pre = f"{self.tag}-{n.lower()}{self.starts[n]}"
        self.prefixes[n] = pre
        log = f"{n}{self.starts[n]}"
        sock = "h0.sock" if n == "A" else "h1.sock"
        flags = ["--max-qps", "256", "--device-owner", f"2={HOSTILE_UID}", "--timeout-us", "20000"] + self.worker_flags
        self.workers[n] = self.lab.start(lab_worker_argv(self.rnic, n, pre, self.d, sock, flags), log, pre)
        dev = f"{self.d}/devices/tandem_{n}_v2.dev"
        t0 = time.time()
        # A restarted worker rewrites its records: wait for this one's pid in them.
        while True:
            try:
                with open(dev) as f:
                    if f"pid {self.workers[n].pid}" in f.read():
                        break
            except OSError:
                pass
            if time.time() - t0 > 30 or self.workers[n].poll() is not None:
                raise RuntimeError(f"worker {n} did not register its devices:\n" + self.lab.text(log)[-2000:])
            time.sleep(0.1)

    def worker_log(self, n):
        return self.lab.text(f"{n}{self.starts[n]}")

    def dead_workers(self):
        """{name: 'SIGSEGV' or 'exit N'} of the workers that are gone."""
        out = {}
        for n, p in self.workers.items():
            rc = p.poll()
            if rc is not None:
                try:
                    out[n] = signal.Signals(-rc).name if rc < 0 else f"exit {rc}"
                except ValueError:
                    out[n] = f"signal {-rc}"
        return out

    def telemetry(self, n, cmd):
        try:
            return Telemetry(self.prefixes[n], ready=cmd, timeout=5).cmd(cmd) or {}
        except (OSError, RuntimeError, ValueError):
            return {}

    def stats(self, n):
        return self.telemetry(n, "/tandem/rnic/stats")

    def rss(self, n):
        """Worker n's resident memory, bytes (0 if it is gone)."""
        try:
            with open(f"/proc/{self.workers[n].pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def cleanup(self):
        self.lab.cleanup()

    # ---- the victim ---------------------------------------------------------------------
    def victim(self, name):
        """The victim's verified write_bw for self.seconds: (Gb/s or None, verify ok, why not)."""
        cc, cj, sc, sj = lab_perf_pair(self.lab, self.perf, self.d, name, "write_bw",
                                       ["-D", str(self.seconds), "--verify", "-s", "65536", "-m", "1024"],
                                       timeout=self.seconds + 60)
        ok = cc == 0 and sc == 0 and cj.get("verify") == "ok" and cj.get("server_verify", "ok") == "ok"
        why = "" if ok else (cj.get("error") or sj.get("error") or f"exit {cc}/{sc}, verify {cj.get('verify')}")
        return (cj.get("bw_avg_gbps") if cc == 0 else None), ok, why

    # ---- one case -----------------------------------------------------------------------
    def run_case(self, case):
        # The program's directory (ready and stop files): its own, writable by the uid it may run as.
        hd = os.path.join(self.d, f"case-{case.name}")
        os.makedirs(hd, exist_ok=True)
        os.chmod(hd, 0o777)
        for f in os.listdir(hd):  # a case measured again starts afresh
            os.unlink(os.path.join(hd, f))
        res = {"case": case.name, "what": case.what}
        res["alone_gbps"], res["alone_ok"], res["alone_why"] = self.victim(f"alone-{case.name}")
        prog = os.path.join(self.progdir, f"hostile_{case.name}")
        budget = self.seconds + 30
        if case.silent:
            argv = [prog, f"{self.d}/A.rnic", hd, str(budget)]
            if os.geteuid() == 0:
                argv += ["--as-uid", str(HOSTILE_UID)]
        else:
            argv = [self.run, prog, "tandem_A_v2", "tandem_B_v2", hd, str(budget)] + case.extra
            if case.name == "hugetlb_punch" and self.exhaust:
                argv.append("exhaust")
        log = f"hostile-{case.name}"
        rss0 = self.rss("A")
        p = self.lab.start(["nice", "-n", "19"] + argv, log, env=self.env)
        ready = os.path.join(hd, case.name + ".ready")
        t0 = time.time()
        while not os.path.exists(ready) and p.poll() is None and time.time() - t0 < 90:
            time.sleep(0.05)
        res["ready"] = os.path.exists(ready)
        if case.memory:
            res["rss_growth"] = self.rss("A") - rss0
            res["queue_share"] = (self.telemetry("A", "/tandem/rnic/limits") or {}).get("per_vnic_queue_bytes")
        gbps, ok, why = self.victim(f"victim-{case.name}") if res["ready"] else (None, False, "hostile never ready")
        res.update(victim_gbps=gbps, victim_ok=ok, victim_why=why)
        if case.probe and res["ready"]:
            r = subprocess.run([self.run, prog, "tandem_A_v1", "tandem_B_v1", hd, "0", "probe"], env=self.env,
                               capture_output=True, text=True, timeout=60)
            res["probe"] = (r.returncode, (r.stdout + r.stderr).strip().splitlines()[-2:])
        open(os.path.join(hd, "stop"), "w").close()
        try:
            code = p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            code = None
        out = self.lab.text(log)
        res["hostile_exit"] = code
        res["hostile_lines"] = [ln for ln in out.splitlines() if ln.startswith(("hostile ", "verdict"))]
        res["deaths"] = self.dead_workers()
        for n, how in res["deaths"].items():
            res.setdefault("death_logs", {})[n] = self.worker_log(n)[-1500:]
        return res

    def restart_dead(self, excuse=None):
        """Restarts the workers that died (a fresh file prefix each). In the test a death fails
        the case (judge) and the test (Lab.cleanup's signal check); excuse: why a death is not a
        failure (noisy-neighbour counts deaths as its data)."""
        for n in list(self.dead_workers()):
            if excuse:
                self.lab.expect_death(self.workers[n], excuse)
            self.start_worker(n)

def judge(res):
    """(passed, [why not]) for one case's result, against the victim's goodput alone just before."""
    why = []
    if res["deaths"]:
        why.append("worker(s) died: " + ", ".join(f"{n} {h}" for n, h in res["deaths"].items()))
    if not res["ready"]:
        why.append("the hostile program never got its abuse going")
    if not res["alone_ok"]:
        why.append(f"victim alone not verified: {res['alone_why']}")
    if not res["victim_ok"]:
        why.append(f"victim not verified: {res['victim_why']}")
    alone = res["alone_gbps"]
    ratio = res["victim_gbps"] / alone if res["victim_gbps"] and alone else 0.0
    res["ratio"] = ratio
    if ratio < GOAL:
        why.append(f"victim kept {ratio:.2f} of its goodput alone (goal >= {GOAL})")
    if res["hostile_exit"] != 0:
        verdict = next((ln for ln in res["hostile_lines"] if ln.startswith("verdict")), "no verdict")
        why.append(f"hostile program exit {res['hostile_exit']}: {verdict}")
    if "probe" in res and res["probe"][0] != 0:
        why.append(f"the victim's own SRQ probe failed: {res['probe'][1]}")
    if "rss_growth" in res:
        share = res["queue_share"]
        if not isinstance(share, int) or res["rss_growth"] > share + (64 << 20):
            why.append(f"worker A grew by {res['rss_growth'] >> 20} MiB for the held QPs, over its vNIC's queue_bytes "
                       f"share ({share if not isinstance(share, int) else share >> 20} MiB) + 64 MiB")
    return not why, why
