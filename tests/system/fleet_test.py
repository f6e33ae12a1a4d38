"""System test of fleet mode: a real 3-member etcd cluster (Debian's etcd, on
loopback, own data directories and ports), three servers, each a tandem-dpu
agent (own SQLite, own channel directory) started with --etcd/--server and a
tandem-rnic worker in DPU mode (adaptive idle), on the lab fabric:

  * a tenant, three RNICs and two vNICs written once with `tandemctl fleet`
    reach every agent (each its own vNIC, the others' as derived mappings)
    and the workers (vNIC entries); `fleet status` says all converged; a
    verify pair carries WRITE/SEND/READ between two servers;
  * a vNIC streaming to a peer is moved to a third server (`fleet vnic
    move`): its old RNIC refuses and counts the stream's QP and sends nothing
    more, no level-2 entry of the old placement is left, the peer's server
    maps it to the new place in place, and a new pair through it verifies;
  * kill -9 an agent during a burst of 400 single-key revisions; restarted,
    it resumes after its stored revision and ends with exactly etcd's desired
    state, nothing refused (a change applied twice would be), nothing missing;
  * a dead agent's status disappears from etcd with its lease;
  * an agent down while keys are deleted and added and etcd is compacted
    past its revision: restarted, it re-reads and applies only the difference
    (counted: exactly the changes made meanwhile);
  * kill -9 the etcd leader: a write still reaches both agents; kill a
    second member: writes fail (no quorum), the agents keep serving (control
    socket, RNIC channels ACTIVE, a new QP pair verifies); a member back: the
    stalled write goes through and the agents converge.

usage: fleet_test.py TANDEM_DPU TANDEMCTL TANDEM_FABRIC TANDEM_RNIC RNIC_HOST_APP
Skips (exit 77) only if etcd/etcdctl are not installed. Everything started
is stopped by PID; data directories, sockets, channel and hugepage files are
removed, also on failure."""
import base64
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, Tandemctl, poll_until, remove_dpdk_files, telemetry_query  # noqa: E402
from etcd_cluster import EtcdCluster, have_etcd  # noqa: E402

DPU, CTL, FABRIC, RNIC, APP = sys.argv[1:6]
if not have_etcd():
    print("SKIP: etcd/etcdctl not installed (scripts/setup.sh installs etcd-server and etcd-client)")
    sys.exit(77)

T0 = time.time()
TAG = f"flt{os.getpid()}"
lab = Lab(tmp_prefix="tandem-fleet-test-")
D = lab.d
etcd = EtcdCluster(lab, TAG)
ENDPOINTS = etcd.endpoints
etcdctl = etcd.ctl
checks = Checks()
check, failed = checks.check, checks.failed


def log(name):
    return lab.text(name)


def fleet(*args):
    """tandemctl fleet --json against the cluster: (exit code, reply)."""
    r = subprocess.run([CTL, "fleet", "--etcd", ENDPOINTS, *map(str, args), "--json"], capture_output=True, text=True)
    try:
        return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {"raw": r.stderr}
    except ValueError:
        return r.returncode, {"raw": r.stdout + r.stderr}


def fleet_ok(*args, timeout=15):
    """A write that may meet a leader election: retried until etcd takes it."""
    deadline = time.time() + timeout
    while True:
        rc, j = fleet(*args)
        if rc == 0 or time.time() > deadline:
            return rc, j
        time.sleep(0.2)


SERVERS = {"s1": "A", "s2": "B", "s3": "C"}
ctl = {s: Tandemctl(CTL, f"{D}/{s}.sock") for s in SERVERS}
agents = {}


def agent(s, gen=0):
    pre = f"{TAG}-{s}{gen}"
    os.makedirs(f"{D}/{s}ch", exist_ok=True)
    p = lab.start([DPU, "--db", f"{D}/{s}.sqlite", "--control-socket", f"{D}/{s}.sock", "--channel-dir", f"{D}/{s}ch",
                   "--idle", "adaptive", "--heartbeat-timeout-ms", "3000", "--etcd", ENDPOINTS, "--server", s,
                   "--fleet-lease-ttl", "3", "--", "--no-pci", "--no-huge", "-m", "64", f"--file-prefix={pre}",
                   "-l", "0", "--log-level=lib.eal:error"], open(lab.path(f"agent-{s}.log"), "a"), pre)
    if not poll_until(lambda: ctl[s]("tenant", "list")[0] == 0 or p.poll() is not None, 20, "agent"):
        raise RuntimeError(f"agent {s} did not start:\n" + log(f"agent-{s}"))
    if p.poll() is not None:
        raise RuntimeError(f"agent {s} exited:\n" + log(f"agent-{s}"))
    agents[s] = (p, pre)
    return p


def kill9_agent(s):
    p, pre = agents.pop(s)
    p.kill()
    p.wait()
    remove_dpdk_files(pre)


PREFIX = {}


def worker(s, sock):
    n = SERVERS[s]
    pre = f"{TAG}-{n}"
    PREFIX[n] = pre
    return lab.start([RNIC, "--name", n, "--host-socket", f"{D}/{n}.rnic", "--table", f"{D}/{n}.yaml",
                      "--device-dir", f"{D}/devices", "--dpu-channel", f"{D}/{s}ch/tandem-{n}.chan",
                      "--dpu-agent-timeout-ms", "3000", "--table-capacity", "8192", "--idle", "adaptive",
                      "--mtu", "1024", "--", "--no-pci", f"--file-prefix={pre}", "-l", "1", "-m", "128",
                      "--log-level=lib.eal:error", f"--vdev=net_memif0,role=client,socket={D}/{sock}"],
                     open(lab.path(f"{n}.log"), "a"), pre)


def status():
    rc, j = fleet("status")
    return j if rc == 0 else {}


def converged(servers=tuple(SERVERS)):
    st = status()
    rows = {r["server"]: r for r in st.get("servers", [])}
    return st.get("ok") and all(rows.get(s, {}).get("converged") for s in servers)


def agent_status(s):
    """The agent's own status document in etcd (what `fleet status` summarises)."""
    rc, out = etcdctl("get", f"/tandem/v1/status/{s}", "--print-value-only")
    try:
        return json.loads(out) if rc == 0 and out.strip() else {}
    except ValueError:
        return {}


def level1(s):
    rc, j = ctl[s]("table", "dump", "--level", 1)
    return j if rc == 0 else {}


def mapping_set(s):
    return sorted((m["vni"], m["overlay_ip"], m["underlay_ip"], m["rnic"]) for m in level1(s).get("mappings", []))


def expected_mappings(s):  # noqa: ARG001 (every server maps the same addresses)
    """What etcd says server s's level 1 maps: every vNIC (own ones through the vNIC, others derived) and
    every extra mapping, read straight from etcd with etcdctl (not through our client)."""
    rc, out = etcdctl("get", "--prefix", "/tandem/v1/desired/", "-w", "json")
    kvs = json.loads(out).get("kvs", []) if rc == 0 else []
    dec = {base64.b64decode(kv["key"]).decode(): json.loads(base64.b64decode(kv["value"]).decode()) for kv in kvs}
    rnics = {}
    for k, v in dec.items():
        p = k.split("/")
        if len(p) == 8 and p[4] == "servers":
            rnics[p[7]] = v
    want = set()
    for k, v in dec.items():
        p = k.split("/")
        if p[4] == "vnics":
            r = rnics[v["rnic"]]
            want.add((v["vni"], v["overlay_ip"], r["underlay_ip"], v["rnic"]))
        elif p[4] == "mappings":
            want.add((int(p[5]), p[6], v["underlay_ip"], v["rnic"]))
    return sorted(want)


def channel_active(s):
    return ctl[s].channel(SERVERS[s]).get("state") == "ACTIVE"


def l2(s):
    return ctl[s]("table", "dump", "--level", 2)[1].get("rnics", {}).get(SERVERS[s], {}).get("entries", [])


def rx_stats(n):
    """(frames received, frames the transport core accepted, ingress drops by reason) of worker n."""
    st = telemetry_query(PREFIX[n], "/tandem/rnic/stats")
    get = lambda suffix: sum(v for k, v in st.items() if k.endswith(suffix) and isinstance(v, int))
    drops = {k: v for k, v in st.items() if "ingress" in k and "drop" in k and isinstance(v, int) and v}
    return get("rx_packets"), get("rx_accepted"), drops


def bar_counter(s, name):
    return ctl[s].channel(SERVERS[s]).get("bar", {}).get("counters", {}).get(name, 0)


def migration():
    """vNIC 5 streams from A (s1) to vNIC 2 on B (s2) and is moved to C (s3) meanwhile."""
    rc, _ = fleet("vnic", "add", 5, "--vni", 100, "--server", "s1", "--rnic", "A", "--ip", "192.168.7.5",
                  "--mac", "02:00:00:00:01:05")
    placed = rc == 0 and poll_until(lambda: telemetry_query(PREFIX["A"], "/tandem/rnic/table").get("vnic_list", {})
                                    .get("5") == "192.168.7.5" and converged(), 20, "vnic 5")
    # Both directions: vNIC 5 (A) -> vNIC 2 (B), and vNIC 2 (B) -> vNIC 5 (A).
    sink = lab.start([APP, "sink", f"{D}/B.rnic", D, "sinkm", "strmm", "30", "192.168.7.5", "192.168.7.2"],
                     open(lab.path("sinkm.log"), "w"))
    strm = lab.start([APP, "stream", f"{D}/A.rnic", D, "strmm", "sinkm", "31", "192.168.7.2", "192.168.7.5"],
                     open(lab.path("strmm.log"), "w"))
    sink2 = lab.start([APP, "sink", f"{D}/A.rnic", D, "sinkr", "strmr", "34", "192.168.7.2", "192.168.7.5"],
                      open(lab.path("sinkr.log"), "w"))
    strm2 = lab.start([APP, "stream", f"{D}/B.rnic", D, "strmr", "sinkr", "35", "192.168.7.5", "192.168.7.2"],
                      open(lab.path("strmr.log"), "w"))
    streaming = poll_until(lambda: all(os.path.exists(f"{D}/{n}.streaming") for n in ("strmm", "strmr")) or
                           strm.poll() is not None or strm2.poll() is not None, 30, "streams")
    check(placed and streaming and strm.poll() is None and strm2.poll() is None,
          "vNIC 5 placed on s1/A streams to and from vNIC 2 on s2/B")
    acc_a = rx_stats("A")[1]
    time.sleep(0.3)
    acc_b = rx_stats("A")[1]
    rc, j = fleet("vnic", "move", 5, "--server", "s3", "--rnic", "C")
    moved = rc == 0 and poll_until(
        lambda: "5" not in telemetry_query(PREFIX["A"], "/tandem/rnic/table").get("vnic_list", {"5": 0}) and
        telemetry_query(PREFIX["C"], "/tandem/rnic/table").get("vnic_list", {}).get("5") == "192.168.7.5" and
        converged(), 20, "moved")
    time.sleep(0.3)  # the streams keep going at the old placement meanwhile
    tx0, miss0 = bar_counter("s1", "tx_packets"), bar_counter("s1", "table_misses")
    rx0, acc0, _ = rx_stats("A")
    time.sleep(1.0)
    tx1, miss1 = bar_counter("s1", "tx_packets"), bar_counter("s1", "table_misses")
    rx1, acc1, drops = rx_stats("A")
    ta = telemetry_query(PREFIX["A"], "/tandem/rnic/table")
    check(acc_b > acc_a, f"before the move A's transport accepts the stream from B ({acc_a} -> {acc_b} frames)")
    check(moved and ta.get("qps_on_withdrawn_vnic", 0) >= 2 and tx1 == tx0 and acc1 == acc0 and wa_alive(),
          f"`fleet vnic move 5` to s3/C under traffic: gone from A, on C; at the old placement both streaming QPs "
          f"are refused and counted (qps_on_withdrawn_vnic {ta.get('qps_on_withdrawn_vnic')}, table misses "
          f"{miss0} -> {miss1}), A sends nothing more (tx {tx0} -> {tx1}) and accepts nothing more (frames "
          f"received {rx0} -> {rx1}, accepted {acc0} -> {acc1}, ingress drops {drops}) ({j.get('error', 'ok')})")
    stale = [e for e in l2("s1") if e.get("vnic") == 5 or e.get("overlay_dst_ip") == "192.168.7.5"]
    to_old = [e for e in l2("s2") if e.get("dst_overlay_ip") == "192.168.7.5" and e.get("underlay_dst_ip") == "10.0.0.1"]
    m2 = [m for m in mapping_set("s2") if m[1] == "192.168.7.5"]
    check(not stale and not to_old and m2 == [(100, "192.168.7.5", "10.0.0.3", "C")],
          f"no level-2 entry of the old placement left on A ({len(stale)}) or pointing B at it ({len(to_old)}); "
          f"s2 maps 192.168.7.5 to C in place ({m2})")
    for st, sk, name in ((strm, sink, "sinkm"), (strm2, sink2, "sinkr")):
        st.kill()
        st.wait()
        open(f"{D}/{name}.stop", "w").close()
        try:
            sk.wait(30)
        except subprocess.TimeoutExpired:
            sk.kill()
            sk.wait()
    a = lab.start([APP, "verify", f"{D}/C.rnic", D, "mig1", "mig2", "32", "192.168.7.2", "192.168.7.5"],
                  open(lab.path("mig1.log"), "w"))
    b = lab.start([APP, "verify", f"{D}/B.rnic", D, "mig2", "mig1", "33", "192.168.7.5", "192.168.7.2"],
                  open(lab.path("mig2.log"), "w"))
    ra, rb = a.wait(90), b.wait(90)
    check(ra == 0 and rb == 0, f"after reconnection, the moved vNIC (now on C) and its peer on B verify "
                               f"WRITE/SEND/READ (exit {ra}, {rb})")


WORKERS = {}


def wa_alive():
    return all(p.poll() is None for p in WORKERS.values())


def main():
    # etcd: three members, each its own data directory and ports.
    etcd.start()
    etcd.wait_healthy()
    check(True, f"3-member etcd cluster healthy on loopback ({ENDPOINTS})")

    for n, ip in (("A", "10.0.0.1"), ("B", "10.0.0.2"), ("C", "10.0.0.3")):
        with open(f"{D}/{n}.yaml", "w") as f:
            f.write(f"underlay: {{ip: {ip}, mac: 02:00:00:00:00:0{ip[-1]}, gateway_mac: 02:00:00:00:00:fe}}\n")
    fab_pre = f"{TAG}-fab"
    lab.start([FABRIC, "--route", "10.0.0.1=0", "--route", "10.0.0.2=1", "--route", "10.0.0.3=2", "--paths", "4",
               "--idle", "adaptive",
               "--link-wait-ms", "0", "--", "--no-pci", f"--file-prefix={fab_pre}", "-l", "0", "-m", "64",
               "--log-level=lib.eal:error", f"--vdev=net_memif0,role=server,socket={D}/h0.sock",
               f"--vdev=net_memif1,role=server,socket={D}/h1.sock", f"--vdev=net_memif2,role=server,socket={D}/h2.sock"],
              open(lab.path("fabric.log"), "w"), fab_pre)
    if not poll_until(lambda: "tandem-fabric:" in log("fabric"), 20, "fabric"):
        raise RuntimeError("fabric did not start:\n" + log("fabric"))

    # 1. The desired state, written once.
    writes = [("tenant", "add", 100, "red"),
              ("rnic", "add", "s1", "A", "--underlay-ip", "10.0.0.1", "--mac", "02:00:00:00:00:01",
               "--path-base-port", 0xC000, "--path-count", 4),
              ("rnic", "add", "s2", "B", "--underlay-ip", "10.0.0.2", "--mac", "02:00:00:00:00:02",
               "--path-base-port", 0xC000, "--path-count", 4),
              ("rnic", "add", "s3", "C", "--underlay-ip", "10.0.0.3", "--mac", "02:00:00:00:00:03",
               "--path-base-port", 0xC000, "--path-count", 4),
              ("vnic", "add", 1, "--vni", 100, "--server", "s1", "--rnic", "A", "--ip", "192.168.7.1",
               "--mac", "02:00:00:00:01:01"),
              ("vnic", "add", 2, "--vni", 100, "--server", "s2", "--rnic", "B", "--ip", "192.168.7.2",
               "--mac", "02:00:00:00:01:02")]
    rcs = [fleet(*w)[0] for w in writes]
    check(rcs == [0] * len(writes), f"tandemctl fleet writes a tenant, 3 RNICs, 2 vNICs once (exit codes {rcs})")
    bad = fleet("vnic", "add", 3, "--vni", 999, "--server", "s1", "--rnic", "A", "--ip", "192.168.7.3",
                "--mac", "02:00:00:00:01:03")
    check(bad[0] == 2 and "999" in bad[1].get("error", ""), f"a vNIC of an unknown tenant is refused: {bad[1].get('error')}")

    for s in SERVERS:
        agent(s)
    wa, wb, wc = worker("s1", "h0.sock"), worker("s2", "h1.sock"), worker("s3", "h2.sock")
    WORKERS.update(A=wa, B=wb, C=wc)
    check(poll_until(converged, 20, "converged"), f"fleet status: every server converged ({status().get('servers')})")
    l1 = {s: level1(s) for s in SERVERS}
    check([v["id"] for v in l1["s1"].get("vnics", [])] == [1] and [v["id"] for v in l1["s2"].get("vnics", [])] == [2]
          and all(t["partition"] == 1 for s in SERVERS for t in l1[s].get("tenants", [])),
          "each agent holds its own vNIC and the tenant with the same (fleet-wide) partition")
    check(all(mapping_set(s) == expected_mappings(s) for s in SERVERS),
          f"each agent derived the other server's vNIC as a mapping: s1 {mapping_set('s1')}")
    learned = poll_until(lambda: telemetry_query(PREFIX["A"], "/tandem/rnic/table").get("vnic_list") ==
                         {"1": "192.168.7.1"} and
                         telemetry_query(PREFIX["B"], "/tandem/rnic/table").get("vnic_list") == {"2": "192.168.7.2"},
                         30, "vnics")
    healthy = poll_until(lambda: all(r.get("health") == "ok" for r in status().get("servers", [])), 10, "health")
    check(learned and all(channel_active(s) for s in SERVERS) and healthy,
          "the workers are ACTIVE with their agents, hold the vNIC etcd placed on them, and every agent's status "
          f"says ok ({[r.get('health') for r in status().get('servers', [])]})")
    a = lab.start([APP, "verify", f"{D}/A.rnic", D, "app1", "app2", "2", "192.168.7.2", "192.168.7.1"],
                  open(lab.path("app1.log"), "w"))
    b = lab.start([APP, "verify", f"{D}/B.rnic", D, "app2", "app1", "3", "192.168.7.1", "192.168.7.2"],
                  open(lab.path("app2.log"), "w"))
    ra, rb = a.wait(90), b.wait(90)
    check(ra == 0 and rb == 0,
          f"WRITE/SEND/READ verified between the two servers over routes each agent resolved (exit {ra}, {rb})")
    print(f"     ({time.time() - T0:.1f} s)", flush=True)
    migration()

    # 2. kill -9 an agent during a burst of single-key revisions.
    with open(f"{D}/burst.csv", "w") as f:
        for i in range(400):
            f.write(f"100,172.16.{i // 200}.{i % 200 + 1},10.0.0.9,02:00:00:00:00:09,X\n")
    rev0 = status().get("desired_revision", 0)
    burst = subprocess.Popen([CTL, "fleet", "--etcd", ENDPOINTS, "mapping", "import", f"{D}/burst.csv", "--per-txn", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    poll_until(lambda: agent_status("s2").get("applied_revision", 0) > rev0 + 50, 20, "burst under way")
    killed_at = agent_status("s2").get("applied_revision", 0)
    kill9_agent("s2")
    out = burst.communicate(timeout=120)[0]
    check(burst.returncode == 0, f"the burst of 400 revisions went into etcd ({out.strip()[:120]})")
    agent("s2", 1)
    ok = poll_until(converged, 30, "converged")
    st2 = agent_status("s2")
    resumed = [l for l in log("agent-s2").splitlines() if "resuming after revision" in l]
    check(ok and killed_at > rev0 and len(resumed) == 2 and not resumed[-1].endswith(" 0"),
          f"kill -9 during the burst (at revision ~{killed_at}): the restarted agent resumed after its stored "
          f"revision ({resumed[-1].split('tandem-dpu: fleet: ')[-1] if resumed else '?'}) and converged")
    check(mapping_set("s2") == expected_mappings("s2") and mapping_set("s1") == expected_mappings("s1") and
          len(mapping_set("s2")) == 403,
          f"both agents hold exactly etcd's desired mappings ({len(mapping_set('s2'))}: 400 + 3 vNICs)")
    check(st2.get("changes_rejected") == 0 and st2.get("full_reads") == 1 and st2.get("resync_changes") == 0,
          f"nothing applied twice or refused, no full re-read needed: {dict((k, st2.get(k)) for k in ('changes_applied', 'changes_rejected', 'full_reads', 'resync_changes'))}")
    flows_b = len([e for e in l2("s2") if e.get("kind") != "vnic"])
    check(st2.get("stale_withdrawn") == 0 and flows_b > 0,
          f"the restart's sweep of B's level-2 table against level 1 found nothing stale in {flows_b} flow entries")

    # 3. Compaction past an agent's revision while it is down.
    kill9_agent("s2")
    t_kill = time.time()
    gone = poll_until(lambda: agent_status("s2") == {}, 15, "lease expired")
    row = {r["server"]: r for r in status().get("servers", [])}.get("s2", {})
    check(gone and not row.get("converged") and row.get("health", "").startswith("no status"),
          f"the dead agent's status disappears with its lease ({time.time() - t_kill:.1f} s; --fleet-lease-ttl 3): "
          f"fleet status says {row.get('health')!r}")
    rc1, _ = etcdctl("del", "--prefix", "/tandem/v1/desired/mappings/100/172.16.1.")
    rc2, _ = fleet("mapping", "add", "--vni", 100, "--overlay-ip", "172.17.0.1", "--underlay-ip", "10.0.0.8",
                   "--next-hop-mac", "02:00:00:00:00:08", "--rnic", "Y")
    rev = status().get("etcd_revision", 0)
    rc3, out = etcdctl("compact", rev)
    check(rc1 == 0 and rc2 == 0 and rc3 == 0, f"while s2 is down: 200 mappings deleted, 1 added, etcd compacted at {rev}")
    agent("s2", 2)
    ok = poll_until(converged, 30, "converged")
    st2 = agent_status("s2")
    check(ok and "is compacted" in log("agent-s2") and st2.get("resync_changes") == 201 and
          mapping_set("s2") == expected_mappings("s2"),
          f"restarted past the compaction: re-read whole, applied only the difference "
          f"(resync_changes {st2.get('resync_changes')} == 201) and matches etcd")
    print(f"     ({time.time() - T0:.1f} s)", flush=True)

    # 4. The leader dies, then a second member.
    leader = etcd.leader()
    if leader is None:
        raise RuntimeError("no etcd leader found:\n" + etcdctl("endpoint", "status")[1])
    etcd.kill(leader)
    rc, j = fleet_ok("vnic", "add", 3, "--vni", 100, "--server", "s1", "--rnic", "A", "--ip", "192.168.7.3",
                     "--mac", "02:00:00:00:01:03")
    ok = rc == 0 and poll_until(lambda: converged() and ("100", "192.168.7.3") in
                                {(str(m[0]), m[1]) for m in mapping_set("s2")}, 20, "converged")
    check(ok, f"leader {leader} killed -9: a write still goes through and reaches both agents ({j.get('error', 'ok')})")
    second = next(m for m in etcd.members if m != leader)
    etcd.kill(second)
    rc, j = fleet("vnic", "add", 4, "--vni", 100, "--server", "s2", "--rnic", "B", "--ip", "192.168.7.4",
                  "--mac", "02:00:00:00:01:04")
    check(rc == 2, f"a second member killed: no quorum, the write is refused ({j.get('error', j)[:100]})")
    time.sleep(1.5)
    serving = all(ctl[s]("tenant", "list")[0] == 0 and channel_active(s) for s in SERVERS)
    a = lab.start([APP, "verify", f"{D}/A.rnic", D, "nq1", "nq2", "40", "192.168.7.2", "192.168.7.1"],
                  open(lab.path("nq1.log"), "w"))
    b = lab.start([APP, "verify", f"{D}/B.rnic", D, "nq2", "nq1", "41", "192.168.7.1", "192.168.7.2"],
                  open(lab.path("nq2.log"), "w"))
    ra, rb = a.wait(90), b.wait(90)
    check(serving and wa_alive() and ra == 0 and rb == 0,
          f"without quorum the agents keep serving (control sockets answer, RNIC channels ACTIVE) and a new QP "
          f"pair between s1 and s2 verifies (exit {ra}, {rb})")
    etcd.start(leader)
    rc, j = fleet_ok("vnic", "add", 4, "--vni", 100, "--server", "s2", "--rnic", "B", "--ip", "192.168.7.4",
                     "--mac", "02:00:00:00:01:04", timeout=30)
    ok = rc == 0 and poll_until(lambda: converged() and 4 in [v["id"] for v in level1("s2").get("vnics", [])], 30,
                                "converged")
    check(ok and all(mapping_set(s) == expected_mappings(s) for s in SERVERS),
          f"a member back, quorum returns: the write goes through and both agents converge ({j.get('error', 'ok')})")
    st = {s: agent_status(s) for s in SERVERS}
    check(all(st[s].get("changes_rejected") == 0 for s in SERVERS),
          f"no change refused anywhere (s1 {st['s1'].get('changes_rejected')}, s2 {st['s2'].get('changes_rejected')})")
    print(f"     ({time.time() - T0:.1f} s)", flush=True)
    if failed:
        for n in ("agent-s1", "agent-s2", "A", "B", "etcd-e0"):
            print(f"--- {n} log ---\n{log(n)[-3000:]}")


try:
    main()
except Exception as e:  # a set-up failure is a test failure, with the logs
    check(False, f"set-up: {e}")
    for n in ("agent-s1", "agent-s2", "fabric", "A", "B", "etcd-e0", "etcd-e1", "etcd-e2"):
        print(f"--- {n} log ---\n{log(n)[-3000:]}")
finally:
    lab.cleanup()
    etcd.cleanup()
print(f"fleet: {len(failed)} check(s) failed ({time.time() - T0:.0f} s)" if failed else
      f"fleet: all checks passed ({time.time() - T0:.0f} s)")
sys.exit(1 if failed else 0)
