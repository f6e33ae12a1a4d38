"""The process harness shared by Tandem's Python tests, benchmarks and demo:
a lab that starts processes with log files and always cleans them up
(stopped by the PID it started, hugepage files and runtime dirs of their DPDK
--file-prefix removed, also on failure, SIGINT or SIGTERM), the DPDK telemetry
client, check() printing, free_port(), the ECMP hash of common/fabric/ecmp.h
re-implemented independently (so tests can predict each packet's path), and
the standalone tandem-rnic table YAML of the two-host lab.

Every process a script starts through subprocess (Popen, run, check_output...)
is recorded, with the signals the script itself sent it (send_signal, kill,
terminate). A process that died by a signal nobody here sent (a worker's
SIGSEGV, an application's SIGBUS) fails the test: Lab.cleanup() reports it as a
failed check to every Checks of the script (signal_deaths()), so no test has
to look for it itself.

Import it from a script's own location, so it works from any directory:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "<up>", "tests", "lib"))"""
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

M64 = (1 << 64) - 1


# ---- every started process, and who signalled it ---------------------------

class TrackedPopen(subprocess.Popen):
    """subprocess.Popen that remembers itself and the signals sent to it from here."""
    started = []

    def __init__(self, *args, **kwargs):
        self.sent_signals = set()
        super().__init__(*args, **kwargs)
        TrackedPopen.started.append(self)

    def send_signal(self, sig):  # kill() and terminate() come through here too
        self.sent_signals.add(int(sig))
        super().send_signal(sig)


# subprocess.run/check_output build their Popen from the module's name: this catches them too.
subprocess.Popen = TrackedPopen


WRAPPERS = ("tandem-run", "nice", "python3", "setpriv", "env", "timeout")


def describe_process(p):
    """'ib_write_bw (pid N)': the program, past wrappers such as tandem-run or nice -n 19."""
    argv = [str(a) for a in (p.args if isinstance(p.args, (list, tuple)) else str(p.args).split())] or ["?"]
    i = 0
    while i < len(argv) - 1 and os.path.basename(argv[i]) in WRAPPERS:
        i += 1
        while i < len(argv) - 1 and (argv[i].startswith("-") or argv[i].isdigit()):
            i += 1
    return f"{os.path.basename(argv[i])} (pid {p.pid})"


def signal_deaths(procs=None):
    """Processes started here (all, or those in procs) that died by a signal this script did not send:
    [(description, signal name)]. Running ones are not waited for."""
    out = []
    for p in TrackedPopen.started if procs is None else procs:
        rc = p.poll() if isinstance(p, subprocess.Popen) else None
        if rc is not None and rc < 0 and -rc not in getattr(p, "sent_signals", ()):
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            out.append((describe_process(p), name))
    return out


# ---- ECMP (common/fabric/ecmp.h) -------------------------------------------

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


def path_ports(src, dst, n_paths, dport=4791):
    """The first UDP source port (RoCEv2 entropy range) that reaches each path."""
    ports = {}
    for sport in range(0xC000, 0x10000):
        ports.setdefault(ecmp_pick(ip2int(src), ip2int(dst), sport, dport, n_paths), sport)
        if len(ports) == n_paths:
            break
    return [ports[k] for k in range(n_paths)]


# ---- the two-host lab's standalone tables ----------------------------------

LAB_HOSTS = [(1, "10.0.0.1", "192.168.7.1"), (2, "10.0.0.2", "192.168.7.2")]  # (index, underlay, overlay)


def table_yaml(me, peer, paths=4):
    """tandem-rnic --table for host `me` talking to `peer`, both (index, underlay ip, overlay ip);
    paths is a path count or a list of UDP source ports, one per path."""
    return f"""underlay:
  ip: {me[1]}
  mac: 02:00:00:00:00:0{me[0]}
  gateway_mac: 02:00:00:00:00:fe
vnics:
  - {{id: 1, ip: {me[2]}, mac: 02:00:00:00:01:0{me[0]}, vni: 100}}
egress:
  - {{vnic: 1, remote_ip: {peer[2]}, underlay_ip: {peer[1]}, paths: {paths}}}
ingress:
  - {{vnic: 1, underlay_src: {peer[1]}, remote_ip: {peer[2]}}}
"""


def write_lab_tables(d, paths=lambda me, peer: 4):
    """Writes d/A.yaml and d/B.yaml for LAB_HOSTS; paths(me, peer) gives each egress's paths."""
    a, b = LAB_HOSTS
    for me, peer, n in ((a, b, "A"), (b, a, "B")):
        with open(f"{d}/{n}.yaml", "w") as f:
            f.write(table_yaml(me, peer, paths(me, peer)))


# ---- the two-host lab's processes (sockets and tables in one directory d) ---

def lab_fabric_argv(fabric, prefix, d, flags=(), lcore="0", transport="memif"):
    """tandem-fabric as memif server for both lab hosts (d/h0.sock: 10.0.0.1, d/h1.sock: 10.0.0.2), 4 paths;
    transport="vhost": vhost-user backends on the same sockets instead (for virtio-user workers)."""
    if transport == "vhost":
        ports = [f"--vdev=net_vhost{i},iface={d}/h{i}.sock" for i in (0, 1)]
    else:
        ports = [f"--vdev=net_memif{i},role=server,socket={d}/h{i}.sock" for i in (0, 1)]
    return [fabric, "--route", "10.0.0.1=0", "--route", "10.0.0.2=1", "--paths", "4"] + list(flags) + [
        "--idle", "adaptive", "--link-wait-ms", "0", "--", "--no-pci", f"--file-prefix={prefix}",
        "-l", str(lcore), "-m", "64", "--log-level=lib.eal:error"] + ports


def lab_memif_vdev(d, sock, role="client", extra=""):
    """The --vdev of a lab host's memif port on d/<sock> (what workers use; baselines reuse it);
    extra: more memif devargs, e.g. "bsize=8192" (the client allocates the shared buffers)."""
    return f"--vdev=net_memif0,role={role},socket={d}/{sock}" + (f",{extra}" if extra else "")


def lab_worker_argv(rnic, name, prefix, d, sock, flags=(), eal=(), lcore="1", memif="", transport="memif"):
    """tandem-rnic `name` (table d/<name>.yaml, host socket d/<name>.rnic, verbs devices in d/devices)
    as memif client on d/<sock>;
    transport="virtio": the virtio-user PMD a VM or container uses, against the fabric's vhost-user port
    (one hugepage file, so the backend can map DPDK's memory)."""
    if transport == "virtio":
        port = ["--single-file-segments", f"--vdev=net_virtio_user0,path={d}/{sock}"]
    else:
        port = [lab_memif_vdev(d, sock, extra=memif)]
    return [rnic, "--name", name, "--host-socket", f"{d}/{name}.rnic", "--table", f"{d}/{name}.yaml",
            "--idle", "adaptive", "--device-dir", f"{d}/devices"] + list(flags) + [
        "--", "--no-pci", f"--file-prefix={prefix}", "-l", str(lcore), "-m", "128",
        "--log-level=lib.eal:error"] + port + list(eal)


def lab_perf_pair(lab, perf, d, name, test, flags, timeout=120):
    """tandem-perf `test` --json: server on worker A (d/A.rnic, overlay 192.168.7.1), client with `flags`
    on worker B (192.168.7.2), TCP on loopback. Returns (client exit, client JSON, server exit, server JSON);
    a side that does not exit within timeout is killed (exit None)."""
    port = free_port()
    common = [test, "-p", str(port), "--json", "--timeout", "30"]
    srv = lab.start([perf] + common + ["--device", f"{d}/A.rnic", "--gid", "192.168.7.1"],
                    f"{name}-server", separate_stderr=True)
    cli = lab.start([perf] + common + flags + ["--device", f"{d}/B.rnic", "--gid", "192.168.7.2", "127.0.0.1"],
                    f"{name}-client", separate_stderr=True)
    results = []
    for p, side in ((cli, "client"), (srv, "server")):
        try:
            code = p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            code = None
        try:
            j = json.loads(lab.text(f"{name}-{side}"))
        except ValueError:
            j = {}
        results.append((code, j))
    (cc, cj), (sc, sj) = results
    if cc != 0 or sc != 0:
        print(f"--- {name} client stderr ---\n{lab.text(name + '-client', 'err')}"
              f"--- {name} server stderr ---\n{lab.text(name + '-server', 'err')}")
    return cc, cj, sc, sj


def wait_fabric_started(lab, p, name="fabric", timeout=20):
    """memif sockets are abstract by default: waits for the fabric's start-up line."""
    t0 = time.time()
    while "tandem-fabric:" not in lab.text(name) + lab.text(name, "err"):
        if time.time() - t0 > timeout or p.poll() is not None:
            raise RuntimeError("fabric did not start:\n" + lab.text(name) + lab.text(name, "err"))
        time.sleep(0.1)


# ---- processes -------------------------------------------------------------

def stop(p, timeout=15):
    """SIGINT, then SIGKILL if it has not exited within timeout; returns the exit code."""
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return p.returncode


def remove_dpdk_files(prefix):
    """The hugepage files and runtime dir an EAL with --file-prefix=prefix leaves behind."""
    for f in glob.glob(f"/dev/hugepages/{prefix}*"):
        try:
            os.unlink(f)
        except OSError:
            pass
    shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)


def wait_for(cond, what, timeout=30, poll=0.05):
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout:
            raise RuntimeError(what)
        time.sleep(poll)


def poll_until(pred, timeout, what=None, poll=0.1):
    """True once pred() holds, False after `timeout` s (for a check that reports rather
    than raises; `what` only names the wait at the call site)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(poll)
    return False


class Tandemctl:
    """tandemctl --json against one agent's control socket; a call returns (exit code, reply)."""

    def __init__(self, ctl, sock):
        self.ctl, self.sock = ctl, sock

    def __call__(self, *args):
        r = subprocess.run([self.ctl, "--socket", self.sock, *map(str, args), "--json"], capture_output=True,
                           text=True)
        try:
            return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {}
        except ValueError:
            return r.returncode, {"raw": r.stdout + r.stderr}

    def channel(self, rnic):
        """The agent's channel to `rnic` (rnic show's "channel"), {} if unknown."""
        rc, j = self("rnic", "show", rnic)
        return j.get("rnic", {}).get("channel", {}) if rc == 0 else {}

    def l2_entries(self, rnic):
        return self("table", "dump", "--level", 2)[1].get("rnics", {}).get(rnic, {}).get("entries", [])

    def l2_vnics(self, rnic):
        return sorted(e["vnic"] for e in self.l2_entries(rnic) if e.get("kind") == "vnic")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Lab:
    """Started processes, their file prefixes and (optionally) a run directory
    for logs, all cleaned up by cleanup(), which SIGINT/SIGTERM also run.

    tmp_prefix: make a temporary run directory (self.d) removed at cleanup
    unless keep. graceful: cleanup SIGINTs live processes and gives them 5 s
    together before SIGKILL (else it kills them). on_signal(signum) runs
    before cleanup on a signal and returns the exit code (default 128+signum)."""

    def __init__(self, tmp_prefix=None, graceful=False, keep=False, on_signal=None):
        self.d = tempfile.mkdtemp(prefix=tmp_prefix) if tmp_prefix else None
        self.procs = []
        self.prefixes = []
        self.graceful = graceful
        self.keep = keep
        self.on_signal = on_signal
        self._reported = set()
        self._expected = {}  # process -> why its death is an expected failure
        self.signal_failures = []  # what report_signal_deaths found when no Checks exists
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum, frame):
        code = self.on_signal(signum) if self.on_signal else 128 + signum
        self.cleanup()
        sys.exit(code)

    def path(self, name):
        return f"{self.d}/{name}"

    def start(self, argv, log, prefix=None, separate_stderr=False, **popen):
        """log: an open file, or a name for self.d/<name>.log (and <name>.err with separate_stderr)."""
        if prefix:
            self.prefixes.append(prefix)
        if isinstance(log, str):
            err = open(self.path(f"{log}.err"), "w") if separate_stderr else subprocess.STDOUT
            log = open(self.path(f"{log}.log"), "w")
        else:
            err = subprocess.STDOUT
        p = subprocess.Popen(argv, stdout=log, stderr=err, **popen)
        self.procs.append(p)
        return p

    def stop(self, p, timeout=15):
        return stop(p, timeout)

    def text(self, name, ext="log", missing=""):
        """The contents of self.d/<name>.<ext>; `missing` if absent (None: raise)."""
        try:
            with open(self.path(f"{name}.{ext}")) as f:
                return f.read()
        except OSError:
            if missing is None:
                raise
            return missing

    def expect_death(self, p, why):
        """p's death by a signal is a known, named failure (a hostile test's expected-failure
        list): report_signal_deaths prints it instead of failing the test."""
        self._expected[p] = why

    def report_signal_deaths(self):
        """A failed check (in every Checks made; printed if there is none) for each process this
        script started that died by a signal it did not send. Once per process."""
        for p in list(self._expected):
            if p not in self._reported and p.poll() is not None:
                if p.returncode < 0:  # (one that exited on its own did not die)
                    print(f"xfail {describe_process(p)} died (exit {p.returncode}), expected: {self._expected[p]}",
                          file=sys.stderr if not Checks.made else sys.stdout, flush=True)
                self._reported.add(p)
        for desc, sig in signal_deaths([p for p in TrackedPopen.started if p not in self._reported]):
            what = f"{desc} died by {sig}, a signal the test did not send"
            if Checks.made:
                for c in Checks.made:
                    c.check(False, what)
            else:  # a benchmark: its stdout may be one JSON object
                print("FAIL " + what, file=sys.stderr, flush=True)
                self.signal_failures.append(what)
        self._reported.update(p for p in TrackedPopen.started if p.poll() is not None)

    def cleanup(self):
        if self.graceful:
            for p in self.procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            deadline = time.time() + 5
            for p in self.procs:
                try:
                    p.wait(max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        else:
            for p in self.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for pre in self.prefixes:
            remove_dpdk_files(pre)
        self.report_signal_deaths()
        if self.d:
            if self.keep:
                print(f"logs kept in {self.d}")
            else:
                shutil.rmtree(self.d, ignore_errors=True)


# ---- DPDK telemetry ----------------------------------------------------------

class Telemetry:
    """DPDK telemetry client (what dpdk-telemetry.py -f PREFIX talks to). With
    ready, also waits until that command answers: the EAL opens the socket
    before the application registers its commands."""

    def __init__(self, prefix, ready=None, timeout=20.0):
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
        while ready and self.cmd(ready) is None:
            if time.time() > deadline:
                raise RuntimeError(f"tandem-{ready.split('/')[2]} never registered its telemetry commands")
            time.sleep(0.1)

    def cmd(self, c):
        self.s.send(c.encode())
        return json.loads(self.s.recv(1 << 22).decode()).get(c.split(",")[0])

    def opackets(self, port=0):
        """Port `port`'s /ethdev/stats opackets, None before the port is up."""
        r = self.cmd(f"/ethdev/stats,{port}")
        return r["opackets"] if r else None


def telemetry_query(prefix, command, timeout=5):
    """One telemetry command of the process with EAL file prefix `prefix`; {} if it does not
    answer. Closes the connection: the EAL serves only a handful at once."""
    try:
        t = Telemetry(prefix, ready=command, timeout=timeout)
    except (OSError, RuntimeError, ValueError):
        return {}
    try:
        return t.cmd(command) or {}
    except (OSError, ValueError):
        return {}
    finally:
        t.s.close()


def opackets_rate(tel, p, warmup, seconds, what, port=0):
    """Mpps sent by port `port` of process p over `seconds` after it started sending and `warmup`
    more seconds (RuntimeError(what) if it never starts within 20 s)."""
    deadline = time.time() + 20
    while tel.opackets(port) in (None, 0):
        if p.poll() is not None or time.time() > deadline:
            raise RuntimeError(what)
        time.sleep(0.1)
    time.sleep(warmup)
    t0, n0 = time.monotonic(), tel.opackets(port)
    time.sleep(seconds)
    t1, n1 = time.monotonic(), tel.opackets(port)
    return (n1 - n0) / (t1 - t0) / 1e6


def measure_opackets(lab, argv, prefix, warmup, seconds, log=subprocess.DEVNULL):
    """Starts a DPDK process (stdin closed), returns its port 0's Mpps over `seconds` after
    `warmup` (opackets_rate), and stops it and removes its runtime files, whatever happens."""
    p = lab.start(argv, log, prefix, stdin=subprocess.DEVNULL)
    try:
        where = f" (see {log.name})" if hasattr(log, "name") else ""
        return opackets_rate(Telemetry(prefix), p, warmup, seconds, f"{argv[0]} did not start sending{where}")
    finally:
        stop(p, 15)
        remove_dpdk_files(prefix)


def measure_testpmd_io(lab, testpmd, frame_bytes, seconds, warmup, tag, copy=False):
    """dpdk-testpmd io forwarding on one net_null port looped to itself, one forwarding lcore,
    frames of `frame_bytes` (copy=True: the PMD writes every received frame into its mbuf,
    as a NIC's DMA does): the pipeline benches' baseline, in Mpps."""
    pre = f"{tag}-{os.getpid()}"
    null = f"--vdev=net_null0,size={frame_bytes}" + (",copy=1" if copy else "")
    return measure_opackets(lab, [testpmd, "-l", "0,1", "--no-pci", "--no-huge", "-m", "256", f"--file-prefix={pre}",
                                  null, "--log-level=error", "--", "--forward-mode=io", "--port-topology=loop",
                                  "--nb-cores=1", "--total-num-mbufs=8192", "--stats-period=100"],
                            pre, warmup, seconds)


# ---- checks ------------------------------------------------------------------

class Checks:
    """Prints "ok   what" or "FAIL what" per check; failed lists what failed. Lab.cleanup()
    adds a failed check to every Checks for each process that died by a signal it was not sent."""

    made = []

    def __init__(self):
        self.failed = []
        Checks.made.append(self)

    def check(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            self.failed.append(what)


def run_checked(name, main, checks, lab, logs=("fabric", "A", "B")):
    """Runs a test's main(), counting a set-up exception as a failed check (with the
    logs that exist), always cleans up, prints the verdict and exits 1 if a check failed."""
    try:
        main()
    except Exception as e:  # a set-up failure is a test failure, with the logs
        checks.check(False, f"set-up: {e}")
        for n in logs:
            if os.path.exists(lab.path(f"{n}.log")):
                print(f"--- {n} log ---\n{lab.text(n)}")
    finally:
        lab.cleanup()
    failed = checks.failed
    print(f"{name}: {len(failed)} check(s) failed" if failed else f"{name}: all checks passed")
    sys.exit(1 if failed else 0)


def finish_apps(lab, name, procs):
    """Waits for a test's application pair (120 s each; a hung one is killed): their exit codes,
    None for a killed one; prints both sides' logs (name-server, name-client) if any failed."""
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(120))
        except Exception:  # noqa: BLE001 - a hung side is killed and reported
            p.kill()
            p.wait()
            codes.append(None)
    if any(c != 0 for c in codes):
        for side in ("server", "client"):
            print(f"--- {name}-{side} ---\n{lab.text(f'{name}-{side}')}\n{lab.text(f'{name}-{side}', 'err')}")
    return codes
