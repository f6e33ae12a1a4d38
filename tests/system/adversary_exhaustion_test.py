"""System test of a worker's fair shares against an adversarial tenant (issue 16, "QP/MR
exhaustion"): two tandem-rnic workers on the lab fabric, each with two vNICs, tenant A
(192.168.7.x, VNI 100) and tenant B (192.168.8.x, VNI 200). Worker A runs with --max-qps 256
(the default per-vNIC shares follow from it: 192 QPs, CQs and PDs, 384 MRs) and
--limit-per-vnic bytes=64M.

  * tenant A's verbs program (tests/system/exhaustion_app.c, drop-in libibverbs, device
    tandem_A_v1) takes PDs, CQs, QPs, registered bytes and MRs until refused: each refusal is a
    clean errno (EAGAIN for counts, ENOMEM for bytes), 9 more attempts are refused alike,
    freeing one lets one more in; the worker stays up and counts the refusals for A's vNIC
    (/tandem/rnic/limits, host_refused_* in /tandem/rnic/stats);
  * while A holds everything it got, tenant B's application on the same worker (bound to
    192.168.8.1) creates its PD, MR, CQ and QP and verifies WRITE, SEND and READ both ways with
    its peer on worker B; B's vNIC shows no refusal;
  * when A's program exits, the worker gives A's vNIC its share back (used_* to 0), and the
    counts are in --stats-json at SIGINT.
Prints the table the lead copies into benchmarks/RESULTS.md.

usage: adversary_exhaustion_test.py TANDEM_FABRIC TANDEM_RNIC RNIC_HOST_APP EXHAUSTION_APP"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Telemetry, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started)

FABRIC, RNIC, APP, EXHAUST = sys.argv[1:5]
TAG = f"exhaust{os.getpid()}"
lab = Lab(tmp_prefix="tandem-exhaust-")
D = lab.d
checks = Checks()
check, failed = checks.check, checks.failed
ENV = dict(os.environ, TANDEM_DEVICES=f"{D}/devices")
EXPECT = {"pds": "EAGAIN", "cqs": "EAGAIN", "qps": "EAGAIN", "bytes": "ENOMEM", "mrs": "EAGAIN"}


def table(me, peer):
    """Two vNICs per host: 1 = tenant A (192.168.7.x, VNI 100), 2 = tenant B (192.168.8.x, VNI 200)."""
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


def parse_lines(text):
    rows = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in EXPECT and all("=" in p for p in parts[1:]):
            rows[parts[0]] = dict(p.split("=", 1) for p in parts[1:])
    return rows


def main():
    a, b = (1, "10.0.0.1"), (2, "10.0.0.2")
    for me, peer, n in ((a, b, "A"), (b, a, "B")):
        with open(f"{D}/{n}.yaml", "w") as f:
            f.write(table(me, peer))
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D), "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    workers, tel = {}, {}
    for n, sock, flags in (("A", "h0.sock", ["--max-qps", "256", "--limit-per-vnic", "bytes=64M"]),
                           ("B", "h1.sock", [])):
        pre = f"{TAG}-{n.lower()}"
        workers[n] = lab.start(lab_worker_argv(RNIC, n, pre, D, sock, flags + ["--stats-json", f"{D}/{n}.json"],
                                               lcore="1" if n == "A" else "0"), n, pre)
        tel[n] = Telemetry(pre, ready="/tandem/rnic/limits")
    t0 = time.time()
    while not os.path.exists(f"{D}/devices/tandem_A_v1.dev"):
        if time.time() - t0 > 30 or workers["A"].poll() is not None:
            raise RuntimeError("worker A did not register its verbs devices:\n" + lab.text("A")[-2000:])
        time.sleep(0.1)

    # 1. Tenant A exhausts its vNIC's shares on worker A, and holds what it got.
    adv = lab.start([EXHAUST, "exhaust", "tandem_A_v1", D, "adversary"], "adversary", env=ENV)
    t0 = time.time()
    while not os.path.exists(f"{D}/adversary.ready") and adv.poll() is None and time.time() - t0 < 120:
        time.sleep(0.1)
    ready = os.path.exists(f"{D}/adversary.ready")
    rows = parse_lines(lab.text("adversary"))
    check(ready and adv.poll() is None, f"tenant A's program ran every resource to its limit and holds it "
                                        f"(ready {ready}, running {adv.poll() is None}): "
                                        f"{' '.join(lab.text('adversary').split())[-300:]}")
    for res, want in EXPECT.items():
        r = rows.get(res, {})
        check(r.get("errno") == want and r.get("refused") == "10" and r.get("again") == "ok"
              and int(r.get("created", 0)) > 0,
              f"{res}: {r.get('created')} created, then {r.get('refused')} of {r.get('attempted')} attempts refused "
              f"with {r.get('errno')} (want {want}); freeing one let one more in: {r.get('again')}")
    check(workers["A"].poll() is None, "worker A is alive after the exhaustion")
    lim = tel["A"].cmd("/tandem/rnic/limits") or {}
    for res in ("pds", "cqs", "qps", "mrs"):
        check(rows.get(res, {}).get("created") == str(lim.get(f"per_vnic_{res}")),
              f"{res}: tenant A got exactly its vNIC's share ({rows.get(res, {}).get('created')} of "
              f"{lim.get(f'per_vnic_{res}')})")
    got = int(rows.get("bytes", {}).get("created", 0)) * (8 << 20)
    check(0 < got <= lim.get("per_vnic_bytes", 0) < got + (8 << 20),
          f"bytes: tenant A registered {got >> 20} MiB in 8 MiB MRs of its {lim.get('per_vnic_bytes', 0) >> 20} MiB")
    va, vb = lim.get("vnic1", {}), lim.get("vnic2", {})
    check(va.get("vnic") == 1 and all(va.get(f"refused_{r}") == 10 for r in EXPECT),
          f"worker A counts 10 refusals of each resource for tenant A's vNIC 1: "
          f"{ {r: va.get('refused_' + r) for r in EXPECT} }")
    check(va.get("used_qps") == lim.get("per_vnic_qps") == 192,
          f"tenant A holds its vNIC's default share of QPs, 3/4 of --max-qps 256 "
          f"(used {va.get('used_qps')}, share {lim.get('per_vnic_qps')})")
    stats = tel["A"].cmd("/tandem/rnic/stats") or {}
    check(all(stats.get(f"host_refused_{r}") == 10 for r in EXPECT),
          f"/tandem/rnic/stats totals: { {r: stats.get('host_refused_' + r) for r in EXPECT} }")

    # 2. Tenant B, on the same worker, at this moment: its own objects and a verified transfer.
    t1 = time.time()
    pa = lab.start([APP, "verify", f"{D}/A.rnic", D, "b1", "b2", "2", "192.168.8.2", "192.168.8.1"], "b1")
    pb = lab.start([APP, "verify", f"{D}/B.rnic", D, "b2", "b1", "3", "192.168.8.1", "192.168.8.2"], "b2")
    ra, rb = pa.wait(90), pb.wait(90)
    b_secs = time.time() - t1
    check(ra == 0 and rb == 0, f"tenant B on worker A creates its PD, MR, CQ and QP and verifies WRITE/SEND/READ "
                               f"both ways with worker B while A holds its limits (exit {ra}, {rb}, {b_secs:.2f} s): "
                               f"{' '.join(lab.text('b1').split())[-160:]}")
    if ra or rb:
        print(lab.text("b1")[-1500:], lab.text("b2")[-1500:])
    lim = tel["A"].cmd("/tandem/rnic/limits") or {}
    vb = lim.get("vnic2", {})
    check(vb.get("vnic") == 2 and all(vb.get(f"refused_{r}", 0) == 0 for r in EXPECT),
          f"tenant B's vNIC 2 has no refusal: { {r: vb.get('refused_' + r) for r in EXPECT} }")

    # 3. A's program exits: its vNIC's share comes back.
    open(f"{D}/adversary.stop", "w").close()
    code = adv.wait(30)
    check(code == 0, f"tenant A's program exits cleanly (exit {code})")
    freed = False
    t0 = time.time()
    while time.time() - t0 < 10 and not freed:
        va = (tel["A"].cmd("/tandem/rnic/limits") or {}).get("vnic1", {})
        freed = all(va.get(f"used_{r}") == 0 for r in EXPECT)
        time.sleep(0.1)
    check(freed, f"worker A gave tenant A's vNIC its share back: { {r: va.get('used_' + r) for r in EXPECT} }")

    for n in ("A", "B"):
        workers[n].send_signal(signal.SIGINT)
        code = workers[n].wait(30)
        check(code == 0, f"worker {n} stops cleanly on SIGINT (exit {code})")
    try:
        with open(f"{D}/A.json") as f:
            js = json.load(f)["limits"]
    except (OSError, ValueError, KeyError):
        js = {}
    jv = js.get("vnics", {}).get("vnic1", {})
    check(all(jv.get(f"refused_{r}") == 10 for r in EXPECT) and js.get("per_vnic", {}).get("qps") == 192,
          f"--stats-json limits: per vNIC refusals {({r: jv.get('refused_' + r) for r in EXPECT})}, "
          f"per_vnic {js.get('per_vnic')}")
    lab.stop(fab)

    print("\nQP/MR exhaustion (worker A: --max-qps 256 --limit-per-vnic bytes=64M; tenant A = vNIC 1):")
    print("| tenant | resource | attempted | created | refused | errno | freed one -> one more |")
    print("|---|---|---|---|---|---|---|")
    for res in EXPECT:
        r = rows.get(res, {})
        print(f"| A | {res} | {r.get('attempted')} | {r.get('created')} | {r.get('refused')} | {r.get('errno')} "
              f"| {r.get('again')} |")
    print(f"| B (same worker, meanwhile) | PD+MR+CQ+QP, WRITE/SEND/READ verified | 1 each | "
          f"{'1 each' if ra == 0 else 'failed'} | 0 | - | {'verified' if ra == 0 and rb == 0 else 'FAILED'} "
          f"in {b_secs:.2f} s |")
    if failed:
        for n in ("A", "B"):
            print(f"--- {n} log ---\n{lab.text(n)[-3000:]}")


run_checked("adversary_exhaustion", main, checks, lab)
