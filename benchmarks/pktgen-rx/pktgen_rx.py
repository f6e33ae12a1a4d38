#!/usr/bin/python3
"""pktgen-rx: pktgen (PKTGEN=...) replays profiles at a receiver over one memif
link, and the receiver's rate is read from its own counters (DPDK telemetry):

  ours      tandem-rnic --bench-any-psn with a tandem-perf sink's QPs; the
            profiles are scripts/make_profiles.py --from the sink's JSON:
            write-stream.pcap at 64 B and at 1 KiB payloads (accepted Mpps:
            rx_accepted), and malformed.pcap (the drop path: every frame
            dropped by a reason; rx_packets)
  baseline  dpdk-testpmd --forward-mode=rxonly on the same memif socket,
            under the same pktgen binary, lcores and pcaps, in the same run

The receiver is the memif server (lcore 1) and pktgen the client (TX lcore 0,
its main lcore 1): the receiver never shares pktgen's TX core. Loss is
pktgen's opackets minus the receiver's received frames over the whole send
(memif does not drop: a full ring back-pressures pktgen). Each pcap is
looped by pktgen, so its PSNs repeat: docs/pktgen.md "Looped replays"."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "lib"))
from tandem_harness import LAB_HOSTS, Lab, Telemetry, remove_dpdk_files, stop, table_yaml  # noqa: E402

ROOT = os.path.join(HERE, "..", "..")


class Pktgen:
    """pktgen as the memif client (the receiver is the server): TX lcore 0, main lcore 1, the pcap
    replayed in a loop at 100 % rate. Its CLI reads stdin: "stop 0", "quit"."""
    port = 0  # its memif port

    def __init__(self, path):
        self.path = path

    def start(self, lab, tag, prefix, sock, pcap):
        script = lab.path(f"{tag}.pkt")
        with open(script, "w") as f:
            f.write(PKT_SCRIPT)
        return lab.start([self.path, "-l", "0,1", "--main-lcore=1", "--no-pci", f"--file-prefix={prefix}",
                          "--socket-limit=512", "--huge-unlink", "--log-level=error",
                          f"--vdev=net_memif0,role=client,socket={sock}", "--",
                          "-P", "-T", "-m", "0.0", "-s", f"0:{pcap}", "-f", script],
                         f"gen-{tag}", prefix, stdin=subprocess.PIPE)

    def go(self, p):
        pass  # the script starts it

    def halt(self, p):
        send(p, b"stop 0\n")

    def quit(self, p):
        send(p, b"quit\n")


class TestpmdReplay:
    """Checks the harness without pktgen (--generator testpmd; not the benchmark): dpdk-testpmd
    io-forwards a net_pcap infinite_rx replay onto the memif client port."""
    port = 1

    def __init__(self, path):
        self.path = path

    def start(self, lab, tag, prefix, sock, pcap):
        return lab.start([self.path, "-l", "0,1", "--main-lcore=1", "--no-pci", f"--file-prefix={prefix}",
                          "-m", "256", "--huge-unlink", "--log-level=error",
                          f"--vdev=net_pcap0,rx_pcap={pcap},infinite_rx=1",
                          f"--vdev=net_memif0,role=client,socket={sock}", "--", "-i", "--forward-mode=io",
                          "--no-flush-rx", "--no-lsc-interrupt"], f"gen-{tag}", prefix, stdin=subprocess.PIPE)

    def go(self, p):
        send(p, b"start\n")

    def halt(self, p):
        send(p, b"stop\n")

    def quit(self, p):
        send(p, b"quit\n")


# pktgen's unattended run (docs/pktgen.md "An unattended run"): replay port 0's pcap at full rate.
PKT_SCRIPT = "set 0 rate 100\nenable 0 pcap\nstart 0\n"


def send(p, b):
    try:
        p.stdin.write(b)
        p.stdin.flush()
    except (OSError, ValueError):
        pass


def run_generator(lab, gen, sock, pcap, tag, counts, seconds, warmup, link_up):
    """Replays pcap with `gen` at the receiver; counts() gives the receiver's (counted, received)
    frames. Measures counted and the generator's opackets over `seconds` after `warmup`, stops
    it; returns counted Mpps, generator Mpps, and sent / received / lost over the whole send."""
    pre = f"pkg-{tag}-{os.getpid()}"
    before = counts()[1]
    p = gen.start(lab, tag, pre, sock, pcap)
    try:
        tel = Telemetry(pre, ready=f"/ethdev/stats,{gen.port}", timeout=30)
        deadline = time.time() + 30
        while not link_up():
            if p.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{tag}: the memif link never came up:\n" + lab.text(f"gen-{tag}")[-3000:])
            time.sleep(0.1)
        gen.go(p)
        while (tel.opackets(gen.port) or 0) == 0:
            if p.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{tag}: the generator did not start sending:\n" + lab.text(f"gen-{tag}")[-3000:])
            time.sleep(0.1)
        time.sleep(warmup)
        t0, r0, s0 = time.monotonic(), counts()[0], tel.opackets(gen.port)
        time.sleep(seconds)
        t1, r1, s1 = time.monotonic(), counts()[0], tel.opackets(gen.port)
        gen.halt(p)
        # Sent stops growing, then the receiver drains what the ring holds.
        last, stable = -1, 0
        while stable < 3 and time.time() < deadline + 60:
            cur = tel.opackets(gen.port)
            stable = stable + 1 if cur == last else 0
            last = cur
            time.sleep(0.2)
        time.sleep(0.5)
        received = counts()[1] - before
        tel.s.close()
    finally:
        gen.quit(p)
        stop(p, 10)
        remove_dpdk_files(pre)
    dt = t1 - t0
    return {"mpps": (r1 - r0) / dt / 1e6, "gen_mpps": (s1 - s0) / dt / 1e6, "sent": last,
            "received": received, "lost": last - received}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pktgen", required=True)
    ap.add_argument("--generator", choices=("pktgen", "testpmd"), default="pktgen",
                    help="testpmd: check this harness without pktgen (a testpmd pcap replay; not the benchmark)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--qps", type=int, default=16)
    ap.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    rnic, perf, wire = (f"{b}/apps/tandem-rnic/tandem-rnic", f"{b}/apps/tandem-perf/tandem-perf",
                        f"{b}/apps/tandem-wire/tandem-wire")
    testpmd = shutil.which("dpdk-testpmd")
    gen = Pktgen(a.pktgen) if a.generator == "pktgen" else TestpmdReplay(testpmd)
    for x in (rnic, perf, wire, testpmd):
        if not x or not os.access(x, os.X_OK):
            sys.exit(f"pktgen-rx: need {x} (build it; dpdk-testpmd from Debian's dpdk package)")
    lab = Lab(tmp_prefix="tandem-pktgen-rx-", keep=a.keep)
    d = lab.d
    sock = f"{d}/rx.sock"
    out = {}
    try:
        with open(f"{d}/A.yaml", "w") as f:
            f.write(table_yaml(LAB_HOSTS[0], LAB_HOSTS[1], paths=4))
        # --- ours: the worker, the sink's QPs, their profiles
        wpre = f"pkr-w-{os.getpid()}"
        w = lab.start([rnic, "--name", "A", "--host-socket", f"{d}/A.rnic", "--table", f"{d}/A.yaml",
                       "--bench-any-psn", "--idle", "busy", "--link-wait-ms", "0", "--device-dir", "",
                       "--stats-json", f"{d}/A.json", "--", "--no-pci", f"--file-prefix={wpre}", "-l", "1",
                       "-m", "256", "--log-level=lib.eal:error", f"--vdev=net_memif0,role=server,socket={sock}"],
                      "worker", wpre)
        wtel = Telemetry(wpre, ready="/tandem/rnic/stats")
        s = lab.start([perf, "sink", "-d", f"{d}/A.rnic", "--table", f"{d}/A.yaml", "--remote", "192.168.7.2",
                       "--qps", str(a.qps), "--size", "65536", "--json", "--out", f"{d}/sink.json"],
                      "sink", separate_stderr=True)
        t0 = time.time()
        while not os.path.exists(f"{d}/sink.json"):
            if s.poll() is not None or time.time() - t0 > 30:
                raise RuntimeError("sink did not start: " + lab.text("sink", "err"))
            time.sleep(0.05)
        pcaps = {}
        for pay in (64, 1024):
            r = subprocess.run([sys.executable, f"{ROOT}/scripts/make_profiles.py", wire, f"{d}/p{pay}",
                                "--from", f"{d}/sink.json", "--payload", str(pay)], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"make_profiles {pay}: {r.stderr}")
            pcaps[pay] = f"{d}/p{pay}/write-stream.pcap"
        pcaps["malformed"] = f"{d}/p64/malformed.pcap"

        def stat(name):
            def counts():
                st = wtel.cmd("/tandem/rnic/stats") or {}
                return st.get(name, 0), st.get("rx_packets", 0)
            return counts

        def wlink():
            return (wtel.cmd("/ethdev/link_status,0") or {}).get("status") == "UP"

        ours = {}
        for k in (64, 1024):
            ours[k] = run_generator(lab, gen, sock, pcaps[k], f"w{k}", stat("rx_accepted"), a.seconds, a.warmup,
                                    wlink)
        ours["malformed"] = run_generator(lab, gen, sock, pcaps["malformed"], "wmal", stat("rx_packets"), a.seconds,
                                          a.warmup, wlink)
        st = wtel.cmd("/tandem/rnic/stats") or {}
        wtel.s.close()
        stop(s)
        sink_res = json.loads(lab.text("sink").strip().splitlines()[-1])
        stop(w)
        remove_dpdk_files(wpre)
        # --- baseline: testpmd rxonly, same socket, same pktgen
        tpre = f"pkr-t-{os.getpid()}"
        # Its forwarding lcore is 1 (the worker's); the main lcore waits on stdin.
        t = lab.start([testpmd, "-l", "0,1", "--main-lcore=0", "--no-pci", f"--file-prefix={tpre}", "-m", "256", "--huge-unlink",
                       "--log-level=error",
                       f"--vdev=net_memif0,role=server,socket={sock}", "--", "--forward-mode=rxonly",
                       "--no-lsc-interrupt"], "testpmd", tpre, stdin=subprocess.PIPE)
        ttel = Telemetry(tpre, ready="/ethdev/stats,0")

        def ipackets():
            n = (ttel.cmd("/ethdev/stats,0") or {}).get("ipackets", 0)
            return n, n

        def tlink():
            return (ttel.cmd("/ethdev/link_status,0") or {}).get("status") == "UP"

        base = {}
        for k in (64, 1024, "malformed"):
            base[k] = run_generator(lab, gen, sock, pcaps[k], f"t{k}", ipackets, a.seconds, a.warmup, tlink)
        ttel.s.close()
        stop(t)

        def r3(x):
            return round(x, 3)
        out = {"bench": "pktgen-rx", "unit": "Mpps", "ours": r3(ours[64]["mpps"]), "baseline": r3(base[64]["mpps"]),
               "baseline_name": "dpdk-testpmd --forward-mode=rxonly on the same memif link, same pktgen, 64 B profile",
               "ratio": r3(ours[64]["mpps"] / base[64]["mpps"]) if base[64]["mpps"] else None,
               "ours_1024_mpps": r3(ours[1024]["mpps"]), "baseline_1024_mpps": r3(base[1024]["mpps"]),
               "ratio_1024": r3(ours[1024]["mpps"] / base[1024]["mpps"]) if base[1024]["mpps"] else None,
               "drop_path_mpps": r3(ours["malformed"]["mpps"]),
               "baseline_malformed_mpps": r3(base["malformed"]["mpps"]),
               "drop_path_ratio": r3(ours["malformed"]["mpps"] / base["malformed"]["mpps"])
               if base["malformed"]["mpps"] else None,
               "lost": {str(k): ours[k]["lost"] for k in ours},
               "baseline_lost": {str(k): base[k]["lost"] for k in base},
               "generator": a.generator, "generator_sent_mpps": {str(k): r3(ours[k]["gen_mpps"]) for k in ours},
               "bench_duplicate": st.get("core_bench_duplicate"), "bench_gap": st.get("core_bench_gap"),
               "bench_accepted": st.get("core_bench_accepted"),
               "sink_verify": sink_res.get("verify"), "sink_write": sink_res.get("write"),
               "seconds": a.seconds, "qps": a.qps, "pktgen": a.pktgen}
    finally:
        lab.cleanup()
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{'profile':<24}{'ours Mpps':>10}{'testpmd rxonly':>16}{'ratio':>8}{'lost':>8}")
        for k, name in ((64, "WRITE 64 B (accepted)"), (1024, "WRITE 1 KiB (accepted)"),
                        ("malformed", "malformed (dropped)")):
            o, bb = out, None
            ours_k = {64: o["ours"], 1024: o["ours_1024_mpps"], "malformed": o["drop_path_mpps"]}[k]
            bb = {64: o["baseline"], 1024: o["baseline_1024_mpps"], "malformed": o["baseline_malformed_mpps"]}[k]
            print(f"{name:<24}{ours_k:>10}{bb:>16}{(ours_k / bb if bb else 0):>8.3f}{o['lost'][str(k)]:>8}")
        print(f"bench_duplicate {out['bench_duplicate']} bench_gap {out['bench_gap']} sink {out['sink_verify']}")


if __name__ == "__main__":
    main()
