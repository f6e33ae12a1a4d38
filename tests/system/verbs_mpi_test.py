"""Open MPI over UCX between two tandem-rnic workers, with Debian's binaries unmodified: NetPIPE
(netpipe-openmpi's NPopenmpi) in integrity mode (-i: every message's bytes checked by the
receiving rank) from 1 byte to 4 MiB, one rank per worker through scripts/tandem-run, with
pml ucx on UCX_TLS=rc_verbs,ud_verbs,self (no shared memory: the ranks share a host, their
devices do not).

Judged: mpirun exits 0; every size's integrity check passes and the largest is at least 4 MiB;
each worker received at least the bytes NetPIPE moved (the traffic went through Tandem); no
packet dropped for want of a route (UCX's UD transport sends to its own interface too); no
process died by a signal. (Before UCX's UD transport could reach its own interface, the run
aborted after ~30 s with "UD endpoint ... unhandled timeout error": issue 35.)

Skipped (77) when mpirun or NPopenmpi is absent (scripts/setup.sh installs them).

usage: verbs_mpi_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_RUN BINDIR"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, lab_fabric_argv, lab_worker_argv, run_checked,  # noqa: E402
                            telemetry_query, wait_fabric_started, write_lab_tables)

FABRIC, RNIC, RUN, BINDIR = sys.argv[1:5]
MPIRUN, NETPIPE = f"{BINDIR}/mpirun", f"{BINDIR}/NPopenmpi"
TAG = f"verbsmpi{os.getpid()}"
DEV = "tandem_h_v1"
TOP = 4 << 20
lab = Lab(tmp_prefix="tandem-verbsmpi-")
D = lab.d
checks = Checks()
check = checks.check


def stats(prefix):
    return telemetry_query(prefix, "/tandem/rnic/stats") or {}


def main():
    os.chmod(D, 0o755)
    write_lab_tables(D)
    fab = lab.start(lab_fabric_argv(FABRIC, f"{TAG}-fab", D), "fabric", f"{TAG}-fab")
    wait_fabric_started(lab, fab)
    prefixes = {}
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        prefixes[n] = f"{TAG}-{n.lower()}"
        argv = lab_worker_argv(RNIC, n, prefixes[n], D, sock, ["--mtu", "1024", "--spray", "round_robin",
                                                             "--cc", "credit"])
        argv[argv.index("--name") + 1] = "h"  # both register tandem_h_v1, each in its own registry
        argv[argv.index("--device-dir") + 1] = f"{D}/dev{n}"
        lab.start(argv, n, prefixes[n])
    t0 = time.time()
    while not all(os.path.exists(f"{D}/dev{n}/{DEV}.dev") for n in "AB"):
        if time.time() - t0 > 30:
            raise RuntimeError("workers did not register their verbs devices")
        time.sleep(0.1)
    before = {n: stats(p).get("rx_bytes", 0) for n, p in prefixes.items()}

    common = ["-x", "UCX_TLS=rc_verbs,ud_verbs,self", "-x", f"UCX_NET_DEVICES={DEV}:1",
              "--mca", "pml", "ucx", "--mca", "btl", "^vader,tcp,openib,uct", "--mca", "osc", "^ucx"]
    np_argv = [NETPIPE, "-i", "-p", "0", "-u", str(TOP + 64), "-o", f"{D}/np.out"]
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
    for n in "AB":  # one rank on each worker's device (MPMD)
        cmd += (["-np", "1", "-x", f"TANDEM_DEVICES={D}/dev{n}"] + common + [RUN] + np_argv + [":"])
    t = time.time()
    try:
        r = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=240, cwd=D)
        code, out = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        code, out = None, (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    took = time.time() - t
    sizes = [int(m.group(1)) for m in re.finditer(r"^\s*\d+:\s+(\d+) bytes.*Integrity check passed", out, re.M)]
    bad = [ln for ln in out.splitlines() if "Integrity check failed" in ln or "Fatal" in ln or "ERROR" in ln]
    check(code == 0, f"mpirun NPopenmpi -i up to {TOP} B: exit {code} in {took:.1f} s"
                     + ("" if code == 0 else f": {' '.join(out.split())[-600:]}"))
    check(sizes and max(sizes) >= TOP and not bad,
          f"{len(sizes)} sizes' integrity checks passed, largest {max(sizes) if sizes else 0} B; failures: {bad[:3]}")
    moved = 2 * sum(sizes)  # at least one round trip of each size
    after = {n: stats(p) for n, p in prefixes.items()}
    got = {n: after[n].get("rx_bytes", 0) - before[n] for n in prefixes}
    check(all(v >= moved for v in got.values()),
          f"each worker received at least the {moved} B NetPIPE checked: {got}")
    # UCX's UD transport also sends to its own interface, as an RNIC's loopback takes it.
    miss = {n: after[n].get("drop_egress_table_miss", 0) for n in prefixes}
    check(all(v == 0 for v in miss.values()), f"no datagram dropped for want of a route (table_miss {miss})")


if __name__ == "__main__":
    if not (os.path.exists(MPIRUN) and os.path.exists(NETPIPE)):
        print(f"SKIP verbs_mpi: {MPIRUN} or {NETPIPE} missing (scripts/setup.sh installs openmpi-bin, netpipe-openmpi)")
        sys.exit(77)
    run_checked("verbs_mpi", main, checks, lab)
