"""System test of tandem-rnic: the lab fabric (memif server, 2 ports, 4 paths,
one delayed, one lossy) and two RNIC workers (memif clients, adaptive idle)
carry real tenant applications attached through rnic/host:

  * WRITE, SEND and READ in both directions arrive byte-exact;
  * crafted bad frames (bad ICRC, truncated, unknown opcode, foreign VNI,
    unknown underlay source, unknown QPN, not addressed to the port) replayed
    at worker B from a net_pcap port are dropped and counted by reason, and
    B keeps serving;
  * an application killed mid-transfer has its QPs freed by its worker, and
    the worker keeps serving new applications;
  * with --many-qps APP N: an application holds N idle QPs in RTS on worker A
    (default --max-qps) while a new pair verifies through it, and when it is
    killed the worker frees all N;
  * SIGINT stops each worker cleanly with its counters in --stats-json.

usage: rnic_lab_test.py TANDEM_FABRIC TANDEM_RNIC RNIC_HOST_APP TANDEM_WIRE [--many-qps APP N] [--lossy P]
                        [WORKER FLAGS...]
(e.g. --mode gbn --tx-copy: the same checks in go-back-N mode with copied payloads;
--lossy 0.02: every fabric path drops that fraction, and the checks then also
require that the workers recovered by retransmitting)
Everything started is stopped by PID, and hugepage files, runtime dirs and
sockets of the file prefixes used are removed, also on failure."""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Telemetry, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started, write_lab_tables)

FABRIC, RNIC, APP, WIRE = sys.argv[1:5]
WORKER_FLAGS = sys.argv[5:]
LOSSY = None
MANY_APP, MANY_N = None, 0
if WORKER_FLAGS[:1] == ["--many-qps"]:
    MANY_APP, MANY_N, WORKER_FLAGS = WORKER_FLAGS[1], int(WORKER_FLAGS[2]), WORKER_FLAGS[3:]
if WORKER_FLAGS[:1] == ["--lossy"]:
    LOSSY, WORKER_FLAGS = WORKER_FLAGS[1], WORKER_FLAGS[2:]
TAG = f"rnic{os.getpid()}"
lab = Lab(tmp_prefix="tandem-rnic-lab-")
D = lab.d
checks = Checks()
check, failed = checks.check, checks.failed
start, stop = lab.start, lab.stop


def log(name):
    return lab.text(name, missing=None)


BAD = [  # (spec, stage, reason)
    ({"opcode": "RC_SEND_ONLY", "src": "10.0.0.1", "dst": "10.0.0.2", "dqpn": 65536, "payload_len": 32,
      "bad_icrc": True}, "parse", "bad_icrc"),
    ({"opcode": "RC_SEND_ONLY", "src": "10.0.0.1", "dst": "10.0.0.2", "dqpn": 65536, "payload_len": 32,
      "truncate": 40}, "parse", "truncated"),
    ({"opcode": 31, "src": "10.0.0.1", "dst": "10.0.0.2", "dqpn": 65536, "payload_len": 32},
     "parse", "unknown_opcode"),
    ({"opcode": "RC_SEND_ONLY", "src": "192.168.7.1", "dst": "192.168.7.2", "dqpn": 65536, "payload_len": 32,
      "outer": {"src": "10.0.0.1", "dst": "10.0.0.2", "vni": 999}}, "ingress", "tenant_mismatch"),
    ({"opcode": "RC_RDMA_WRITE_ONLY", "src": "192.168.7.1", "dst": "192.168.7.2", "dqpn": 65536,
      "payload_len": 64, "reth": {"va": 4096, "rkey": 1, "len": 64},
      "outer": {"src": "10.9.9.9", "dst": "10.0.0.2", "vni": 100}}, "ingress", "tenant_mismatch"),
    ({"opcode": "RC_RDMA_WRITE_ONLY", "src": "10.0.0.1", "dst": "10.0.0.2", "dqpn": 0x777,
      "payload_len": 64, "reth": {"va": 4096, "rkey": 1, "len": 64}}, "ingress", "unknown_qpn"),
    ({"opcode": "RC_SEND_ONLY", "src": "10.0.0.1", "dst": "10.0.0.99", "dqpn": 65536, "payload_len": 8},
     "ingress", "table_miss"),
]
COPIES = 3


def run_pair(name_a, name_b, mode_a="verify", mode_b="verify", seed=2):
    a = start([APP, mode_a, f"{D}/A.rnic", D, name_a, name_b, str(seed), "192.168.7.2"], name_a)
    b = start([APP, mode_b, f"{D}/B.rnic", D, name_b, name_a, str(seed + 1), "192.168.7.1"], name_b)
    return a, b


def main():
    write_lab_tables(D)
    spec = []
    for s, _, _ in BAD:
        spec += [json.dumps(s)] * COPIES
    with open(f"{D}/bad.jsonl", "w") as f:
        f.write("\n".join(spec) + "\n")
    subprocess.run([WIRE, "encode", f"{D}/bad.jsonl", f"{D}/bad.pcap"], check=True, stdout=subprocess.DEVNULL)

    fab_pre, a_pre, b_pre = f"{TAG}-fab", f"{TAG}-a", f"{TAG}-b"
    lossy = ["--path-default", f"loss={LOSSY}"] if LOSSY else []
    fab = start(lab_fabric_argv(FABRIC, fab_pre, D, lossy + [
        "--path", "1:delay_us=20", "--path", "2:loss=0.01", "--path", "3:delay_us=5,jitter_us=5"]), "fabric", fab_pre)
    wait_fabric_started(lab, fab)

    def worker(n, pre, sock, extra):
        return start(lab_worker_argv(RNIC, n, pre, D, sock, ["--mtu", "1024", "--stats-json", f"{D}/{n}.json"]
                                     + WORKER_FLAGS, extra), n, pre)

    wa = worker("A", a_pre, "h0.sock", [])
    wb = worker("B", b_pre, "h1.sock", [f"--vdev=net_pcap1,rx_pcap={D}/bad.pcap,tx_pcap={D}/ignored.pcap"])
    tel_a, tel_b = Telemetry(a_pre, "/tandem/rnic/stats"), Telemetry(b_pre, "/tandem/rnic/stats")
    check(wa.poll() is None and wb.poll() is None, "both workers run")

    # 1. Byte-exact WRITE/SEND/READ both ways, after B saw the crafted frames.
    a, b = run_pair("app1", "app2")
    ra, rb = a.wait(90), b.wait(90)
    check(ra == 0 and rb == 0, f"WRITE, SEND and READ verified in both directions (exit {ra}, {rb})")
    if ra or rb:
        print(log("app1"), log("app2"))
    stats_b = tel_b.cmd("/tandem/rnic/stats")
    for _, stage, reason in BAD:
        n = sum(COPIES for _, s2, r2 in BAD if (s2, r2) == (stage, reason))
        got = stats_b.get(f"drop_{stage}_{reason}", 0)
        check(got >= n, f"crafted frames dropped at {stage} as {reason}: {got} (>= {n})")

    # 2. An application killed mid-transfer: its worker frees its QPs.
    s = start([APP, "sink", f"{D}/B.rnic", D, "sink", "victim", "4", "192.168.7.1"], "sink")
    v = start([APP, "stream", f"{D}/A.rnic", D, "victim", "sink", "5", "192.168.7.2"], "victim")
    t0 = time.time()
    while not os.path.exists(f"{D}/victim.streaming") and time.time() - t0 < 30 and v.poll() is None:
        time.sleep(0.05)
    check(os.path.exists(f"{D}/victim.streaming"), "victim streams WRITEs through the fabric")
    qps_before = len(tel_a.cmd("/tandem/rnic/qps") or {})
    died_before = tel_a.cmd("/tandem/rnic/stats")["qps_app_died"]
    v.send_signal(signal.SIGKILL)
    v.wait()
    t0 = time.time()
    died, qps_after = died_before, qps_before
    while time.time() - t0 < 15:
        died = tel_a.cmd("/tandem/rnic/stats")["qps_app_died"]
        qps_after = len(tel_a.cmd("/tandem/rnic/qps") or {})
        if died > died_before and qps_after == qps_before - 1:
            break
        time.sleep(0.1)
    check(died == died_before + 1 and qps_after == qps_before - 1,
          f"killed application's QP freed by its worker (qps_app_died {died_before} -> {died}, "
          f"live QPs {qps_before} -> {qps_after})")
    open(f"{D}/sink.stop", "w").close()
    s.wait(30)

    # 3. Both workers keep serving after bad frames and an application's death
    #    (with --many-qps, while N idle QPs live on worker A).
    many = None

    def rss_mib(p):
        with open(f"/proc/{p.pid}/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) / 1024

    if MANY_APP:
        live0, rss0 = tel_a.cmd("/tandem/rnic/stats")["live_qps"], rss_mib(wa)
        t0 = time.time()
        many = start([MANY_APP, f"{D}/A.rnic", D, "many", str(MANY_N), "192.168.7.2"], "many")
        while not os.path.exists(f"{D}/many.ready") and time.time() - t0 < 120 and many.poll() is None:
            time.sleep(0.1)
        live = tel_a.cmd("/tandem/rnic/stats")["live_qps"]
        check(os.path.exists(f"{D}/many.ready") and live == live0 + MANY_N,
              f"{MANY_N} QPs created and moved to RTS on one worker in {time.time() - t0:.1f} s "
              f"(live QPs {live0} -> {live}; worker RSS {rss0:.0f} -> {rss_mib(wa):.0f} MiB)")
        if many.poll() is not None:
            print(log("many"))
    a, b = run_pair("app3", "app4", seed=6)
    ra, rb = a.wait(90), b.wait(90)
    check(ra == 0 and rb == 0, f"workers keep serving new applications (exit {ra}, {rb})"
          + (f" with {MANY_N} more QPs live on A" if many else ""))
    if ra or rb:
        print(log("app3"), log("app4"))
    if many:
        died0 = tel_a.cmd("/tandem/rnic/stats")["qps_app_died"]
        many.send_signal(signal.SIGKILL)
        many.wait()
        t0 = time.time()
        while time.time() - t0 < 30 and tel_a.cmd("/tandem/rnic/stats")["live_qps"] != live0:
            time.sleep(0.2)
        st = tel_a.cmd("/tandem/rnic/stats")
        check(st["live_qps"] == live0 and st["qps_app_died"] == died0 + MANY_N,
              f"killing it frees all {MANY_N} QPs (live {st['live_qps']}, qps_app_died +{st['qps_app_died'] - died0})")

    # 4. Clean shutdown with counters.
    check(stop(wa) == 0 and stop(wb) == 0, "workers stop cleanly on SIGINT")
    stop(fab)
    retx = 0
    for n in ("A", "B"):
        try:
            with open(f"{D}/{n}.json") as f:
                j = json.load(f)
            retx += j["worker"]["tx_retransmits"]
            check(j["worker"]["tx_packets"] > 0 and j["worker"]["rx_accepted"] > 0 and j["live_qps"] == 0,
                  f"worker {n} wrote --stats-json (tx {j['worker']['tx_packets']}, rx accepted "
                  f"{j['worker']['rx_accepted']}, retransmits {j['worker']['tx_retransmits']})")
        except (OSError, ValueError, KeyError) as e:
            check(False, f"worker {n} --stats-json readable: {e}")
    if LOSSY:
        check(retx > 0, f"with {LOSSY} loss on every path the data above arrived through retransmissions ({retx})")
    if failed:
        for n in ("fabric", "A", "B"):
            print(f"--- {n} log ---\n{log(n)}")


run_checked("rnic_lab", main, checks, lab)
