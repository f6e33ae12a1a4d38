"""System test: no packet sees a half-applied tandem-dpu transaction, while
thousands of transactions commit under traffic.

Worker A (10.0.0.1) streams RDMA WRITEs from one TX queue to two destinations
behind worker B (10.0.0.2): 192.168.7.2 in tenant 100 and 192.168.8.2 in
tenant 101. Their mappings are the group: each round rewrites both to
generation g, the generation being the next-hop MAC 02:00:00:0k:gg:gg
(k = member, gg:gg = g). The fabric forwards by underlay IP and B ignores
the MAC, so every generation delivers. A round is three acknowledged
transactions: `mapping del` of each member (tandem-dpu withdraws its
installed level-2 entries in one level-2 transaction per member) and one
`mapping import` of both rows at generation g (one level-1 transaction, all
rows or none); A's next packet to each member misses, is punted, and the
agent installs the entry resolved from level 1 at that moment. Every 20th
round goes through tandemctl (exit 0), the rest straight to the control
socket with the same JSON requests (a process per request would not fit
2000 of them in a minute on 2 shared cores). Each round waits until A holds
generation g and both flows progress again (RC recovers the withdrawal's
drops by one retransmission timeout, which is why the traffic comes from
txn_stream_app with a ~17 ms timeout).

dpdk-dumpcap records, in send order, every frame A transmits. The checker:
  * monotone generations across the whole group: after a frame that used
    generation g (to either member), no frame to any member uses one < g;
    a frame that did would have seen a half-applied round;
  * every frame's generation is one that was committed, and the member
    byte of the MAC matches the destination QP of the frame;
  * the final generation is what both members end on, on the wire and in
    A's level-2 table (agent shadow == worker BAR);
  * every request was acknowledged (>= 2000 level-1 transactions; the
    level-2 transactions they caused on A are counted too);
  * B refused no frame of A's for a table reason, and both streams ran
    through every round without a completion error (RC recovered each
    withdrawal's drops).
A's own table-miss drops are expected and reported: changing a mapping in
tandem-dpu withdraws the derived level-2 entries and re-resolves on the next
miss; it never rewrites them in place.

--split rewrites one member per transaction (del + import of that row, then
the other): a half-applied round by construction. In that mode the test
passes only if the checker catches it, so the suite proves it can fail.

--race N (by hand, not registered): N probes of `mapping del` issued 0-10 ms
after an import, while A's retransmissions punt the mapping; once the agent
is idle A must hold no entry for the deleted mapping. It fails today: the
agent computes a withdrawal from its committed shadow only, so an install
resolved just before the del (queued or in flight) escapes it and commits.

usage: dpu_txn_traffic_test.py TANDEM_DPU TANDEMCTL TANDEM_FABRIC TANDEM_RNIC TXN_STREAM_APP
       [--rounds N] [--split] [--race N] [--keep]"""
import argparse
import json
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, Tandemctl, Telemetry, lab_fabric_argv, poll_until, run_checked, stop  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("bins", nargs=5)
ap.add_argument("--rounds", type=int, default=670)
ap.add_argument("--split", action="store_true")
ap.add_argument("--race", type=int, default=0, help="instead of the rounds: N probes of `mapping del` racing "
                "the install of a punt resolved just before it (by hand; see the report)")
ap.add_argument("--keep", action="store_true")
opt = ap.parse_args()
DPU, CTL, FABRIC, RNIC, APP = opt.bins
TAG = f"txn{os.getpid()}"
lab = Lab(tmp_prefix="tandem-dpu-txn-", keep=opt.keep)
D = lab.d
ctl = Tandemctl(CTL, f"{D}/ctl.sock")
CH = f"{D}/ch"
os.makedirs(CH)
checks = Checks()
check = checks.check

A_MAC = "02:00:00:00:00:01"
# txn_stream_app: RTO 4.096 us << 12 (~17 ms; 7 retries = 2 s to recover a withdrawal on a busy
# lab), 1 KiB WRITEs (one frame), 4 outstanding per QP.
TRAFFIC = ["12", "1024", "4"]
DEPTH = 4
# The group: (member, VNI, overlay IP on B, A's vNIC, its IP, B's vNIC, its VNI).
MEMBERS = [(1, 100, "192.168.7.2", 1, "192.168.7.1", 2, 200),
           (2, 101, "192.168.8.2", 5, "192.168.8.1", 6, 201)]
# DPU mode: the YAML gives the underlay identity; the vNICs come from the agent (`vnic add` below).
YAML = {
    "A": "underlay: {ip: 10.0.0.1, mac: 02:00:00:00:00:01, gateway_mac: 02:00:00:00:00:fe}\n",
    "B": "underlay: {ip: 10.0.0.2, mac: 02:00:00:00:00:02, gateway_mac: 02:00:00:00:00:fe}\n",
}


def gen_mac(member, g):
    return f"02:00:00:{member:02x}:{g >> 8 & 0xff:02x}:{g & 0xff:02x}"




def api(req):
    """One request on the agent's control socket, as tandemctl sends it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(f"{D}/ctl.sock")
        s.sendall((json.dumps(req) + "\n").encode())
        buf = b""
        while b"\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    return json.loads(buf.split(b"\n")[0] or b"{}")


def egress_macs():
    """dst MACs of the egress entries in the agent's view of A's committed level-2 table."""
    t = api({"cmd": "table.dump", "level": 2, "rnic": "A"}).get("rnics", {}).get("A", {})
    return {e.get("dst_mac") for e in t.get("entries", []) if e.get("kind") == "egress"}


def channel(rnic):
    """What `tandemctl rnic show` prints: the agent's channel state, shadow version, BAR."""
    j = api({"cmd": "rnic.show", "name": rnic})
    return j.get("rnic", {}).get("channel", {}) if j.get("ok") else {}


def active():
    """Both channels ACTIVE and each worker's vNICs (from the agent) committed."""
    if not all(channel(n).get("state") == "ACTIVE" and channel(n).get("bar", {}).get("state") == "active"
               for n in ("A", "B")):
        return False
    l2 = ctl("table", "dump", "--level", 2)[1].get("rnics", {})
    return all(len([e for e in l2.get(n, {}).get("entries", []) if e.get("kind") == "vnic"]) == len(MEMBERS)
               for n in ("A", "B"))


def start_agent():
    pre = f"{TAG}-dpu"
    p = lab.start([DPU, "--db", f"{D}/dpu.sqlite", "--control-socket", f"{D}/ctl.sock", "--channel-dir", CH,
                   "--idle", "adaptive", "--heartbeat-timeout-ms", "3000", "--", "--no-pci", "--no-huge", "-m", "64", f"--file-prefix={pre}",
                   "-l", "0", "--log-level=lib.eal:error"], "agent", pre)
    if not poll_until(lambda: ctl("tenant", "list")[0] == 0 or p.poll() is not None, 20) or p.poll() is not None:
        raise RuntimeError("agent did not start")
    return p


def start_worker(n, sock):
    pre = f"{TAG}-{n}"
    p = lab.start([RNIC, "--name", n, "--host-socket", f"{D}/{n}.rnic", "--table", f"{D}/{n}.yaml",
                   "--device-dir", f"{D}/devices",
                  "--dpu-channel", f"{CH}/tandem-{n}.chan", "--dpu-agent-timeout-ms", "3000", "--idle", "adaptive", "--mtu", "1024", "--",
                   "--no-pci", f"--file-prefix={pre}", "-l", "1", "-m", "128", "--log-level=lib.eal:error",
                   f"--vdev=net_memif0,role=client,socket={D}/{sock}"], n, pre)
    return p, pre


def write_csv(path, rows):
    with open(path, "w") as f:
        f.write("vni,overlay_ip,underlay_ip,next_hop_mac,rnic\n")
        for member, g in rows:
            _, vni, ip, *_ = MEMBERS[member - 1]
            f.write(f"{vni},{ip},10.0.0.2,{gen_mac(member, g)},B\n")


def read_pcap(path):
    """(dst MAC, src IP, dst QPN) of every frame, in capture order (libpcap format)."""
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack_from("<I", data, 0)[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off, out = 24, []
    while off + 16 <= len(data):
        caplen = struct.unpack_from(endian + "I", data, off + 8)[0]
        frame = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        if len(frame) < 50 or frame[12:14] != b"\x08\x00" or frame[23] != 17 or frame[36:38] != b"\x12\xb7":
            continue
        dqpn = int.from_bytes(frame[47:50], "big")
        out.append((frame[0:6], frame[26:30], dqpn))
    return out


def qp_new_data(tel, a_qpn):
    """Frames of new data (not retransmissions) each member's QP on A has sent, by member:
    it only grows while ACKs open the window, i.e. while the flow makes progress."""
    try:
        q = tel.cmd("/tandem/rnic/qps") or {}
    except OSError:
        return {}
    return {a_qpn[int(k, 16)]: v.get("tx_pkts", 0) - v.get("retx_pkts", 0) for k, v in q.items()
            if int(k, 16) in a_qpn}


def stats(tel):
    try:
        return tel.cmd("/tandem/rnic/stats") or {}
    except OSError:
        return {}


def race_probe(tel_a, a_qpn, streams):
    """Member 1 only: import it, let A's retransmissions punt it, `mapping del` it after a
    random 0-10 ms, and once the agent is idle require that A holds no entry for it: the
    withdrawal must also catch an install that was resolved but not yet committed."""
    import random
    _, vni, ip, *_ = MEMBERS[0]
    stale, g = [], 1
    for i in range(opt.race):
        if any(t.poll() is not None for _, t in streams):
            break
        api({"cmd": "mapping.del", "vni": vni, "overlay_ip": ip})
        g += 1
        write_csv(f"{D}/g.csv", [(1, g)])
        api({"cmd": "mapping.import", "path": f"{D}/g.csv"})
        time.sleep(random.uniform(0, 0.010))
        api({"cmd": "mapping.del", "vni": vni, "overlay_ip": ip})
        poll_until(lambda: not channel("A").get("txn_in_flight") and channel("A").get("queued_change_sets") == 0, 3, poll=0.002)
        time.sleep(0.005)
        left = [e for e in api({"cmd": "table.dump", "level": 2, "rnic": "A"})["rnics"]["A"]["entries"]
                if e.get("kind") == "egress" and e.get("dst_overlay_ip") == ip]
        if left:
            stale.append((g, left[0].get("dst_mac")))
        g += 1
        write_csv(f"{D}/g.csv", [(1, g)])
        api({"cmd": "mapping.import", "path": f"{D}/g.csv"})
        sent = qp_new_data(tel_a, a_qpn)
        poll_until(lambda: qp_new_data(tel_a, a_qpn).get(1, 0) > sent.get(1, 0) + DEPTH, 3, poll=0.001)
    alive = [t.poll() is None for _, t in streams]
    check(not stale, f"{i + 1} probes (streams alive {alive}): after `mapping del` and an idle agent, A holds no entry for the deleted "
          f"mapping ({len(stale)} stale: generation, MAC {stale[:5]})")


def main():
    for n, y in YAML.items():
        with open(f"{D}/{n}.yaml", "w") as f:
            f.write(y)
    start_agent()

    # Configuration: two tenants per side; B's tenants reach A's vNIC addresses by
    # fixed mappings. The group's addresses are plain mappings (not vNICs of
    # tenant 100/101), because a vNIC's own mapping cannot change while it exists.
    steps = [("rnic", "add", "A", "--underlay-ip", "10.0.0.1", "--mac", A_MAC, "--path-base-port", 0xC000,
              "--path-count", 4),
             ("rnic", "add", "B", "--underlay-ip", "10.0.0.2", "--mac", "02:00:00:00:00:02", "--path-base-port",
              0xC000, "--path-count", 4)]
    for _, vni, ib, va, ia, vb, vnib in MEMBERS:
        # B's receivers are in tenant vnib, A's senders in vni: one partition, or
        # the workers drop each other's packets as pkey_violation.
        steps += [("tenant", "add", vni, f"t{vni}"), ("tenant", "add", vnib, f"t{vnib}", "--share-partition-with", vni),
                  ("vnic", "add", va, "--vni", vni, "--rnic", "A", "--ip", ia, "--mac", f"02:00:00:00:01:0{va}"),
                  ("vnic", "add", vb, "--vni", vnib, "--rnic", "B", "--ip", ib, "--mac", f"02:00:00:00:01:0{vb}"),
                  ("mapping", "add", "--vni", vnib, "--overlay-ip", ia, "--underlay-ip", "10.0.0.1",
                   "--next-hop-mac", A_MAC, "--rnic", "A")]
    rcs = [ctl(*s)[0] for s in steps]
    write_csv(f"{D}/g1.csv", [(1, 1), (2, 1)])
    rcs.append(ctl("mapping", "import", f"{D}/g1.csv")[0])
    check(rcs == [0] * len(rcs), f"configuration: 2 RNICs, 4 tenants, 4 vNICs, group at generation 1 (exit codes {set(rcs)})")

    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D), "fabric", fab_pre)
    if not poll_until(lambda: "tandem-fabric:" in lab.text("fabric") or fab.poll() is not None, 20):
        raise RuntimeError("fabric did not start")
    wa, pre_a = start_worker("A", "h0.sock")
    wb, pre_b = start_worker("B", "h1.sock")
    if not poll_until(active, 30):
        raise RuntimeError("workers did not reach ACTIVE with the agent: " +
                           json.dumps({n: {k: channel(n).get(k) for k in ("state", "last_error", "bar")} for n in "AB"}))
    tel_a = Telemetry(pre_a, ready="/tandem/rnic/stats")
    tel_b = Telemetry(pre_b, ready="/tandem/rnic/stats")
    # Every frame worker A sends, in send order (its rte_pdump TX callback).
    cap = lab.start(["nice", "-n", "19", "dpdk-dumpcap", f"--file-prefix={pre_a}", "-i", "0", "-s", "64", "-P", "-q",
                     "-w", f"{D}/a.pcap", "-f", "src host 10.0.0.1"], "dumpcap")
    if not poll_until(lambda: "File:" in lab.text("dumpcap") or cap.poll() is not None, 20) or cap.poll() is not None:
        raise RuntimeError("dpdk-dumpcap did not start:\n" + lab.text("dumpcap"))
    time.sleep(1.0)  # it names its file before the primary has enabled the callbacks

    streams = []
    for member, vni, ib, va, ia, vb, vnib in MEMBERS:
        s = lab.start([APP, "sink", f"{D}/B.rnic", D, f"sink{member}", f"strm{member}", ia] + TRAFFIC, f"sink{member}")
        t = lab.start([APP, "stream", f"{D}/A.rnic", D, f"strm{member}", f"sink{member}", ib] + TRAFFIC, f"strm{member}")
        streams.append((s, t))
    ok = poll_until(lambda: all(os.path.exists(f"{D}/strm{m}.streaming") or t.poll() is not None
                          for (m, *_), (s, t) in zip(MEMBERS, streams)), 30)
    check(ok and all(t.poll() is None for _, t in streams), "two streams A -> B run, one per group member")
    qpn = {}
    for member, *_ in MEMBERS:
        with open(f"{D}/sink{member}.qp") as f:
            qpn[int(f.read().split()[0])] = member

    # B's QPs get their routes from the agent asynchronously (punt on the first
    # miss); until then A's first frames are refused as bad_qp_state and resent.
    # The ingress check below is about the rounds, so it counts from here.
    time.sleep(0.5)
    b_start = {k: v for k, v in stats(tel_b).items() if k.startswith("drop_ingress")}
    a_qpn = {}
    for member, *_ in MEMBERS:
        with open(f"{D}/strm{member}.qp") as f:
            a_qpn[int(f.read().split()[0])] = member
    if os.environ.get("TXN_DEBUG"):
        c = channel("A")
        print(f"before the rounds: {c.get('state')} {c.get('last_error')!r} {c.get('stats')}", flush=True)
    if opt.race:
        race_probe(tel_a, a_qpn, streams)
        return
    # The rounds. Most requests go straight to the control socket (what tandemctl
    # sends, without a process per request); every 20th round goes through tandemctl.
    calls, bad_calls, g, paced, unpaced, consecutive = 0, [], 1, 0, [], 0
    l2_before = channel("A").get("stats", {}).get("txns_committed", 0)
    t0 = time.time()
    for r in range(opt.rounds):
        if consecutive >= 3 or any(t.poll() is not None for _, t in streams):
            print(f"rounds stopped after generation {g}: flows stalled in rounds {unpaced}, streams alive "
                  f"{[t.poll() is None for _, t in streams]}; A: {json.dumps(channel('A'))}", flush=True)
            break
        g += 1
        members = [[1], [2]] if opt.split else [[1, 2]]
        for group in members:
            plan = [("del", m) for m in group] + [("import", group)]
            for what, arg in plan:
                via_ctl = r % 20 == 0
                if what == "del":
                    _, vni, ip, *_ = MEMBERS[arg - 1]
                    if via_ctl:
                        rc, j = ctl("mapping", "del", "--vni", vni, "--overlay-ip", ip)
                    else:
                        j = api({"cmd": "mapping.del", "vni": vni, "overlay_ip": ip})
                        rc = 0 if j.get("ok") else 2
                else:
                    write_csv(f"{D}/g.csv", [(m, g) for m in arg])
                    if via_ctl:
                        rc, j = ctl("mapping", "import", f"{D}/g.csv")
                    else:
                        j = api({"cmd": "mapping.import", "path": f"{D}/g.csv"})
                        rc = 0 if j.get("ok") else 2
                    if rc == 0 and j.get("imported") != len(arg):
                        rc = -1
                calls += 1
                if rc != 0:
                    bad_calls.append((g, what, rc, j))
            # Pace the rounds to the traffic: A's next packet to each member
            # misses and gets the entry at generation g installed; then the
            # member's QP must make progress (ACKs accepted) before the next round.
            t1 = time.time()
            ok = poll_until(lambda: all(gen_mac(m, g) in egress_macs() for m in group), 3, poll=0.001)
            sent = qp_new_data(tel_a, a_qpn)
            ok = ok and poll_until(lambda: all(qp_new_data(tel_a, a_qpn).get(m, 0) > sent.get(m, 0) + DEPTH
                                         for m in group), 3, poll=0.001)
            paced += ok
            if not ok:
                c = channel("A")
                unpaced.append((g, c.get("state"), c.get("last_error"), c.get("stats", {}).get("degraded")))
                consecutive += 1
            else:
                consecutive = 0
            if os.environ.get("TXN_DEBUG"):
                c = channel("A")
                print(f"round {g}: {time.time() - t1:.3f} s to install and progress; {c.get('state')} "
                      f"{c.get('last_error')!r} {c.get('stats')}", flush=True)
    elapsed = time.time() - t0
    final = g
    rounds_total = (g - 1) * len(members)
    l2_ok = poll_until(lambda: all(gen_mac(m, final) in egress_macs() for m, *_ in MEMBERS), 20)
    cha = channel("A")
    l2_txns = cha.get("stats", {}).get("txns_committed", 0) - l2_before
    # Pacing is how the test keeps the flows alive, not the property under test: a
    # starved lab may miss it now and then (the flows then recover by timeout).
    check(not bad_calls and paced >= 0.95 * rounds_total and calls >= (2000 if not opt.split else 1),
          f"{calls + l2_txns} transactions committed in {elapsed:.1f} s under traffic: {calls} level-1 "
          f"(mapping del/import, all acknowledged: tandemctl exit 0 or control-socket ok) and {l2_txns} level-2 "
          f"on RNIC A (COMMITTED by the worker); each round's generation installed on A and its flows "
          f"progressing before the next round: {paced} of {rounds_total}"
          + (f" (not: generation, A's channel state, last error, times degraded: {unpaced[:5]})" if unpaced else "")
          + (f"; refused: {bad_calls[:3]}" if bad_calls else ""))

    time.sleep(0.5)  # traffic at the final generation
    cha = channel("A")
    check(l2_ok and cha.get("table_version") == cha.get("bar", {}).get("table", {}).get("version"),
          f"A's level-2 table ends with both members at generation {final} (agent shadow v{cha.get('table_version')}"
          f" == BAR v{cha.get('bar', {}).get('table', {}).get('version')}; "
          f"BAR commits {cha.get('bar', {}).get('counters', {}).get('commits')})")
    sa, sb = stats(tel_a), stats(tel_b)
    print(f"agent, RNIC A: punts {cha.get('punts')}, channel {cha.get('stats')}, last error "
          f"{cha.get('last_error')!r}, state {cha.get('state')}, queued {cha.get('queued_change_sets')}, "
          f"in flight {cha.get('txn_in_flight')}, BAR counters "
          f"{cha.get('bar', {}).get('counters')}")
    if os.environ.get("TXN_DEBUG"):
        print(json.dumps(api({"cmd": "table.dump", "level": 2, "rnic": "A"})))
    alive = [t.poll() is None for _, t in streams]
    check(all(alive), f"both streams ran through every round without a completion error (alive {alive})")
    stop(cap)
    for m, *_ in MEMBERS:
        open(f"{D}/sink{m}.stop", "w").close()
    for s, t in streams:
        if t.poll() is None:
            t.kill()
            t.wait()
        s.wait(30)

    # The checker.
    frames = read_pcap(f"{D}/a.pcap")
    high, first_bad, bad, seen, counted, mismatched = 0, None, 0, {}, 0, 0
    last_gen = {}
    for i, (mac, src, dqpn) in enumerate(frames):
        if src != bytes([10, 0, 0, 1]) or dqpn not in qpn:
            continue
        # A frame to a member's QP whose MAC is not that member's generation MAC used
        # another entry (or none of ours): counted as mismatched.
        member, gen = mac[3], mac[4] << 8 | mac[5]
        if mac[0:3] != b"\x02\x00\x00" or qpn[dqpn] != member:
            mismatched += 1
            continue
        counted += 1
        seen.setdefault(member, set()).add(gen)
        last_gen[member] = gen
        if gen < high or gen < 1 or gen > final:
            bad += 1
            if first_bad is None:
                first_bad = (i, member, gen, high)
        high = max(high, gen)
    print(f"capture: {len(frames)} frames from A, {counted} to the group; generations seen on the wire: "
          f"{ {m: len(s) for m, s in seen.items()} } of {final}")
    if first_bad:
        i, member, gen, hi = first_bad
        print(f"first out-of-order frame: #{i} to member {member} used generation {gen} after generation {hi} "
              f"had been sent ({bad} such frames)")
    enough = counted >= 1000 and all(len(seen.get(m, ())) >= 10 for m, *_ in MEMBERS) and mismatched == 0
    if opt.split:
        check(enough and bad > 0,
              f"one member per transaction (--split): the checker sees half-applied rounds ({bad} frames out of order)")
    else:
        check(enough and bad == 0,
              f"{counted} frames to the group checked: generations monotone across both members in send order, "
              f"each a committed one, member byte == destination QP ({mismatched} mismatched)")
    check(all(last_gen.get(m) == final for m, *_ in MEMBERS),
          f"the last frame to each member used the final generation {final} (last seen {last_gen})")
    b_table = {k: v - b_start.get(k, 0) for k, v in sb.items()
               if k.startswith("drop_ingress") and v - b_start.get(k, 0)}
    a_table = {k: v for k, v in sa.items() if k.startswith("drop_") and ("table" in k or "tenant" in k)}
    check(not b_table, f"B refused none of A's frames at ingress during the rounds ({b_table or 'no drops'}; "
          f"before them, while its QPs were being routed: {b_start or 'none'}); "
          f"A's drops while entries were withdrawn: {a_table}")
    check(stop(wa) == 0 and stop(wb) == 0, "workers stop cleanly on SIGINT")


run_checked("dpu_txn_traffic" + ("_split" if opt.split else ""), main, checks, lab,
            logs=("agent", "fabric", "A", "B", "dumpcap", "strm1", "strm2"))
