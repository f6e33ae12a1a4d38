"""System test of what stock binaries see of Tandem devices beyond libibverbs' answers, with
Debian's binaries unmodified, through scripts/tandem-run, against two tandem-rnic workers on the
lab fabric. As on two real hosts, each worker registers its device as tandem_h_v1 in a registry of
its own (D/devA, D/devB): UCX's UCT tests hand the client's device name to the server. Worker A
has --device-owner 1=4242.

  * UCX (ucx-utils' ucx_info -d) lists tandem_h_v1 as a memory domain with the rc_verbs transport:
    it finds it through /dev/infiniband/uverbs0 and reads the GID type from /sys/class/infiniband,
    both only in tandem-run's private mount namespace (with TANDEM_SYSFS=0 UCX lists no Tandem
    device, and the host's /sys and /dev never show them);
  * UCP (ucx_perftest tag_bw/tag_lat) with UCX_TLS=rc_verbs,ud_verbs and with ud_verbs alone;
  * UCX's rc_verbs between the workers: ucx_perftest add_lat and fadd (device atomics), put_bw (64 KiB zero-copy RDMA writes) and
    am_lat (8 B sends; UCX flushes with zero-length RDMA writes on rkey 0); rc_verbs receives on an
    SRQ. An interface that does not open fails the test;
  * device access is the worker's decision: as uid 65534 ibv_open_device on A's device fails with
    EACCES (Debian's python calling the library through ctypes, and stock ibv_devinfo fails), the
    worker counts the refusal (attach_denied); uid 4242, its owner, opens it.

usage: verbs_ucx_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_RUN BINDIR
(BINDIR: where ucx_info, ucx_perftest and ibv_devinfo are, /usr/bin)"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Telemetry, free_port, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started, write_lab_tables)

FABRIC, RNIC, RUN, BINDIR = sys.argv[1:5]
TAG = f"verbsucx{os.getpid()}"
lab = Lab(tmp_prefix="tandem-verbsucx-")
D = lab.d
checks = Checks()
check, failed = checks.check, checks.failed
ENV = {n: dict(os.environ, TANDEM_DEVICES=f"{D}/dev{n}") for n in "AB"}
DEV = "tandem_h_v1"

# ibv_open_device through the public ABI of whichever libibverbs.so.1 is loaded: "opened" or "errno N".
OPEN_PY = """
import ctypes, sys
lib = ctypes.CDLL("libibverbs.so.1", use_errno=True)
lib.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
lib.ibv_get_device_name.restype = ctypes.c_char_p
lib.ibv_get_device_name.argtypes = [ctypes.c_void_p]
lib.ibv_open_device.restype = ctypes.c_void_p
lib.ibv_open_device.argtypes = [ctypes.c_void_p]
n = ctypes.c_int()
devs = lib.ibv_get_device_list(ctypes.byref(n))
for i in range(n.value):
    if lib.ibv_get_device_name(devs[i]).decode() == sys.argv[1]:
        ctx = lib.ibv_open_device(devs[i])
        print("opened" if ctx else f"errno {ctypes.get_errno()}")
        sys.exit(0)
print("no such device")
"""


def run(argv, env=None, timeout=30, as_uid=None):
    pre = [] if as_uid is None else ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups"]
    try:
        r = subprocess.run(pre + [RUN] + argv, env=env or ENV["A"], capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        return None, f"timed out: {e}"


def ucx_section(out, transport, device):
    """The ucx_info -d block of one transport on one device (up to the next Transport line)."""
    lines, keep = [], False
    for line in out.splitlines():
        if "Transport:" in line:
            keep = line.split()[-1] == transport
        elif keep and "Device:" in line and line.split()[-1] != device:
            keep = False
        if keep:
            lines.append(line)
    return "\n".join(lines)


def main():
    for b in ("ucx_info", "ucx_perftest", "ibv_devinfo"):
        if not os.path.exists(f"{BINDIR}/{b}"):
            raise RuntimeError(f"{BINDIR}/{b} missing: install ucx-utils and ibverbs-utils (scripts/setup.sh)")
    os.chmod(D, 0o755)  # other users reach the workers' sockets and the registry
    write_lab_tables(D)
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D), "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    workers, prefixes = {}, {}
    for n, sock, extra in (("A", "h0.sock", ["--device-owner", "1=4242"]), ("B", "h1.sock", [])):
        prefixes[n] = f"{TAG}-{n.lower()}"
        argv = lab_worker_argv(RNIC, n, prefixes[n], D, sock, [
            "--mtu", "1024", "--spray", "round_robin", "--cc", "credit"] + extra)
        argv[argv.index("--name") + 1] = "h"  # both register tandem_h_v1, each in its own registry
        argv[argv.index("--device-dir") + 1] = f"{D}/dev{n}"
        workers[n] = lab.start(argv, n, prefixes[n])
    t0 = time.time()
    while not all(os.path.exists(f"{D}/dev{n}/{DEV}.dev") for n in workers):
        if time.time() - t0 > 30 or any(w.poll() is not None for w in workers.values()):
            raise RuntimeError("workers did not register their verbs devices")
        time.sleep(0.1)
    tel = Telemetry(prefixes["A"], ready="/tandem/rnic/stats")

    # UCX finds the device through the namespace tandem-run makes, and only there.
    code, out = run([f"{BINDIR}/ucx_info", "-d"], env=dict(ENV["A"], UCX_LOG_LEVEL="debug"))
    rc = ucx_section(out, "rc_verbs", f"{DEV}:1")
    check(code == 0 and f"Memory domain: {DEV}" in out and rc,
          f"ucx_info -d lists {DEV} as a memory domain with rc_verbs (exit {code})")
    code, gtype = run(["cat", f"/sys/class/infiniband/{DEV}/ports/1/gid_attrs/types/0",
                       "/sys/class/infiniband_verbs/uverbs0/ibdev"])
    check(code == 0 and gtype.split("\n")[:2] == ["RoCE v2", DEV],
          f"under tandem-run, GID 0's type (what UCX and NCCL read) is RoCE v2: {' '.join(gtype.split())}")
    code, mine = run(["cat", f"/sys/class/infiniband/{DEV}/ports/1/gid_attrs/types/0"], as_uid=4242)
    check(code == 0 and mine.strip() == "RoCE v2",
          f"as uid 4242 (tandem-sysfs in a user namespace of its own) the tree is there too: {mine.strip()[:200]}")
    code, bare = run([f"{BINDIR}/ucx_info", "-d"], env=dict(ENV["A"], TANDEM_SYSFS="0"))
    check(code == 0 and "tandem_" not in bare,
          f"without the tree (TANDEM_SYSFS=0) UCX lists no Tandem device (exit {code})")
    check(not os.path.exists(f"/sys/class/infiniband/{DEV}") and not os.path.exists("/dev/infiniband/uverbs0"),
          "the host's /sys and /dev never show the tree")

    # rc_verbs between the two workers (UCT: RDMA writes on RC QPs), when the interface opens.
    if "failed to open interface" in rc:
        why = [ln.split("ERROR", 1)[1].strip() for ln in rc.splitlines() if "ERROR" in ln]
        check(False, f"UCX rc_verbs interface on {DEV} does not open: {why[:1] or rc[-300:]}")
    else:
        # put_bw: 64 KiB zero-copy RDMA writes; am_lat: 8 B sends ping-pong, and UCX's flushes,
        # zero-length RDMA writes with rkey 0 that the responder must not check.
        # add_lat, fadd: UCT's 64-bit atomics (IBV_WR_ATOMIC_FETCH_AND_ADD) on the RC QPs.
        for test, extra in (("put_bw", ["-D", "zcopy", "-s", "65536", "-n", "500"]), ("am_lat", ["-s", "8", "-n", "200"]),
                            ("add_lat", ["-n", "200"]), ("fadd", ["-n", "200"])):
            args = [f"{BINDIR}/ucx_perftest", "-t", test, "-x", "rc_verbs", "-d", f"{DEV}:1", "-p", str(free_port())] + extra
            srv = subprocess.Popen([RUN] + args, env=ENV["A"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(1)
            code, cout = run(args + ["127.0.0.1"], env=ENV["B"], timeout=60)
            try:
                sout, _ = srv.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                srv.kill()
                sout = srv.communicate()[0] + "\n(hung: killed)"
            final = [ln for ln in cout.splitlines() if ln.startswith("Final:")]
            check(code == 0 and srv.returncode == 0 and final,
                  f"ucx_perftest {test} {' '.join(extra)} over rc_verbs, B -> A (exit {code}/{srv.returncode}): "
                  f"{' '.join(final[0].split()) if final else cout[-600:] + sout[-600:]}")

    # UCP (what MPI and applications use) over the workers: it wires up over ud_verbs (UD QPs
    # and AHs), then runs on rc_verbs, or on ud_verbs alone.
    for tls in ("rc_verbs,ud_verbs", "ud_verbs"):
        tests = [("tag_bw", ["-s", "65536", "-n", "200"]), ("tag_lat", ["-s", "8", "-n", "200"])]
        if tls.startswith("rc_verbs"):
            tests.append(("ucp_fadd", ["-n", "200"]))  # UCP's atomics on the RC lanes' device atomics
        for test, extra in tests:
            args = [f"{BINDIR}/ucx_perftest", "-t", test, "-p", str(free_port())] + extra
            ucp = {"UCX_TLS": tls, "UCX_NET_DEVICES": f"{DEV}:1"}
            srv = subprocess.Popen([RUN] + args, env=dict(ENV["A"], **ucp), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
            time.sleep(1)
            code, cout = run(args + ["127.0.0.1"], env=dict(ENV["B"], **ucp), timeout=90)
            try:
                sout, _ = srv.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                srv.kill()
                sout = srv.communicate()[0] + "\n(hung: killed)"
            final = [ln for ln in cout.splitlines() if ln.startswith("Final:")]
            check(code == 0 and srv.returncode == 0 and final,
                  f"UCP ucx_perftest {test} {' '.join(extra)} with UCX_TLS={tls}, B -> A (exit {code}/{srv.returncode}): "
                  f"{' '.join(final[0].split()) if final else cout[-600:] + sout[-600:]}")

    # Access: A's vNIC 1 is uid 4242's; root and 4242 open it, uid 65534 does not.
    denied0 = tel.cmd("/tandem/rnic/stats")["host_attach_denied"]
    code, out = run(["python3", "-c", OPEN_PY, DEV], as_uid=65534)
    check(code == 0 and "errno 13" in out, f"uid 65534: ibv_open_device(A's device) fails with EACCES ({out.strip()})")
    code, out = run([f"{BINDIR}/ibv_devinfo", "-d", DEV], as_uid=65534)
    check(code != 0 and "hca_id" not in out, f"uid 65534: stock ibv_devinfo cannot open A's device (exit {code})")
    denied = tel.cmd("/tandem/rnic/stats")["host_attach_denied"]
    check(denied == denied0 + 2, f"worker A counted both refusals (attach_denied {denied0} -> {denied})")
    code, out = run(["python3", "-c", OPEN_PY, DEV], as_uid=4242)
    check(code == 0 and "opened" in out, f"uid 4242, the vNIC's owner, opens A's device ({out.strip()})")
    code, out = run([f"{BINDIR}/ibv_devinfo", "-d", DEV], as_uid=4242)
    check(code == 0 and f"hca_id:\t{DEV}" in out, f"uid 4242: stock ibv_devinfo -d A's device (exit {code})")
    code, out = run(["python3", "-c", OPEN_PY, DEV])
    check(code == 0 and "opened" in out, f"root opens A's device ({out.strip()})")
    # B has no owners: its socket's mode (the worker's umask) decides, and lets no other user in.
    mode = os.stat(f"{D}/B.rnic").st_mode & 0o777
    code, out = run(["python3", "-c", OPEN_PY, DEV], env=ENV["B"], as_uid=65534)
    check(mode & 0o002 or "errno 13" in out,
          f"uid 65534 on B's device (no owners, socket mode {mode:o}): {out.strip()}")
    for n in ("A", "B"):
        lab.stop(workers[n])
    lab.stop(fab)
    if failed:
        print(f"--- A log ---\n{lab.text('A')}")


if shutil.which("setpriv") is None:
    print("FAIL setpriv (util-linux) missing")
    sys.exit(1)
run_checked("verbs_ucx", main, checks, lab)
