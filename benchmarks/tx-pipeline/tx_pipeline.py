"""tx-pipeline benchmark driver: our transmit pipeline (tx_pipeline_bench,
in process, one lcore) against dpdk-testpmd --forward-mode=txonly on the same
vdev type (net_null, one forwarding lcore, 64-byte frames from a template),
measured in the same run. testpmd's rate is its port's opackets delta over
the window, read through /ethdev/stats telemetry after a warm-up."""
import argparse
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time


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


def testpmd_txonly(testpmd, seconds, warmup):
    pre = f"txbench-pmd-{os.getpid()}"
    p = subprocess.Popen([testpmd, "-l", "0,1", "--no-pci", "--no-huge", "-m", "256", f"--file-prefix={pre}",
                          "--vdev=net_null0", "--log-level=error", "--", "--forward-mode=txonly", "--nb-cores=1",
                          "--total-num-mbufs=8192", "--txpkts=64", "--stats-period=100"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        s = telemetry(pre)
        deadline = time.time() + 20
        while opackets(s) in (None, 0):
            if p.poll() is not None or time.time() > deadline:
                raise RuntimeError("dpdk-testpmd did not start transmitting")
            time.sleep(0.1)
        time.sleep(warmup)
        a, t0 = opackets(s), time.time()
        time.sleep(seconds)
        b, t1 = opackets(s), time.time()
        return (b - a) / (t1 - t0) / 1e6
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        shutil.rmtree(f"/var/run/dpdk/{pre}", ignore_errors=True)
        for f in glob.glob(f"/dev/hugepages/{pre}*"):
            os.unlink(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    a = ap.parse_args()
    testpmd = shutil.which("dpdk-testpmd")
    if not os.access(a.bench, os.X_OK) or testpmd is None:
        sys.exit(f"tx-pipeline: need {a.bench} (build it) and dpdk-testpmd")
    ours = {}
    for name, extra in (("64", ["--payload", "64"]), ("1024", ["--payload", "1024"]),
                        ("1024-copy", ["--payload", "1024", "--tx-copy"])):
        r = subprocess.run([a.bench, "--seconds", str(a.seconds)] + extra, check=True, capture_output=True, text=True)
        ours[name] = json.loads(r.stdout.strip().splitlines()[-1])
    base = testpmd_txonly(testpmd, a.seconds, a.warmup)
    out = {"bench": "tx-pipeline", "unit": "Mpps", "ours": round(ours["64"]["mpps"], 3),
           "baseline": round(base, 3), "baseline_name": "dpdk-testpmd txonly 64 B (net_null)",
           "ratio": round(ours["64"]["mpps"] / base, 3) if base else None,
           "ours_1024_zero_copy_mpps": round(ours["1024"]["mpps"], 3),
           "ours_1024_copy_mpps": round(ours["1024-copy"]["mpps"], 3), "seconds": a.seconds}
    if a.json:
        print(json.dumps(out))
        return
    print(f"{'transmitter (one lcore, net_null)':<52} {'Mpps':>8} {'ratio':>7}")
    print(f"{'dpdk-testpmd txonly, 64 B frames (baseline)':<52} {base:>8.3f} {1.0:>7.2f}")
    for name, label in (("64", "tandem-rnic TX pipeline, 64 B WRITEs (copied)"),
                        ("1024", "tandem-rnic TX pipeline, 1 KiB WRITEs, zero-copy"),
                        ("1024-copy", "tandem-rnic TX pipeline, 1 KiB WRITEs, --tx-copy")):
        m = ours[name]["mpps"]
        print(f"{label:<52} {m:>8.3f} {m / base:>7.2f}")


if __name__ == "__main__":
    main()
