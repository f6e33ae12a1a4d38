"""System test: the DPU agent does not trust a worker, nor a stranger on its control socket
(issue 30 item 5). tandem-dpu, tandemctl, the lab fabric and two tandem-rnic workers A and B
in DPU mode, a stream A -> B running; RNIC C has a channel file and no worker.

  * a process that maps C's channel file scribbles on it as a compromised worker would: the
    header's offsets and geometry, the event ring's producer index, the command ring's mask,
    a PUNT naming a slot beyond the slot area, then bursts of random bytes anywhere. Each time
    the agent counts a violation, retires the file and makes a new one (link reset), and never
    dies; A and B stay ACTIVE with no reset of their own, the stream keeps running;
  * the same process scribbles on worker B's own channel (its event ring's producer index): the
    agent resets B's link, worker B maps the new file and is ACTIVE again with the agent's
    table (digest and version agree), forwarding all along; A untouched;
  * the control socket is 0660 and group-owned (--control-group nogroup), in a directory the
    agent made; a user of that group may use it, another user is refused (counted); a mapping
    import names a file only root can read: the group member's tandemctl cannot open it, and
    the raw request naming its path is refused; root's tandemctl imports a file by passing it.

usage: dpu_compromised_worker_test.py TANDEM_DPU TANDEMCTL TANDEM_FABRIC TANDEM_RNIC RNIC_HOST_APP"""
import json
import mmap
import os
import random
import socket
import stat
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, Tandemctl, poll_until  # noqa: E402

DPU, CTL, FABRIC, RNIC, APP = sys.argv[1:6]
TAG = f"cw{os.getpid()}"
lab = Lab(tmp_prefix="tandem-compromised-")
D = lab.d
os.chmod(D, 0o711)  # the group member must reach the socket's directory
CH = f"{D}/ch"
os.makedirs(CH)
RUN = f"{D}/run"  # made by the agent
SOCK = f"{RUN}/dpu.sock"
ctl = Tandemctl(CTL, SOCK)
checks = Checks()
check, failed = checks.check, checks.failed
NOBODY, NOGROUP, DAEMON_GID = 65534, 65534, 1

# Default channel layout (common/channel/layout.h) and DPDK 22.11's struct rte_ring.
BAR, CMD, EVT, SLOTS = 4096, 8192, 8192 + 266240, 8192 + 2 * 266240
PROD_HEAD, PROD_TAIL, CONS_TAIL, MASK, ELEMS = 128, 132, 260, 52, 384


def chan(n):
    return f"{CH}/tandem-{n}.chan"


class Mapped:
    """The channel file as a worker maps it (read-write, shared)."""

    def __init__(self, path):
        self.f = open(path, "r+b")
        self.m = mmap.mmap(self.f.fileno(), 0)

    def put(self, off, data):
        self.m[off:off + len(data)] = data

    def u32(self, off):
        return struct.unpack_from("<I", self.m, off)[0]

    def close(self):
        self.m.close()
        self.f.close()


def channel(n):
    return ctl.channel(n)


def violations(n):
    return channel(n).get("channel", {}).get("violations", 0)


def inode(n):
    try:
        return os.stat(chan(n)).st_ino
    except FileNotFoundError:
        return None


def worker(n, sock):
    pre = f"{TAG}-{n}"
    i = 1 if n == "A" else 2
    with open(f"{D}/{n}.yaml", "w") as f:
        f.write(f"underlay: {{ip: 10.0.0.{i}, mac: 02:00:00:00:00:0{i}, gateway_mac: 02:00:00:00:00:fe}}\n")
    return lab.start([RNIC, "--name", n, "--host-socket", f"{D}/{n}.rnic", "--table", f"{D}/{n}.yaml",
                      "--device-dir", f"{D}/devices", "--dpu-channel", chan(n), "--dpu-agent-timeout-ms", "3000",
                      "--table-capacity", "8192", "--idle", "adaptive", "--mtu", "1024", "--", "--no-pci",
                      f"--file-prefix={pre}", "-l", "1", "-m", "128", "--log-level=lib.eal:error",
                      f"--vdev=net_memif0,role=client,socket={D}/{sock}"], n, pre)


def as_user(argv, gid, stdin=None):
    """Runs argv as uid nobody with only group `gid`; (exit code, stdout)."""
    p = subprocess.run(argv, user=NOBODY, group=gid, extra_groups=[], capture_output=True, text=True, timeout=30,
                       input=stdin)
    return p.returncode, p.stdout + p.stderr


def raw_request(req, gid):
    """One request line on the socket from a process of uid nobody, group gid; the reply text."""
    code = ("import socket,sys\n"
            "s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1])\n"
            # a refused peer gets its answer and the close at connect: the send may find it shut
            "try: s.sendall(sys.argv[2].encode()+b'\\n')\n"
            "except (BrokenPipeError, ConnectionResetError): pass\n"
            "b=b''\n"
            "while not b.endswith(b'\\n'):\n"
            "  try: c=s.recv(65536)\n"
            "  except ConnectionResetError: break\n"
            "  if not c: break\n"
            "  b+=c\n"
            "print(b.decode().strip())\n")
    return as_user([sys.executable, "-c", code, SOCK, json.dumps(req)], gid)[1].strip()


def scribble_and_wait(n, what, do):
    """Maps n's current file, applies do(mapped), waits for the agent to count a violation
    and make a new file; returns (counted, new file made, last_violation)."""
    c0 = channel(n).get("channel", {})
    m = Mapped(chan(n))
    do(m)
    counted = poll_until(lambda: violations(n) > c0.get("violations", 0), 10, what)
    m.close()
    fresh = poll_until(lambda: channel(n).get("channel", {}).get("files_replaced", 0) > c0.get("files_replaced", 0)
                       and os.path.exists(chan(n)), 30, f"{what}: new file")
    return counted, fresh, channel(n).get("channel", {}).get("last_violation", "")


def evt_message(m, msg):
    """Puts one 64-byte event at the event ring's producer index, as a worker enqueues."""
    p = m.u32(EVT + PROD_TAIL)
    m.put(EVT + ELEMS + (p & 4095) * 64, msg.ljust(64, b"\0"))
    m.put(EVT + PROD_HEAD, struct.pack("<I", p + 1))
    m.put(EVT + PROD_TAIL, struct.pack("<I", p + 1))


def main():
    pre = f"{TAG}-dpu"
    ag = lab.start([DPU, "--db", f"{D}/dpu.sqlite", "--control-socket", SOCK, "--control-group", "nogroup",
                    "--channel-dir", CH, "--idle", "adaptive", "--heartbeat-timeout-ms", "3000", "--", "--no-pci",
                    "--no-huge", "-m", "64", f"--file-prefix={pre}", "-l", "0", "--log-level=lib.eal:error"],
                   "agent", pre)
    if not poll_until(lambda: ctl("tenant", "list")[0] == 0 or ag.poll() is not None, 20, "agent"):
        raise RuntimeError("agent did not start:\n" + lab.text("agent"))
    steps = [("rnic", "add", n, "--underlay-ip", f"10.0.0.{i}", "--mac", f"02:00:00:00:00:0{i}",
              "--path-base-port", 0xC000, "--path-count", 4) for i, n in ((1, "A"), (2, "B"), (3, "C"))]
    steps += [("tenant", "add", 100, "red"),
              ("vnic", "add", 1, "--vni", 100, "--rnic", "A", "--ip", "192.168.7.1", "--mac", "02:00:00:00:01:01"),
              ("vnic", "add", 2, "--vni", 100, "--rnic", "B", "--ip", "192.168.7.2", "--mac", "02:00:00:00:01:02")]
    rcs = [ctl(*s)[0] for s in steps]
    if rcs != [0] * len(steps):
        raise RuntimeError(f"tandemctl set-up failed: {rcs}\n" + lab.text("agent")[-2000:])
    fab_pre = f"{TAG}-fab"
    fab = lab.start([FABRIC, "--route", "10.0.0.1=0", "--route", "10.0.0.2=1", "--paths", "4", "--idle", "adaptive",
                     "--link-wait-ms", "0", "--", "--no-pci", f"--file-prefix={fab_pre}", "-l", "0", "-m", "64",
                     "--log-level=lib.eal:error", f"--vdev=net_memif0,role=server,socket={D}/h0.sock",
                     f"--vdev=net_memif1,role=server,socket={D}/h1.sock"], "fabric", fab_pre)
    if not poll_until(lambda: "tandem-fabric:" in lab.text("fabric") or fab.poll() is not None, 20, "fabric"):
        raise RuntimeError("fabric did not start:\n" + lab.text("fabric"))
    wa, wb = worker("A", "h0.sock"), worker("B", "h1.sock")
    active = lambda n: channel(n).get("state") == "ACTIVE"
    if not poll_until(lambda: active("A") and active("B"), 40, "active"):
        raise RuntimeError("workers did not reach ACTIVE:\n" + lab.text("A")[-2000:])
    sink = lab.start([APP, "sink", f"{D}/B.rnic", D, "sink", "strm", "4", "192.168.7.1"], "sink")
    strm = lab.start([APP, "stream", f"{D}/A.rnic", D, "strm", "sink", "5", "192.168.7.2"], "strm")
    check(poll_until(lambda: os.path.exists(f"{D}/strm.streaming") or strm.poll() is not None, 40, "stream"),
          "stream A -> B runs")
    base = {n: channel(n) for n in "AB"}

    # 1. A compromised worker on C's channel file.
    cases = [
        ("header offsets and geometry", lambda m: m.put(48, struct.pack("<QQ", 1 << 40, 1 << 41) + b"\xff" * 16)),
        ("event ring producer index", lambda m: m.put(EVT + PROD_TAIL, struct.pack("<I", 0x80000000))),
        ("command ring mask", lambda m: m.put(CMD + MASK, struct.pack("<I", 0xFFFFFFFF))),
        # PUNT (type 0x44): seq, slot 99999, generation 1, length 100, port 0, missed key egress(1, 192.168.7.9)
        ("PUNT beyond the slot area",
         lambda m: evt_message(m, struct.pack("<BBHIIIHHI", 0x44, 0, 0, 0, 99999, 1, 100, 0, 0) +
                               struct.pack("<B3xII", 1, 1, 0xC0A80709))),
    ]
    for what, do in cases:
        counted, fresh, last = scribble_and_wait("C", what, do)
        check(counted and fresh and ag.poll() is None,
              f"C, {what}: violation counted ({last!r}), a new channel file made, agent alive")
    # Garbage where a worker may write (ring elements as events, slots, BAR) and anywhere else:
    # messages the agent must parse and refuse, values it must not use as addresses.
    rnd = random.Random(7)
    v0 = violations("C")
    m = Mapped(chan("C"))
    for _ in range(300):
        evt_message(m, bytes(rnd.randrange(256) for _ in range(64)))
    for _ in range(400):
        off = rnd.choice([BAR, SLOTS, EVT + ELEMS, rnd.randrange(0, len(m.m) - 4096)]) + rnd.randrange(0, 4000)
        m.put(off, bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 64))))
    m.close()
    time.sleep(2)
    c = channel("C")
    check(ag.poll() is None and c.get("name") == "C",
          f"C, 300 garbage events and 400 random writes: agent alive and answering (violations {v0} -> "
          f"{c['channel']['violations']}, stale events {c['stats']['stale_events']}, errors {c['stats']['errors']})")
    check(c["channel"]["violations"] >= len(cases) and c["channel"]["files_replaced"] >= len(cases),
          f"C: {c['channel']['violations']} violations, {c['channel']['files_replaced']} files replaced")
    now = {n: channel(n) for n in "AB"}
    check(all(now[n]["state"] == "ACTIVE" and now[n]["stats"]["resets"] == base[n]["stats"]["resets"] and
              now[n]["stats"]["degraded"] == base[n]["stats"]["degraded"] and
              now[n]["channel"]["violations"] == 0 for n in "AB") and strm.poll() is None,
          "A and B stayed ACTIVE with no reset, degradation or violation of their own; the stream runs: " +
          ", ".join(f"{n} {now[n]['state']} resets {now[n]['stats']['resets']} degraded {now[n]['stats']['degraded']} "
                    f"({now[n]['last_error']!r}) "
                    f"violations {now[n]['channel']['violations']}" for n in "AB") + f", stream exit {strm.poll()}")

    # 2. The same on worker B's own channel: its link is reset, it maps the new file.
    counted, fresh, last = scribble_and_wait("B", "B's event ring index",
                                             lambda m: m.put(EVT + PROD_TAIL, struct.pack("<I", 0xDEAD0000)))
    check(counted and fresh, f"B: violation counted ({last!r}), a new channel file made")
    back = poll_until(lambda: active("B") and channel("B").get("bar", {}).get("state") == "active", 30, "B back")
    b = channel("B")
    t = b.get("bar", {}).get("table", {})
    check(back and b["stats"]["transport_resets"] == 1 and t.get("version") == b["table_version"] and
          t.get("digest") == b["table_digest"] and t.get("entries") == b["table_entries"],
          f"worker B mapped the new file and is ACTIVE again; its committed table is the agent's "
          f"(v{t.get('version')} / {b['table_version']}, {t.get('entries')} entries, "
          f"reconcile skips {b['stats']['reconcile_skips']}, replays {b['stats']['replays']})")
    check("replaced by the agent" in lab.text("B"), "worker B's log says it re-attached")
    a = channel("A")
    check(a["state"] == "ACTIVE" and a["stats"]["resets"] == base["A"]["stats"]["resets"] and
          a["stats"]["transport_resets"] == 0 and strm.poll() is None and wb.poll() is None and wa.poll() is None,
          "A untouched; both workers alive; the stream A -> B never saw an error")
    strm.kill()  # as dpu_agent_test: the verify pair alone on the link
    strm.wait()
    open(f"{D}/sink.stop", "w").close()
    sink.wait(30)
    pa = lab.start([APP, "verify", f"{D}/A.rnic", D, "va", "vb", "30", "192.168.7.2"], "va")
    pb = lab.start([APP, "verify", f"{D}/B.rnic", D, "vb", "va", "31", "192.168.7.1"], "vb")
    ra, rb = pa.wait(90), pb.wait(90)
    check(ra == 0 and rb == 0, f"a new QP pair A <-> B verifies WRITE/SEND/READ after B's link reset (exit {ra}, {rb})")

    # 3. The control socket.
    st = os.stat(SOCK)
    check(stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == NOGROUP and stat.S_IMODE(os.stat(RUN).st_mode) == 0o750,
          f"control socket 0660 group nogroup ({oct(stat.S_IMODE(st.st_mode))}, gid {st.st_gid}) in a 0750 "
          f"directory the agent made ({oct(stat.S_IMODE(os.stat(RUN).st_mode))})")
    os.chown(RUN, 0, NOGROUP)
    rc, out = as_user([CTL, "--socket", SOCK, "--json", "tenant", "list"], NOGROUP)
    check(rc == 0 and '"red"' in out, f"a member of the control group may use it (exit {rc})")
    rc, out = as_user([CTL, "--socket", SOCK, "--json", "tenant", "list"], DAEMON_GID)
    check(rc != 0, f"another user cannot reach the socket (file modes): exit {rc}, {out.strip()[-100:]}")
    # An operator's mistake opens the modes to everyone: the peer credentials still refuse a stranger.
    os.chmod(RUN, 0o755)
    os.chmod(SOCK, 0o666)
    refused0 = json.loads(raw_request({"cmd": "control.stats"}, NOGROUP)).get("refused_peers", -1)
    reply = raw_request({"cmd": "tenant.list"}, DAEMON_GID)
    refused1 = json.loads(raw_request({"cmd": "control.stats"}, NOGROUP)).get("refused_peers", -1)
    check('"forbidden"' in reply and refused1 == refused0 + 1,
          f"another user is refused at connect and counted ({reply!r}; refused_peers {refused0} -> {refused1})")
    secret = f"{D}/secret.csv"
    with open(secret, "w") as f:
        f.write("100,192.168.9.1,10.0.0.9,02:00:00:00:00:09,A\n")
    os.chmod(secret, 0o600)
    rc, out = as_user([CTL, "--socket", SOCK, "mapping", "import", secret], NOGROUP)
    check(rc != 0 and "192.168.9.1" not in json.dumps(ctl("mapping", "list")[1]),
          f"the group member's tandemctl cannot import a file it cannot read (exit {rc}: {out.strip()[-120:]})")
    reply = raw_request({"cmd": "mapping.import", "path": secret}, NOGROUP)
    check('"ok":false' in reply.replace(" ", "") and "forbidden" in reply,
          f"a raw import naming a root-only path is refused: {reply[:160]}")
    os.chmod(secret, 0o644)
    rc, out = ctl("mapping", "import", secret)
    check(rc == 0 and out.get("imported") == 1, f"root's tandemctl imports it by passing the file: {out}")

    check(ag.poll() is None, "the agent survived everything")
    for n, w in (("A", wa), ("B", wb)):
        lab.stop(w)
    lab.stop(fab)
    lab.stop(ag)
    if failed:
        for n in ("agent", "B", "strm", "sink", "va", "vb"):
            print(f"--- {n} log ---\n{lab.text(n)[-3000:]}")


if __name__ == "__main__":
    from tandem_harness import run_checked  # noqa: E402
    run_checked("dpu_compromised_worker", main, checks, lab)
