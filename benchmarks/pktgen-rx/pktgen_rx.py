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
    replayed in a loop at 100 % rate. Its CLI reads stdin: "stop 0", "quit". pktgen 23.03 makes five
    24576 x 10 KiB mbuf pools per port and queue (~1.3 GB, fixed at build time): on ordinary pages
    (--no-huge), so the receivers keep the VM's 2 GB of hugepages."""
    port = 0  # its memif port

    def __init__(self, path):
        self.path = path

    def start(self, lab, tag, prefix, sock, pcap):
        script = lab.path(f"{tag}.pkt")
        with open(script, "w") as f:
            f.write(PKT_SCRIPT)
        return lab.start([self.path, "-l", "0,1", "--main-lcore=1", "--no-pci", f"--file-prefix={prefix}",
                          "--no-huge", "-m", "1536", "--log-level=error",
                          f"--vdev=net_memif0,role=client,socket={sock}", "--",
                          "-P", "-T", "-m", "0.0", "-s", f"0:{pcap}", "-f", script],
                         f"gen-{tag}", prefix, stdin=subprocess.PIPE)

    def go(self, p):
        send(p, b"start 0\n")

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


# pktgen's set-up (docs/pktgen.md "An unattended run"): replay port 0's pcap at full rate; "start 0"
# comes on stdin once the link is up and the receiver's counters are read (a memif server's
# port counters restart from 0 when its client leaves, so they are read while connected).
PKT_SCRIPT = "set 0 rate 100\nenable 0 pcap\n"


def remove_socket(sock):
    """A memif server whose predecessor left its socket file behind fails to bind ("Address
    already in use"): the receivers take turns on one socket path."""
    try:
        os.unlink(sock)
    except FileNotFoundError:
        pass


def send(p, b):
    try:
        p.stdin.write(b)
        p.stdin.flush()
    except (OSError, ValueError):
        pass


def run_generator(lab, gen, sock, pcap, tag, counts, seconds, warmup, link_up):
    """run_once, tried a second time if the generator never got going (a busy VM can take
    pktgen's 1.5 GB set-up past the deadline)."""
    try:
        return run_once(lab, gen, sock, pcap, tag, counts, seconds, warmup, link_up)
    except RuntimeError as e:
        print(f"pktgen-rx: {tag}: {str(e).splitlines()[0]}; once more", file=sys.stderr)
        return run_once(lab, gen, sock, pcap, tag + "-again", counts, seconds, warmup, link_up)


def run_once(lab, gen, sock, pcap, tag, counts, seconds, warmup, link_up):
    """Replays pcap with `gen` at the receiver; counts() gives the receiver's (counted, received)
    frames. Measures counted and the generator's opackets over `seconds` after `warmup`, stops
    it; returns counted Mpps, generator Mpps, and sent / received / lost over the whole send."""
    pre = f"pkg-{tag}-{os.getpid()}"
    p = gen.start(lab, tag, pre, sock, pcap)
    try:
        tel = Telemetry(pre, ready=f"/ethdev/stats,{gen.port}", timeout=30)
        deadline = time.time() + 60
        while not link_up():
            if p.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{tag}: the memif link never came up:\n" + lab.text(f"gen-{tag}")[-3000:])
            time.sleep(0.1)
        time.sleep(0.5)  # pktgen runs its -f script once its ports are up
        before = counts()[1]
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
    ap.add_argument("--rounds", type=int, default=3, help="ours then the baseline, this many times (medians)")
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
    kinds = (64, 1024, "malformed")
    rounds = []
    try:
        with open(f"{d}/A.yaml", "w") as f:
            f.write(table_yaml(LAB_HOSTS[0], LAB_HOSTS[1], paths=4))
        for rnd in range(a.rounds):
            ours, st, sink_res = ours_phase(lab, a, gen, d, sock, rnd, rnic, perf, wire)
            base = baseline_phase(lab, a, gen, d, sock, rnd, testpmd)
            rounds.append({"ours": ours, "base": base, "stats": st, "sink": sink_res})
    finally:
        lab.cleanup()

    def med(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    def r3(x):
        return round(x, 3)
    o = {k: med([r["ours"][k]["mpps"] for r in rounds]) for k in kinds}
    b = {k: med([r["base"][k]["mpps"] for r in rounds]) for k in kinds}
    # The ratio of each round (ours and its baseline minutes apart), then the median.
    ratio = {k: med([r["ours"][k]["mpps"] / r["base"][k]["mpps"] for r in rounds if r["base"][k]["mpps"]] or [0])
             for k in kinds}
    last = rounds[-1]
    out = {"bench": "pktgen-rx", "unit": "Mpps", "ours": r3(o[64]), "baseline": r3(b[64]),
           "baseline_name": "dpdk-testpmd --forward-mode=rxonly on the same memif link, same pktgen, 64 B profile",
           "ratio": r3(ratio[64]), "ours_1024_mpps": r3(o[1024]), "baseline_1024_mpps": r3(b[1024]),
           "ratio_1024": r3(ratio[1024]), "drop_path_mpps": r3(o["malformed"]),
           "baseline_malformed_mpps": r3(b["malformed"]), "drop_path_ratio": r3(ratio["malformed"]),
           "lost": sum(r["ours"][k]["lost"] for r in rounds for k in kinds),
           "baseline_lost": sum(r["base"][k]["lost"] for r in rounds for k in kinds),
           "rounds": [{str(k): {"ours": r3(r["ours"][k]["mpps"]), "baseline": r3(r["base"][k]["mpps"]),
                               "sent_mpps": r3(r["ours"][k]["gen_mpps"]),
                               "baseline_sent_mpps": r3(r["base"][k]["gen_mpps"]), "lost": r["ours"][k]["lost"]}
                       for k in kinds} for r in rounds],
           "generator": a.generator, "pktgen": a.pktgen, "seconds": a.seconds, "qps": a.qps,
           "bench_accepted": last["stats"].get("core_bench_accepted"),
           "bench_duplicate": last["stats"].get("core_bench_duplicate"),
           "bench_gap": last["stats"].get("core_bench_gap"),
           "sink_verify": [r["sink"].get("verify") for r in rounds], "sink_write": last["sink"].get("write")}
    if a.json:
        print(json.dumps(out))
        return
    print(f"{'profile (median of rounds)':<28}{'ours Mpps':>10}{'testpmd rxonly':>16}{'ratio':>8}")
    for k, name in ((64, "WRITE 64 B (accepted)"), (1024, "WRITE 1 KiB (accepted)"), ("malformed", "malformed (dropped)")):
        print(f"{name:<28}{r3(o[k]):>10}{r3(b[k]):>16}{r3(ratio[k]):>8}")
    print(f"lost {out['lost']} (baseline {out['baseline_lost']}); last round: bench_accepted {out['bench_accepted']} "
          f"bench_duplicate {out['bench_duplicate']} bench_gap {out['bench_gap']}; sink {out['sink_verify']}")


def ours_phase(lab, a, gen, d, sock, rnd, rnic, perf, wire):
    """The worker (memif server), the sink's QPs and their profiles; pktgen replays each."""
    wpre = f"pkr-w{rnd}-{os.getpid()}"
    remove_socket(sock)
    w = lab.start([rnic, "--name", "A", "--host-socket", f"{d}/A.rnic", "--table", f"{d}/A.yaml",
                   "--bench-any-psn", "--idle", "busy", "--link-wait-ms", "0", "--device-dir", "",
                   "--stats-json", f"{d}/A{rnd}.json", "--", "--no-pci", f"--file-prefix={wpre}", "-l", "1",
                   "-m", "256", "--log-level=lib.eal:error", f"--vdev=net_memif0,role=server,socket={sock}"],
                  f"worker{rnd}", wpre)
    wtel = Telemetry(wpre, ready="/tandem/rnic/stats")
    s = lab.start([perf, "sink", "-d", f"{d}/A.rnic", "--table", f"{d}/A.yaml", "--remote", "192.168.7.2",
                   "--qps", str(a.qps), "--size", "65536", "--json", "--out", f"{d}/sink{rnd}.json"],
                  f"sink{rnd}", separate_stderr=True)
    t0 = time.time()
    while not os.path.exists(f"{d}/sink{rnd}.json"):
        if s.poll() is not None or time.time() - t0 > 30:
            raise RuntimeError("sink did not start: " + lab.text(f"sink{rnd}", "err"))
        time.sleep(0.05)
    pcaps = {}
    for pay in (64, 1024):
        r = subprocess.run([sys.executable, f"{ROOT}/scripts/make_profiles.py", wire, f"{d}/p{pay}",
                            "--from", f"{d}/sink{rnd}.json", "--payload", str(pay)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"make_profiles {pay}: {r.stderr}")
        pcaps[pay] = f"{d}/p{pay}/write-stream.pcap"
    pcaps["malformed"] = f"{d}/p64/malformed.pcap"

    def counts(name):
        def f():
            # The worker's lcore fills the snapshot; under load a reply can be -EBUSY: ask again.
            for _ in range(50):
                st = wtel.cmd("/tandem/rnic/stats") or {}
                if "rx_packets" in st:
                    return st.get(name, 0), st["rx_packets"]
                time.sleep(0.05)
            raise RuntimeError("the worker's /tandem/rnic/stats did not answer")
        return f

    def link():
        return (wtel.cmd("/ethdev/link_status,0") or {}).get("status") == "UP"

    ours = {}
    for k in (64, 1024, "malformed"):
        ours[k] = run_generator(lab, gen, sock, pcaps[k], f"w{rnd}-{k}",
                                counts("rx_packets" if k == "malformed" else "rx_accepted"), a.seconds, a.warmup,
                                link)
    st = wtel.cmd("/tandem/rnic/stats") or {}
    wtel.s.close()
    stop(s)
    sink_res = json.loads(lab.text(f"sink{rnd}").strip().splitlines()[-1])
    stop(w)
    remove_dpdk_files(wpre)
    # The profiles stay for the baseline (testpmd rxonly does not look inside).
    lab.pcaps = pcaps
    return ours, st, sink_res


def baseline_phase(lab, a, gen, d, sock, rnd, testpmd):
    """dpdk-testpmd rxonly as the memif server on the same socket: its forwarding lcore is 1 (the
    worker's), its main lcore waits on stdin; the same pktgen replays the same pcaps."""
    tpre = f"pkr-t{rnd}-{os.getpid()}"
    remove_socket(sock)
    t = lab.start([testpmd, "--lcores=0@1,1@1", "--main-lcore=0", "--no-pci", f"--file-prefix={tpre}", "-m", "256",
                   "--huge-unlink", "--log-level=error", f"--vdev=net_memif0,role=server,socket={sock}", "--",
                   "--forward-mode=rxonly", "--no-lsc-interrupt"], f"testpmd{rnd}", tpre, stdin=subprocess.PIPE)
    ttel = Telemetry(tpre, ready="/ethdev/stats,0")

    def ipackets():
        for _ in range(50):
            r = ttel.cmd("/ethdev/stats,0") or {}
            if "ipackets" in r:
                return r["ipackets"], r["ipackets"]
            time.sleep(0.05)
        raise RuntimeError("testpmd's /ethdev/stats did not answer")

    def link():
        return (ttel.cmd("/ethdev/link_status,0") or {}).get("status") == "UP"

    base = {}
    for k in (64, 1024, "malformed"):
        base[k] = run_generator(lab, gen, sock, lab.pcaps[k], f"t{rnd}-{k}", ipackets, a.seconds, a.warmup, link)
    ttel.s.close()
    stop(t)
    remove_dpdk_files(tpre)
    return base


if __name__ == "__main__":
    main()
