"""A Tandem worker and Linux's rxe (scripts/rxe-peer.sh: the Debian kernel in a QEMU TCG guest) on
one tap in a network namespace of their own, and stock verbs programs run in pairs across them, one
side in the guest on rxe, the other through scripts/tandem-run on Tandem, either side the server.
Shared by tests/system/interop_rxe_test.py and benchmarks/interop-rxe.

The worker is standalone on `--vdev net_af_packet0,iface=<tap>` with vNIC IP = underlay IP
(10.99.0.1: what rxe sees is the worker itself, as with a bare-metal RNIC) and one egress entry to
the guest (10.99.0.2) marked `peer: roce`, so its QPs there are go-back-N without Tandem-only headers
whatever --mode says. The guest reaches the worker's MAC through a static neighbour (the worker does
not answer ARP). TCP exchanges: a guest server is reached at 127.0.0.1:PORT in the namespace (QEMU's
user network forwards GUEST_PORTS), a Tandem server at 10.0.2.2:PORT from the guest."""
import os
import subprocess
import time

WORKER_IP, WORKER_MAC = "10.99.0.1", "02:00:00:00:00:01"
GUEST_IP, GUEST_MAC = "10.99.0.2", "52:54:00:99:00:02"
GUEST_PORTS = list(range(18515, 18521))  # forwarded to the guest: its servers listen here
TANDEM_PORTS = list(range(18530, 18536))  # Tandem's servers (the guest connects to 10.0.2.2)
DEV = "tandem_T_v1"


def table_yaml(peer="roce", paths=4):
    return f"""underlay: {{ip: {WORKER_IP}, mac: "{WORKER_MAC}", gateway_mac: "{GUEST_MAC}"}}
vnics:
  - {{id: 1, ip: {WORKER_IP}, mac: "{WORKER_MAC}", vni: 100}}
egress:
  - {{vnic: 1, remote_ip: {GUEST_IP}, underlay_ip: {GUEST_IP}, paths: {paths}, peer: {peer}}}
"""


class RxeLab:
    """lab: a tandem_harness.Lab (logs in lab.d, cleanup); peer: scripts/rxe-peer.sh; run: tandem-run."""

    def __init__(self, lab, rnic, peer, run, tag, worker_flags=(), tap="tq0"):
        self.lab, self.rnic, self.peer, self.run_script = lab, rnic, peer, run
        self.ns = f"{tag}ns"
        self.prefix = f"{tag}-w"
        self.gdir = f"{lab.d}/guest"
        self.tap = tap
        self.worker_flags = list(worker_flags)
        self.worker = None
        self.guest_up = False
        self.env = dict(os.environ, TANDEM_DEVICES=f"{lab.d}/devices")

    # ---- bring-up and teardown --------------------------------------------
    def start_guest(self, timeout=400):
        t0 = time.time()
        r = subprocess.run([self.peer, "-d", self.gdir, "start", "--netns", self.ns, "--tap", self.tap,
                            "--ip", GUEST_IP, "--mac", GUEST_MAC, "--neigh", f"{WORKER_IP}={WORKER_MAC}"]
                           + sum((["--fwd", str(p)] for p in GUEST_PORTS), []),
                           capture_output=True, text=True, timeout=timeout + 30)
        self.guest_up = r.returncode == 0
        if not self.guest_up:
            raise RuntimeError(f"rxe guest did not start:\n{r.stdout}{r.stderr}")
        self.boot_s = time.time() - t0
        return r.stdout.strip()

    def start_worker(self, peer="roce", capture=False):
        with open(f"{self.lab.d}/T.yaml", "w") as f:
            f.write(table_yaml(peer))
        os.makedirs(f"{self.lab.d}/devices", exist_ok=True)
        # qdisc_bypass=0: the worker's frames pass the tap's taps, so tshark sees both directions.
        vdev = f"--vdev=net_af_packet0,iface={self.tap}" + (",qdisc_bypass=0" if capture else "")
        argv = ["ip", "netns", "exec", self.ns, self.rnic, "--name", "T", "--host-socket", f"{self.lab.d}/T.rnic",
                "--table", f"{self.lab.d}/T.yaml", "--idle", "adaptive", "--device-dir", f"{self.lab.d}/devices",
                "--stats-json", f"{self.lab.d}/T.stats.json"] + self.worker_flags + [
                "--", "--no-pci", f"--file-prefix={self.prefix}", "-l", "1", "-m", "128",
                "--log-level=lib.eal:error", vdev]
        self.worker = self.lab.start(argv, "T", self.prefix)
        t0 = time.time()
        while not os.path.exists(f"{self.lab.d}/devices/{DEV}.dev"):
            if time.time() - t0 > 30 or self.worker.poll() is not None:
                raise RuntimeError("worker did not register its device:\n" + self.lab.text("T"))
            time.sleep(0.1)

    def stop(self):
        code = None
        if self.worker is not None:
            code = self.lab.stop(self.worker)
            self.worker = None
        if self.guest_up:
            subprocess.run([self.peer, "-d", self.gdir, "stop"], capture_output=True, timeout=60)
            self.guest_up = False
        return code

    # ---- running programs on either side ------------------------------------
    def guest_popen(self, argv):
        return subprocess.Popen([self.peer, "-d", self.gdir, "run", " ".join(argv)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def tandem_popen(self, argv):
        return subprocess.Popen(["ip", "netns", "exec", self.ns, "env", f"TANDEM_DEVICES={self.lab.d}/devices",
                                 self.run_script] + argv, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def guest(self, cmd, timeout=60):
        r = subprocess.run([self.peer, "-d", self.gdir, "run", cmd], capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout + r.stderr

    def pair(self, prog, args, server, timeout=120, port_index=None, guest_prog=None, tandem_prog=None):
        """`prog` ARGS with the server on `server` ("rxe" or "tandem") and the client on the other
        side. The device and GID index flags each side needs are added (-d, and -g or -x: rxe's
        RoCE v2 IPv4 GID is index 1, Tandem's 0). Returns (client (exit, out), server (exit, out), s)."""
        gidflag = "-x" if prog.startswith("ib_") else "-g"
        gprog, tprog = guest_prog or prog, tandem_prog or prog
        if port_index is None:  # a fresh port per pair: a server that outlived its pair cannot block the next
            self.pairs = getattr(self, "pairs", 0) + 1
            port_index = self.pairs % len(GUEST_PORTS)
        g = [gprog, "-d", "rxe0", gidflag, "1"] + args
        t = [tprog, "-d", DEV, gidflag, "0"] + args
        if server == "rxe":
            port = str(GUEST_PORTS[port_index])
            srv, cli_argv = self.guest_popen(g + ["-p", port]), t + ["-p", port, "127.0.0.1"]
            mk_cli = self.tandem_popen
        else:
            port = str(TANDEM_PORTS[port_index])
            srv, cli_argv = self.tandem_popen(t + ["-p", port]), g + ["-p", port, "10.0.2.2"]
            mk_cli = self.guest_popen
        # The client must not connect before the server listens: through QEMU's forwarder that shows as a
        # reset, which ibv_rc_pingpong does not retry.
        probe = f"ss -ltnH | grep -q ':{port} '"
        t_wait = time.time()
        while time.time() - t_wait < 60 and srv.poll() is None:
            if server == "rxe":
                up = self.guest(probe, timeout=30)[0] == 0
            else:
                up = subprocess.run(["ip", "netns", "exec", self.ns, "sh", "-c", probe]).returncode == 0
            if up:
                break
            time.sleep(0.2)
        t0 = time.time()
        cli = mk_cli(cli_argv)
        out = []
        for p in (cli, srv):
            try:
                o, _ = p.communicate(timeout=max(5, timeout - (time.time() - t0)))
            except subprocess.TimeoutExpired:
                p.terminate()  # rxe-peer.sh run then kills the job in the guest too
                try:
                    o, _ = p.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    o, _ = p.communicate()
                o += "\n(hung: killed)"
            out.append((p.returncode, o))
        return out[0], out[1], time.time() - t0

    def cm_pair(self, srv_argv, cli_argv, server, port, timeout=90, done=None):
        """A pair that connects through rdma_cm (CM MADs on the wire): the server `srv_argv` on
        `server` ("rxe" or "tandem"), then the client `cli_argv` on the other side. An rxe listener
        is waited for (it shows in the guest's rdma_cm IDs); a Tandem one has no probe, so a client
        turned away before it listens is run again (up to 4 times; done(out): the client got far
        enough not to). Returns (client (exit, out), server (exit, out), s)."""
        if server == "rxe":
            srv, mk_cli = self.guest_popen(srv_argv), self.tandem_popen
            t_wait = time.time()
            while time.time() - t_wait < 60 and srv.poll() is None:
                if self.guest(f"rdma resource show cm_id | grep -q 'LISTEN.*:{port}'", timeout=30)[0] == 0:
                    break
                time.sleep(0.2)
        else:
            srv, mk_cli = self.tandem_popen(srv_argv), self.guest_popen
        t0 = time.time()
        for attempt in range(4):
            if server == "tandem":
                time.sleep(1.0 + attempt)
            cli = mk_cli(cli_argv)
            try:
                o, _ = cli.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                cli.terminate()
                o, _ = cli.communicate(timeout=10)
                o += "\n(hung: killed)"
            c = (cli.returncode, o)
            if c[0] == 0 or server == "rxe" or (done and done(o)) or srv.poll() is not None:
                break
        try:
            so, _ = srv.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            srv.terminate()
            so, _ = srv.communicate(timeout=10)
            so += "\n(hung: killed)"
        return c, (srv.returncode, so), time.time() - t0

    def rping(self, server, count=10, port=7174, timeout=90):
        """Stock rping -v -C count with the server on `server` ("rxe": bound to the guest's address;
        "tandem": to the worker's vNIC) and the client on the other side (cm_pair). rping -v prints
        every ping's data, checked against its pattern. Returns (client (exit, out), server (exit,
        out), s, pings the client and the server printed)."""
        ip = GUEST_IP if server == "rxe" else WORKER_IP
        srv_argv = ["rping", "-s", "-v", "-a", ip, "-p", str(port), "-C", str(count)]
        cli_argv = ["rping", "-c", "-v", "-a", ip, "-p", str(port), "-C", str(count)]
        c, s, secs = self.cm_pair(srv_argv, cli_argv, server, port, timeout, done=lambda o: "ping data" in o)
        nc = sum(1 for l in c[1].splitlines() if l.startswith("ping data: rdma-ping-"))
        ns = sum(1 for l in s[1].splitlines() if l.startswith("server ping data: rdma-ping-"))
        return c, s, secs, nc, ns

    def perftest_cm(self, prog, args, server, port, timeout=90):
        """Stock perftest `prog` ARGS with -R (its exchange and connection through rdma_cm), the
        client connecting to the server's RoCE address (cm_pair)."""
        ip = GUEST_IP if server == "rxe" else WORKER_IP
        g = [prog, "-d", "rxe0", "-x", "1", "-R", "-p", str(port)] + args
        t = [prog, "-d", DEV, "-x", "0", "-R", "-p", str(port)] + args
        if server == "rxe":
            return self.cm_pair(g, t + [ip], server, port, timeout)
        return self.cm_pair(t, g + [ip], server, port, timeout)

def perftest_row(out, size):
    """perftest's result row for `size` bytes: the numbers after it, or None."""
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] == str(size) and all(x.replace(".", "").isdigit() for x in f[1:4]):
            row = []
            for x in f[1:]:  # the guest's stderr may follow the last number without a newline
                try:
                    row.append(float(x))
                except ValueError:
                    break
            return row
    return None


# The compat matrix: (name, program, args, how its result is read). Data-checked programs first.
# Message counts are small: the guest is emulated (TCG).
def compat_cases(verify):
    return [
        ("rdma_verify", verify, ["-n", "12", "-s", "16384", "-t", "90"], "verify"),
        ("ibv_rc_pingpong -c", "ibv_rc_pingpong", ["-c", "-n", "50", "-s", "4096"], "pingpong"),
        ("ibv_ud_pingpong -c", "ibv_ud_pingpong", ["-c", "-n", "50", "-s", "512"], "pingpong"),
        ("ib_write_bw", "ib_write_bw", ["-s", "65536", "-n", "100"], 65536),
        ("ib_read_bw", "ib_read_bw", ["-s", "65536", "-n", "100"], 65536),
        ("ib_send_bw", "ib_send_bw", ["-s", "65536", "-n", "100"], 65536),
        ("ib_write_lat", "ib_write_lat", ["-s", "2", "-n", "200"], 2),
    ]


def judge(kind, cli, srv):
    """(ok, what): a pair passed when both sides exit 0 and the data check (or the result row) holds."""
    (cc, co), (sc, so) = cli, srv
    if kind == "verify":
        ok = cc == 0 and sc == 0 and "rdma_verify: ok" in co and "rdma_verify: ok" in so
        return ok, "data checked both sides" if ok else f"exit {cc}/{sc}"
    if kind == "pingpong":
        ok = cc == 0 and sc == 0 and "iters in" in co and "iters in" in so
        return ok, "data checked (-c)" if ok else f"exit {cc}/{sc}"
    row = perftest_row(co, kind)
    ok = cc == 0 and sc == 0 and row is not None and max(row[1:]) > 0
    return ok, (f"row {row}" if ok else f"exit {cc}/{sc}, row {row}")
