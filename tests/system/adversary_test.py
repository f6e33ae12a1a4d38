"""System test: a hostile tenant sharing both RNIC ports cannot reach another tenant's QP.

DPU mode, real processes: tandem-dpu, tandem-fabric and workers A (10.0.0.1) and B
(10.0.0.2). Tenant red (the victim) has vNICs 192.168.7.1 and 192.168.7.3 (victim-only,
the target) on A and 192.168.7.2 on B; tenant blue (the attacker) has 192.168.8.1 on A
and 192.168.8.2 on B. While red's own write_bw --verify runs 7.2 -> 7.1 for the whole
test, each attack is made:

QPN aiming (WRITE, then SEND): a red tandem-perf server on the target vNIC waits for a
peer; blue's tandem-perf client, bound to blue's 8.2, connects through a relay that
passes the out-of-band exchange through with only the GIDs changed (the server is told
its peer is red's 7.2, the client that the server is blue's 8.1). Both QPs are then
legal: blue's goes 8.2 -> 8.1 (its own tenant), red's 7.3 -> 7.2. Blue's packets leave B
for red's QPN on A, from the underlay address red's QP expects. Without partitions they
are accepted into red's QP and memory (the test fails on a main without them); with
them, A drops every one as ingress pkey_violation, so the target QP receives nothing.

Prints the table benchmarks/RESULTS.md holds ("adversary"): per attack, packets the
attacker sent, delivered cross-tenant (goal 0), pkey_violation drops, victim verified.

Crafted collisions: blue picks overlay addresses in its own VPC whose egress entries on B
land in the two buckets of red's next new flow (7.2 -> 7.3), computed with SipHash-1-3
under a secret the test knows: with B run under that secret (--insecure-table-hash-key)
blue's 16 flows fill both buckets and red's flow is refused (TABLE_FULL, full_buckets);
with B restarted under a secret of its own, the same 16 flows scatter and red's flow is
installed and verifies.

Quota exhaustion and punt storm: blue's quota on each RNIC is set to 64 flows and its verbs
program (exhaustion_app storm, on blue's vNIC on B) keeps 1024 QPs asking for routes, half to
its own mapped addresses (flows until the quota, then refused over_quota) and half to addresses
that miss, remade every 4 s. Red's 60 new flows on B (each a QP whose RTR waits for the agent's
route) are timed without and with the storm; the p99 of their set-up times and the ratio are
printed (RESULTS "adversary"; not judged here: timing on a shared box is noise), and every one
of them must be set up; the agent's per-tenant punt counters show the refusals.

usage: adversary_test.py TANDEM_DPU TANDEMCTL TANDEM_FABRIC TANDEM_RNIC TANDEM_PERF MANY_QPS_APP EXHAUSTION_APP
       [--keep]"""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Tandemctl, free_port, ip2int, lab_fabric_argv,  # noqa: E402
                            lab_worker_argv, run_checked, telemetry_query, wait_fabric_started, wait_for)

ap = argparse.ArgumentParser()
ap.add_argument("bins", nargs=7)
ap.add_argument("--keep", action="store_true")
opt = ap.parse_args()
DPU, CTL, FABRIC, RNIC, PERF, MANY, EXHAUST = opt.bins
TAG = f"adv{os.getpid()}"
lab = Lab(tmp_prefix="tandem-adversary-", keep=opt.keep)
D = lab.d
CH = f"{D}/ch"
os.makedirs(CH)
ctl = Tandemctl(CTL, f"{D}/ctl.sock")
checks = Checks()
check = checks.check

UNDERLAY = {"A": ("10.0.0.1", "02:00:00:00:00:01"), "B": ("10.0.0.2", "02:00:00:00:00:02")}
TENANTS = [(100, "red"), (200, "blue")]
# (vnic id, tenant, rnic, overlay ip, mac)
VNICS = [(1, 100, "A", "192.168.7.1", "02:00:00:00:01:01"), (2, 100, "B", "192.168.7.2", "02:00:00:00:01:02"),
         (3, 100, "A", "192.168.7.3", "02:00:00:00:01:03"),
         (4, 200, "A", "192.168.8.1", "02:00:00:00:02:01"), (5, 200, "B", "192.168.8.2", "02:00:00:00:02:02")]
PREFIX = {"A": f"{TAG}-a", "B": f"{TAG}-b"}


def gid(ip):
    """tandem-perf's GID: the IPv4-mapped IPv6 address (oob_messages.h QpDest.gid)."""
    return bytes(10) + b"\xff\xff" + socket.inet_aton(ip)


# ---- the level-2 table's placement (rnic/table/key_hash.h, Level2Table::buckets_of) ----
M64 = (1 << 64) - 1
KNOWN_KEY = (0x0123456789ABCDEF, 0xFEDCBA9876543210)


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & M64


def _sip_round(v):
    v0, v1, v2, v3 = v
    v0 = (v0 + v1) & M64; v1 = _rotl(v1, 13); v1 ^= v0; v0 = _rotl(v0, 32)
    v2 = (v2 + v3) & M64; v3 = _rotl(v3, 16); v3 ^= v2
    v0 = (v0 + v3) & M64; v3 = _rotl(v3, 21); v3 ^= v0
    v2 = (v2 + v1) & M64; v1 = _rotl(v1, 17); v1 ^= v2; v2 = _rotl(v2, 32)
    return [v0, v1, v2, v3]


def keyed_hash(key, kind, w0, w1):
    """SipHash-1-3 of an EntryKey's 12 bytes under key = (k0, k1)."""
    k0, k1 = key
    v = [k0 ^ 0x736f6d6570736575, k1 ^ 0x646f72616e646f6d, k0 ^ 0x6c7967656e657261, k1 ^ 0x7465646279746573]
    for m in (kind | w0 << 32, 12 << 56 | w1):
        v[3] ^= m
        v = _sip_round(v)
        v[0] ^= m
    v[2] ^= 0xFF
    for _ in range(3):
        v = _sip_round(v)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def buckets_of(h, nb):
    tag, b1 = h >> 32, h & (nb - 1)
    return frozenset((b1, (b1 ^ (((tag * 0x5BD1E995) & M64) >> 7)) & (nb - 1)))


KIND_EGRESS = 1
assert keyed_hash((0, 0), 1, 0, 0) == 0x812b00d8d1d44dcd  # the unit test's vector (keyed_hash_test.cc)


class Relay:
    """Accepts one TCP connection and relays it to the real server, replacing GIDs in
    each direction; records the server's QPNs (QpDest: qpn at +4, gid at +32)."""

    def __init__(self, server_port, to_server, to_client, server_gid):
        self.port = free_port()
        self.server_port = server_port
        self.rules = {"up": to_server, "down": to_client}
        self.server_gid = server_gid
        self.qpns = []
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", self.port))
        self.ls.listen(1)
        self.ls.settimeout(30)
        threading.Thread(target=self.run, daemon=True).start()

    def pump(self, src, dst, way):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if way == "down":
                    at = b.find(self.server_gid)
                    while at >= 32:
                        self.qpns.append(int.from_bytes(b[at - 28:at - 24], "little"))
                        at = b.find(self.server_gid, at + 1)
                for old, new in self.rules[way]:
                    b = b.replace(old, new)
                dst.sendall(b)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def run(self):
        try:
            c, _ = self.ls.accept()
            s = socket.create_connection(("127.0.0.1", self.server_port), timeout=30)
        except OSError:
            return
        c.settimeout(None)
        s.settimeout(None)
        threading.Thread(target=self.pump, args=(c, s, "up"), daemon=True).start()
        self.pump(s, c, "down")


def start_worker(n, sock, extra=(), capacity=128):
    ip, mac = UNDERLAY[n]
    with open(f"{D}/{n}.yaml", "w") as f:
        f.write(f"underlay: {{ip: {ip}, mac: {mac}, gateway_mac: 02:00:00:00:00:fe}}\n")
    return lab.start(lab_worker_argv(RNIC, n, PREFIX[n], D, sock, [
        "--dpu-channel", f"{CH}/tandem-{n}.chan", "--spray", "round_robin", "--mtu", "4096",
        "--timeout-us", "20000", "--table-capacity", str(capacity)] + list(extra)), n, PREFIX[n])


def worker_stats(n):
    return telemetry_query(PREFIX[n], "/tandem/rnic/stats")


def pkey_drops(n):
    s = worker_stats(n)
    return int(s.get("drop_ingress_pkey_violation", 0)) if s else 0


def qp_rx(n, qpn):
    """rx_pkts of host QP `qpn` on worker n, None if the worker does not list it."""
    row = telemetry_query(PREFIX[n], f"/tandem/rnic/qps,{qpn:#x}").get(f"{qpn:#x}")
    return None if row is None else int(row.get("rx_pkts", 0))


def perf(test, name, device, gid_ip, port, extra, server=None):
    argv = ["nice", "-n", "10", PERF, test, "-p", str(port), "--json", "--device", f"{D}/{device}.rnic",
            "--gid", gid_ip] + extra + ([server] if server else [])
    return lab.start(argv, name, separate_stderr=True)


def finish(p, timeout):
    try:
        return p.wait(timeout)
    except Exception:
        p.kill()
        p.wait()
        return None


def attack(test, table):
    """Blue's client aims `test` at red's target QP. Returns what the table row needs."""
    port = free_port()
    target = perf(test, f"{test}-target", "A", "192.168.7.3", port,
                  ["--timeout", "6", "--verify"])
    time.sleep(0.4)
    relay = Relay(port, to_server=[(gid("192.168.8.2"), gid("192.168.7.2"))],
                  to_client=[(gid("192.168.7.3"), gid("192.168.8.1"))], server_gid=gid("192.168.7.3"))
    drops0 = pkey_drops("A")
    att = perf(test, f"{test}-attacker", "B", "192.168.8.2", relay.port,
               ["-n", "2000", "-s", "4096", "--timeout", "4", "--verify"], server="127.0.0.1")
    # The target QP's receive counter while it exists (it goes with its QP).
    rx = 0
    deadline = time.time() + 20
    while time.time() < deadline and (att.poll() is None or target.poll() is None):
        for q in relay.qpns[:1]:
            v = qp_rx("A", q)
            if v is not None:
                rx = max(rx, v)
        time.sleep(0.05)
    ac, tc = finish(att, 10), finish(target, 10)
    try:
        aj = json.loads(lab.text(f"{test}-attacker"))
    except ValueError:
        aj = {}
    try:  # what the target's server says it received (its QP row goes with the QP)
        tj = json.loads(lab.text(f"{test}-target"))
    except ValueError:
        tj = {}
    rx = max(rx, int(tj.get("messages", 0) or 0), int(tj.get("iterations", 0) or 0) if tc == 0 else 0)
    drops = pkey_drops("A") - drops0
    sent = aj.get("iterations")
    table.append((f"QPN aiming, {test}", relay.qpns[:1], rx, drops, ac, tc))
    check(bool(relay.qpns), f"{test}: the relay saw red's target QPN in the exchange ({relay.qpns[:1]})")
    check(rx == 0, f"{test}: red's target QP received {rx} packets from blue (goal 0)")
    check(drops > 0, f"{test}: worker A dropped {drops} of blue's packets as ingress pkey_violation")
    check(ac != 0, f"{test}: blue's client did not complete against red's QP (exit {ac}, iterations {sent})")
    return rx, drops


def b_back():
    """Worker B's new process serves: its host socket, its vNICs from the agent, ACTIVE."""
    t = telemetry_query(PREFIX["B"], "/tandem/rnic/table", timeout=1)
    return (os.path.exists(f"{D}/B.rnic") and t.get("vnic_source") == "agent" and t.get("vnics") == 2
            and ctl.channel("B").get("state") == "ACTIVE")


def restart_b(extra=(), capacity=128):
    """Worker B replaced by a new process (the agent replays its table), serving again."""
    lab.stop(workers[1])
    workers[1] = start_worker("B", "h1.sock", extra, capacity)
    wait_for(b_back, "worker B did not come back ACTIVE with its vNICs", timeout=40)


def collision_phase(known, victim_name):
    """Worker B restarted under KNOWN_KEY (known) or a secret of its own; blue's flows to
    the crafted addresses, then red's new flow 7.2 -> 7.3. Returns (blue's flows installed, agent
    table_full added, B's full_buckets, red verified, red's client exit)."""
    restart_b(["--insecure-table-hash-key", "%x:%x" % KNOWN_KEY] if known else [])
    full0 = ctl.channel("B").get("stats", {}).get("table_full", 0)
    name = f"blue-{victim_name}"
    app = lab.start([MANY, f"{D}/B.rnic", D, name, str(len(CRAFTED)), ",".join(CRAFTED)], name)
    wait_for(lambda: os.path.exists(f"{D}/{name}.ready") or app.poll() is not None,
             "blue's QPs did not connect", timeout=60)
    installed = sum(1 for e in ctl.l2_entries("B") if e.get("kind") == "egress" and e.get("vnic") == 5
                    and e.get("dst_overlay_ip") in CRAFTED)
    port = free_port()
    srv = perf("write_bw", f"{victim_name}-server", "A", "192.168.7.3", port, ["--timeout", "8"])
    time.sleep(0.4)
    cli = perf("write_bw", f"{victim_name}-client", "B", "192.168.7.2", port,
               ["-n", "200", "-s", "4096", "--verify", "--timeout", "8"], server="127.0.0.1")
    cc, sc = finish(cli, 30), finish(srv, 15)
    open(f"{D}/{name}.stop", "w").close()
    finish(app, 10)
    try:
        j = json.loads(lab.text(f"{victim_name}-client"))
    except ValueError:
        j = {}
    table = telemetry_query(PREFIX["B"], "/tandem/rnic/table")
    full = ctl.channel("B").get("stats", {}).get("table_full", 0) - full0
    verified = cc == 0 and sc == 0 and j.get("verify") == "ok"
    return installed, full, int(table.get("full_buckets", 0)), verified, cc


CRAFTED = []


def import_mappings(name, vni, addrs, behind="A"):
    with open(f"{D}/{name}.csv", "w") as f:
        f.write("vni,overlay_ip,underlay_ip,next_hop_mac,rnic\n")
        for a in addrs:
            f.write(f"{vni},{a},{UNDERLAY[behind][0]},{UNDERLAY[behind][1]},{behind}\n")
    return ctl("mapping", "import", f"{D}/{name}.csv")[0]


def red_new_flows(tag, third_octet, n=60):
    """Red's n new flows on B (bound to vNIC 2) toward fresh red addresses behind A:
    (app exit, set-up times in ms)."""
    addrs = [f"192.168.{third_octet}.{i + 1}" for i in range(n)]
    rc = import_mappings(f"red-{tag}", 100, addrs)
    check(rc == 0, f"red's {n} addresses for the {tag} run imported (exit {rc})")
    name = f"red-{tag}"
    app = lab.start([MANY, f"{D}/B.rnic", D, name, str(n), ",".join(addrs), "192.168.7.2"], name)
    wait_for(lambda: os.path.exists(f"{D}/{name}.ready") or app.poll() is not None,
             f"red's {tag} flows", timeout=120)
    # Each QP's RTR asked the agent for its route (the app's modify returns at once): the worker
    # times RTR to route installed per QP (route_wait_us in /tandem/rnic/qps).
    want = set(addrs)

    def rows():
        got, start = {}, 0
        while True:
            page = telemetry_query(PREFIX["B"], f"/tandem/rnic/qps,{start:#x}")
            for k, r in page.items():
                if isinstance(r, dict) and r.get("vnic") == 2 and r.get("remote") in want:
                    got[k] = r
            qpns = [int(k, 16) for k in page if k.startswith("0x")]
            if not qpns:  # pages until an empty one: a page holds what fits in a reply
                return got
            start = max(qpns) + 1
    done = {}
    deadline = time.time() + 20
    while time.time() < deadline and app.poll() is None:
        done = rows()
        if len(done) == n and not any(r.get("route_pending") for r in done.values()):
            break
        time.sleep(0.2)
    times = [r.get("route_wait_us", 0) / 1000 for r in done.values()
             if not r.get("route_pending") and r.get("state") == "RTS"]
    open(f"{D}/{name}.stop", "w").close()
    rc = finish(app, 10)
    return rc, times


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else float("nan")


def storm_phase(table):
    # A table that holds both tenants' shares (the collision phases ran B at 128 entries).
    restart_b(capacity=4096)
    red_new_flows("warm-up", 69, n=20)  # a restarted worker's first flows fault pages in: not the baseline
    base_rc, base = red_new_flows("calm", 70)
    check(base_rc == 0 and len(base) == 60, f"red's 60 new flows without a storm are set up: routes installed, RTS ({len(base)} of 60)")
    rc, _ = ctl("tenant", "quota", 200, 64)
    check(rc == 0, "tandemctl tenant quota 200 64")
    own = [f"10.200.{i // 256}.{i % 256}" for i in range(512)]
    rc = import_mappings("blue-own", 200, [a for a in own if a not in CRAFTED])
    check(rc == 0, f"blue's 512 own addresses imported (exit {rc})")
    env = dict(os.environ, TANDEM_DEVICES=f"{D}/devices")
    storm = lab.start([EXHAUST, "storm", "tandem_B_v5", D, "storm", "1024"], "storm", env=env)
    wait_for(lambda: os.path.exists(f"{D}/storm.ready") or storm.poll() is not None, "blue's storm", timeout=60)
    check(storm.poll() is None, f"blue's storm runs: 1024 QPs asking for routes ({lab.text('storm')[-200:].strip()})")
    st_rc, st = red_new_flows("storm", 71)
    open(f"{D}/storm.stop", "w").close()
    finish(storm, 15)
    punts = ctl.channel("B").get("punts", {})
    tenants = punts.get("tenants", {})
    blue, red = tenants.get("200", {}), tenants.get("100", {})
    check(st_rc == 0 and len(st) == 60, f"red's 60 new flows during blue's storm are all set up: routes installed, RTS ({len(st)} of 60)")
    check(blue.get("over_quota", 0) > 0 and blue.get("flows", 1 << 30) <= 64,
          f"blue is held to its quota on B: {blue.get('flows')} flows, {blue.get('over_quota')} punts refused "
          f"over quota, {blue.get('dropped')} dropped from its queue; red {red}")
    time.sleep(0.3)  # the agent publishes its telemetry snapshot periodically
    tel = telemetry_query(f"{TAG}-dpu", "/tandem/dpu/rnics").get("B", {})
    check(tel.get("tenant_200_punts_over_quota", 0) > 0,
          f"the agent's telemetry shows blue's refusals on B (over quota "
          f"{tel.get('tenant_200_punts_over_quota')}, red served {tel.get('tenant_100_punts_served')})")
    exporter = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "tandem-exporter")
    text = subprocess.run([exporter, "--once", "--prefix", f"{TAG}-dpu"], capture_output=True, text=True).stdout
    line = next((ln for ln in text.splitlines() if ln.startswith("tandem_dpu_tenant_punts{") and 'rnic="B"' in ln
                 and 'tenant="200"' in ln and 'verdict="over_quota"' in ln), "")
    check(line and float(line.split()[-1]) > 0, f"tandem-exporter gives them to Prometheus: {line}")
    ratio = p99(st) / p99(base) if base else float("nan")
    print(f"red's new-flow set-up p99: {p99(base):.2f} ms calm, {p99(st):.2f} ms during the storm "
          f"(x{ratio:.2f}; goal <= 2); median {sorted(base)[len(base) // 2] if base else 0:.2f} / "
          f"{sorted(st)[len(st) // 2] if st else 0:.2f} ms")
    table.append(("quota + punt storm", None, 0, None,
                  f"blue {blue.get('queued')} punts, {blue.get('over_quota')} over quota, {blue.get('dropped')} dropped",
                  f"p99 {p99(base):.2f} -> {p99(st):.2f} ms (x{ratio:.2f})"))


def main():
    pre = f"{TAG}-dpu"
    agent = lab.start([DPU, "--db", f"{D}/dpu.sqlite", "--control-socket", f"{D}/ctl.sock", "--channel-dir", CH,
                       "--idle", "adaptive", "--", "--no-pci", "--no-huge", "-m", "64", f"--file-prefix={pre}",
                       "-l", "0", "--log-level=lib.eal:error"], "agent", pre)
    wait_for(lambda: ctl("tenant", "list")[0] == 0 or agent.poll() is not None, "the agent did not start")
    for n, (ip, mac) in UNDERLAY.items():
        ctl("rnic", "add", n, "--underlay-ip", ip, "--mac", mac, "--path-base-port", 0xC000, "--path-count", 4)
    for vni, name in TENANTS:
        rc, _ = ctl("tenant", "add", vni, name)
        check(rc == 0, f"tenant {name} added")
    rc, tl = ctl("tenant", "list")
    keys = {t["name"]: t.get("pkey") for t in tl.get("tenants", [])}
    check(len(set(keys.values())) == 2 and None not in keys.values(),
          f"each tenant got its own partition key: {keys}")
    for v, t, r, o, m in VNICS:
        ctl("vnic", "add", v, "--vni", t, "--rnic", r, "--ip", o, "--mac", m)
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D), "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    workers[:] = [start_worker("A", "h0.sock"), start_worker("B", "h1.sock")]
    wait_for(lambda: all(ctl.channel(n).get("state") == "ACTIVE" for n in "AB")
             or any(p.poll() is not None for p in workers), "the workers did not reach ACTIVE", timeout=40)
    wait_for(lambda: all(len(ctl.l2_vnics(n)) == sum(1 for v in VNICS if v[2] == n) for n in "AB"),
             "the workers did not get their vNIC entries", timeout=20)
    pkeys = {e["vnic"]: e.get("pkey") for n in "AB" for e in ctl.l2_entries(n) if e.get("kind") == "vnic"}
    check(pkeys.get(1) == pkeys.get(3) == keys["red"] and pkeys.get(4) == keys["blue"],
          f"the vNIC entries carry their tenant's key: {pkeys}")

    # The victim's own transfer, verified, for the length of both attacks.
    vport = free_port()
    vsrv = perf("write_bw", "victim-server", "A", "192.168.7.1", vport, ["--timeout", "20"])
    time.sleep(0.4)
    vcli = perf("write_bw", "victim-client", "B", "192.168.7.2", vport,
                ["-D", "14", "-s", "65536", "--verify", "--timeout", "20"], server="127.0.0.1")
    time.sleep(1.5)
    table = []
    attack("write_bw", table)
    attack("send_bw", table)
    vc, vs = finish(vcli, 60), finish(vsrv, 20)
    try:
        vj = json.loads(lab.text("victim-client"))
    except ValueError:
        vj = {}
    victim_ok = vc == 0 and vs == 0 and vj.get("verify") == "ok" and vj.get("server_verify") == "ok"
    check(victim_ok, f"red's write_bw --verify ran through the attacks: exit {vc}/{vs}, "
          f"{vj.get('iterations')} x 64 KiB, verify {vj.get('verify')}/{vj.get('server_verify')}"
          + ("" if victim_ok else f" ({lab.text('victim-client', 'err').strip()[-300:]})"))

    # Crafted collisions against red's next flow on B (vNIC 2 -> 192.168.7.3).
    nb = int(telemetry_query(PREFIX["B"], "/tandem/rnic/table").get("buckets", 0))
    check(nb > 0, f"worker B's level-2 table has {nb} buckets (--table-capacity 128)")
    victim = buckets_of(keyed_hash(KNOWN_KEY, KIND_EGRESS, 2, ip2int("192.168.7.3")), nb)
    ip = ip2int("10.200.0.1")
    while len(CRAFTED) < 16 and nb:
        if buckets_of(keyed_hash(KNOWN_KEY, KIND_EGRESS, 5, ip), nb) == victim:
            CRAFTED.append(socket.inet_ntoa(ip.to_bytes(4, "big")))
        ip += 1
    for x in CRAFTED:  # blue's own VPC: addresses blue may choose, behind A
        ctl("mapping", "add", "--vni", 200, "--overlay-ip", x, "--underlay-ip", UNDERLAY["A"][0],
            "--next-hop-mac", UNDERLAY["A"][1], "--rnic", "A")
    k_inst, k_full, k_buckets, k_ok, k_exit = collision_phase(True, "known")
    check(k_inst >= 15 and k_full > 0 and k_buckets > 0 and not k_ok,
          f"under a known secret blue's {k_inst} crafted flows fill red's buckets: red's flow refused "
          f"(agent table_full +{k_full}, B full_buckets {k_buckets}, red's client exit {k_exit})")
    s_inst, s_full, s_buckets, s_ok, s_exit = collision_phase(False, "secret")
    check(s_inst == len(CRAFTED) and s_full == 0 and s_buckets == 0 and s_ok,
          f"under B's own secret the same {s_inst} flows scatter: red's flow installed and verified "
          f"(table_full +{s_full}, full_buckets {s_buckets}, exit {s_exit})")
    table.append(("crafted collisions, known secret", None, 0, None, f"{k_inst} flows installed",
                  "refused" if not k_ok else "installed"))
    table.append(("crafted collisions, B's secret", None, 0, None, f"{s_inst} flows installed",
                  "installed" if s_ok else "refused"))
    storm_phase(table)

    print("\nattack                 | target QPN | delivered cross-tenant | pkey_violation drops | "
          "attacker exit | victim verified")
    for what, q, rx, drops, ac, tc in table:
        if q is None:  # a collision row: flows blue installed, what became of red's flow
            print(f"{what}: blue: {ac}; red's new flow(s): {tc}")
            continue
        print(f"{what:22} | {hex(q[0]) if q else '?':10} | {rx:22} | {drops:20} | {ac!s:13} | "
              f"{'yes' if victim_ok else 'no'}")
    for p in workers + [agent]:
        lab.stop(p)
    lab.stop(fab)


workers = []
run_checked("adversary", main, checks, lab, logs=("agent", "fabric", "A", "B"))
