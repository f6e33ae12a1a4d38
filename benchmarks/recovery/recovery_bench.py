"""Recovery times of the DPU set-up (tandem-dpu, tandem-fabric, two tandem-rnic
workers in DPU mode, adaptive idle), measured from outside with real processes:

  worker restart: kill -9 worker B, start it again; time from its spawn until
      the agent has replayed B's level-2 table and both ends are ACTIVE with the
      agent's committed version in B's BAR (ours);
  agent restart: kill -9 tandem-dpu, start it again; time from its spawn until
      both RNICs are ACTIVE again (digest reconcile, no replay);
  baseline: worker B started in standalone mode (YAML table), time from spawn
      until its host socket exists (what a restart costs without the agent).
With --app, one verified QP pair first makes the agent install level-2 entries
on both RNICs (punt -> transaction), which the worker restart then replays."""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib"))
from tandem_harness import Lab  # noqa: E402

ap = argparse.ArgumentParser()
for a in ("--dpu", "--ctl", "--fabric", "--rnic"):
    ap.add_argument(a, required=True)
ap.add_argument("--app", help="rnic_host_app: one verified QP pair first, so B's table is not empty")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--json", action="store_true")
args = ap.parse_args()

TAG = f"rec{os.getpid()}"
lab = Lab(tmp_prefix="tandem-recovery-")
D = lab.d
CH = f"{D}/ch"
os.makedirs(CH)
STATES = {0: "down", 1: "await_hello", 2: "sync", 3: "active", 4: "headless"}


def start(argv, name, prefix=None):
    """Appends to D/<name>.log, so a restarted process keeps its predecessor's log."""
    return lab.start(argv, open(lab.path(f"{name}.log"), "a"), prefix)


def ctl(*a):
    r = subprocess.run([args.ctl, "--socket", f"{D}/ctl.sock", *map(str, a), "--json"], capture_output=True, text=True)
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else {})


def bar(n):
    with open(f"{CH}/tandem-{n}.chan", "rb") as f:
        f.seek(4096)
        b = f.read(4096)
    u = lambda i: struct.unpack_from("<Q", b, i * 64)[0]
    return STATES.get(u(0)), u(2), u(5)  # state, instance, committed version


def channel(n):
    rc, j = ctl("rnic", "show", n)
    return j.get("rnic", {}).get("channel", {}) if rc == 0 else {}


def wait(pred, timeout):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.005)
    raise RuntimeError("timed out")


gen = [0]


def agent():
    gen[0] += 1
    pre = f"{TAG}-dpu{gen[0]}"
    p = start([args.dpu, "--db", f"{D}/dpu.sqlite", "--control-socket", f"{D}/ctl.sock", "--channel-dir", CH,
               "--idle", "adaptive", "--heartbeat-timeout-ms", "3000", "--", "--no-pci", "--no-huge", "-m", "64",
               f"--file-prefix={pre}", "-l", "0", "--log-level=lib.eal:error"], "agent", pre)
    return p


def worker(n, sock, dpu=True):
    gen[0] += 1
    pre = f"{TAG}-{n}{gen[0]}"
    extra = ["--dpu-channel", f"{CH}/tandem-{n}.chan", "--dpu-agent-timeout-ms", "3000"] if dpu else []
    if os.path.exists(f"{D}/{n}.rnic"):
        os.unlink(f"{D}/{n}.rnic")
    return start([args.rnic, "--name", n, "--host-socket", f"{D}/{n}.rnic", "--table",
                  f"{D}/{n}.yaml" if dpu else f"{D}/{n}-standalone.yaml", "--idle", "adaptive",
                  "--device-dir", f"{D}/devices"] + extra +
                 ["--", "--no-pci", f"--file-prefix={pre}", "-l", "1", "-m", "128", "--log-level=lib.eal:error",
                  f"--vdev=net_memif0,role=client,socket={D}/{sock}"], n, pre)


def active(n):
    c = channel(n)
    return c.get("state") == "ACTIVE" and bar(n)[0] == "active" and bar(n)[2] == c.get("table_version")


def main():
    vnics = 1  # one vNIC per port: a QP's vNIC is found by punting for each local vNIC (see report)
    # DPU mode: the YAML names only the underlay; the agent pushes the vNICs.
    ya = "underlay: {ip: 10.0.0.1, mac: 02:00:00:00:00:01, gateway_mac: 02:00:00:00:00:fe}\n"
    yb = "underlay: {ip: 10.0.0.2, mac: 02:00:00:00:00:02, gateway_mac: 02:00:00:00:00:fe}\n"
    open(f"{D}/A.yaml", "w").write(ya)
    open(f"{D}/B.yaml", "w").write(yb)
    sb = yb + "vnics:\n" + "".join(
        f"  - {{id: {101 + i}, ip: 192.168.2.{1 + i}, mac: 02:00:00:00:02:{1 + i:02x}, vni: 100}}\n"
        for i in range(vnics)) + "egress:\n" + "".join(
        f"  - {{vnic: {101 + i}, remote_ip: 192.168.1.{1 + j}, underlay_ip: 10.0.0.1, paths: 4}}\n"
        for i in range(vnics) for j in range(vnics)) + "ingress:\n" + "".join(
        f"  - {{vnic: {101 + i}, underlay_src: 10.0.0.1, remote_ip: 192.168.1.1}}\n" for i in range(1))
    open(f"{D}/B-standalone.yaml", "w").write(sb)

    ag = agent()
    wait(lambda: ctl("tenant", "list")[0] == 0, 20)
    ctl("rnic", "add", "A", "--underlay-ip", "10.0.0.1", "--mac", "02:00:00:00:00:01", "--path-count", 4)
    ctl("rnic", "add", "B", "--underlay-ip", "10.0.0.2", "--mac", "02:00:00:00:00:02", "--path-count", 4)
    ctl("tenant", "add", 100, "bench")
    for i in range(vnics):
        ctl("vnic", "add", 1 + i, "--vni", 100, "--rnic", "A", "--ip", f"192.168.1.{1 + i}", "--mac",
            f"02:00:00:00:01:{1 + i:02x}")
        ctl("vnic", "add", 101 + i, "--vni", 100, "--rnic", "B", "--ip", f"192.168.2.{1 + i}", "--mac",
            f"02:00:00:00:02:{1 + i:02x}")
    fpre = f"{TAG}-fab"
    start([args.fabric, "--route", "10.0.0.1=0", "--route", "10.0.0.2=1", "--paths", "4", "--idle", "adaptive",
           "--link-wait-ms", "0", "--", "--no-pci", f"--file-prefix={fpre}", "-l", "0", "-m", "64",
           "--log-level=lib.eal:error", f"--vdev=net_memif0,role=server,socket={D}/h0.sock",
           f"--vdev=net_memif1,role=server,socket={D}/h1.sock"], "fabric", fpre)
    wait(lambda: "tandem-fabric:" in open(f"{D}/fabric.log").read(), 20)
    wa, wb = worker("A", "h0.sock"), worker("B", "h1.sock")
    wait(lambda: active("A") and active("B"), 30)
    if args.app:
        a = start([args.app, "verify", f"{D}/A.rnic", D, "p1", "p2", "2", "192.168.2.1"], "p1")
        b = start([args.app, "verify", f"{D}/B.rnic", D, "p2", "p1", "3", "192.168.1.1"], "p2")
        if a.wait(90) or b.wait(90):
            raise RuntimeError("the warm-up QP pair failed")

    entries_b = ctl("table", "dump", "--level", 2, "--rnic", "B")[1].get("rnics", {}).get("B", {}).get("count")
    worker_ms, agent_ms, base_ms = [], [], []
    for _ in range(args.rounds):
        # worker restart -> replayed and ACTIVE
        wb.kill()
        wb.wait()
        inst = bar("B")[1]
        t0 = time.time()
        wb = worker("B", "h1.sock")
        wait(lambda: bar("B")[1] != inst and active("B"), 30)
        worker_ms.append((time.time() - t0) * 1e3)
        # agent restart -> both reconciled ACTIVE
        ag.kill()
        ag.wait()
        t0 = time.time()
        ag = agent()
        wait(lambda: os.path.exists(f"{D}/ctl.sock") and active("A") and active("B"), 30)
        agent_ms.append((time.time() - t0) * 1e3)
    # baseline: standalone start of the same worker
    wb.kill()
    wb.wait()
    for _ in range(args.rounds):
        t0 = time.time()
        sw = worker("B", "h1.sock", dpu=False)
        wait(lambda: os.path.exists(f"{D}/B.rnic"), 30)
        base_ms.append((time.time() - t0) * 1e3)
        sw.kill()
        sw.wait()
    ours, base, agm = statistics.median(worker_ms), statistics.median(base_ms), statistics.median(agent_ms)
    res = {"bench": "recovery", "unit": "ms", "ours": round(ours, 1), "baseline": round(base, 1),
           "baseline_name": "standalone worker start (YAML table) to host socket",
           "ratio": round(ours / base, 3), "worker_restart_ms": [round(x, 1) for x in worker_ms],
           "agent_restart_to_active_ms": round(agm, 1), "agent_restart_ms": [round(x, 1) for x in agent_ms],
           "baseline_ms": [round(x, 1) for x in base_ms], "rounds": args.rounds,
           }
    res["level2_entries_B"] = entries_b
    if args.json:
        print(json.dumps(res))
    else:
        print(f"{'what':52s} {'median ms':>10s}")
        print(f"{'worker kill -9 -> restart -> replayed, ACTIVE (ours)':52s} {ours:10.1f}")
        print(f"{'agent kill -9 -> restart -> both RNICs ACTIVE':52s} {agm:10.1f}")
        print(f"{'standalone worker start (baseline)':52s} {base:10.1f}")
        print(f"ratio ours/baseline {ours / base:.2f} ({args.rounds} rounds, B's level-2 table: {entries_b} entries)")


try:
    main()
finally:
    lab.cleanup()
