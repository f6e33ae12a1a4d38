"""Line rate per lcore (issue 21): runs tx_pipeline_bench and rx_pipeline_bench
on one lcore at 1 KiB and 4 KiB WRITEs (4 KiB both as 4 frames at MTU 1024,
the benches' default, and as one frame at MTU 4096, what 100-400 GbE RoCE
fabrics run), the lab's policies, and prints docs/line-rate.md's table:
payload Gb/s per lcore (packets/s x payload per packet x 8) and the lcores a
100, 200 and 400 GbE port needs, ceil(port Gb/s / Gb/s per lcore). Each row
is the fastest of --repeats runs (other work on the shared VM's 2 CPUs only
ever slows a run).

usage: python3 benchmarks/common/line_rate.py [--build build] [--seconds 3]
       [--repeats 3] [--json]"""
import argparse
import json
import math
import os
import subprocess
import sys

ROWS = ((1024, 1024), (4096, 1024), (4096, 4096))  # (WRITE payload, path MTU)
PORTS = (100, 200, 400)


def run(binary, seconds, payload, mtu, extra):
    r = subprocess.run([binary, "--seconds", str(seconds), "--payload", str(payload), "--mtu", str(mtu),
                        "--lcores", "1"] + extra, check=True, capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("TANDEM_BUILD", "build"))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    benches = {"TX": (os.path.join(a.build, "benchmarks/tx-pipeline/tx_pipeline_bench"), []),
               "RX": (os.path.join(a.build, "benchmarks/rx-pipeline/rx_pipeline_bench"), ["--no-control"])}
    for binary, _ in benches.values():
        if not os.access(binary, os.X_OK):
            sys.exit(f"line_rate: need {binary} (build it)")
    rows = []
    for direction, (binary, extra) in benches.items():
        for payload, mtu in ROWS:
            runs = [run(binary, a.seconds, payload, mtu, extra) for _ in range(max(1, a.repeats))]
            best = max(runs, key=lambda r: r["mpps"])
            mpps, cpu_ns = best["mpps"], best["ns_per_packet_cpu"]
            per_pkt = min(payload, mtu)  # payload bytes a frame carries
            gbps = mpps * per_pkt * 8 / 1000
            rows.append({"dir": direction, "payload": payload, "mtu": mtu, "frame_bytes": runs[0]["frame_bytes"],
                         "mpps": round(mpps, 3), "ns_per_packet_cpu": cpu_ns, "gbps_per_lcore": round(gbps, 1),
                         "lcores": {str(p): math.ceil(p / gbps) if gbps else None for p in PORTS},
                         "runs_mpps": [round(r["mpps"], 3) for r in runs]})
    if a.json:
        print(json.dumps({"seconds": a.seconds, "repeats": a.repeats, "rows": rows}))
        return
    print("| path | WRITE | MTU | frame B | Mpps / lcore | CPU ns / pkt | Gb/s / lcore | 100 GbE | 200 GbE | 400 GbE |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dir']} | {r['payload']} B | {r['mtu']} | {r['frame_bytes']} | {r['mpps']:.3f} | "
              f"{r['ns_per_packet_cpu']:.0f} | {r['gbps_per_lcore']:.1f} | "
              + " | ".join(str(r["lcores"][str(p)]) for p in PORTS) + " |")
    print(f"(fastest of {a.repeats} runs of {a.seconds:g} s each; runs' Mpps: "
          + "; ".join(f"{r['dir']} {r['payload']}/{r['mtu']}: {r['runs_mpps']}" for r in rows) + ")")


if __name__ == "__main__":
    main()
