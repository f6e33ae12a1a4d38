"""System test of tandem-rnic --lcores 2 in DPU mode: one tandem-dpu agent, the
lab fabric (two RX queues per port) and two workers with two lcores each,
their vNICs and routes from the agent.

  * both 2-lcore workers reach ACTIVE with the agent (the channel served by
    lcore 0, rnic/port/commit_fanout.h);
  * two tandem-perf pairs, write_bw --verify and read_bw --verify, clients on
    A, so A places one application (4 QPs) on each lcore; each pair's server
    is its own vNIC on B, so each lcore's QPs get their own route from the
    agent at RTR (a miss on lcore 1 is handed to lcore 0, which punts it, and
    its QPs wait until lcore 1 adopts the version that installs it);
  * while they run, A's routes to both receivers move three times (`mapping
    add --replace` with a new next-hop MAC: the agent rewrites A's entries in
    a transaction); each new route is committed on A (the agent's shadow of
    A's table holds the new MACs, A's BAR shows the agent's version: every
    lcore acknowledged it) and both lcores' QPs go on over it;
  * `tandemctl trace` on the flow of one of A's QPs on lcore 1: A's records
    of its packets (what it sends, what it accepts) come from lcore 1's own
    trace ring and are merged with the other processes' into delivered
    timelines;
  * every byte verified, both lcores adopted the new versions, lcore 1
    handed misses to lcore 0, no process died by a signal, the workers stop
    cleanly.

usage: dpu_lcores_test.py TANDEM_DPU TANDEMCTL TANDEM_FABRIC TANDEM_RNIC TANDEM_PERF"""
import json
import os
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (finish_apps, Checks, Lab, Tandemctl, Telemetry, free_port, lab_fabric_argv, lab_memif_vdev,  # noqa: E402
                            poll_until, run_checked, wait_fabric_started)

DPU, CTL, FABRIC, RNIC, PERF = sys.argv[1:6]
TAG = f"dpulc{os.getpid()}"
lab = Lab(tmp_prefix="tandem-dpu-lcores-")
D = lab.d
CH = f"{D}/ch"
os.makedirs(CH)
ctl = Tandemctl(CTL, f"{D}/ctl.sock")
checks = Checks()
check, failed = checks.check, checks.failed
start, stop = lab.start, lab.stop
QPS = 4
# Failure detection is dpu_agent's subject, not this test's: on the 2 shared cores of the lab VM
# the agent's loop has been seen silent for seconds (the worker then goes HEADLESS, the agent
# resets the channel, and a resolution pending across that reset never comes back: the run's
# report prints the agent's punt counters), so both sides wait 10 s here instead of 3.
SILENCE_MS = "10000"
A_MAC = "02:00:00:00:00:01"
# A's senders are vNIC 1 (tenant 100); the receivers, vNICs 2 and 3 on B, are in tenant 200
# (one partition with 100), so their addresses are plain mappings in tenant 100 that can move.
A_IP, B_IPS = "192.168.7.1", ("192.168.7.2", "192.168.7.3")
YAML = {
    "A": "underlay: {ip: 10.0.0.1, mac: 02:00:00:00:00:01, gateway_mac: 02:00:00:00:00:fe}\n",
    "B": "underlay: {ip: 10.0.0.2, mac: 02:00:00:00:00:02, gateway_mac: 02:00:00:00:00:fe}\n",
}


def gen_mac(i, g):
    return f"02:00:00:07:{i:02x}:{g:02x}"


def set_route(i, g):
    """Receiver i's address in tenant 100 -> B, next hop gen_mac(i, g): a new route for A."""
    return ctl("mapping", "add", "--vni", 100, "--overlay-ip", B_IPS[i], "--underlay-ip", "10.0.0.2",
               "--next-hop-mac", gen_mac(i, g), "--rnic", "B", *(["--replace"] if g > 1 else []))


def a_route_macs():
    """{receiver: next-hop MACs} of A's committed egress entries toward the receivers (the agent's shadow)."""
    out = {i: set() for i in range(len(B_IPS))}
    for e in ctl.l2_entries("A"):
        if e.get("kind") == "egress" and e.get("dst_overlay_ip") in B_IPS:
            out[B_IPS.index(e["dst_overlay_ip"])].add(e.get("dst_mac"))
    return out


class HeartbeatWatch(threading.Thread):
    """Samples A's BAR heartbeat (the channel file's BAR page, line 1) every 10 ms: the longest
    time it stood still, and the longest gap between this thread's own samples (a loaded machine's)."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.stop, self.still, self.gap = path, False, 0.0, 0.0

    def run(self):
        last, changed, prev = None, time.time(), time.time()
        while not self.stop:
            try:
                with open(self.path, "rb") as f:
                    f.seek(4096 + 64)
                    hb = struct.unpack("<Q", f.read(8))[0]
            except OSError:
                hb = last
            now = time.time()
            self.gap = max(self.gap, now - prev)
            prev = now
            if hb != last:
                last, changed = hb, now
            self.still = max(self.still, now - changed)
            time.sleep(0.01)


def agent():
    pre = f"{TAG}-dpu"
    p = start([DPU, "--db", f"{D}/dpu.sqlite", "--control-socket", f"{D}/ctl.sock", "--channel-dir", CH,
               "--idle", "adaptive", "--heartbeat-timeout-ms", SILENCE_MS, "--", "--no-pci", "--no-huge", "-m", "64",
               f"--file-prefix={pre}", "-l", "0", "--log-level=lib.eal:error"], "agent", pre)
    if not poll_until(lambda: ctl("tenant", "list")[0] == 0 or p.poll() is not None, 20) or p.poll() is not None:
        raise RuntimeError("agent did not start:\n" + lab.text("agent"))
    return p


def worker(n, sock):
    pre = f"{TAG}-{n}"
    return start([RNIC, "--name", n, "--host-socket", f"{D}/{n}.rnic", "--table", f"{D}/{n}.yaml",
                  "--device-dir", f"{D}/devices", "--dpu-channel", f"{CH}/tandem-{n}.chan",
                  "--dpu-agent-timeout-ms", SILENCE_MS, "--lcores", "2", "--idle", "adaptive", "--mtu", "1024",
                  "--stats-json", f"{D}/{n}.json", "--", "--no-pci", f"--file-prefix={pre}", "-l", "0,1",
                  "-m", "128", "--log-level=lib.eal:error", lab_memif_vdev(D, sock)], n, pre), pre


def active():
    """Both channels ACTIVE, the BAR says so, and each worker's vNIC committed."""
    for n in ("A", "B"):
        c = ctl.channel(n)
        if c.get("state") != "ACTIVE" or c.get("bar", {}).get("state") != "active" or not ctl.l2_vnics(n):
            return False
    return True


def perf_pair(name, test, flags, server_ip):
    """tandem-perf `test`: server on B (vNIC server_ip), client on A (192.168.7.1): A sends the data."""
    port = free_port()
    common = [test, "-p", str(port), "--json", "--timeout", "30"]
    srv = start([PERF] + common + ["--device", f"{D}/B.rnic", "--gid", server_ip], f"{name}-server",
                separate_stderr=True)
    time.sleep(0.3)
    cli = start([PERF] + common + flags + ["--device", f"{D}/A.rnic", "--gid", A_IP, "127.0.0.1"],
                f"{name}-client", separate_stderr=True)
    time.sleep(0.3)  # attached (and placed) before the next application comes
    return srv, cli


def qps_by_lcore(tel):
    """{host QPN: (lcore, not yet in RTS: its route not in)} of every live QP."""
    out, first = {}, 0
    while True:
        page = tel.cmd(f"/tandem/rnic/qps,{first}") or {}
        if not page:
            return out
        for k, v in page.items():
            out[int(k, 16)] = (v["lcore"], v.get("route_pending", 1) or v.get("state") != "RTS")
        first = max(int(k, 16) for k in page) + 1


def trace(*args):
    r = subprocess.run([CTL, "--socket", f"{D}/ctl.sock", "trace", *map(str, args)], capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


def trace_lcore1(placed):
    """tandemctl trace on the flow of one of A's QPs on lcore 1 (its QPN picks the flow: the pair whose
    client it is): A's records of its packets come from lcore 1's ring and end in delivered timelines."""
    qpn = min((q for q, (lc, _) in placed.items() if lc == 1), default=None)
    if qpn is None:
        return check(False, "a QP of A on lcore 1 to trace")
    rc = err = None
    for dst in B_IPS:  # the flow the QP carries (the other refuses: no such QP on its source end)
        rc, out, err = trace("start", "--vni", 100, "--src", A_IP, "--dst", dst, "--qpn", qpn, "--seconds", 0.3,
                             "--fabric", f"{TAG}-fab")
        if rc == 0:
            break
    time.sleep(0.8)  # past the rule's 0.3 s everywhere
    rc2, out, err2 = trace("show", "--json", "--all")
    try:
        t = json.loads(out)
    except ValueError:
        t = {}
    rings = [x for x in t.get("sources", []) if x.get("process") == "tandem-rnic A"]
    lc1 = [x for x in rings if x.get("ring", "").endswith("tandem-trace.lcore1.ring")]
    sent = got = 0
    for p in t.get("timelines", []):
        a_stages = {e["stage"] for e in p["events"] if e["process"] == "tandem-rnic A"}
        # A's sends in the rule go to the QP's peer: only the lcore-1 QP makes them (B, whose receivers
        # are another tenant's vNICs, is not an end of tenant 100's flow and is not armed).
        sent += "tx" in a_stages
        got += "rx_core" in a_stages and p["dqpn"] == qpn and p["outcome"] == "delivered"
    check(rc == 0 and rc2 == 0 and lc1 and lc1[0].get("records", 0) > 0 and sent > 0 and got > 0,
          f"trace of A's QP {qpn:#x} on lcore 1: A's rings {[(x.get('ring', '').rsplit('/', 1)[-1], x.get('records')) for x in rings]}"
          f", {sent} packets it sent and {got} it accepted (delivered) traced (trace start {rc} {(err or '').strip()}, "
          f"show {rc2} {(err2 or '').strip()[:200]})")
    trace("stop")


def main():
    for n, y in YAML.items():
        with open(f"{D}/{n}.yaml", "w") as f:
            f.write(y)
    agent()
    steps = [("rnic", "add", "A", "--underlay-ip", "10.0.0.1", "--mac", A_MAC, "--path-base-port", 0xC000,
              "--path-count", 4),
             ("rnic", "add", "B", "--underlay-ip", "10.0.0.2", "--mac", "02:00:00:00:00:02", "--path-base-port",
              0xC000, "--path-count", 4),
             ("tenant", "add", 100, "t100"), ("tenant", "add", 200, "t200", "--share-partition-with", 100),
             ("vnic", "add", 1, "--vni", 100, "--rnic", "A", "--ip", A_IP, "--mac", "02:00:00:00:01:01"),
             ("vnic", "add", 2, "--vni", 200, "--rnic", "B", "--ip", B_IPS[0], "--mac", "02:00:00:00:01:02"),
             ("vnic", "add", 3, "--vni", 200, "--rnic", "B", "--ip", B_IPS[1], "--mac", "02:00:00:00:01:03"),
             ("mapping", "add", "--vni", 200, "--overlay-ip", A_IP, "--underlay-ip", "10.0.0.1",
              "--next-hop-mac", A_MAC, "--rnic", "A")]
    rcs = [ctl(*s)[0] for s in steps] + [set_route(i, 1)[0] for i in range(len(B_IPS))]
    check(rcs == [0] * len(rcs), f"configuration: 2 RNICs, 2 tenants, 3 vNICs, the receivers' routes (exit {set(rcs)})")

    fab = start(lab_fabric_argv(FABRIC, f"{TAG}-fab", D, ["--rx-queues", "2"]), "fabric", f"{TAG}-fab")
    wait_fabric_started(lab, fab)
    (wa, pre_a), (wb, pre_b) = worker("A", "h0.sock"), worker("B", "h1.sock")
    if not poll_until(active, 60):
        raise RuntimeError("the workers did not reach ACTIVE: " + json.dumps({n: ctl.channel(n) for n in "AB"})[:2000])
    check(True, "two 2-lcore workers in DPU mode reach ACTIVE with the agent")
    tel = {"A": Telemetry(pre_a, "/tandem/rnic/stats"), "B": Telemetry(pre_b, "/tandem/rnic/stats")}
    check(tel["A"].cmd("/tandem/rnic/stats")["lcores"] == 2, "worker A reports 2 lcores")

    watch = HeartbeatWatch(f"{CH}/tandem-A.chan")
    watch.start()
    flags = ["-q", str(QPS), "-s", "65536", "-D", "6", "--verify", "-m", "1024"]
    w = perf_pair("write", "write_bw", flags, B_IPS[0])
    r = perf_pair("read", "read_bw", flags, B_IPS[1])
    # Every QP of A routed (its RTR's punt resolved, on either lcore) before the routes move:
    # the moves are about traffic, not about a resolution racing a level-1 change.
    placed = {}

    def routed():
        placed.clear()
        placed.update(qps_by_lcore(tel["A"]))
        return len(placed) >= 2 * QPS and not any(p for _, p in placed.values())
    if not poll_until(routed, 60, poll=0.1):  # a loaded CI machine starts the applications late
        c = ctl.channel("A")
        per = [tel["A"].cmd(f"/tandem/rnic/stats,{k}") or {} for k in (0, 1)]
        print(f"not all routed: {placed}; agent's channel to A: punts {c.get('punts')}, stats {c.get('stats')}, "
              f"shadow v{c.get('table_version')}, BAR {c.get('bar', {}).get('table')}; A's lcores: "
              + "; ".join(str({k: v for k, v in p.items() if k.startswith("dpu_") or k.startswith("table_")
                               or k in ("qps_no_route", "live_qps")}) for p in per), flush=True)
    lcores = sorted({lc for lc, _ in placed.values()})
    waiting = sum(1 for _, p in placed.values() if p)
    check(len(placed) == 2 * QPS and lcores == [0, 1] and waiting == 0,
          f"A's {len(placed)} QPs live on lcores {lcores} (one application on each), each routed by the agent "
          f"({waiting} waiting)")

    trace_lcore1(placed)

    # Three route changes under traffic, each committed on A and used by both lcores' QPs.
    moved = []
    for g in (2, 3, 4):
        time.sleep(0.5)
        t0 = time.time()
        rcs = [set_route(i, g)[0] for i in range(len(B_IPS))]
        want = {i: {gen_mac(i, g)} for i in range(len(B_IPS))}
        installed = poll_until(lambda: a_route_macs() == want, 10, poll=0.01)
        moved.append((g, rcs, installed, round(time.time() - t0, 3)))
        if not installed:
            c = ctl.channel("A")
            print(f"A's routes at generation {g}: {a_route_macs()}; agent's channel to A: punts {c.get('punts')}, "
                  f"stats {c.get('stats')}, last error {c.get('last_error')!r}, BAR {c.get('bar', {}).get('counters')}")
    check(all(m[1] == [0, 0] and m[2] for m in moved),
          f"A's routes to {list(B_IPS)} moved three times under traffic, each new one installed "
          f"(generation, exits, installed, seconds: {moved})")

    cw, cr = finish_apps(lab, "write", w), finish_apps(lab, "read", r)
    watch.stop = True
    print(f"A's BAR heartbeat stood still at most {watch.still:.3f} s (this script's samples: {watch.gap:.3f} s apart "
          f"at most); the agent's channel to A: {ctl.channel('A').get('stats')}")
    check(cw == [0, 0], f"write_bw --verify, {QPS} QPs from A, every byte verified across the route changes (exit {cw})")
    check(cr == [0, 0], f"read_bw --verify, {QPS} QPs from A, every byte verified across the route changes (exit {cr})")

    cha = ctl.channel("A")
    shadow, bar_v = cha.get("table_version"), (cha.get("bar") or {}).get("table", {}).get("version")
    per = [tel["A"].cmd(f"/tandem/rnic/stats,{k}") or {} for k in (0, 1)]
    views = [p.get("dpu_view_version") for p in per]
    adopted = [p.get("dpu_views_adopted", 0) for p in per]
    handed = per[1].get("dpu_punts_handed", 0)
    held = per[0].get("dpu_commits_held", 0)
    check(shadow is not None and shadow == bar_v and views == [shadow, shadow],
          f"A's committed table: agent shadow v{shadow} == BAR v{bar_v} == the version each lcore reads at {views} "
          f"(COMMITTED waited for the other lcore {held} loop turns)")
    check(min(adopted) >= 4 and handed > 0,
          f"both lcores of A adopted the agent's versions ({adopted}) and lcore 1 handed its misses to lcore 0 "
          f"({handed}; repeats not handed {per[1].get('dpu_punts_repeated', 0)}, ring full "
          f"{per[1].get('dpu_punts_ring_full', 0)})")
    check(stop(wa) == 0 and stop(wb) == 0, "workers stop cleanly on SIGINT")
    try:
        with open(f"{D}/A.json") as f:
            j = json.load(f)
        lc = j["lcores"]
        check(len(lc) == 2 and all(x["worker"]["tx_packets"] > 0 for x in lc) and "dpu" in lc[1],
              f"A's --stats-json: per-lcore counters, both lcores sent (tx {[x['worker']['tx_packets'] for x in lc]}), "
              f"lcore 1's dpu rows {lc[1].get('dpu')}")
    except (OSError, ValueError, KeyError) as e:
        check(False, f"A's --stats-json readable: {e}")
    if failed:
        for n in ("agent", "fabric", "A", "B"):
            print(f"--- {n} log ---\n{lab.text(n)[-4000:]}")


run_checked("dpu_lcores", main, checks, lab, logs=("agent", "fabric", "A", "B"))
