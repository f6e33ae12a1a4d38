"""fabric-fwd benchmark. Both contenders get the same port: net_pcap with
infinite_rx (replays 256 RoCEv2 packets from memory, one copy per packet)
and tx_drop, forwarded back out of the same port on one lcore. The rate is
the port's opackets delta over a fixed window, read through DPDK telemetry
(/ethdev/stats) the same way for both, after a warm-up."""
import argparse
import json
import os
import shutil
import subprocess
import sys

from scapy.all import IP, UDP, Ether, Raw, wrpcap
from scapy.contrib.roce import BTH

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib"))
from tandem_harness import Lab, measure_opackets  # noqa: E402


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

    lab = Lab(tmp_prefix="tandem-bench-fwd-")
    try:
        run(lab, a, testpmd)
    except BaseException:
        lab.keep = True  # an error names a log in it
        raise
    finally:
        lab.cleanup()


def run(lab, a, testpmd):
    tmp = lab.d
    pcap = f"{tmp}/in.pcap"
    wrpcap(pcap, [Ether() / IP(src="10.0.0.1", dst="10.0.0.2", tos=2) /
                  UDP(sport=49152 + i, dport=4791) / BTH(opcode=10, dqpn=3, psn=i) / Raw(b"\x00" * 64)
                  for i in range(256)])
    vdev = f"--vdev=net_pcap0,rx_pcap={pcap},infinite_rx=1"
    tag = os.getpid()
    results = {}
    with open(f"{tmp}/log", "w") as log:
        pre = f"tandem-bench-fwd-tp-{tag}"
        results["baseline"] = measure_opackets(
            lab, [testpmd, "-l", "0,1", "--no-pci", f"--file-prefix={pre}", "-m", "128", vdev, "--",
                  "--forward-mode=io", "--port-topology=loop", "--nb-cores=1", "--total-num-mbufs=8192",
                  "--stats-period=100"], pre, a.warmup, a.seconds, log)
        pre = f"tandem-bench-fwd-fab-{tag}"
        results["ours"] = measure_opackets(
            lab, [a.fabric, "--route", "10.0.0.2=0", "--paths", "4", "--no-pdump", "--",
                  "--no-pci", f"--file-prefix={pre}", "-l", "1", "-m", "128", vdev], pre, a.warmup, a.seconds, log)
        pre = f"tandem-bench-fwd-fabd-{tag}"
        results["ours_delay_10us"] = measure_opackets(
            lab, [a.fabric, "--route", "10.0.0.2=0", "--paths", "4", "--path-default", "delay_us=10", "--no-pdump",
                  "--", "--no-pci", f"--file-prefix={pre}", "-l", "1", "-m", "128", vdev], pre, a.warmup, a.seconds,
            log)
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
