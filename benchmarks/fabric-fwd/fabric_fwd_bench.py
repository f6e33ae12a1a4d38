"""fabric-fwd benchmark. Both contenders get the same port: net_pcap with
infinite_rx (replays 256 RoCEv2 packets from memory, one copy per packet)
and tx_drop, forwarded back out of the same port on one lcore. The rate is
the port's opackets delta over a fixed window, read through DPDK telemetry
(/ethdev/stats) the same way for both, after a warm-up."""
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

from scapy.all import IP, UDP, Ether, Raw, wrpcap
from scapy.contrib.roce import BTH


def telemetry(prefix, timeout=20.0):
    path = f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2"
    deadline = time.time() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect(path)
            s.recv(65536)
            return s
        except OSError:
            s.close()
            if time.time() > deadline:
                raise RuntimeError(f"no telemetry at {path}")
            time.sleep(0.1)


def opackets(s):
    s.send(b"/ethdev/stats,0")
    r = json.loads(s.recv(1 << 20).decode())["/ethdev/stats"]
    return r["opackets"] if r else None


def measure(argv, prefix, warmup, seconds, log):
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        s = telemetry(prefix)
        deadline = time.time() + 20
        while opackets(s) in (None, 0):
            if p.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{argv[0]} did not start forwarding (see {log.name})")
            time.sleep(0.1)
        time.sleep(warmup)
        t0, n0 = time.monotonic(), opackets(s)
        time.sleep(seconds)
        t1, n1 = time.monotonic(), opackets(s)
        return (n1 - n0) / (t1 - t0) / 1e6
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        for f in glob.glob(f"/dev/hugepages/{prefix}*"):
            os.unlink(f)
        shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fabric", required=True)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    a = ap.parse_args()
    testpmd = shutil.which("dpdk-testpmd")
    if not os.access(a.fabric, os.X_OK) or testpmd is None:
        sys.exit(f"fabric-fwd: need {a.fabric} (build it) and dpdk-testpmd")

    tmp = tempfile.mkdtemp(prefix="tandem-bench-fwd-")
    pcap = f"{tmp}/in.pcap"
    wrpcap(pcap, [Ether() / IP(src="10.0.0.1", dst="10.0.0.2", tos=2) /
                  UDP(sport=49152 + i, dport=4791) / BTH(opcode=10, dqpn=3, psn=i) / Raw(b"\x00" * 64)
                  for i in range(256)])
    vdev = f"--vdev=net_pcap0,rx_pcap={pcap},infinite_rx=1"
    tag = os.getpid()
    results = {}
    with open(f"{tmp}/log", "w") as log:
        pre = f"tandem-bench-fwd-tp-{tag}"
        results["baseline"] = measure(
            [testpmd, "-l", "0,1", "--no-pci", f"--file-prefix={pre}", "-m", "128", vdev, "--",
             "--forward-mode=io", "--port-topology=loop", "--nb-cores=1", "--total-num-mbufs=8192",
             "--stats-period=100"], pre, a.warmup, a.seconds, log)
        pre = f"tandem-bench-fwd-fab-{tag}"
        results["ours"] = measure(
            [a.fabric, "--route", "10.0.0.2=0", "--paths", "4", "--no-pdump", "--",
             "--no-pci", f"--file-prefix={pre}", "-l", "1", "-m", "128", vdev], pre, a.warmup, a.seconds, log)
        pre = f"tandem-bench-fwd-fabd-{tag}"
        results["ours_delay_10us"] = measure(
            [a.fabric, "--route", "10.0.0.2=0", "--paths", "4", "--path-default", "delay_us=10", "--no-pdump",
             "--", "--no-pci", f"--file-prefix={pre}", "-l", "1", "-m", "128", vdev], pre, a.warmup, a.seconds,
            log)
    shutil.rmtree(tmp, ignore_errors=True)
    out = {"bench": "fabric-fwd", "unit": "Mpps", "ours": round(results["ours"], 3),
           "baseline": round(results["baseline"], 3), "baseline_name": "dpdk-testpmd io (same vdev)",
           "ratio": round(results["ours"] / results["baseline"], 3),
           "ours_delay_10us": round(results["ours_delay_10us"], 3), "seconds": a.seconds,
           "vdev": "net_pcap infinite_rx + tx_drop, 118-byte RoCEv2 packets, 1 lcore"}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{'forwarder':<42} {'Mpps':>8} {'ratio':>7}")
        print(f"{'dpdk-testpmd io (baseline)':<42} {out['baseline']:>8.3f} {1.0:>7.2f}")
        print(f"{'tandem-fabric, 4 paths, no impairment':<42} {out['ours']:>8.3f} {out['ratio']:>7.2f}")
        print(f"{'tandem-fabric, 4 paths, 10 us delay':<42} {out['ours_delay_10us']:>8.3f} "
              f"{out['ours_delay_10us'] / out['baseline']:>7.2f}")


if __name__ == "__main__":
    main()
