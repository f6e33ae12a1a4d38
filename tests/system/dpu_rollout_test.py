"""System test of a rollout across channel protocols v3 (vNIC entries) and v4
(partition keys, withheld from a tenant while any of its RNICs is older): an agent
and workers one release apart still carry verified traffic, with processes
(tandem-dpu --max-protocol, tandem-rnic --dpu-max-protocol stand in for the
previous release):

  1. new agent; worker A of the previous release (v2), worker B new: A meets
     the agent at v2, gets no vNIC entries (the agent withholds them, counted)
     and uses its YAML vNIC; B meets it at v4 and takes its vNICs (unkeyed) from the
     agent, ignoring its YAML's with one warning; A <-> B verifies;
  2. the agent is replaced by the previous release (v2): B falls back to its
     YAML vNIC (replayed table without vNIC entries); A <-> B verifies;
  3. the new agent returns: B is back at v4 and, although the store the old
     agent left holds no vNIC entries, the agent reconciles them from level 1;
     A <-> B verifies.

usage: dpu_rollout_test.py TANDEM_DPU TANDEMCTL TANDEM_FABRIC TANDEM_RNIC RNIC_HOST_APP
Everything started is stopped by PID; hugepage files, runtime dirs, sockets and
channel files are removed, also on failure."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, Tandemctl, poll_until, stop, telemetry_query  # noqa: E402

DPU, CTL, FABRIC, RNIC, APP = sys.argv[1:6]
TAG = f"roll{os.getpid()}"
lab = Lab(tmp_prefix="tandem-dpu-rollout-")
D = lab.d
CH = f"{D}/ch"
ctl = Tandemctl(CTL, f"{D}/ctl.sock")
channel, l2_entries, l2_vnics = ctl.channel, ctl.l2_entries, ctl.l2_vnics
os.makedirs(CH)
checks = Checks()
check, failed = checks.check, checks.failed
# Both YAMLs list their port's vNIC: the fallback for whichever side is old.
YAML = {
    "A": "underlay: {ip: 10.0.0.1, mac: 02:00:00:00:00:01, gateway_mac: 02:00:00:00:00:fe}\n"
         "vnics:\n  - {id: 1, ip: 192.168.7.1, mac: 02:00:00:00:01:01, vni: 100}\n",
    "B": "underlay: {ip: 10.0.0.2, mac: 02:00:00:00:00:02, gateway_mac: 02:00:00:00:00:fe}\n"
         "vnics:\n  - {id: 2, ip: 192.168.7.2, mac: 02:00:00:00:01:02, vni: 100}\n",
}
PREFIX = {}
AGENTS = [0]


def start(argv, log, prefix=None):
    return lab.start(argv, open(lab.path(f"{log}.log"), "a"), prefix)


def log(name):
    return lab.text(name)












def worker_vnics(n):
    """The worker's own view: /tandem/rnic/table (vNIC source, list, withdrawal counters)."""
    return telemetry_query(PREFIX[n], "/tandem/rnic/table")


def agent(max_protocol=None):
    pre = f"{TAG}-dpu{AGENTS[0]}"
    AGENTS[0] += 1
    p = start([DPU, "--db", f"{D}/dpu.sqlite", "--control-socket", f"{D}/ctl.sock", "--channel-dir", CH,
               "--idle", "adaptive", "--heartbeat-timeout-ms", "3000"] +
              (["--max-protocol", str(max_protocol)] if max_protocol else []) +
              ["--", "--no-pci", "--no-huge", "-m", "64", f"--file-prefix={pre}", "-l", "0",
               "--log-level=lib.eal:error"], "agent", pre)
    if not poll_until(lambda: ctl("tenant", "list")[0] == 0 or p.poll() is not None, 20) or p.poll() is not None:
        raise RuntimeError("agent did not start:\n" + log("agent"))
    return p


def worker(n, sock, max_protocol=None):
    pre = f"{TAG}-{n}"
    PREFIX[n] = pre
    return start([RNIC, "--name", n, "--host-socket", f"{D}/{n}.rnic", "--table", f"{D}/{n}.yaml",
                  "--device-dir", f"{D}/devices",
                  "--dpu-channel", f"{CH}/tandem-{n}.chan", "--dpu-agent-timeout-ms", "3000"] +
                 (["--dpu-max-protocol", str(max_protocol)] if max_protocol else []) +
                 ["--idle", "adaptive", "--mtu", "1024", "--", "--no-pci", f"--file-prefix={pre}", "-l", "1",
                  "-m", "128", "--log-level=lib.eal:error", f"--vdev=net_memif0,role=client,socket={D}/{sock}"],
                 n, pre)


def both_active():
    return all(channel(n).get("state") == "ACTIVE" and channel(n).get("bar", {}).get("state") == "active"
               for n in "AB")


def verify(tag, seed):
    """A verify pair bound to the two vNICs: WRITE/SEND/READ both ways; the exit codes."""
    a = start([APP, "verify", f"{D}/A.rnic", D, f"{tag}a", f"{tag}b", str(seed), "192.168.7.2", "192.168.7.1"],
              f"{tag}a")
    b = start([APP, "verify", f"{D}/B.rnic", D, f"{tag}b", f"{tag}a", str(seed + 1), "192.168.7.1", "192.168.7.2"],
              f"{tag}b")
    return a.wait(90), b.wait(90)


def main():
    for n, y in YAML.items():
        with open(f"{D}/{n}.yaml", "w") as f:
            f.write(y)
    ag = agent()
    steps = [("rnic", "add", "A", "--underlay-ip", "10.0.0.1", "--mac", "02:00:00:00:00:01",
              "--path-base-port", 0xC000, "--path-count", 4),
             ("rnic", "add", "B", "--underlay-ip", "10.0.0.2", "--mac", "02:00:00:00:00:02",
              "--path-base-port", 0xC000, "--path-count", 4),
             ("tenant", "add", 100, "red"),
             ("vnic", "add", 1, "--vni", 100, "--rnic", "A", "--ip", "192.168.7.1", "--mac", "02:00:00:00:01:01"),
             ("vnic", "add", 2, "--vni", 100, "--rnic", "B", "--ip", "192.168.7.2", "--mac", "02:00:00:00:01:02")]
    rcs = [ctl(*s)[0] for s in steps]
    check(rcs == [0] * len(rcs), f"configuration: 2 RNICs, 1 tenant, 2 vNICs (exit codes {rcs})")
    fab_pre = f"{TAG}-fab"
    fab = start([FABRIC, "--route", "10.0.0.1=0", "--route", "10.0.0.2=1", "--paths", "4", "--idle", "adaptive",
                 "--link-wait-ms", "0", "--", "--no-pci", f"--file-prefix={fab_pre}", "-l", "0", "-m", "64",
                 "--log-level=lib.eal:error", f"--vdev=net_memif0,role=server,socket={D}/h0.sock",
                 f"--vdev=net_memif1,role=server,socket={D}/h1.sock"], "fabric", fab_pre)
    if not poll_until(lambda: "tandem-fabric:" in log("fabric") or fab.poll() is not None, 20):
        raise RuntimeError("fabric did not start:\n" + log("fabric"))
    wa, wb = worker("A", "h0.sock", max_protocol=2), worker("B", "h1.sock")
    check(poll_until(both_active, 30), "both workers reach ACTIVE with the new agent")

    # 1. New agent, A of the previous release, B new.
    ok = poll_until(lambda: worker_vnics("B").get("vnic_source") == "agent" and l2_vnics("B") == [2], 20)
    ca, cb = channel("A"), channel("B")
    ta, tb = worker_vnics("A"), worker_vnics("B")
    check(ca.get("protocol_version") == 2 and ca.get("stats", {}).get("vnic_ops_withheld", 0) >= 1 and
          l2_vnics("A") == [] and ta.get("vnic_source") == "yaml" and ta.get("vnic_list") == {"1": "192.168.7.1"},
          f"new agent + previous-release worker A meet at v{ca.get('protocol_version')}: vNIC entries withheld "
          f"({ca.get('stats', {}).get('vnic_ops_withheld')}), none in A's table, A uses its YAML vNIC {ta.get('vnic_list')}")
    pk = {e["vnic"]: e.get("pkey") for e in l2_entries("B") if e.get("kind") == "vnic"}
    check(ok and cb.get("protocol_version") == 4 and tb.get("vnic_list") == {"2": "192.168.7.2"} and
          log("B").count("are ignored") == 1 and pk == {2: "0xffff"},
          f"new agent + new worker B meet at v{cb.get('protocol_version')}: B's vNICs come from the agent "
          f"{tb.get('vnic_list')}, its YAML's ignored with one warning; the tenant is unkeyed while A is at v2 {pk}")
    ra, rb = verify("p1", 2)
    check(ra == 0 and rb == 0, f"A (v2) <-> B (v4) verify WRITE/SEND/READ both ways (exit {ra}, {rb})")

    # 2. The agent of the previous release replaces it.
    stop(ag)
    ag = agent(max_protocol=2)
    ok = poll_until(lambda: both_active() and channel("B").get("protocol_version") == 2 and
                  worker_vnics("B").get("vnic_source") == "yaml", 30)
    tb = worker_vnics("B")
    check(ok and l2_vnics("B") == [] and tb.get("vnic_list") == {"2": "192.168.7.2"},
          f"previous-release agent + new worker B meet at v2: B falls back to its YAML vNIC {tb.get('vnic_list')}, "
          f"no vNIC entries in its table ({l2_vnics('B')})")
    ra, rb = verify("p2", 4)
    check(ra == 0 and rb == 0, f"with the previous-release agent, A <-> B verify (exit {ra}, {rb})")

    # 3. The new agent returns; its store (written by the old one) has no vNIC entries for B.
    stop(ag)
    ag = agent()
    ok = poll_until(lambda: both_active() and worker_vnics("B").get("vnic_source") == "agent" and
                  l2_vnics("B") == [2], 30)
    tb = worker_vnics("B")
    check(ok and channel("B").get("protocol_version") == 4 and tb.get("vnic_list") == {"2": "192.168.7.2"},
          f"new agent back: B at v{channel('B').get('protocol_version')} gets its vNIC entry reconciled from level 1 "
          f"{tb.get('vnic_list')}")
    ra, rb = verify("p3", 6)
    check(ra == 0 and rb == 0, f"after the rollout round trip, A <-> B verify (exit {ra}, {rb})")

    check(stop(wa) == 0 and stop(wb) == 0 and stop(ag) == 0, "agent and workers stop cleanly on SIGINT")
    stop(fab)
    if failed:
        for n in ("agent", "A", "B"):
            print(f"--- {n} log ---\n{log(n)[-4000:]}")


try:
    main()
except Exception as e:  # a set-up failure is a test failure, with the logs
    check(False, f"set-up: {e}")
    for n in ("agent", "fabric", "A", "B"):
        print(f"--- {n} log ---\n{log(n)[-4000:]}")
finally:
    lab.cleanup()
print(f"dpu_rollout: {len(failed)} check(s) failed" if failed else "dpu_rollout: all checks passed")
sys.exit(1 if failed else 0)
