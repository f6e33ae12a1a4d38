#!/usr/bin/python3
"""The whole system (run by scripts/demo.sh): tandem-dpu, the DPU control agent,
programs the two lab hosts' RNIC workers (tandem-rnic --dpu-channel) over its
shared-memory channels; tenants, RNICs and vNICs are created with tandemctl;
tandem-perf write_bw --verify runs between the vNICs of two tenants at once,
their routes installed by the agent when the workers punt the first miss;
a third tenant's vNIC tries to reach one of them and is refused (the punt is
denied by isolation, counted). Prints what tandemctl shows: RNIC channel
states, the level-2 tables the agent committed, punt counters.

One agent manages both workers: the lab's two "hosts" are one machine here;
in Pegasus each server's DPU manages that server's RNICs. Everything it
starts is stopped by PID; hugepage files, runtime dirs, sockets and channel
files are removed, also on Ctrl-C.

usage: dpu_demo.py BUILD_DIR [--seconds N] [--keep]"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from tandem_harness import Lab, free_port, lab_fabric_argv, lab_worker_argv, wait_fabric_started, wait_for  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("build")
ap.add_argument("--seconds", type=float, default=6, help="length of each write_bw run (default 6)")
ap.add_argument("--keep", action="store_true", help="keep the logs directory")
ap.add_argument("--png", default="/tmp/tandem-dpu-tenants.png",
                help="where to draw the tenants' goodput (default /tmp/tandem-dpu-tenants.png; '' for none)")
args = ap.parse_args()

B = args.build
DPU, CTL = f"{B}/apps/tandem-dpu/tandem-dpu", f"{B}/apps/tandemctl/tandemctl"
FABRIC, RNIC, PERF = (f"{B}/apps/tandem-fabric/tandem-fabric", f"{B}/apps/tandem-rnic/tandem-rnic",
                      f"{B}/apps/tandem-perf/tandem-perf")
TAG = f"dpudemo{os.getpid()}"

# (vnic id, tenant vni, rnic, overlay ip, mac)
TENANTS = [(100, "red"), (200, "blue"), (300, "green")]
VNICS = [(1, 100, "A", "192.168.7.1", "02:00:00:00:01:01"), (2, 100, "B", "192.168.7.2", "02:00:00:00:01:02"),
         (3, 200, "A", "192.168.8.1", "02:00:00:00:02:01"), (4, 200, "B", "192.168.8.2", "02:00:00:00:02:02"),
         (5, 300, "B", "192.168.9.2", "02:00:00:00:03:02")]
UNDERLAY = {"A": ("10.0.0.1", "02:00:00:00:00:01"), "B": ("10.0.0.2", "02:00:00:00:00:02")}

lab = Lab(tmp_prefix="tandem-dpu-demo-", graceful=True, keep=args.keep,
          on_signal=lambda s: print("\ninterrupted: stopping") or 130)
D = lab.d
CH = f"{D}/ch"
os.makedirs(CH)


def ctl(*a, show=False):
    argv = [CTL, "--socket", f"{D}/ctl.sock", *map(str, a)]
    r = subprocess.run(argv + ["--json"], capture_output=True, text=True)
    if show:
        print(f"   $ tandemctl {' '.join(map(str, a))}" + (f"   -> {r.stdout.strip() or r.stderr.strip()}"
                                                            if r.returncode else ""))
    try:
        return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {}
    except ValueError:
        return r.returncode, {"error": r.stdout + r.stderr}


def channel(rnic):
    rc, j = ctl("rnic", "show", rnic)
    return j.get("rnic", {}).get("channel", {}) if rc == 0 else {}


def write_yaml(n):
    ip, mac = UNDERLAY[n]
    # DPU mode: only the underlay identity; the worker learns its vNICs from the agent.
    lines = [f"underlay: {{ip: {ip}, mac: {mac}, gateway_mac: 02:00:00:00:00:fe}}"]
    with open(f"{D}/{n}.yaml", "w") as f:
        f.write("\n".join(lines) + "\n")


PORTS = set()


def perf(name, srv_gid, cli_gid, secs):
    port = free_port()
    while port in PORTS:  # two servers at once: free_port() may hand out the same port twice
        port = free_port()
    PORTS.add(port)
    port = str(port)
    common = ["write_bw", "-p", port, "--json", "--timeout", "20", "--verify", "-s", "65536"]
    srv = lab.start(["nice", "-n", "19", PERF] + common + ["--device", f"{D}/A.rnic", "--gid", srv_gid],
                    f"{name}-srv", separate_stderr=True)
    time.sleep(0.3)
    cli = lab.start(["nice", "-n", "19", PERF] + common + ["-D", str(secs), "--device", f"{D}/B.rnic",
                                                           "--gid", cli_gid, "127.0.0.1"],
                    f"{name}-cli", separate_stderr=True)
    return srv, cli


def draw_tenants(png, goodput):
    """The tenants' write_bw goodput side by side (matplotlib, no display)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("   (no matplotlib: no picture; scripts/setup.sh installs python3-matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    names = list(goodput)
    ax.bar(names, [goodput[n] for n in names], color=["tab:red", "tab:blue"][:len(names)])
    for i, n in enumerate(names):
        ax.text(i, goodput[n], f"{goodput[n]:.2f}", ha="center", va="bottom")
    ax.set_ylabel("write_bw goodput (Gb/s)")
    ax.set_title("tandem DPU mode: two tenants at once, verified")
    fig.tight_layout()
    try:
        fig.savefig(png, dpi=100)
        print(f"   picture: {png} (each tenant's goodput)")
    except OSError as e:
        print(f"   (could not write {png}: {e})")
    plt.close(fig)


def result(name, srv, cli, secs):
    for p in (cli, srv):
        try:
            p.wait(secs + 40)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    try:
        j = json.loads(lab.text(f"{name}-cli"))
    except ValueError:
        j = {}
    return cli.returncode, srv.returncode, j, lab.text(f"{name}-cli", "err").strip()


def main():
    secs = args.seconds
    print("== tandem-dpu: the DPU control agent (SQLite state, one channel file per RNIC)")
    pre = f"{TAG}-dpu"
    agent = lab.start([DPU, "--db", f"{D}/dpu.sqlite", "--control-socket", f"{D}/ctl.sock", "--channel-dir", CH,
                       "--idle", "adaptive", "--", "--no-pci", "--no-huge", "-m", "64", f"--file-prefix={pre}",
                       "-l", "0", "--log-level=lib.eal:error"], "agent", pre)
    wait_for(lambda: ctl("tenant", "list")[0] == 0 or agent.poll() is not None, "the agent did not start")
    if agent.poll() is not None:
        raise RuntimeError("tandem-dpu exited:\n" + lab.text("agent"))

    print("\n== tenants, RNICs and vNICs, with tandemctl")
    for n, (ip, mac) in UNDERLAY.items():
        ctl("rnic", "add", n, "--underlay-ip", ip, "--mac", mac, "--path-base-port", 0xC000, "--path-count", 4,
            show=True)
    for vni, name in TENANTS:
        ctl("tenant", "add", vni, name, show=True)
    for v, t, r, o, m in VNICS:
        ctl("vnic", "add", v, "--vni", t, "--rnic", r, "--ip", o, "--mac", m, show=True)
    print("   (a refused request changes nothing and exits 2:)")
    ctl("vnic", "add", 9, "--vni", 999, "--rnic", "A", "--ip", "192.168.7.9", "--mac", "02:00:00:00:09:09",
        show=True)

    print("\n== tandem-fabric (4 paths) and two tandem-rnic workers in DPU mode")
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D), "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    workers = []
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        write_yaml(n)
        workers.append(lab.start(lab_worker_argv(RNIC, n, f"{TAG}-{n.lower()}", D, sock, [
            "--dpu-channel", f"{CH}/tandem-{n}.chan", "--spray", "round_robin", "--mtu", "4096",
            "--timeout-us", "20000"]), n, f"{TAG}-{n.lower()}"))
    t0 = time.time()
    wait_for(lambda: all(channel(n).get("state") == "ACTIVE" for n in "AB")
             or any(p.poll() is not None for p in workers), "the workers did not reach ACTIVE", timeout=40)
    print(f"   both channels HELLO -> SYNC -> ACTIVE in {time.time() - t0:.1f} s")

    def vnic_entries():
        l2 = ctl("table", "dump", "--level", 2)[1].get("rnics", {})
        return {n: sorted((e["vnic"], e["overlay_ip"]) for e in l2.get(n, {}).get("entries", [])
                          if e.get("kind") == "vnic") for n in "AB"}
    want = {n: sorted((v, o) for v, t, r, o, m in VNICS if r == n) for n in "AB"}
    wait_for(lambda: vnic_entries() == want, "the workers did not get their vNIC entries", timeout=20)
    for n, vs in vnic_entries().items():
        print(f"   worker {n} learned its vNICs from the agent (level-2 vNIC entries, not its YAML): "
              + ", ".join(f"{v}={o}" for v, o in vs))
    rc, rl = ctl("rnic", "list")
    for r in rl.get("rnics", []):
        c = r.get("channel", r)
        print(f"   rnic {r.get('name')}: {c.get('state')}, protocol v{c.get('protocol_version', '?')}, "
              f"table version {c.get('table_version')}, {c.get('table_entries')} entries")

    print(f"\n== traffic: tenant red 192.168.7.2 -> 192.168.7.1 and tenant blue 192.168.8.2 -> 192.168.8.1, "
          f"write_bw --verify, {secs:.0f} s each, at the same time")
    red = perf("red", "192.168.7.1", "192.168.7.2", secs)
    blue = perf("blue", "192.168.8.1", "192.168.8.2", secs)
    goodput = {}
    for name, (srv, cli) in (("red", red), ("blue", blue)):
        cc, sc, j, err = result(name, srv, cli, secs)
        goodput[name] = j.get("bw_avg_gbps", 0) if cc == 0 and sc == 0 else 0
        print(f"   {name:5}: exit {cc}/{sc}, {j.get('iterations', 0)} x 64 KiB, {j.get('bw_avg_gbps', 0):.3f} Gb/s, "
              f"verify client {j.get('verify')}, server {j.get('server_verify')}" + (f"  ({err})" if err else ""))

    if args.png:
        draw_tenants(args.png, goodput)
    print("\n== isolation: tenant green's vNIC 192.168.9.2 (on B) tries to reach red's 192.168.7.1 (on A)")
    def denied():
        return sum(channel(n).get("punts", {}).get("denied", 0) for n in "AB")
    denied0 = denied()
    srv, cli = perf("green", "192.168.7.1", "192.168.9.2", 2)
    cc, sc, j, err = result("green", srv, cli, 2)
    serr = lab.text("green-srv", "err").strip()
    print(f"   tandem-perf client exit {cc}: {err.splitlines()[-1] if err else '(no error?)'}")
    print(f"   tandem-perf server exit {sc}: {serr.splitlines()[-1] if serr else '(no error?)'}")
    print(f"   agent: punts denied by isolation (both RNICs) {denied0} -> {denied()}; per RNIC: " +
          "; ".join(f"{n} {json.dumps(channel(n).get('punts', {}))}" for n in "AB"))

    print("\n== what the agent committed: level-2 tables (tandemctl table dump --level 2)")
    rc, l2 = ctl("table", "dump", "--level", 2)
    for n, t in sorted(l2.get("rnics", {}).items()):
        entries = t.get("entries", [])
        print(f"   rnic {n}: version {t.get('version')}, {len(entries)} entries")
        for e in entries[:8]:
            print(f"     {json.dumps(e)}")
    t0 = time.time()
    states = {n: channel(n).get("state") for n in "AB"}
    while any(v != "ACTIVE" for v in states.values()) and time.time() - t0 < 10:
        time.sleep(0.2)
        states = {n: channel(n).get("state") for n in "AB"}
    for n in "AB":
        c = channel(n)
        print(f"   rnic {n}: state {c.get('state')}, table version {c.get('table_version')} "
              f"(BAR {c.get('bar', {}).get('table', {}).get('version')}), stats {json.dumps(c.get('stats', {}))}")
    for p in workers + [agent]:
        lab.stop(p)
    lab.stop(fab)
    print("\n== tandem-dpu, two workers and the fabric stopped cleanly")


try:
    main()
except Exception as e:
    print(f"dpu demo failed: {e}")
    for n in ("agent", "fabric", "A", "B"):
        print(f"--- {n} log ---\n{lab.text(n)[-3000:]}")
    lab.cleanup()
    sys.exit(1)
lab.cleanup()
