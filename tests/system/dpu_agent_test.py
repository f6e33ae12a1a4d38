"""System test of tandem-dpu + tandemctl + two tandem-rnic workers in DPU mode
(--dpu-channel), on the lab fabric:

  * tandemctl configures tenants, RNICs and vNICs; refused requests exit 2 and
    change nothing; state survives an agent restart (SQLite);
  * both workers go HELLO -> SYNC -> ACTIVE; their YAML lists no vNICs: they
    learn them from the agent (vNIC entries, protocol v3) and register each as
    a verbs device (rnic/host/device_registry.h); QPs get their routes
    from the agent (punted miss -> level-2 transaction) and WRITE/SEND/READ
    verify both ways;
  * a vNIC added with tandemctl while the workers are ACTIVE becomes usable (a
    QP on it verifies) and its device appears; `vnic del` takes it out of the
    worker's table, vNIC list and devices, and a QP streaming over it is
    counted, not crashed;
  * a vNIC of another tenant cannot be reached: the punt is denied by isolation
    (counted) and the QP fails;
  * kill -9 the agent under traffic: workers go HEADLESS and keep forwarding,
    the agent restarts from SQLite, both channels reconcile to ACTIVE, the stream
    never saw an error, new QPs work;
  * kill -9 a worker under traffic: it restarts, the agent replays its table, the
    other worker stays ACTIVE throughout, new QPs work.

usage: dpu_agent_test.py TANDEM_DPU TANDEMCTL TANDEM_FABRIC TANDEM_RNIC RNIC_HOST_APP
Everything started is stopped by PID; hugepage files, runtime dirs, sockets and
channel files are removed, also on failure."""
import json
import os
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, Tandemctl, poll_until, stop, telemetry_query  # noqa: E402

DPU, CTL, FABRIC, RNIC, APP = sys.argv[1:6]
TAG = f"dpu{os.getpid()}"
lab = Lab(tmp_prefix="tandem-dpu-test-")
D = lab.d
CH = f"{D}/ch"
ctl = Tandemctl(CTL, f"{D}/ctl.sock")
channel, l2_entries, l2_vnics = ctl.channel, ctl.l2_entries, ctl.l2_vnics
os.makedirs(CH)
prefixes = lab.prefixes
checks = Checks()
check, failed = checks.check, checks.failed
BAR_STATES = {0: "down", 1: "await_hello", 2: "sync", 3: "active", 4: "headless"}


def start(argv, log, prefix=None):
    """Appends to D/<log>.log, so a restarted process keeps its predecessor's log."""
    return lab.start(argv, open(lab.path(f"{log}.log"), "a"), prefix)


def log(name):
    return lab.text(name)




def bar(rnic):
    """(state, tx_packets, heartbeat, rnic_instance) straight from the channel file's BAR page."""
    with open(f"{CH}/tandem-{rnic}.chan", "rb") as f:
        f.seek(4096)
        b = f.read(4096)
    u = lambda line: struct.unpack_from("<Q", b, line * 64)[0]
    return BAR_STATES.get(u(0), "?"), u(8 + 1), u(1), u(2)






def worker_vnics(n):
    """The worker's own view: /tandem/rnic/table (vNIC source, list, withdrawal counters)."""
    return telemetry_query(PREFIX[n], "/tandem/rnic/table")


def agent():
    pre = f"{TAG}-dpu{len(prefixes)}"
    p = start([DPU, "--db", f"{D}/dpu.sqlite", "--control-socket", f"{D}/ctl.sock", "--channel-dir", CH,
               "--idle", "adaptive", "--heartbeat-timeout-ms", "3000", "--", "--no-pci", "--no-huge", "-m", "64", f"--file-prefix={pre}", "-l", "0",
               "--log-level=lib.eal:error"], "agent", pre)
    if not poll_until(lambda: ctl("tenant", "list")[0] == 0 or p.poll() is not None, 20, "agent"):
        raise RuntimeError("agent did not start:\n" + log("agent"))
    if p.poll() is not None:
        raise RuntimeError("agent exited:\n" + log("agent"))
    return p


# DPU mode: the YAML only gives the port's underlay identity; the vNICs come from the agent.
YAML = {
    "A": "underlay: {ip: 10.0.0.1, mac: 02:00:00:00:00:01, gateway_mac: 02:00:00:00:00:fe}\n",
    "B": "underlay: {ip: 10.0.0.2, mac: 02:00:00:00:00:02, gateway_mac: 02:00:00:00:00:fe}\n",
}
PREFIX = {}  # worker name -> its current EAL file prefix (telemetry)


def worker(n, sock, gen=0):
    pre = f"{TAG}-{n}{gen}"
    PREFIX[n] = pre
    return start([RNIC, "--name", n, "--host-socket", f"{D}/{n}.rnic", "--table", f"{D}/{n}.yaml",
                  "--stats-json", f"{D}/{n}{gen}.stats.json", "--device-dir", f"{D}/devices",
                  "--dpu-channel", f"{CH}/tandem-{n}.chan", "--dpu-agent-timeout-ms", "3000",
                  "--table-capacity", "8192", "--idle", "adaptive", "--mtu", "1024", "--", "--no-pci", f"--file-prefix={pre}", "-l", "1",
                  "-m", "128", "--log-level=lib.eal:error", f"--vdev=net_memif0,role=client,socket={D}/{sock}"],
                 n, pre)


def pair(a_name, b_name, seed, a_peer_ip="192.168.7.2", a_vnic=None):
    """A verify pair: a_name on A (bound to vNIC a_vnic if given) <-> b_name on B."""
    a = start([APP, "verify", f"{D}/A.rnic", D, a_name, b_name, str(seed), a_peer_ip] + ([a_vnic] if a_vnic else []),
              a_name)
    b = start([APP, "verify", f"{D}/B.rnic", D, b_name, a_name, str(seed + 1), a_vnic or "192.168.7.1"], b_name)
    return a, b








def both_active():
    return all(channel(n).get("state") == "ACTIVE" and bar(n)[0] == "active" for n in ("A", "B"))


def main():
    for n, y in YAML.items():
        with open(f"{D}/{n}.yaml", "w") as f:
            f.write(y)
    ag = agent()

    # 1. Configuration, and refusals that change nothing.
    steps = [("rnic", "add", "A", "--underlay-ip", "10.0.0.1", "--mac", "02:00:00:00:00:01",
              "--path-base-port", 0xC000, "--path-count", 4),
             ("rnic", "add", "B", "--underlay-ip", "10.0.0.2", "--mac", "02:00:00:00:00:02",
              "--path-base-port", 0xC000, "--path-count", 4),
             ("tenant", "add", 100, "red"), ("tenant", "add", 300, "green"),
             ("vnic", "add", 1, "--vni", 100, "--rnic", "A", "--ip", "192.168.7.1", "--mac", "02:00:00:00:01:01"),
             ("vnic", "add", 2, "--vni", 100, "--rnic", "B", "--ip", "192.168.7.2", "--mac", "02:00:00:00:01:02"),
             ("vnic", "add", 3, "--vni", 300, "--rnic", "B", "--ip", "192.168.9.3", "--mac", "02:00:00:00:01:03"),
             ("vnic", "add", 4, "--vni", 100, "--rnic", "A", "--ip", "192.168.7.4", "--mac", "02:00:00:00:01:04")]
    results = [ctl(*s)[0] for s in steps]
    check(results == [0] * len(steps), f"tandemctl adds 2 RNICs, 2 tenants, 4 vNICs (exit codes {results})")
    before = ctl("table", "dump", "--level", 1)[1]
    bad = [ctl("vnic", "add", 9, "--vni", 999, "--rnic", "A", "--ip", "192.168.7.9", "--mac", "02:00:00:00:01:09"),
           ctl("vnic", "add", 9, "--vni", 100, "--rnic", "A", "--ip", "192.168.7.300", "--mac", "02:00:00:00:01:09"),
           ctl("tenant", "add", 100, "again"), ctl("tenant", "del", 100),
           ctl("mapping", "del", "--vni", 100, "--overlay-ip", "10.9.9.9")]
    check(all(rc == 2 and j.get("ok") is False and j.get("error") for rc, j in bad),
          "bad requests (unknown tenant, bad IP, duplicate, tenant in use, unknown mapping) exit 2 with a reason: " +
          "; ".join(j.get("error", "?") for _, j in bad))
    check(ctl("table", "dump", "--level", 1)[1] == before, "refused requests changed nothing")

    # 2. Workers in DPU mode reach ACTIVE and get routes from the agent.
    fab_pre = f"{TAG}-fab"
    fab = start([FABRIC, "--route", "10.0.0.1=0", "--route", "10.0.0.2=1", "--paths", "4", "--idle", "adaptive",
                 "--link-wait-ms", "0", "--", "--no-pci", f"--file-prefix={fab_pre}", "-l", "0", "-m", "64",
                 "--log-level=lib.eal:error", f"--vdev=net_memif0,role=server,socket={D}/h0.sock",
                 f"--vdev=net_memif1,role=server,socket={D}/h1.sock"], "fabric", fab_pre)
    if not poll_until(lambda: "tandem-fabric:" in log("fabric") or fab.poll() is not None, 20, "fabric"):
        raise RuntimeError("fabric did not start:\n" + log("fabric"))
    wa, wb = worker("A", "h0.sock"), worker("B", "h1.sock")
    check(poll_until(both_active, 30, "active"), "both workers reach ACTIVE with the agent (HELLO -> SYNC -> ACTIVE)")
    caps = {n: channel(n).get("table_capacity") for n in ("A", "B")}
    check(caps == {"A": 8192, "B": 8192}, f"the agent knows each worker's --table-capacity from HELLO ({caps})")
    want = {"A": {"1": "192.168.7.1", "4": "192.168.7.4"}, "B": {"2": "192.168.7.2", "3": "192.168.9.3"}}
    learned = poll_until(lambda: all(worker_vnics(n).get("vnic_list") == want[n] for n in "AB"), 20, "vnics")
    tel = {n: worker_vnics(n) for n in "AB"}
    check(learned and all(tel[n].get("vnic_source") == "agent" for n in "AB") and
          l2_vnics("A") == [1, 4] and l2_vnics("B") == [2, 3] and
          all(channel(n).get("protocol_version") == 4 for n in "AB"),
          f"workers whose YAML lists no vNICs learn them from the agent (vNIC entries, protocol v3 on; v4 here): "
          f"A {tel['A'].get('vnic_list')}, B {tel['B'].get('vnic_list')}; table dump A {l2_vnics('A')}, B {l2_vnics('B')}")
    want_devs = ["tandem_A_v1.dev", "tandem_A_v4.dev", "tandem_B_v2.dev", "tandem_B_v3.dev"]
    devs = lambda: sorted(f for f in os.listdir(f"{D}/devices") if f.endswith(".dev")) if os.path.isdir(f"{D}/devices") else []
    check(poll_until(lambda: devs() == want_devs, 10, "devices"),
          f"each worker registers the agent's vNICs as verbs devices ({devs()})")
    # Two vNICs of tenant 100 on A (.1 and .4) talk to the same vNIC on B at
    # once: B's ingress key (A's underlay, VNI 100) cannot name both senders
    # (the agent withdraws it, or, when the two resolutions were in flight
    # together, the later one's stands); each of B's QPs is checked against
    # its own route instead, so both pairs work either way.
    a, b = pair("app1", "app2", 2, a_vnic="192.168.7.1")
    a2, b2 = pair("app1b", "app2b", 16, a_vnic="192.168.7.4")
    ra, rb, ra2, rb2 = a.wait(90), b.wait(90), a2.wait(90), b2.wait(90)
    check(ra == 0 and rb == 0, f"WRITE/SEND/READ verified both ways over agent-installed routes (exit {ra}, {rb})")
    l2b = ctl("table", "dump", "--level", 2)[1].get("rnics", {}).get("B", {}).get("entries", [])
    shared = [e for e in l2b if e.get("kind") == "ingress_vni" and e.get("underlay_src_ip") == "10.0.0.1"]
    check(ra2 == 0 and rb2 == 0,
          f"two vNIC pairs of one tenant between the same two ports both verify (exit {ra2}, {rb2}; "
          f"B's ingress entries for (10.0.0.1, VNI 100): {len(shared)})")
    l2 = ctl("table", "dump", "--level", 2)[1].get("rnics", {})
    na, nb = (len([e for e in l2.get(n, {}).get("entries", []) if e.get("kind") != "vnic"]) for n in "AB")
    check(na >= 2 and nb >= 2 and poll_until(both_active, 10, "active"),
          f"level-2 tables installed by transactions (A {na} flow entries, B {nb}, A's BAR {bar('A')})")

    # 2b. A vNIC added while the workers are ACTIVE becomes usable; `vnic del`
    # takes it away again, also from under a QP that streams over it.
    rc5, _ = ctl("vnic", "add", 5, "--vni", 100, "--rnic", "A", "--ip", "192.168.7.5", "--mac", "02:00:00:00:01:05")
    got5 = poll_until(lambda: worker_vnics("A").get("vnic_list", {}).get("5") == "192.168.7.5", 10, "vnic 5")
    check(poll_until(lambda: "tandem_A_v5.dev" in devs(), 10, "device 5"), f"vNIC 5's device is registered ({devs()})")
    check(rc5 == 0 and got5 and 5 in l2_vnics("A"),
          f"`vnic add 5` on the ACTIVE worker A: in A's table dump {l2_vnics('A')} and its vNIC list "
          f"{worker_vnics('A').get('vnic_list')}")
    a5, b5 = pair("app7", "app8", 20, a_vnic="192.168.7.5")
    ra5, rb5 = a5.wait(90), b5.wait(90)
    check(ra5 == 0 and rb5 == 0, f"a QP on the added vNIC 5 connects and verifies WRITE/SEND/READ (exit {ra5}, {rb5})")
    sink5 = start([APP, "sink", f"{D}/B.rnic", D, "sink5", "strm5", "22", "192.168.7.5"], "sink5")
    strm5 = start([APP, "stream", f"{D}/A.rnic", D, "strm5", "sink5", "23", "192.168.7.2", "192.168.7.5"], "strm5")
    streaming5 = poll_until(lambda: os.path.exists(f"{D}/strm5.streaming") or strm5.poll() is not None, 30, "stream")
    rcd, _ = ctl("vnic", "del", 5)
    gone = poll_until(lambda: 5 not in l2_vnics("A") and "5" not in worker_vnics("A").get("vnic_list", {"5": 0}),
                    10, "vnic 5 gone")
    time.sleep(0.5)  # the stream keeps trying on the withdrawn vNIC meanwhile
    left = [e for n in "AB" for e in l2_entries(n)
            if e.get("vnic") == 5 or "192.168.7.5" in (e.get("dst_overlay_ip"), e.get("overlay_src_ip"))]
    ta = worker_vnics("A")
    check(streaming5 and rcd == 0 and gone and not left and wa.poll() is None and
          ta.get("vnics_withdrawn", 0) >= 1 and ta.get("qps_on_withdrawn_vnic", 0) >= 1,
          f"`vnic del 5`: gone from A's table dump and vNIC list {ta.get('vnic_list')}, no entry derived from it "
          f"left ({len(left)}), its streaming QP counted (qps_on_withdrawn_vnic {ta.get('qps_on_withdrawn_vnic')}), "
          f"worker A alive")
    check(poll_until(lambda: "tandem_A_v5.dev" not in devs(), 10, "device 5 gone"),
          f"vNIC 5's device is removed with it ({devs()})")
    for p in (strm5, a5, b5):
        if p.poll() is None:
            p.kill()
            p.wait()
    open(f"{D}/sink5.stop", "w").close()
    try:
        sink5.wait(30)
    except subprocess.TimeoutExpired:
        sink5.kill()
        sink5.wait()

    # 3. Isolation: tenant 100's vNIC cannot reach tenant 300's address; while
    # that QP waits for a route that never comes, worker A serves everyone else.
    sink0 = start([APP, "sink", f"{D}/B.rnic", D, "sink0", "strm0", "14", "192.168.7.1"], "sink0")
    strm0 = start([APP, "stream", f"{D}/A.rnic", D, "strm0", "sink0", "15", "192.168.7.2"], "strm0")
    poll_until(lambda: os.path.exists(f"{D}/strm0.streaming") or strm0.poll() is not None, 30, "stream")
    denied0 = channel("A").get("punts", {}).get("denied", 0)
    i1 = start([APP, "verify", f"{D}/A.rnic", D, "iso1", "iso2", "8", "192.168.9.3"], "iso1")
    i2 = start([APP, "verify", f"{D}/B.rnic", D, "iso2", "iso1", "9", "192.168.7.1"], "iso2")
    poll_until(lambda: channel("A").get("punts", {}).get("denied", 0) > denied0 or i1.poll() is not None, 10, "punt")
    tx0 = bar("A")[1]
    time.sleep(1.0)
    tx1 = bar("A")[1]
    check(i1.poll() is None and strm0.poll() is None and tx1 > tx0,
          f"while the denied QP waits for its route, worker A keeps forwarding the other stream (tx {tx0} -> {tx1})")
    try:
        r1 = i1.wait(60)
    except subprocess.TimeoutExpired:
        r1 = None
    for p in (i1, i2, strm0):
        if p.poll() is None:
            p.kill()
            p.wait()
    open(f"{D}/sink0.stop", "w").close()
    sink0.wait(30)
    punts = channel("A").get("punts", {})
    denied = punts.get("denied", 0)
    check(r1 not in (0, None) and denied > denied0,
          f"cross-tenant QP refused: punt denied by isolation (denied {denied0} -> {denied}), app exit {r1}, punts {punts}")

    # 4. kill -9 the agent under traffic.
    sink = start([APP, "sink", f"{D}/B.rnic", D, "sink", "strm", "4", "192.168.7.1"], "sink")
    strm = start([APP, "stream", f"{D}/A.rnic", D, "strm", "sink", "5", "192.168.7.2"], "strm")
    check(poll_until(lambda: os.path.exists(f"{D}/strm.streaming") or strm.poll() is not None, 30, "stream"),
          "stream A -> B runs")
    ver_before = {n: channel(n).get("table_version") for n in ("A", "B")}
    ag.send_signal(signal.SIGKILL)
    ag.wait()
    tx0 = bar("A")[1]
    headless = poll_until(lambda: bar("A")[0] == "headless" and bar("B")[0] == "headless", 20, "headless")
    time.sleep(0.5)
    tx1 = bar("A")[1]
    check(headless and tx1 > tx0 and strm.poll() is None,
          f"agent killed: both workers HEADLESS and still forwarding (A tx {tx0} -> {tx1})")
    ag = agent()
    check(poll_until(both_active, 30, "active"), "agent restarted: both channels reconcile to ACTIVE")
    rc, tl = ctl("tenant", "list")
    rc2, vl = ctl("vnic", "list")
    check([t["vni"] for t in tl.get("tenants", [])] == [100, 300] and len(vl.get("vnics", [])) == 4,
          "agent state reloaded from SQLite (2 tenants, 4 vNICs)")
    ch = {n: channel(n) for n in ("A", "B")}
    check(all(ch[n].get("table_version") == ver_before[n] and ch[n]["table_version"] ==
              ch[n]["bar"]["table"]["version"] for n in ("A", "B")),
          f"committed tables kept: versions {ver_before} == agent shadow == BAR "
          f"(reconcile skips A {ch['A']['stats']['reconcile_skips']}, B {ch['B']['stats']['reconcile_skips']})")
    time.sleep(1)
    check(strm.poll() is None, "the stream saw no error through the agent's death and return")
    strm.kill()
    strm.wait()
    open(f"{D}/sink.stop", "w").close()
    sink.wait(30)
    a, b = pair("app3", "app4", 6)
    ra, rb = a.wait(90), b.wait(90)
    check(ra == 0 and rb == 0, f"new QPs work after the agent restart (exit {ra}, {rb})")

    # 5. kill -9 worker B under traffic; A undisturbed.
    sink = start([APP, "sink", f"{D}/A.rnic", D, "sink2", "strm2", "10", "192.168.7.2"], "sink2")
    strm = start([APP, "stream", f"{D}/B.rnic", D, "strm2", "sink2", "11", "192.168.7.1"], "strm2")
    poll_until(lambda: os.path.exists(f"{D}/strm2.streaming") or strm.poll() is not None, 30, "stream")
    replays0 = channel("B").get("stats", {}).get("replays", 0)
    wb.send_signal(signal.SIGKILL)
    wb.wait()
    strm.kill()  # its worker is gone
    strm.wait()
    a_states = set()
    inst0 = bar("B")[3]
    wb = worker("B", "h1.sock", gen=1)
    t0 = time.time()
    while time.time() - t0 < 40:
        a_states.add(bar("A")[0])
        if (bar("B")[3] != inst0 and bar("B")[0] == "active" and channel("B").get("state") == "ACTIVE" and
                os.path.exists(f"{D}/B.rnic")):
            break
        time.sleep(0.1)
    chb = channel("B")
    check(chb.get("state") == "ACTIVE" and chb["stats"]["replays"] > replays0 and
          chb["bar"]["table"]["version"] == chb["table_version"],
          f"worker B restarted: table replayed (replays {replays0} -> {chb.get('stats', {}).get('replays')}), ACTIVE")
    if failed:
        print(json.dumps(chb))
    check(a_states == {"active"} and wa.poll() is None, f"worker A undisturbed (states seen {sorted(a_states)})")
    open(f"{D}/sink2.stop", "w").close()
    sink.wait(30)
    a, b = pair("app5", "app6", 12)
    ra, rb = a.wait(90), b.wait(90)
    check(ra == 0 and rb == 0, f"traffic resumes through the restarted worker (exit {ra}, {rb})")

    # 6. The replayed table is what the agent stored: another agent restart keeps it.
    before = {n: (channel(n).get("table_version"), channel(n).get("table_entries")) for n in ("A", "B")}
    ag.send_signal(signal.SIGKILL)
    ag.wait()
    ag = agent()
    ok = poll_until(both_active, 30, "active")
    after = {n: (channel(n).get("table_version"), channel(n).get("table_entries")) for n in ("A", "B")}
    check(ok and after == before and after["B"][1] >= 2,
          f"after a replay, an agent restart reloads the same tables from SQLite ({before} -> {after})")

    check(stop(wa) == 0 and stop(wb) == 0 and stop(ag) == 0, "agent and workers stop cleanly on SIGINT")
    try:
        with open(f"{D}/A0.stats.json") as f:
            sa = json.load(f)
    except (OSError, ValueError):
        sa = {}
    check(sa.get("vnics", {}).get("source") == "agent" and sa.get("vnics", {}).get("count") == 2 and
          "ignored" not in log("A"),
          f"worker A's exit counters: vNICs {sa.get('vnics')}")
    stop(fab)
    if failed:
        for n in ("agent", "fabric", "A", "B"):
            print(f"--- {n} log ---\n{log(n)[-4000:]}")


try:
    main()
except Exception as e:  # a set-up failure is a test failure, with the logs
    check(False, f"set-up: {e}")
    for n in ("agent", "fabric", "A", "B"):
        print(f"--- {n} log ---\n{log(n)[-4000:]}")
finally:
    lab.cleanup()
print(f"dpu_agent: {len(failed)} check(s) failed" if failed else "dpu_agent: all checks passed")
sys.exit(1 if failed else 0)
