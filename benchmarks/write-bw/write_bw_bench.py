"""write-bw: tandem-perf write_bw through the real path (tandem-fabric as memif
server, zero impairment, 4 paths; two tandem-rnic workers, one lcore each)
against the same tool over a loopback worker (WQEs executed by memcpy between
the two applications' memory: the host interface alone, no transport, no
packets), measured in the same run. The ratio is the share of the
host-interface ceiling the transport + DPDK + fabric path delivers here.

Everything started is stopped by PID; hugepage files and runtime dirs of the
file prefixes used are removed, also on failure."""
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

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--fabric", required=True)
ap.add_argument("--rnic", required=True)
ap.add_argument("--perf", required=True)
ap.add_argument("--loopback", required=True)
ap.add_argument("--json", action="store_true")
ap.add_argument("--seconds", type=float, default=3.0)
ap.add_argument("--size", type=int, default=65536)
ap.add_argument("--qps", type=int, default=1)
args = ap.parse_args()

TAG = f"wbw{os.getpid()}"
D = tempfile.mkdtemp(prefix="tandem-write-bw-")
procs, prefixes = [], []


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for pre in prefixes:
        for f in glob.glob(f"/dev/hugepages/{pre}*"):
            try:
                os.unlink(f)
            except OSError:
                pass
        shutil.rmtree(f"/var/run/dpdk/{pre}", ignore_errors=True)
    shutil.rmtree(D, ignore_errors=True)


def on_signal(signum, frame):
    cleanup()
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)


def start(argv, name, prefix=None):
    if prefix:
        prefixes.append(prefix)
    p = subprocess.Popen(argv, stdout=open(f"{D}/{name}.log", "w"), stderr=open(f"{D}/{name}.err", "w"))
    procs.append(p)
    return p


def text(name, ext="log"):
    try:
        with open(f"{D}/{name}.{ext}") as f:
            return f.read()
    except OSError:
        return ""


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait_for(cond, what, timeout=30):
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout:
            raise RuntimeError(what)
        time.sleep(0.05)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def write_bw(name, sock_a, sock_b, gid_a=None, gid_b=None):
    port = free_port()
    common = ["write_bw", "-p", str(port), "--json", "--timeout", "30"]
    srv = start([args.perf] + common + ["--device", sock_a] + (["--gid", gid_a] if gid_a else []), f"{name}-srv")
    cli = start([args.perf] + common + ["--device", sock_b, "-s", str(args.size), "-q", str(args.qps),
                                        "-D", str(args.seconds)] + (["--gid", gid_b] if gid_b else [])
                + ["127.0.0.1"], f"{name}-cli")
    for p in (cli, srv):
        p.wait(args.seconds + 90)
    if cli.returncode != 0 or srv.returncode != 0:
        raise RuntimeError(f"{name}: tandem-perf failed:\n{text(name + '-cli', 'err')}{text(name + '-srv', 'err')}")
    return json.loads(text(f"{name}-cli"))


def table_yaml(me, peer):
    return f"""underlay:
  ip: {me[1]}
  mac: 02:00:00:00:00:0{me[0]}
  gateway_mac: 02:00:00:00:00:fe
vnics:
  - {{id: 1, ip: {me[2]}, mac: 02:00:00:00:01:0{me[0]}, vni: 100}}
egress:
  - {{vnic: 1, remote_ip: {peer[2]}, underlay_ip: {peer[1]}, paths: 4}}
ingress:
  - {{vnic: 1, underlay_src: {peer[1]}, remote_ip: {peer[2]}}}
"""


def main():
    # Baseline: the loopback worker.
    lb = start([args.loopback, f"{D}/lb.sock"], "loopback")
    wait_for(lambda: os.path.exists(f"{D}/lb.sock"), "loopback worker did not start")
    base = write_bw("base", f"{D}/lb.sock", f"{D}/lb.sock")
    stop(lb)

    # Ours: fabric + two workers.
    hosts = [(1, "10.0.0.1", "192.168.7.1"), (2, "10.0.0.2", "192.168.7.2")]
    for me, peer, n in ((hosts[0], hosts[1], "A"), (hosts[1], hosts[0], "B")):
        with open(f"{D}/{n}.yaml", "w") as f:
            f.write(table_yaml(me, peer))
    fab_pre, a_pre, b_pre = f"{TAG}-fab", f"{TAG}-a", f"{TAG}-b"
    fab = start([args.fabric, "--route", "10.0.0.1=0", "--route", "10.0.0.2=1", "--paths", "4",
                 "--idle", "adaptive", "--link-wait-ms", "0", "--", "--no-pci", f"--file-prefix={fab_pre}",
                 "-l", "0", "-m", "64", "--log-level=lib.eal:error",
                 f"--vdev=net_memif0,role=server,socket={D}/h0.sock",
                 f"--vdev=net_memif1,role=server,socket={D}/h1.sock"], "fabric", fab_pre)
    wait_for(lambda: "tandem-fabric:" in text("fabric") + text("fabric", "err"), "fabric did not start")
    workers = []
    for n, pre, sock in (("A", a_pre, "h0.sock"), ("B", b_pre, "h1.sock")):
        workers.append(start([args.rnic, "--name", n, "--host-socket", f"{D}/{n}.rnic", "--table", f"{D}/{n}.yaml",
                              "--idle", "adaptive", "--mtu", "4096", "--", "--no-pci", f"--file-prefix={pre}",
                              "-l", "1", "-m", "128", "--log-level=lib.eal:error",
                              f"--vdev=net_memif0,role=client,socket={D}/{sock}"], n, pre))
    wait_for(lambda: os.path.exists(f"{D}/A.rnic") and os.path.exists(f"{D}/B.rnic"), "workers did not start")
    ours = write_bw("ours", f"{D}/A.rnic", f"{D}/B.rnic", "192.168.7.1", "192.168.7.2")
    for w in workers:
        stop(w)
    stop(fab)

    o, b = ours["bw_avg_gbps"], base["bw_avg_gbps"]
    ratio = o / b if b > 0 else 0.0
    if args.json:
        print(json.dumps({"bench": "write-bw", "unit": "Gb/s", "ours": round(o, 4), "baseline": round(b, 4),
                          "baseline_name": "tandem-perf over the loopback worker (memcpy, no transport)",
                          "ratio": round(ratio, 4), "size": args.size, "qps": args.qps, "seconds": args.seconds,
                          "ours_mpps": ours["msg_rate_mpps"], "baseline_mpps": base["msg_rate_mpps"],
                          "ours_peak_gbps": ours["bw_peak_gbps"], "ours_messages": ours["messages"]}))
    else:
        print(f"write-bw: tandem-perf write_bw, {args.size} B messages, {args.qps} QP(s), {args.seconds:g} s each")
        print(f"  {'path':<58} {'Gb/s avg':>9} {'Mpps':>9}")
        print(f"  {'tandem-fabric + 2 x tandem-rnic, memif, MTU 4096 (ours)':<58} {o:>9.3f} {ours['msg_rate_mpps']:>9.4f}")
        print(f"  {'loopback worker, memcpy, no transport (baseline)':<58} {b:>9.3f} {base['msg_rate_mpps']:>9.4f}")
        print(f"  {'ratio ours/baseline':<58} {ratio:>9.3f}")


try:
    main()
    rc = 0
except Exception as e:
    print(f"write-bw: {e}", file=sys.stderr)
    for n in ("fabric", "A", "B"):
        sys.stderr.write(f"--- {n} ---\n{text(n)}{text(n, 'err')}")
    rc = 1
finally:
    cleanup()
sys.exit(rc)
