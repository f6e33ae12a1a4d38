#!/usr/bin/python3
"""The lab in a box (run by scripts/demo.sh): two hosts' RNIC workers through
tandem-fabric with 4 paths of different delays, tandem-perf write_bw --verify
with per-packet spraying and credit-based congestion control, one path failed
and healed mid-run. Prints goodput, packets per path over time, reorder depth,
retransmissions and drops by reason. Everything it starts is stopped by PID,
and its hugepage files, runtime dirs and sockets are removed, also on Ctrl-C.

usage: lab_demo.py BUILD_DIR [--seconds N] [--spray P] [--cc P] [--keep]"""
import argparse
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("build")
ap.add_argument("--seconds", type=float, default=24, help="length of the write_bw run (default 24)")
ap.add_argument("--spray", default="round_robin", help="tandem-rnic --spray (default round_robin)")
ap.add_argument("--cc", default="credit", help="tandem-rnic --cc (default credit)")
ap.add_argument("--keep", action="store_true", help="keep the logs directory")
args = ap.parse_args()

FABRIC = f"{args.build}/apps/tandem-fabric/tandem-fabric"
RNIC = f"{args.build}/apps/tandem-rnic/tandem-rnic"
PERF = f"{args.build}/apps/tandem-perf/tandem-perf"
TAG = f"demo{os.getpid()}"
D = tempfile.mkdtemp(prefix="tandem-lab-")
PATHS = ["delay_us=5", "delay_us=10", "delay_us=20,loss=0.002", "delay_us=40"]
procs, prefixes = [], []


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    deadline = time.time() + 5
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for pre in prefixes:
        for f in glob.glob(f"/dev/hugepages/{pre}*"):
            try:
                os.unlink(f)
            except OSError:
                pass
        shutil.rmtree(f"/var/run/dpdk/{pre}", ignore_errors=True)
    if args.keep:
        print(f"logs kept in {D}")
    else:
        shutil.rmtree(D, ignore_errors=True)


def on_signal(signum, frame):
    print("\ninterrupted: stopping the lab")
    cleanup()
    sys.exit(130)


signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGTERM, on_signal)


def start(argv, name, prefix=None):
    if prefix:
        prefixes.append(prefix)
    p = subprocess.Popen(argv, stdout=open(f"{D}/{name}.log", "w"), stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def text(name):
    try:
        with open(f"{D}/{name}.log") as f:
            return f.read()
    except OSError:
        return ""


def wait_for(cond, what, timeout=30):
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Telemetry:
    """DPDK telemetry client (what dpdk-telemetry.py -f PREFIX talks to)."""

    def __init__(self, prefix):
        path = f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2"
        self.s = None
        t0 = time.time()
        while self.s is None:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.connect(path)
                self.s = s
            except OSError:
                s.close()
                if time.time() - t0 > 20:
                    raise RuntimeError(f"no telemetry socket at {path}")
                time.sleep(0.1)
        json.loads(self.s.recv(65536).decode())

    def cmd(self, c):
        self.s.send(c.encode())
        return json.loads(self.s.recv(1 << 22).decode()).get(c.split(",")[0])


M64 = (1 << 64) - 1


def ecmp_pick(src, dst, sport, n_paths, dport=4791, proto=17, seed=0):
    """common/fabric/ecmp.h, so each sprayed source port lands on its own fabric path."""
    ip = lambda s: int.from_bytes(socket.inet_aton(s), "big")
    x = ((ip(src) << 32) ^ ip(dst)) & M64
    x ^= (sport << 48) ^ (dport << 32) ^ (proto << 24) ^ seed
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    return (x & 0xFFFFFFFF) % n_paths


def path_ports(src, dst, n_paths):
    """The first UDP source port (RoCEv2 entropy range) that reaches each path."""
    ports = {}
    for sport in range(0xC000, 0x10000):
        ports.setdefault(ecmp_pick(src, dst, sport, n_paths), sport)
        if len(ports) == n_paths:
            break
    return [ports[k] for k in range(n_paths)]


def table_yaml(i, me, peer):
    ports = path_ports(me[0], peer[0], len(PATHS))
    return f"""underlay: {{ip: {me[0]}, mac: "02:00:00:00:00:0{i}", gateway_mac: "02:00:00:00:00:fe"}}
vnics: [{{id: 1, ip: {me[1]}, mac: "02:00:00:00:01:0{i}", vni: 100}}]
egress: [{{vnic: 1, remote_ip: {peer[1]}, underlay_ip: {peer[0]}, paths: {ports}}}]
ingress: [{{vnic: 1, underlay_src: {peer[0]}, remote_ip: {peer[1]}}}]
"""


def fabric_paths(tel):
    """Per-path counters, in path order ({"0": {...}, "1": {...}} over telemetry)."""
    r = tel.cmd("/tandem/fabric/paths") or {}
    return [r[k] for k in sorted(r, key=int)]


def path_delivered(paths):
    return [p.get("packets", 0) for p in paths]  # accepted for delivery; drops are counted apart


def main():
    a, b = ("10.0.0.1", "192.168.7.1"), ("10.0.0.2", "192.168.7.2")
    for i, me, peer, n in ((1, a, b, "A"), (2, b, a, "B")):
        with open(f"{D}/{n}.yaml", "w") as f:
            f.write(table_yaml(i, me, peer))

    print("== lab: tandem-fabric (memif server, 2 host ports, 4 ECMP paths)")
    for k, spec in enumerate(PATHS):
        print(f"   path {k}: {spec}")
    fab_pre = f"{TAG}-fab"
    argv = [FABRIC, "--route", f"{a[0]}=0", "--route", f"{b[0]}=1", "--paths", "4"]
    for k, spec in enumerate(PATHS):
        argv += ["--path", f"{k}:{spec}"]
    argv += ["--idle", "adaptive", "--link-wait-ms", "0", "--stats-json", f"{D}/fabric.json", "--",
             "--no-pci", f"--file-prefix={fab_pre}", "-l", "0", "-m", "64", "--log-level=lib.eal:error",
             f"--vdev=net_memif0,role=server,socket={D}/h0.sock",
             f"--vdev=net_memif1,role=server,socket={D}/h1.sock"]
    fab = start(argv, "fabric", fab_pre)
    wait_for(lambda: "tandem-fabric:" in text("fabric") or fab.poll() is not None, "the fabric")
    if fab.poll() is not None:
        raise RuntimeError("tandem-fabric exited:\n" + text("fabric"))
    ftel = Telemetry(fab_pre)

    print(f"== two RNIC workers (memif clients): spray {args.spray}, cc {args.cc}, IRN reordering, MTU 4096")
    workers = {}
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        pre = f"{TAG}-{n.lower()}"
        workers[n] = (start([RNIC, "--name", n, "--host-socket", f"{D}/{n}.rnic", "--table", f"{D}/{n}.yaml",
                             "--spray", args.spray, "--cc", args.cc, "--mtu", "4096", "--idle", "adaptive",
                             "--timeout-us", "20000", "--stats-json", f"{D}/{n}.json", "--",
                             "--no-pci", f"--file-prefix={pre}", "-l", "1", "-m", "128",
                             "--log-level=lib.eal:error", f"--vdev=net_memif0,role=client,socket={D}/{sock}"],
                            f"worker-{n}", pre), pre)
    wait_for(lambda: all(os.path.exists(f"{D}/{n}.rnic") for n in workers)
             or any(p.poll() is not None for p, _ in workers.values()), "the workers' host sockets")
    for n, (p, _) in workers.items():
        if p.poll() is not None:
            raise RuntimeError(f"worker {n} exited:\n" + text(f"worker-{n}"))
    wtel = {n: Telemetry(pre) for n, (_, pre) in workers.items()}

    secs = args.seconds
    print(f"== tandem-perf write_bw --verify: 64 KiB messages, 2 QPs, {secs:.0f} s "
          f"(path 1 fails at {secs / 4:.0f} s and heals at {secs / 2:.0f} s)")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = str(s.getsockname()[1])
    s.close()
    common = ["write_bw", "-p", port, "--json", "--timeout", "30", "--verify", "-s", "65536", "-q", "2", "-t", "16"]
    srv = start([PERF] + common + ["--device", f"{D}/A.rnic", "--gid", b[1].replace("7.2", "7.1")], "perf-server")
    time.sleep(0.3)
    cli = start([PERF] + common + ["-D", str(int(secs)), "--device", f"{D}/B.rnic", "--gid", b[1], "127.0.0.1"],
                "perf-client")

    print("\n   time   delivered per path in the last interval (packets)      event")
    print("   ----   path0     path1     path2     path3")
    t0 = time.time()
    last = path_delivered(fabric_paths(ftel))
    failed_at = healed_at = None
    interval = max(1.0, secs / 12)
    qps = {n: {} for n in wtel}
    while cli.poll() is None:
        time.sleep(interval)
        now = time.time() - t0
        event = ""
        if failed_at is None and now >= secs / 4:
            r = ftel.cmd("/tandem/fabric/path_set,1,down")
            failed_at, event = now, f"path 1 DOWN ({r.get('applied')})"
        elif failed_at is not None and healed_at is None and now >= secs / 2:
            r = ftel.cmd("/tandem/fabric/path_set,1,up")
            healed_at, event = now, f"path 1 UP ({r.get('applied')})"
        cur = path_delivered(fabric_paths(ftel))
        delta = [c - l for c, l in zip(cur, last)]
        last = cur
        print(f"   {now:4.0f}s " + "".join(f"{d:>9} " for d in delta) + f"  {event}", flush=True)
        for n, t in wtel.items():  # QPs go away with the application: keep the last view
            q = t.cmd("/tandem/rnic/qps")
            if q:
                qps[n] = q
        if now > secs + 60:
            raise RuntimeError("write_bw did not finish")
    srv.wait(30)

    paths = fabric_paths(ftel)
    for p, _ in workers.values():
        p.send_signal(signal.SIGINT)
    for p, _ in workers.values():
        p.wait(15)
    fab.send_signal(signal.SIGINT)
    fab.wait(15)

    def load(name):
        try:
            with open(f"{D}/{name}") as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    try:
        cj = json.loads(text("perf-client"))
        sj = json.loads(text("perf-server"))
    except ValueError:
        print(text("perf-client"), text("perf-server"))
        raise RuntimeError("tandem-perf did not print its JSON")

    print("\n== results")
    print(f"   write_bw: {cj.get('iterations')} x {cj.get('size')} B messages, "
          f"{cj.get('bw_avg_gbps', 0):.3f} Gb/s average, {cj.get('bw_peak_gbps', 0):.3f} Gb/s peak, "
          f"verify: client {cj.get('verify')}, server {sj.get('verify')}")
    print("   (goodput on a 2-core VM where 5 polling processes share 2 cores: read it relative, "
          "see benchmarks/RESULTS.md)")
    print("\n   fabric paths:                    delivered   dropped   (by reason)")
    for k, (p, d) in enumerate(zip(paths, path_delivered(paths))):
        drops = {r[5:]: v for r, v in p.items() if r.startswith("drop") and v}
        print(f"     path {k} ({PATHS[k]:<22}) {d:>10} {sum(drops.values()):>9}   {drops or ''}")
    print("\n   per QP (receiver A, sender B):  reorder depth max   retransmitted pkts   SACKs rx   timeouts")
    for n in ("A", "B"):
        for qpn, q in sorted(qps[n].items()):
            print(f"     {n} qp {qpn:>8}   {q.get('reorder_depth_max', '-'):>17} "
                  f"{q.get('retx_pkts', 0):>20} {q.get('sacks_rx', 0):>10} {q.get('timeouts', 0):>10}")
    print("\n   worker drops by stage and reason:")
    for n in ("A", "B"):
        st = load(f"{n}.json")
        drops = st.get("drops", {})
        flat = {f"{stage}.{r}": v for stage, rs in drops.items() if isinstance(rs, dict) for r, v in rs.items() if v}
        w = st.get("worker", {})
        print(f"     {n}: tx {w.get('tx_packets', 0)} frames ({w.get('tx_retransmits', 0)} retransmissions), "
              f"rx accepted {w.get('rx_accepted', 0)}; drops: {flat or 'none'}")
    ok = cj.get("verify") == "ok" and sj.get("verify") == "ok" and cli.returncode == 0
    print("\n== " + ("every byte verified: OK" if ok else "FAILED: see logs"))
    return 0 if ok else 1


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    except Exception as e:  # a clear line, then the logs' tails, then cleanup
        print(f"lab demo failed: {e}")
        for name in ("fabric", "worker-A", "worker-B", "perf-server", "perf-client"):
            t = text(name)
            if t:
                print(f"--- {name} (last lines) ---\n" + "\n".join(t.splitlines()[-8:]))
    finally:
        cleanup()
    sys.exit(rc)
