"""A memif peer killed while the server polls its port must not crash the
server (common/dpdk/unmap_guard.h, common/fabric/dpdk/MEMIF.md). A server
that polls its memif port without pause sees dpdk-testpmd clients (txonly)
come, send, and die by SIGKILL, again and again; it must survive every one,
its munmap must be the guard's, and the guard must have held back at least
one unmap while a burst was in progress (else the test did not exercise it).

usage: memif_unmap_guard_test.py SERVER [--cycles N] [--no-guard]
  --no-guard measures the race the guard closes: the server's bursts are not
  announced; the script then reports how many cycles the server survived and
  exits 0 (a measurement, not a check)."""
import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, poll_until  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("server")
ap.add_argument("--cycles", type=int, default=8)
ap.add_argument("--no-guard", action="store_true")
args = ap.parse_args()
testpmd = shutil.which("dpdk-testpmd")
if testpmd is None:
    print("dpdk-testpmd not installed: skipping")
    sys.exit(77)

TAG = os.getpid()
lab = Lab(tmp_prefix="tandem-unmap-")
c = Checks()
sock = lab.path("srv.sock")
SPFX = f"tandem-unmap-srv-{TAG}"


try:
    argv = [args.server] + (["--no-guard"] if args.no_guard else []) + [
        "--no-pci", "--no-huge", "-m", "64", "-l", "0", f"--file-prefix={SPFX}", "--log-level=error",
        f"--vdev=net_memif0,role=server,socket={sock}"]
    srv = lab.start(argv, "server", SPFX, separate_stderr=True)
    c.check(poll_until(lambda: "ready" in lab.text("server"), 15), "server up")
    survived = 0
    for i in range(args.cycles):
        cpfx = f"tandem-unmap-cli-{TAG}-{i}"
        cli = lab.start([testpmd, "-l", "0,1", "--no-pci", "--no-huge", "-m", "64", f"--file-prefix={cpfx}",
                         "--log-level=error", f"--vdev=net_memif0,role=client,socket={sock}", "--",
                         "--forward-mode=txonly", "--nb-cores=1", "--total-num-mbufs=2048",
                         "--txd=256", "--rxd=256", "--auto-start", "--stats-period=1"], f"client{i}", cpfx)
        # Let it connect and stream for a moment, then kill it mid-stream.
        time.sleep(1.2)
        cli.kill()
        cli.wait()
        time.sleep(0.3)
        if srv.poll() is not None:
            break
        survived += 1
    alive = srv.poll() is None
    rc = lab.stop(srv, 10)
    out = lab.text("server")
    stats = {}
    for line in out.splitlines():
        if line.startswith("{"):
            stats = json.loads(line)
    print(out[-600:])
    print(lab.text("server", "err")[-600:])
    if args.no_guard:
        print(f"no guard: the server survived {survived} of {args.cycles} client kills "
              f"({'alive' if alive else f'died, rc {srv.returncode}'})")
        sys.exit(0)
    c.check(alive and survived == args.cycles, f"server survived {survived} of {args.cycles} clients killed mid-stream")
    c.check(rc == 0, f"server stops cleanly ({rc})")
    c.check(stats.get("rx", 0) > 0, f"clients' packets arrived ({stats.get('rx', 0)})")
    c.check(stats.get("active") is True, "the process's munmap is the guard's (exported)")
    c.check(stats.get("waited", 0) > 0,
            f"the guard held back an unmap during a burst at least once ({stats.get('waited', 0)} of "
            f"{stats.get('unmaps', 0)} unmaps, longest wait {stats.get('wait_ns_max', 0)} ns)")
    c.check(stats.get("timeouts", 1) == 0, "no wait timed out")
finally:
    lab.cleanup()
print(f"{len(c.failed)} check(s) failed")
sys.exit(1 if c.failed else 0)
