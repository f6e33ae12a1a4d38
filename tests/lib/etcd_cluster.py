"""A real etcd cluster on loopback for fleet tests and benchmarks: Debian's
etcd binaries, N members with their own data directories (on tmpfs: their
fsyncs are what a 2-core box cannot afford) and free ports, started through
a Lab (so they are stopped by PID with everything else); cleanup() removes
the data directories."""
import json
import os
import shutil
import subprocess
import tempfile
import time

from tandem_harness import free_port

ETCD, ETCDCTL = shutil.which("etcd"), shutil.which("etcdctl")


def have_etcd():
    return bool(ETCD and ETCDCTL)


class EtcdCluster:
    def __init__(self, lab, tag, members=3):
        self.lab, self.tag = lab, tag
        self.members = [f"e{i}" for i in range(members)]
        self.data = tempfile.mkdtemp(prefix="tandem-etcd-", dir="/dev/shm")
        self.cport = {m: free_port() for m in self.members}
        self.pport = {m: free_port() for m in self.members}
        self.endpoints = ",".join(f"127.0.0.1:{self.cport[m]}" for m in self.members)
        self.procs = {}

    def start(self, m=None):
        """Starts one member (again, with its data), or all."""
        cluster = ",".join(f"{x}=http://127.0.0.1:{self.pport[x]}" for x in self.members)
        for x in [m] if m else self.members:
            self.procs[x] = self.lab.start(
                [ETCD, "--name", x, "--data-dir", f"{self.data}/{x}",
                 "--listen-client-urls", f"http://127.0.0.1:{self.cport[x]}",
                 "--advertise-client-urls", f"http://127.0.0.1:{self.cport[x]}",
                 "--listen-peer-urls", f"http://127.0.0.1:{self.pport[x]}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.pport[x]}",
                 "--initial-cluster", cluster, "--initial-cluster-state", "new", "--initial-cluster-token", self.tag,
                 "--heartbeat-interval", "100", "--election-timeout", "1000", "--log-level", "warn",
                 "--logger", "zap"],
                open(self.lab.path(f"etcd-{x}.log"), "a"))

    def wait_healthy(self, timeout=30):
        deadline = time.time() + timeout
        while self.ctl("endpoint", "health")[0] != 0:
            if time.time() > deadline:
                raise RuntimeError("etcd cluster did not become healthy:\n" + self.ctl("endpoint", "health")[1])
            time.sleep(0.2)

    def kill(self, m):
        self.procs[m].kill()
        self.procs[m].wait()

    def ctl(self, *args, timeout=20):
        """etcdctl (v3 API) against every member: (exit code, stdout + stderr)."""
        r = subprocess.run([ETCDCTL, f"--endpoints={self.endpoints}", "--command-timeout=3s", *map(str, args)],
                           capture_output=True, text=True, env=dict(os.environ, ETCDCTL_API="3"), timeout=timeout)
        return r.returncode, r.stdout + r.stderr

    def leader(self):
        """The member that leads now, None if none answers as leader."""
        rc, out = self.ctl("endpoint", "status", "-w", "json")
        try:
            for e in json.loads(out):
                if e["Status"]["header"]["member_id"] == e["Status"]["leader"]:
                    return next(m for m in self.members if e["Endpoint"].endswith(f":{self.cport[m]}"))
        except (ValueError, KeyError, StopIteration):
            pass
        return None

    def cleanup(self):
        shutil.rmtree(self.data, ignore_errors=True)
