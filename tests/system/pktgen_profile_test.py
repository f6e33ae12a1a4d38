#!/usr/bin/python3
"""The pktgen path without pktgen (issue 18): tandem-perf sink QPs on a
tandem-rnic worker run with --bench-any-psn, scripts/make_profiles.py --from
the sink's JSON, and a looped replay of those profiles into the worker:
dpdk-testpmd io-forwards a pcap (net_pcap rx_pcap) onto a memif link to the
worker, as pktgen would send it. The memif ring (rsize=12, 4096 slots) holds
the whole replay, so no frame is lost on the way and every count is exact:

  replay = WRITE pass x3 (one frame of the second lost), SEND pass x2,
           malformed.pcap
  * the sink's memory: every byte of every QP's WRITE region is the pattern,
    every SEND completion carries the pattern (the sink checks, reports JSON);
  * core_bench_accepted = 5 passes x QPs x per_qp - 1, bench_duplicate =
    (5 - 1) x QPs (each pass after the first restarts each QP once from
    behind: docs/pktgen.md "Looped replays"), bench_gap = 1 (the next packet
    of the QP that lost a frame restarts from ahead), accepted one less;
  * malformed.pcap: one drop per reason (bad_icrc, truncated, unknown opcode,
    unknown_qpn, tenant_mismatch), nothing else dropped.
Also: --bench-any-psn is refused in DPU mode (exit 2, before the EAL).

usage: pktgen_profile_test.py TANDEM_RNIC TANDEM_PERF TANDEM_WIRE MAKE_PROFILES [--mode irn|gbn]"""
import json
import os
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import LAB_HOSTS, Checks, Lab, Telemetry, stop, table_yaml  # noqa: E402

QPS, SIZE, PAYLOAD = 8, 4096, 64
LOST_FRAME = 12 * QPS + 4  # in the second WRITE pass
PER_QP = SIZE // PAYLOAD
WRITE_PASSES, SEND_PASSES = 3, 2


def pcap_records(path):
    """(file header, [record bytes]) of a classic pcap."""
    with open(path, "rb") as f:
        data = f.read()
    recs, at = [], 24
    while at < len(data):
        n = struct.unpack_from("<I", data, at + 8)[0]
        recs.append(data[at:at + 16 + n])
        at += 16 + n
    return data[:24], recs


def main():
    rnic, perf, wire, make_profiles = sys.argv[1:5]
    mode = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "irn"
    testpmd = shutil.which("dpdk-testpmd")
    if testpmd is None:
        print("SKIP: no dpdk-testpmd")
        return 77
    lab = Lab(tmp_prefix="tandem-pktgen-", keep=bool(os.environ.get("TANDEM_KEEP")))
    d = lab.d
    c = Checks()
    try:
        with open(f"{d}/A.yaml", "w") as f:
            f.write(table_yaml(LAB_HOSTS[0], LAB_HOSTS[1], paths=4))

        # 1. The benchmark mode is refused for tenant QPs (DPU mode), before the EAL starts.
        r = subprocess.run([rnic, "--host-socket", f"{d}/x.rnic", "--table", f"{d}/A.yaml", "--bench-any-psn",
                            "--dpu-channel", f"{d}/none.chan", "--", "--no-pci", "--file-prefix=never"],
                           capture_output=True, text=True, timeout=20)
        c.check(r.returncode == 2 and "refused in DPU mode" in r.stderr,
                f"--bench-any-psn with --dpu-channel: exit {r.returncode}, {r.stderr.strip()}")
        r = subprocess.run([rnic, "--help"], capture_output=True, text=True, timeout=20)
        c.check("--bench-any-psn" in r.stdout and "BENCHMARK ONLY" in r.stdout, "--help names the benchmark mode")

        # 2. The worker (memif server: the replayer connects once the profile exists).
        pre = f"tpk-{os.getpid()}"
        w = lab.start([rnic, "--name", "A", "--host-socket", f"{d}/A.rnic", "--table", f"{d}/A.yaml",
                       "--bench-any-psn", "--mode", mode, "--idle", "adaptive", "--link-wait-ms", "0", "--device-dir", "",
                       "--stats-json", f"{d}/A.json", "--", "--no-pci", f"--file-prefix={pre}", "-l", "1",
                       "-m", "128", "--log-level=lib.eal:error",
                       f"--vdev=net_memif0,role=server,socket={d}/w.sock"], "A", pre)
        tel = Telemetry(pre, ready="/tandem/rnic/stats")
        c.check("BENCHMARK MODE --bench-any-psn" in lab.text("A"), "the worker says it runs the benchmark mode")

        # 3. The sink: QPs connected to 192.168.7.2, QPN base 0x10000, PSN 1000; receives for every SEND.
        s = lab.start([perf, "sink", "-d", f"{d}/A.rnic", "--table", f"{d}/A.yaml", "--remote", "192.168.7.2",
                       "--qps", str(QPS), "--size", str(SIZE), "--remote-psn", "1000", "--mode", mode,
                       "--recv-depth", str(SEND_PASSES * PER_QP), "--json", "--out", f"{d}/sink.json"],
                      "sink", separate_stderr=True)
        t0 = time.time()
        while not os.path.exists(f"{d}/sink.json"):
            if s.poll() is not None or time.time() - t0 > 20:
                raise RuntimeError("sink did not start:\n" + lab.text("sink") + lab.text("sink", "err"))
            time.sleep(0.05)
        sink = json.load(open(f"{d}/sink.json"))
        c.check(len(sink["qps"]) == QPS and all(q["expected_psn"] == 1000 for q in sink["qps"]) and
                sink["frames"]["src_ip"] == "10.0.0.2" and sink["frames"]["dst_ip"] == "10.0.0.1" and
                sink["frames"]["dst_mac"] == "02:00:00:00:00:01" and sink["frames"]["udp_dport"] == 4791 and
                len(sink["frames"]["udp_sports"]) == 4 and sink["vnic"]["ip"] == "192.168.7.1",
                f"sink JSON: {QPS} QPs, expected PSN 1000, the worker's underlay addresses and 4 path ports")

        # 4. Profiles for those QPs, and the looped replay.
        r = subprocess.run([sys.executable, make_profiles, wire, f"{d}/prof", "--from", f"{d}/sink.json",
                            "--payload", str(PAYLOAD)], capture_output=True, text=True, timeout=60)
        c.check(r.returncode == 0, f"make_profiles.py --from: {r.stdout.strip()} {r.stderr.strip()}")
        prof = json.load(open(f"{d}/prof/profile.json"))
        c.check(prof["per_qp"] == PER_QP and prof["packets"] == QPS * PER_QP, f"profile: {prof}")
        hdr, wrec = pcap_records(f"{d}/prof/write-stream.pcap")
        _, srec = pcap_records(f"{d}/prof/send-stream.pcap")
        _, mrec = pcap_records(f"{d}/prof/malformed.pcap")
        # Pass 2 of the WRITEs loses one frame in its middle (QP 4's 13th): one gap.
        lost = LOST_FRAME
        wpasses = [wrec] * WRITE_PASSES
        wpasses[1] = wrec[:lost] + wrec[lost + 1:]
        with open(f"{d}/replay.pcap", "wb") as f:
            f.write(hdr + b"".join(b"".join(p) for p in wpasses) + b"".join(srec) * SEND_PASSES + b"".join(mrec))
        frames = (WRITE_PASSES + SEND_PASSES) * QPS * PER_QP - 1 + 5

        # testpmd interactive: forwarding starts once the memif link is up (else net_pcap's frames
        # would be read and dropped before the link exists).
        tp = f"tpkr-{os.getpid()}"
        rp = lab.start([testpmd, "-l", "0,1", "--main-lcore=1", "--no-pci", f"--file-prefix={tp}", "-m", "64",
                        "--log-level=error", f"--vdev=net_pcap0,rx_pcap={d}/replay.pcap,tx_pcap=/dev/null",
                        f"--vdev=net_memif0,role=client,socket={d}/w.sock,rsize=12", "--", "-i",
                        "--forward-mode=io", "--no-flush-rx", "--no-lsc-interrupt", "--total-num-mbufs=16384"],
                       "testpmd", tp, stdin=subprocess.PIPE)
        t0 = time.time()
        while (tel.cmd("/ethdev/link_status,0") or {}).get("status") != "UP":
            if rp.poll() is not None or time.time() - t0 > 20:
                raise RuntimeError("memif link to the worker never came up")
            time.sleep(0.1)
        rp.stdin.write(b"start\n")
        rp.stdin.flush()
        t0 = time.time()
        st = {}
        while time.time() - t0 < 25:
            st = tel.cmd("/tandem/rnic/stats") or {}
            if st.get("rx_packets", 0) >= frames or rp.poll() is not None:
                break
            time.sleep(0.2)
        time.sleep(0.3)  # the last ACKs
        st = tel.cmd("/tandem/rnic/stats") or {}
        c.check(st.get("rx_packets") == frames, f"the worker received {st.get('rx_packets')} of {frames} frames")
        rp.stdin.write(b"stop\nquit\n")
        rp.stdin.flush()
        stop(rp)
        tel.s.close()

        # 5. The sink's memory, then the worker's counters.
        stop(s)
        res = json.loads(lab.text("sink").strip().splitlines()[-1])
        wr = res["write"]
        c.check(res["verify"] == "ok" and wr["bytes_written"] == QPS * SIZE and wr["bytes_wrong"] == 0 and
                wr["qps_written"] == QPS, f"sink: every WRITE byte placed and right: {wr}")
        rv = res["recv"]
        c.check(rv["completions"] == SEND_PASSES * QPS * PER_QP and rv["wrong"] == 0 and
                rv["bytes"] == SEND_PASSES * QPS * PER_QP * PAYLOAD,
                f"sink: every SEND completed with the right bytes: {rv}")
        stop(w)
        k = json.load(open(f"{d}/A.json"))
        core = k.get("core", {})
        passes = WRITE_PASSES + SEND_PASSES
        c.check(core.get("bench_accepted") == passes * QPS * PER_QP - 1,
                f"core bench_accepted {core.get('bench_accepted')} == {passes} passes x {QPS * PER_QP} - 1 lost")
        c.check(core.get("bench_duplicate") == (passes - 1) * QPS,
                f"core bench_duplicate {core.get('bench_duplicate')} == (passes - 1) x QPs = {(passes - 1) * QPS}")
        c.check(core.get("bench_gap") == 1, f"core bench_gap {core.get('bench_gap')} == 1 (the frame lost mid-pass)")
        acc = k["worker"].get("rx_accepted")
        c.check(acc == passes * QPS * PER_QP - 1, f"worker rx_accepted {acc}")
        drops = {f"{stage}.{why}": n for stage, m in k["drops"].items() for why, n in m.items() if n}
        c.check(drops == {"parse.bad_icrc": 1, "parse.truncated": 1, "parse.unknown_opcode": 1,
                          "ingress.unknown_qpn": 1, "ingress.tenant_mismatch": 1},
                f"malformed.pcap: one drop per reason, nothing else dropped: {drops}")
    except Exception as e:  # a set-up failure is a failed check, with the logs
        c.check(False, f"{type(e).__name__}: {e}")
        for n in ("A", "sink", "testpmd"):
            print(f"--- {n}\n{lab.text(n)[-3000:]}{lab.text(n, 'err')[-2000:]}")
    finally:
        lab.cleanup()
    print("pktgen_profile:", "FAILED " + "; ".join(c.failed) if c.failed else "ok")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
