"""System test: `tandemctl flow show` follows one virtual flow across the agent, both RNICs and the fabric.

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
refused with a reason (exit 2). write_bw must still verify.

usage: flow_show_test.py TANDEM_DPU TANDEMCTL TANDEM_FABRIC TANDEM_RNIC TANDEM_PERF [--keep]"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Tandemctl, free_port, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started, wait_for)

ap = argparse.ArgumentParser()
ap.add_argument("bins", nargs=5)
ap.add_argument("--keep", action="store_true")
opt = ap.parse_args()
DPU, CTL, FABRIC, RNIC, PERF = opt.bins
TAG = f"flow{os.getpid()}"
lab = Lab(tmp_prefix="tandem-flow-show-", keep=opt.keep)
D = lab.d
CH = f"{D}/ch"
os.makedirs(CH)
ctl = Tandemctl(CTL, f"{D}/ctl.sock")
checks = Checks()
check = checks.check
UNDERLAY = {"A": ("10.0.0.1", "02:00:00:00:00:01"), "B": ("10.0.0.2", "02:00:00:00:00:02")}
VNICS = [(1, "A", "192.168.7.1", "02:00:00:00:01:01"), (2, "B", "192.168.7.2", "02:00:00:00:01:02")]
LOSSY = 2


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


def main():
    pre = f"{TAG}-dpu"
    agent = lab.start([DPU, "--db", f"{D}/dpu.sqlite", "--control-socket", f"{D}/ctl.sock", "--channel-dir", CH,
                       "--idle", "adaptive", "--", "--no-pci", "--no-huge", "-m", "64", f"--file-prefix={pre}",
                       "-l", "0", "--log-level=lib.eal:error"], "agent", pre)
    wait_for(lambda: ctl("tenant", "list")[0] == 0 or agent.poll() is not None, "the agent did not start")
    for n, (ip, mac) in UNDERLAY.items():
        ctl("rnic", "add", n, "--underlay-ip", ip, "--mac", mac, "--path-base-port", 0xC000, "--path-count", 4)
    check(ctl("tenant", "add", 100, "red")[0] == 0, "tenant red added")
    for v, r, o, m in VNICS:
        ctl("vnic", "add", v, "--vni", 100, "--rnic", r, "--ip", o, "--mac", m)
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D, ["--path", f"{LOSSY}:loss=0.05"]), "fabric", fab_pre)
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
    cli = lab.start(base + ["-D", "10", "-s", "65536", "--verify", "--device", f"{D}/B.rnic", "--gid",
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
    for p in workers + [agent, fab]:
        lab.stop(p)


run_checked("flow_show", main, checks, lab, logs=("agent", "fabric", "A", "B"))
