"""System test of the drop-in libibverbs with Debian's own binaries, unmodified (ibverbs-utils,
perftest), run through scripts/tandem-run against two tandem-rnic workers on the lab fabric
(4 paths, one lossy), with per-packet round-robin spraying and receiver-driven credits:

  * ibv_devices lists one device per vNIC of each worker (tandem_A_v1, tandem_B_v1);
  * ibv_devinfo -v shows the port ACTIVE, Ethernet, the worker's MTU, and GID 0 as the vNIC's
    IPv4-mapped address of type RoCE v2; opening the device attached to the worker (its
    apps_attached counter) and closing it detached;
  * ibv_rc_pingpong with its buffer check (-c) and with completion events (-e);
  * ib_write_bw, ib_read_bw, ib_send_bw (also -e, and --use-srq with 2 QPs on the SRQ),
    ib_write_lat, ib_read_lat, ib_send_lat (also --use-srq), each with a small and a 64 KiB message,
    ib_atomic_bw (FETCH_AND_ADD, CMP_AND_SWAP) and ib_atomic_lat, exit 0 on both sides with a result row (Debian's libmlx5,
    libefa and librdmacm load against this library);
  * ib_write_bw, ib_read_bw, ib_send_bw (2 QPs) and ib_write_lat, ib_read_lat, ib_send_lat, each
    -D 3 with a fabric path failed 1.5 s in, finish and report their result;
  * a worker killed with SIGKILL leaves a stale registration that no longer lists; a worker
    stopped cleanly removes its own.

usage: verbs_perftest_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_RUN BINDIR [--failed-path-loop N]
(BINDIR: where ibv_devices, ibv_devinfo, ibv_rc_pingpong and ib_* are, /usr/bin)
--failed-path-loop N: only the failed-path latency cases, each N times, no retry (issue 33's
20-of-20 criterion; prints the tally)."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Telemetry, free_port, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started, write_lab_tables)
import perftest_pair  # noqa: E402
from perftest_pair import result_row  # noqa: E402

FABRIC, RNIC, RUN, BINDIR = sys.argv[1:5]
LOOP = int(sys.argv[sys.argv.index("--failed-path-loop") + 1]) if "--failed-path-loop" in sys.argv else 0
IBV_DEVICES, IBV_DEVINFO = f"{BINDIR}/ibv_devices", f"{BINDIR}/ibv_devinfo"
TAG = f"verbsperf{os.getpid()}"
lab = Lab(tmp_prefix="tandem-verbsperf-")
D = lab.d
checks = Checks()
check, failed = checks.check, checks.failed
ENV = dict(os.environ, TANDEM_DEVICES=f"{D}/devices")


def run(argv, timeout=20):
    try:
        r = subprocess.run([RUN] + argv, env=ENV, capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        return None, f"timed out: {e}"


def pair(prog, args, timeout=60):
    return perftest_pair.pair(RUN, BINDIR, ENV, prog, args, timeout)


def basics(tel):
    """Devices, pingpongs and every perftest without a fault."""
    code, out = run([IBV_DEVICES])
    check(code == 0 and "tandem_A_v1" in out and "tandem_B_v1" in out,
          f"ibv_devices lists both workers' vNICs (exit {code}): {' '.join(out.split())[:160]}")

    attached0 = tel.cmd("/tandem/rnic/stats")["apps_attached"]
    code, out = run([IBV_DEVINFO, "-v", "-d", "tandem_A_v1"])
    want = ["hca_id: tandem_A_v1", "state: PORT_ACTIVE", "link_layer: Ethernet", "active_mtu: 1024 (3)",
            "GID[ 0]: ::ffff:192.168.7.1, RoCE v2", "max_qp: 16384", "atomic_cap: ATOMIC_HCA"]
    flat = " ".join(out.split())
    missing = [w for w in want if w not in flat]
    check(code == 0 and not missing, f"ibv_devinfo -v -d tandem_A_v1 (exit {code}): missing {missing}")
    st = tel.cmd("/tandem/rnic/stats")
    check(st["apps_attached"] == attached0 + 1 and st["apps_detached"] >= 1,
          f"ibv_open_device attached to worker A and ibv_close_device detached "
          f"(attached {attached0} -> {st['apps_attached']}, detached {st['apps_detached']})")

    for args in (["-g", "0", "-c", "-n", "200"], ["-g", "0", "-e", "-n", "200"]):
        (cc, co), (sc, so) = pair("ibv_rc_pingpong", args)
        check(cc == 0 and sc == 0 and "iters in" in co,
              f"ibv_rc_pingpong {' '.join(args)} (exit {cc}/{sc}): {' '.join(co.split()[-8:])}")

    for prog, extra, sizes in (("ib_write_bw", [], (64, 65536)), ("ib_read_bw", [], (64, 65536)),
                               ("ib_send_bw", [], (64, 65536)), ("ib_send_bw", ["-e"], (65536,)),
                               ("ib_send_bw", ["--use-srq", "-q", "2"], (64, 65536)),
                               ("ib_write_lat", [], (2, 65536)), ("ib_read_lat", [], (2, 65536)),
                               ("ib_send_lat", [], (2, 65536)), ("ib_send_lat", ["--use-srq"], (2,)),
                               ("ib_atomic_bw", ["-A", "FETCH_AND_ADD"], (8,)), ("ib_atomic_bw", ["-A", "CMP_AND_SWAP"], (8,)),
                               ("ib_atomic_lat", ["-A", "FETCH_AND_ADD"], (8,))):
        for size in sizes:
            srq0 = tel.cmd("/tandem/rnic/stats")["srq_wqe_recv"] if "--use-srq" in extra else None
            args = ["-s", str(size), "-n", "100"] + extra
            (cc, co), (sc, so) = pair(prog, args)
            row = result_row(co, size)
            # Any nonzero figure: perftest rounds MB/s to 2 decimals, and 64 B READs on this busy
            # VM have printed 0.00 MB/s with a nonzero message rate.
            ok = cc == 0 and sc == 0 and row is not None and max(row[1:]) > 0
            check(ok, f"stock {prog} {' '.join(args)}: exit {cc}/{sc}, result {row}")
            if srq0 is not None:  # the receives went through worker A's SRQ, not per-QP queues
                srq1 = tel.cmd("/tandem/rnic/stats")["srq_wqe_recv"]
                check(srq1 > srq0, f"{prog} --use-srq posted its receives to worker A's SRQ ({srq0} -> {srq1})")
            if not ok:
                print(f"--- client ---\n{co[-1500:]}\n--- server ---\n{so[-1500:]}")


def main():
    write_lab_tables(D)
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D, ["--path", "1:delay_us=20", "--path", "2:loss=0.01"]),
                    "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    workers, prefixes = {}, {}
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        prefixes[n] = f"{TAG}-{n.lower()}"
        workers[n] = lab.start(lab_worker_argv(RNIC, n, prefixes[n], D, sock, [
            "--mtu", "1024", "--spray", "round_robin", "--cc", "credit", "--timeout-us", "20000"]), n, prefixes[n])
    t0 = time.time()
    while not all(os.path.exists(f"{D}/devices/tandem_{n}_v1.dev") for n in workers):
        if time.time() - t0 > 30 or any(w.poll() is not None for w in workers.values()):
            raise RuntimeError("workers did not register their verbs devices")
        time.sleep(0.1)
    tel = Telemetry(prefixes["A"], ready="/tandem/rnic/stats")

    if not LOOP:
        basics(tel)

    # A path fails silently under each running perftest: the senders' path health takes it out
    # and the run finishes on the other three, reporting its result.
    ftel = Telemetry(fab_pre)
    def failed_path_run(prog, size):
        port = ["-p", str(free_port()), "-s", str(size), "-D", "3"] + (["-q", "2"] if prog.endswith("_bw") else [])
        srv = subprocess.Popen([RUN, f"{BINDIR}/{prog}", "-d", "tandem_A_v1"] + port, env=ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(0.5)
        cli = subprocess.Popen([RUN, f"{BINDIR}/{prog}", "-d", "tandem_B_v1"] + port + ["127.0.0.1"], env=ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1.5)
        applied = (ftel.cmd("/tandem/fabric/path_set,0,down") or {}).get("applied")
        outs = []
        for p in (cli, srv):
            try:
                o, _ = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                o, _ = p.communicate()
                o += "\n(hung: killed)"
            outs.append((p.returncode, o))
        ftel.cmd("/tandem/fabric/path_set,0,up")
        row = result_row(outs[0][1], size)
        ok = applied is not None and outs[0][0] == 0 and outs[1][0] == 0 and row is not None and row[2] > 0
        return ok, applied, outs, row

    if LOOP:  # the latency cases alone, each LOOP times, never retried
        tally = {}
        for i in range(LOOP):
            for prog in ("ib_write_lat", "ib_read_lat", "ib_send_lat"):
                ok, applied, outs, row = failed_path_run(prog, 2)
                tally.setdefault(prog, []).append(ok)
                print(f"{prog} run {i + 1}: {'ok' if ok else 'FAILED'} (exit {outs[0][0]}/{outs[1][0]}, {row})", flush=True)
                if not ok:
                    print(f"--- client ---\n{outs[0][1][-1500:]}\n--- server ---\n{outs[1][1][-1500:]}")
        for prog, oks in tally.items():
            check(all(oks), f"{prog} -D 3 with path 0 failed 1.5 s in: {sum(oks)} of {len(oks)} runs passed")
        return
    for prog, size in (("ib_write_bw", 65536), ("ib_read_bw", 65536), ("ib_send_bw", 65536),
                       ("ib_write_lat", 2), ("ib_read_lat", 2), ("ib_send_lat", 2)):
        # Run once, never retried (issue 33): --failed-path-loop 20 at load ~18 (six CPU hogs
        # beside it) passed 20 of 20 each of ib_{write,read,send}_lat, and ib_send_lat alone 55 of 55.
        ok, applied, outs, row = failed_path_run(prog, size)
        check(ok, f"stock {prog} -D 3 with path 0 failed 1.5 s in ({applied}): exit {outs[0][0]}/{outs[1][0]}, "
                  f"result {row}")
        if not ok:
            print(f"--- client ---\n{outs[0][1][-1500:]}\n--- server ---\n{outs[1][1][-1500:]}")

    workers["B"].send_signal(signal.SIGKILL)
    workers["B"].wait()
    code, out = run([IBV_DEVICES])
    check(code == 0 and "tandem_A_v1" in out and "tandem_B_v1" not in out
          and os.path.exists(f"{D}/devices/tandem_B_v1.dev"),
          "a killed worker's registration is stale and no longer listed")
    check(lab.stop(workers["A"]) == 0 and not os.path.exists(f"{D}/devices/tandem_A_v1.dev"),
          "a worker stopped on SIGINT removes its registration")
    lab.stop(fab)
    if failed:
        print(f"--- A log ---\n{lab.text('A')}\n--- B log ---\n{lab.text('B')}")


run_checked("verbs_perftest", main, checks, lab)
