"""System test of the drop-in libibverbs with Debian's own binaries, unmodified (ibverbs-utils,
perftest), run through scripts/tandem-run against two tandem-rnic workers on the lab fabric:

  * ibv_devices lists one device per vNIC of each worker (tandem_A_v1, tandem_B_v1);
  * ibv_devinfo -v shows the port ACTIVE, Ethernet, the worker's MTU, and GID 0 as the vNIC's
    IPv4-mapped address of type RoCE v2; opening the device attached to the worker (its
    apps_attached counter) and closing it detached;
  * stock ib_write_bw loads (with Debian's libmlx5, libefa and librdmacm against this library),
    opens the Tandem device and stops cleanly where this library stops (no PDs yet): exit 1 with
    perftest's own message, no signal, no hang;
  * a worker killed with SIGKILL leaves a stale registration that no longer lists; a worker
    stopped cleanly removes its own.

usage: verbs_devices_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_RUN IBV_DEVICES IBV_DEVINFO IB_WRITE_BW"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Telemetry, free_port, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started, write_lab_tables)

FABRIC, RNIC, RUN, IBV_DEVICES, IBV_DEVINFO, IB_WRITE_BW = sys.argv[1:7]
TAG = f"verbsdev{os.getpid()}"
lab = Lab(tmp_prefix="tandem-verbsdev-")
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


def main():
    write_lab_tables(D)
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D), "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    workers, prefixes = {}, {}
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        prefixes[n] = f"{TAG}-{n.lower()}"
        workers[n] = lab.start(lab_worker_argv(RNIC, n, prefixes[n], D, sock, ["--mtu", "1024"]), n, prefixes[n])
    t0 = time.time()
    while not all(os.path.exists(f"{D}/devices/tandem_{n}_v1.dev") for n in workers):
        if time.time() - t0 > 30 or any(w.poll() is not None for w in workers.values()):
            raise RuntimeError("workers did not register their verbs devices")
        time.sleep(0.1)
    tel = Telemetry(prefixes["A"], ready="/tandem/rnic/stats")

    code, out = run([IBV_DEVICES])
    check(code == 0 and "tandem_A_v1" in out and "tandem_B_v1" in out,
          f"ibv_devices lists both workers' vNICs (exit {code}): {' '.join(out.split())[:160]}")

    attached0 = tel.cmd("/tandem/rnic/stats")["apps_attached"]
    code, out = run([IBV_DEVINFO, "-v", "-d", "tandem_A_v1"])
    want = ["hca_id: tandem_A_v1", "state: PORT_ACTIVE", "link_layer: Ethernet", "active_mtu: 1024 (3)",
            "GID[ 0]: ::ffff:192.168.7.1, RoCE v2", "max_qp: 16384", "atomic_cap: ATOMIC_NONE"]
    flat = " ".join(out.split())
    missing = [w for w in want if w not in flat]
    check(code == 0 and not missing, f"ibv_devinfo -v -d tandem_A_v1 (exit {code}): missing {missing}")
    st = tel.cmd("/tandem/rnic/stats")
    check(st["apps_attached"] == attached0 + 1 and st["apps_detached"] >= 1,
          f"ibv_open_device attached to worker A and ibv_close_device detached "
          f"(attached {attached0} -> {st['apps_attached']}, detached {st['apps_detached']})")

    port = str(free_port())
    srv = subprocess.Popen([RUN, IB_WRITE_BW, "-d", "tandem_A_v1", "-p", port], env=ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    code, out = run([IB_WRITE_BW, "-d", "tandem_B_v1", "-p", port, "127.0.0.1"])
    try:
        sout, _ = srv.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        srv.kill()
        sout, _ = srv.communicate()
    for side, c, o in (("client", code, out), ("server", srv.returncode, sout)):
        check(c == 1 and "Couldn't allocate PD" in o,
              f"stock ib_write_bw {side} opens the Tandem device and stops cleanly at ibv_alloc_pd "
              f"(exit {c}): {' '.join(o.split())[:100]}")

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
        print(f"--- A log ---\n{lab.text('A')}")


run_checked("verbs_devices", main, checks, lab)
