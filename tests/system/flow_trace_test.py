"""System test: `tandemctl flow show` and `trace start|show` follow one virtual flow across the agent,
both RNICs and the fabric.

DPU mode, real processes: tandem-dpu, tandem-fabric (4 paths, path 2 drops 5 %) and workers A
(10.0.0.1) and B (10.0.0.2) spraying round robin with receiver-driven credits. Tenant red has
vNICs 192.168.7.1 on A and 192.168.7.2 on B; tandem-perf write_bw --verify runs 7.2 -> 7.1. While
it runs, `flow show --vni 100 --src 192.168.7.2 --dst 192.168.7.1` must report:

  * level 1: the tenant, both mappings and the store's version;
  * both RNICs: channel ACTIVE, the agent's shadow version equal to the one the RNIC committed,
    and the egress, ingress and vNIC entries of each end installed as level 1 derives them;
  * on each end the flow's QP with its credit state and its paths, each labelled with the fabric
    path its wire source port hashes to; the lossy fabric path visibly worse from the sender's
    end (the highest share of losses);
  * the fabric's per-path counters, with path 2's loss drops.
The same flow, named by RNIC and QP number (--rnic B --qpn Q), is found again, and bad names are
refused with a reason (exit 2).

Then `trace start` on the flow for 0.3 s, during which dpdk-testpmd injects one
frame through a third fabric port: a WRITE to A's QP of the flow "from" B's address but with
another partition's P_Key (a foreign tenant). `trace show --json --all` must place the packets:
  * copies dropped by the fabric (random_loss, all on path 2) and their retransmissions in the
    same timeline, the packet delivered by a later copy;
  * the foreign frame dropped at A's tenant check (rx_ingress, pkey_violation), not sent by a
    traced QP;
  * no packet without a verdict, except ones sent in the trace window's last milliseconds;
  * the stage latencies (tx -> fabric -> rx) positive: the clocks of three processes agree.
write_bw must still verify.

Then a new flow traced from its start: `trace start` on tenant blue's flow (192.168.8.2 -> 192.168.8.1)
before any of its QPs exist, then a short write_bw on it. Each end's RTR misses its egress entry and
punts it; `trace show --json` must show B's set-up as punt (tandem-rnic B) -> agent_resolve ->
txn_commit (tandem-dpu, the committed table version) -> the first packet delivered at A's core, and
the text form must print it.

usage: flow_trace_test.py TANDEM_DPU TANDEMCTL TANDEM_FABRIC TANDEM_RNIC TANDEM_PERF TANDEM_WIRE [--keep]"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Tandemctl, Telemetry, free_port, lab_fabric_argv,  # noqa: E402
                            lab_worker_argv, run_checked, wait_fabric_started, wait_for)


def run_checked_cmd(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {r.stderr.strip()}")

ap = argparse.ArgumentParser()
ap.add_argument("bins", nargs=6)
ap.add_argument("--keep", action="store_true")
opt = ap.parse_args()
DPU, CTL, FABRIC, RNIC, PERF, WIRE = opt.bins
TAG = f"flow{os.getpid()}"
lab = Lab(tmp_prefix="tandem-flow-trace-", keep=opt.keep)
D = lab.d
CH = f"{D}/ch"
os.makedirs(CH)
ctl = Tandemctl(CTL, f"{D}/ctl.sock")
checks = Checks()
check = checks.check
UNDERLAY = {"A": ("10.0.0.1", "02:00:00:00:00:01"), "B": ("10.0.0.2", "02:00:00:00:00:02")}
VNICS = [(1, "A", "192.168.7.1", "02:00:00:00:01:01"), (2, "B", "192.168.7.2", "02:00:00:00:01:02")]
BLUE = [(3, "A", "192.168.8.1", "02:00:00:00:02:01"), (4, "B", "192.168.8.2", "02:00:00:00:02:02")]
LOSSY = 2
FOREIGN_PSN = 0x7FFF00


def start_worker(n, sock):
    ip, mac = UNDERLAY[n]
    with open(f"{D}/{n}.yaml", "w") as f:
        f.write(f"underlay: {{ip: {ip}, mac: {mac}, gateway_mac: 02:00:00:00:00:fe}}\n")
    pre = f"{TAG}-{n.lower()}"
    return lab.start(lab_worker_argv(RNIC, n, pre, D, sock, [
        "--dpu-channel", f"{CH}/tandem-{n}.chan", "--spray", "round_robin", "--cc", "credit", "--mtu", "4096",
        "--timeout-us", "20000"]), n, pre)


def flow_show(*args):
    r = subprocess.run([CTL, "--socket", f"{D}/ctl.sock", "flow", "show", *map(str, args),
                        "--fabric", f"{TAG}-fab"], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def trace(*args):
    r = subprocess.run([CTL, "--socket", f"{D}/ctl.sock", "trace", *map(str, args)], capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


def start_injector(testpmd):
    """dpdk-testpmd io-forwarding a pcap into the fabric's third port, once told to start."""
    pre = f"{TAG}-inj"
    return lab.start([testpmd, "-l", "0,1", "--main-lcore=1", "--no-pci", f"--file-prefix={pre}", "-m", "64",
                      "--log-level=error", f"--vdev=net_pcap0,rx_pcap={D}/foreign.pcap,tx_pcap=/dev/null",
                      f"--vdev=net_memif0,role=client,socket={D}/inj.sock", "--", "-i", "--forward-mode=io",
                      "--no-flush-rx", "--no-lsc-interrupt", "--total-num-mbufs=2048"],
                     "testpmd", pre, stdin=subprocess.PIPE)


def trace_phase(f):
    a_qps = [q for e in f.get("ends", []) if e["rnic"] == "A" for q in e.get("qps", [])]
    target = a_qps[0]["host_qpn"] if a_qps else 0
    ftel = Telemetry(f"{TAG}-fab", ready="/tandem/fabric/paths")
    # A source port the fabric sends over a loss-free path: the frame must reach A's tenant check.
    sport = next(p for p in range(0xC000, 0xC100)
                 if (ftel.cmd(f"/tandem/fabric/route,{UNDERLAY['B'][0]},{UNDERLAY['A'][0]},{p}") or {}).get("path")
                 not in (None, LOSSY))
    with open(f"{D}/foreign.jsonl", "w") as spec:  # another partition's WRITE aimed at A's QP, "from" B
        spec.write(json.dumps({"opcode": "RC_RDMA_WRITE_ONLY", "src": UNDERLAY["B"][0], "dst": UNDERLAY["A"][0],
                               "src_mac": UNDERLAY["B"][1], "dst_mac": UNDERLAY["A"][1], "sport": sport,
                               "dqpn": target, "psn": FOREIGN_PSN, "pkey": "0x8002", "ack_req": True,
                               "reth": {"va": 4096, "rkey": 1, "len": 64}, "payload_len": 64}) + "\n")
    run_checked_cmd([WIRE, "encode", f"{D}/foreign.jsonl", f"{D}/foreign.pcap"])
    testpmd = start_injector(shutil.which("dpdk-testpmd"))
    wait_for(lambda: (ftel.cmd("/ethdev/link_status,2") or {}).get("status") == "UP" or testpmd.poll() is not None,
             "the injector's memif link did not come up", timeout=20)
    rc, out, err = trace("start", "--vni", 100, "--src", "192.168.7.2", "--dst", "192.168.7.1", "--seconds", 0.3,
                         "--fabric", f"{TAG}-fab")
    print(out)
    check(rc == 0 and out.count("armed") == 4, f"trace start armed both workers, the fabric and the agent (rc {rc}) {err.strip()}")
    testpmd.stdin.write(b"start\n")
    testpmd.stdin.flush()
    time.sleep(0.8)  # past the rule's 0.3 s everywhere
    testpmd.stdin.write(b"stop\nquit\n")
    testpmd.stdin.flush()
    lab.stop(testpmd)
    rc, out, err = trace("show", "--json", "--all")
    check(rc == 0, f"trace show --json (rc {rc}) {err.strip()}")
    t = json.loads(out) if rc == 0 else {}
    with open(f"{D}/trace.json", "w") as keep:  # for a failure's post-mortem (--keep)
        keep.write(out)
    srcs = {x.get("process", "?"): x.get("records", 0) for x in t.get("sources", [])}
    data = {k: v for k, v in srcs.items() if k != "tandem-dpu"}  # no flow is set up meanwhile: the agent may have none
    check(len(data) == 3 and all(n > 0 for n in data.values()) and "tandem-dpu" in srcs,
          f"records from the three processes on the packets' way, the agent's ring read too: {srcs}")
    tl = t.get("timelines", [])
    end = (t.get("window_ns") or [0, 0])[1]
    outcomes = t.get("outcomes", {})
    print(f"trace: {t.get('packets')} packets from {t.get('records')} records, outcomes {outcomes}, "
          f"drops {t.get('drops_at')}, hops {json.dumps(t.get('hops'))}")
    unplaced = [p for p in tl if p["outcome"] in ("unknown", "in_flight") and not p["foreign"]
                and end - p["events"][0]["t_ns"] > 20_000_000]
    check(not unplaced and outcomes.get("delivered", 0) > 50,
          f"every traced packet placed ({outcomes.get('delivered', 0)} delivered, {outcomes.get('edge', 0)} at the "
          f"window's edges; {len(unplaced)} without a verdict before its last 20 ms)")
    lost = [p for p in tl if any(e["stage"] == "fabric_drop" for e in p["events"])]
    check(lost and all(e["aux"] == LOSSY for p in lost for e in p["events"] if e["stage"] == "fabric_drop")
          and all(e["verdict"] == "random_loss" for p in lost for e in p["events"] if e["stage"] == "fabric_drop"),
          f"{len(lost)} packets lost a copy on the fabric, all on path {LOSSY} (random_loss)")
    healed = [p for p in lost if p["outcome"] == "delivered" and p["copies"] >= 2]
    check(healed and all(any(e["retransmit"] and e["copy"] >= 2 for e in p["events"]) for p in healed),
          f"{len(healed)} of them delivered by a retransmission linked to the original "
          f"(copies {sorted({p['copies'] for p in healed})})")
    fo = [p for p in tl if p["psn"] == FOREIGN_PSN and p["dqpn"] == target]
    check(len(fo) == 1 and fo[0]["foreign"] and fo[0].get("dropped_at", {}).get("stage") == "rx_ingress"
          and fo[0]["dropped_at"].get("reason") == "pkey_violation",
          f"the foreign frame: dropped at {fo[0].get('dropped_at') if fo else None}, not sent by a traced QP")
    tv = [e.get("table_version") for p in fo for e in p["events"] if e["stage"] == "rx_ingress"]
    check(tv and tv[0] >= 1, f"its tenant check read level-2 table version {tv}")
    hops = t.get("hops", {})
    check(all(h.get("p50_ns", 0) > 0 for k, h in hops.items() if k.startswith("tx>") or k.endswith(">rx_core"))
          and "tx>fabric_enqueue" in hops and "fabric_deliver>rx_core" in hops,
          f"stage latencies across the processes' clocks: {json.dumps(hops)}")
    rc, text, _ = trace("show", "--limit", 3)
    print(text)
    check(rc == 0 and "dropped at fabric_drop/random_loss" in text, "trace show prints the summary and timelines")
    check(trace("stop")[0] == 0, "trace stop")
    return testpmd


def setup_phase(port):
    """Tenant blue's flow traced before its QPs exist: B's punt, the agent's resolution and commit, the first packet."""
    rc, out, err = trace("start", "--vni", 200, "--src", "192.168.8.2", "--dst", "192.168.8.1", "--seconds", 5,
                         "--fabric", f"{TAG}-fab")
    print(out)
    check(rc == 0 and out.count("armed") == 4 and "tandem-dpu" in out,
          f"trace start on a flow with no QP armed the agent too (rc {rc}) {err.strip()}")
    base = ["nice", "-n", "10", PERF, "write_bw", "-p", str(port), "--json", "--timeout", "30"]
    srv = lab.start(base + ["--device", f"{D}/A.rnic", "--gid", "192.168.8.1"], "blue-server", separate_stderr=True)
    time.sleep(0.4)
    cli = lab.start(base + ["-D", "1", "-s", "4096", "--verify", "--device", f"{D}/B.rnic", "--gid", "192.168.8.2",
                            "127.0.0.1"], "blue-client", separate_stderr=True)
    cli_rc, srv_rc = cli.wait(60), srv.wait(30)
    check(cli_rc == 0 and srv_rc == 0, f"blue's write_bw ran (exit {cli_rc}/{srv_rc})")
    rc, out, err = trace("show", "--json")
    t = json.loads(out) if rc == 0 else {}
    with open(f"{D}/trace-setup.json", "w") as keep:
        keep.write(out)
    setups = t.get("setups", [])
    print(f"set-ups: {t.get('setup_outcomes')}, latencies {json.dumps(t.get('setup_hops'))}")
    b = [x for x in setups if x["src"] == UNDERLAY["B"][0] and x["overlay"] == "192.168.8.1"]
    ev = b[0]["events"] if b else []
    way = [(e["stage"], e["process"]) for e in ev]
    first = lambda st: next((i for i, e in enumerate(ev) if e["stage"] == st), None)  # noqa: E731
    # The agent records a commit when it hears of it, which may be after the first packet left: only
    # punt -> resolve -> commit and resolve -> delivered are ordered for certain.
    order = [first(st) for st in ("punt", "agent_resolve", "txn_commit", "rx_core")]
    check(len(b) == 1 and b[0]["outcome"] == "delivered" and None not in order
          and order[0] < order[1] < order[2] and order[1] < order[3]
          and ("punt", "tandem-rnic B") in way and ("agent_resolve", "tandem-dpu") in way
          and ("txn_commit", "tandem-dpu") in way and ("rx_core", "tandem-rnic A") in way,
          f"B's set-up: punt -> agent_resolve -> txn_commit -> delivered: {b[0]['outcome'] if b else None}, {way}")
    tv = [e.get("table_version", 0) for e in ev if e["stage"] == "txn_commit"]
    check(tv and tv[0] >= 1 and b[0]["dst"] == UNDERLAY["A"][0] and b[0].get("first_packet", {}).get("outcome") == "delivered",
          f"the commit names the table version ({tv}), the resolution A's underlay ({b[0]['dst'] if b else None})")
    a = [x for x in setups if x["src"] == UNDERLAY["A"][0] and x["overlay"] == "192.168.8.2"]
    check(a and a[0]["outcome"] in ("delivered", "committed"), f"A's set-up for its ACKs: {[x['outcome'] for x in a]}")
    rc, text, _ = trace("show", "--limit", 2)
    print(text)
    check(rc == 0 and "set-up of 10.0.0.2 vNIC 4 -> 192.168.8.1 (at 10.0.0.1): delivered" in text,
          "trace show prints the set-up timeline")
    check(trace("stop")[0] == 0, "trace stop (the agent too)")


def main():
    pre = f"{TAG}-dpu"
    agent = lab.start([DPU, "--db", f"{D}/dpu.sqlite", "--control-socket", f"{D}/ctl.sock", "--channel-dir", CH,
                       "--idle", "adaptive", "--", "--no-pci", "--no-huge", "-m", "64", f"--file-prefix={pre}",
                       "-l", "0", "--log-level=lib.eal:error"], "agent", pre)
    wait_for(lambda: ctl("tenant", "list")[0] == 0 or agent.poll() is not None, "the agent did not start")
    for n, (ip, mac) in UNDERLAY.items():
        ctl("rnic", "add", n, "--underlay-ip", ip, "--mac", mac, "--path-base-port", 0xC000, "--path-count", 4)
    check(ctl("tenant", "add", 100, "red")[0] == 0, "tenant red added")
    check(ctl("tenant", "add", 200, "blue")[0] == 0, "tenant blue added")
    for vni, vnics in ((100, VNICS), (200, BLUE)):
        for v, r, o, m in vnics:
            ctl("vnic", "add", v, "--vni", vni, "--rnic", r, "--ip", o, "--mac", m)
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D, ["--path", f"{LOSSY}:loss=0.05"])
                    + [f"--vdev=net_memif2,role=server,socket={D}/inj.sock"], "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    workers = [start_worker("A", "h0.sock"), start_worker("B", "h1.sock")]
    wait_for(lambda: all(ctl.channel(n).get("state") == "ACTIVE" for n in "AB")
             or any(p.poll() is not None for p in workers), "the workers did not reach ACTIVE", timeout=40)
    check(all(p.poll() is None for p in workers + [fab, agent]), "agent, fabric and both workers run")

    rc, out, err = flow_show("--vni", 100, "--src", "192.168.7.2", "--dst", "192.168.7.1")
    check(rc == 0 and "absent" in out, f"before any QP: the flow shows, its egress entries not installed yet (rc {rc})"
          + ("" if rc == 0 else f": {err.strip()}"))

    port = free_port()
    base = ["nice", "-n", "10", PERF, "write_bw", "-p", str(port), "--json", "--timeout", "30"]
    srv = lab.start(base + ["--device", f"{D}/A.rnic", "--gid", "192.168.7.1"], "server", separate_stderr=True)
    time.sleep(0.4)
    cli = lab.start(base + ["-D", "12", "-s", "65536", "--verify", "--device", f"{D}/B.rnic", "--gid",
                            "192.168.7.2", "127.0.0.1"], "client", separate_stderr=True)
    snap = {}

    def both_ends_busy():  # both QPs in RTS and the sender well into the transfer
        rc, out, err = flow_show("--vni", 100, "--src", "192.168.7.2", "--dst", "192.168.7.1", "--json")
        snap.update(rc=rc, err=err, f=json.loads(out) if rc == 0 else {})
        qps = {e["rnic"]: e.get("qps", []) for e in snap["f"].get("ends", [])}
        return (len(qps.get("A", [])) == 1 and len(qps.get("B", [])) == 1 and qps["A"][0]["state"] == "RTS"
                and qps["B"][0]["tx_pkts"] > 20000) or cli.poll() is not None
    wait_for(both_ends_busy, "the transfer did not start", timeout=30, poll=0.5)
    check(snap["rc"] == 0, f"flow show --json during the transfer (rc {snap['rc']}) {snap['err'].strip()}")
    f = snap["f"]
    qpn = ([q["host_qpn"] for e in f.get("ends", []) if e["rnic"] == "B" for q in e.get("qps", [])] or [0])[0]
    rc, out, err = flow_show("--rnic", "B", "--qpn", qpn, "--json")
    g = json.loads(out) if rc == 0 else {}
    check(rc == 0 and g.get("src") == "192.168.7.2" and g.get("dst") == "192.168.7.1",
          f"by RNIC B and QPN {qpn}: the same flow ({g.get('src')} -> {g.get('dst')}) {err.strip()}")
    rc_t, text, _ = flow_show("--vni", 100, "--src", "192.168.7.2", "--dst", "192.168.7.1")
    print(text)
    check(rc_t == 0 and "in sync" in text and "by fabric path" in text, "the text form prints the same view")
    testpmd = trace_phase(f)
    cli_rc, srv_rc = cli.wait(60), srv.wait(30)

    l1 = f.get("level1", {})
    check(l1.get("tenant", {}).get("name") == "red" and l1.get("store_version", 0) >= 5
          and len([m for m in l1.get("mappings", []) if "underlay_ip" in m]) == 2,
          f"level 1: tenant, both mappings, store version {l1.get('store_version')}")
    ends = {e["rnic"]: e for e in f.get("ends", [])}
    check(sorted(ends) == ["A", "B"], f"both RNICs' ends are shown: {sorted(ends)}")
    for n, e in ends.items():
        t, ch = e.get("table", {}), e.get("channel", {})
        st = {x["role"]: x["status"] for x in e.get("entries", [])}
        check(ch.get("state") == "ACTIVE" and t.get("in_sync") is True
              and t.get("committed", {}).get("version") == t.get("shadow_version"),
              f"{n}: shadow version {t.get('shadow_version')} = committed {t.get('committed', {}).get('version')}")
        check(st == {"egress": "installed", "ingress": "installed", "vnic": "installed"},
              f"{n}: the flow's entries as level 1 derives them: {st}")
        qps = e.get("qps", [])
        q = qps[0] if qps else {}
        check(len(qps) >= 1 and q.get("state") == "RTS" and q.get("cc") == "credit" and q.get("paths", 0) > 1,
              f"{n}: {len(qps)} QP(s) of the flow, state {q.get('state')}, cc {q.get('cc')}, {q.get('paths')} paths")
        labelled = [q[k].get("fabric_path") for k in q if k.startswith("path") and isinstance(q[k], dict)]
        check(labelled and None not in labelled, f"{n}: every path labelled with its fabric path: {labelled}")

    rows = {r["fabric_path"]: r for r in ends.get("B", {}).get("by_fabric_path", [])}
    share = {k: r["losses"] / max(1, r["pkts"]) for k, r in rows.items()}
    worst = max(share, key=share.get) if share else None
    check(worst == LOSSY and share[LOSSY] > 0,
          f"from the sender's end the lossy fabric path {LOSSY} is the worst: losses/packets "
          + ", ".join(f"{k}: {v:.4f}" for k, v in sorted(share.items())))
    fp = f.get("fabric", {}).get("paths", {}).get(str(LOSSY), {})
    check(fp.get("drop_random_loss", 0) > 0, f"the fabric's path {LOSSY} counted its loss drops ({fp.get('drop_random_loss')})")

    for args, why in ((("--vni", 7, "--src", "192.168.7.2", "--dst", "192.168.7.1"), "no tenant with VNI 7"),
                      (("--vni", 100, "--src", "10.9.9.9", "--dst", "10.9.9.8"), "is a vNIC"),
                      (("--rnic", "B", "--qpn", 999999), "no live QP")):
        rc, _, err = flow_show(*args)
        check(rc == 2 and why in err, f"refused with a reason: {' '.join(map(str, args))}: {err.strip()}")

    try:
        cj = json.loads(lab.text("client"))
    except ValueError:
        cj = {}
    check(cli_rc == 0 and srv_rc == 0 and cj.get("verify") == "ok",
          f"write_bw --verify over the lossy fabric: exit {cli_rc}/{srv_rc}, verify {cj.get('verify')}")
    setup_phase(free_port())
    for p in workers + [agent, fab, testpmd]:
        lab.stop(p)


run_checked("flow_trace", main, checks, lab, logs=("agent", "fabric", "A", "B"))
