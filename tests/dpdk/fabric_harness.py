"""Helpers for the tandem-fabric DPDK tests: a process that is always
cleaned up (killed by its PID, hugepage files of its --file-prefix removed),
the DPDK telemetry client, and the ECMP hash of common/fabric/ecmp.h
re-implemented independently so the tests can predict each packet's path."""
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time

M64 = (1 << 64) - 1


def ecmp_hash(src, dst, sport, dport, proto=17, seed=0):
    x = ((src << 32) ^ dst) & M64
    x ^= (sport << 48) ^ (dport << 32) ^ (proto << 24) ^ seed
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    return x & 0xFFFFFFFF


def ecmp_pick(src, dst, sport, dport, n_paths, proto=17, seed=0):
    return ecmp_hash(src, dst, sport, dport, proto, seed) % n_paths


def ip2int(s):
    a, b, c, d = (int(x) for x in s.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


class Procs:
    """Started processes and file prefixes, cleaned up on exit or signal."""

    def __init__(self):
        self.procs = []
        self.prefixes = []
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum, frame):
        self.cleanup()
        sys.exit(128 + signum)

    def start(self, argv, prefix, log):
        self.prefixes.append(prefix)
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def stop(self, p, timeout=10):
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for pre in self.prefixes:
            for f in glob.glob(f"/dev/hugepages/{pre}*"):
                try:
                    os.unlink(f)
                except OSError:
                    pass
            subprocess.run(["rm", "-rf", f"/var/run/dpdk/{pre}"], check=False)


class Telemetry:
    def __init__(self, prefix, timeout=15.0):
        path = f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2"
        deadline = time.time() + timeout
        while True:
            try:
                self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                self.s.connect(path)
                break
            except OSError:
                self.s.close()
                if time.time() > deadline:
                    raise RuntimeError(f"no telemetry socket at {path}")
                time.sleep(0.1)
        json.loads(self.s.recv(65536).decode())  # greeting
        # The EAL opens the socket before the app registers its commands.
        while self.cmd("/tandem/fabric/ports") is None:
            if time.time() > deadline:
                raise RuntimeError("tandem-fabric never registered its telemetry commands")
            time.sleep(0.1)

    def cmd(self, c):
        self.s.send(c.encode())
        reply = json.loads(self.s.recv(1 << 20).decode())
        return reply[c.split(",")[0]]


class Checks:
    def __init__(self):
        self.failed = 0

    def check(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            self.failed += 1
