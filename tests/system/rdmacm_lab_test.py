"""rdma_cm on the wire between two tandem-rnic workers (rnic/cm in the worker, the drop-in
librdmacm through scripts/tandem-run), with Debian's binaries unmodified:

  * rping -v -C 100 both ways (the server on worker A, then on worker B), every ping's data
    checked by rping (-v prints it; the count must be 100 on both sides); 8 rping -C 1 back to back;
  * ib_write_bw -R, ib_send_bw -R, ib_read_bw -R: perftest connects through rdma_cm;
  * rdma-core's examples: rdma_server/rdma_client (the synchronous endpoint API), udaddy (UD) and ucmatose
    (4 connections on one event channel);
  * a REQ to a port nobody listens on: REJECTED with IBA's reason 8 (invalid service ID),
    counted as cm_no_listener;
  * tenant isolation: the red tenant's vNIC on B holds a (hostile) route to the blue tenant's
    address on A; its REQ carries red's partition, so A refuses it (REJECTED 8, counted
    cm_tenant_refused) and blue's listener never hears of it;
  * malformed and unsolicited MADs (a replayed pcap on a receive-only port of worker B: bad class
    version, unknown attribute, an RTU and a DREP for no connection, the wrong Q_Key, a truncated
    MAD) are dropped and counted, and the worker keeps serving;
  * a half-open connection (the client never takes its CONNECT_RESPONSE, so no RTU) times out
    on the server's side after the REP's retries: rping's server sees it, cm_timeouts counts it.

usage: rdmacm_lab_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_RUN BINDIR CM_CLIENT_APP"""
import logging
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Telemetry, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started)

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Ether, IP, UDP, Raw, wrpcap  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402

FABRIC, RNIC, RUN, BINDIR, CLIENT = sys.argv[1:6]
TAG = f"rdmacm{os.getpid()}"
lab = Lab(tmp_prefix="tandem-rdmacm-")
D = lab.d
checks = Checks()
check = checks.check
ENV = dict(os.environ, TANDEM_DEVICES=f"{D}/devices")
RED_A, RED_B, BLUE_A, BLUE_B = "192.168.7.1", "192.168.7.2", "192.168.8.1", "192.168.8.2"


def table(me, peer, hostile=False):
    """Two tenants per worker: red (partition 1) and blue (partition 2)."""
    i, under, peer_under = me
    y = f"""underlay:
  ip: {under}
  mac: 02:00:00:00:00:0{i}
  gateway_mac: 02:00:00:00:00:fe
vnics:
  - {{id: 1, ip: 192.168.7.{i}, mac: 02:00:00:00:01:0{i}, vni: 100, partition: 1}}
  - {{id: 2, ip: 192.168.8.{i}, mac: 02:00:00:00:02:0{i}, vni: 200, partition: 2}}
egress:
  - {{vnic: 1, remote_ip: 192.168.7.{peer}, underlay_ip: {peer_under}, paths: 4}}
  - {{vnic: 2, remote_ip: 192.168.8.{peer}, underlay_ip: {peer_under}, paths: 4}}
"""
    if hostile:  # red may reach blue's address on the other worker (what isolation must stop)
        y += f"  - {{vnic: 1, remote_ip: 192.168.8.{peer}, underlay_ip: {peer_under}, paths: 4}}\n"
    return y


def bad_mads(path):
    """Frames worker B gets on its receive-only port, as from worker A (10.0.0.1), red's partition."""
    def mad(attr, class_version=2, body=b""):
        h = struct.pack("!BBBBHHQHHI", 1, 0x07, class_version, 0x03, 0, 0, 0x99, attr, 0, 0)
        return h + body + b"\0" * (232 - len(body))

    def frame(payload, qkey=0x80010000):
        return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / \
            IP(src="10.0.0.1", dst="10.0.0.2", flags="DF") / UDP(sport=0xC001, dport=4791, chksum=0) / \
            BTH(opcode=0x64, pkey=0x8001, dqpn=1, psn=1) / Raw(struct.pack("!II", qkey, 1) + payload)
    frames = [
        frame(mad(0x14, class_version=9)),                                      # bad class version
        frame(mad(0x7F)),                                                       # unknown attribute
        frame(mad(0x14, body=struct.pack("!II", 0xDEAD, 0xBEEF))),              # RTU for no connection
        frame(mad(0x16, body=struct.pack("!II", 0xDEAD, 0xBEF0))),              # DREP for no connection
        frame(mad(0x14), qkey=0x12345678),                                      # not the GSI Q_Key
        frame(mad(0x14)[:100]),                                                 # truncated MAD
    ]
    wrpcap(path, frames)


def run(argv, timeout=30):
    try:
        r = subprocess.run([RUN] + argv, env=ENV, capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        return None, f"timed out: {e}"


def server_client(server, client, timeout=60):
    """Starts server (argv), then runs client; returns (server exit, server out, client exit, client out)."""
    srv = subprocess.Popen([RUN] + server, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(1.0)
    ccode, cout = run(client, timeout)
    try:
        sout, _ = srv.communicate(timeout=20)
        scode = srv.returncode
    except subprocess.TimeoutExpired:
        srv.kill()
        sout, _ = srv.communicate()
        scode = None
    return scode, sout, ccode, cout


def main():
    with open(f"{D}/A.yaml", "w") as f:
        f.write(table((1, "10.0.0.1", "10.0.0.2"), 2))
    with open(f"{D}/B.yaml", "w") as f:
        f.write(table((2, "10.0.0.2", "10.0.0.1"), 1, hostile=True))
    bad_mads(f"{D}/bad.pcap")
    fab_pre = f"{TAG}-fab"
    fab = lab.start(lab_fabric_argv(FABRIC, fab_pre, D), "fabric", fab_pre)
    wait_fabric_started(lab, fab)
    pre = {n: f"{TAG}-{n.lower()}" for n in "AB"}
    # Short CM timers so the half-open case ends in seconds: 4.096 us * 2^14 = 67 ms, 3 retries.
    cm_flags = ["--mtu", "1024", "--cm-timeout", "14", "--cm-retries", "3"]
    workers = {
        "A": lab.start(lab_worker_argv(RNIC, "A", pre["A"], D, "h0.sock", cm_flags), "A", pre["A"]),
        "B": lab.start(lab_worker_argv(RNIC, "B", pre["B"], D, "h1.sock", cm_flags,
                                       eal=[f"--vdev=net_pcap1,rx_pcap={D}/bad.pcap,tx_pcap={D}/ignored.pcap"]),
                       "B", pre["B"]),
    }
    t0 = time.time()
    while not all(os.path.exists(f"{D}/devices/tandem_{n}_v{v}.dev") for n in "AB" for v in (1, 2)):
        if time.time() - t0 > 30 or any(w.poll() is not None for w in workers.values()):
            raise RuntimeError("workers did not register their verbs devices")
        time.sleep(0.1)
    tel = {n: Telemetry(pre[n], ready="/tandem/rnic/stats") for n in "AB"}

    def stats(n):
        return tel[n].cmd("/tandem/rnic/stats")

    # Malformed and unsolicited MADs (replayed on B's receive-only port at its start).
    s = stats("B")
    check(s["cm_bad_mads"] == 2, f"malformed MADs dropped and counted on B (cm_bad_mads {s['cm_bad_mads']}, want 2)")
    check(s["cm_unsolicited"] == 2,
          f"an RTU and a DREP for no connection dropped and counted (cm_unsolicited {s['cm_unsolicited']}, want 2)")
    check(s["drop_ingress_bad_qkey"] >= 1 and s["drop_ingress_truncated"] >= 1,
          f"a QP1 datagram with another Q_Key and a truncated MAD dropped at ingress "
          f"(bad_qkey {s['drop_ingress_bad_qkey']}, truncated {s['drop_ingress_truncated']})")
    check(s["cm_mads_out"] == 0, "no MAD answers the malformed or unsolicited ones")

    # rping both ways, 100 verified pings each.
    for srv_ip, cli_ip in ((RED_A, RED_B), (RED_B, RED_A)):
        scode, sout, ccode, cout = server_client(
            [f"{BINDIR}/rping", "-s", "-v", "-a", srv_ip, "-C", "100"],
            [f"{BINDIR}/rping", "-c", "-v", "-a", srv_ip, "-I", cli_ip, "-C", "100"])
        nc, ns = cout.count("ping data: rdma-ping-"), sout.count("server ping data: rdma-ping-")
        check(ccode == 0 and scode == 0 and nc == 100 and ns == 100,
              f"rping -v -C 100, server {srv_ip}: client exit {ccode} ({nc} pings), server exit {scode} ({ns} pings)"
              + ("" if ccode == 0 else f": {' '.join(cout.split())[-200:]}"))

    # Short connections back to back: rping's client disconnects and destroys its QP while its
    # CM thread takes the server's DISCONNECTED (the library once touched the freed QP there:
    # 2 SIGSEGVs in 30; the harness fails the test on any death by a signal).
    codes = []
    for i in range(8):
        port = str(7500 + i)
        scode, _, ccode, _ = server_client([f"{BINDIR}/rping", "-s", "-a", RED_A, "-p", port, "-C", "1"],
                                           [f"{BINDIR}/rping", "-c", "-a", RED_A, "-I", RED_B, "-p", port, "-C", "1"])
        codes.append((ccode, scode))
    check(all(c == (0, 0) for c in codes), f"8 rping -C 1 connections back to back: exits {codes}")

    # perftest over rdma_cm (-R), client on B, server on A.
    for prog in ("ib_write_bw", "ib_send_bw", "ib_read_bw"):
        scode, sout, ccode, cout = server_client(
            [f"{BINDIR}/{prog}", "-R", "-d", "tandem_A_v1", "-s", "65536", "-n", "500"],
            [f"{BINDIR}/{prog}", "-R", "-d", "tandem_B_v1", "-s", "65536", "-n", "500", RED_A], timeout=90)
        row = [ln for ln in cout.splitlines() if ln.strip().startswith("65536")]
        check(ccode == 0 and scode == 0 and len(row) == 1,
              f"{prog} -R: client exit {ccode}, server exit {scode}: {row[0].split() if row else cout[-200:]}")

    # rdma-core's own examples: the synchronous API (rdma_getaddrinfo, rdma_create_ep,
    # rdma_get_request) and several connections on one channel (ucmatose -c 4).
    scode, sout, ccode, cout = server_client([f"{BINDIR}/rdma_server", "-s", RED_A, "-p", "7471"],
                                             [f"{BINDIR}/rdma_client", "-s", RED_A, "-p", "7471"])
    check(ccode == 0 and scode == 0 and "end 0" in cout and "end 0" in sout,
          f"rdma_server/rdma_client (synchronous endpoints): exit {scode}/{ccode}: {' '.join((sout + cout).split())[-120:]}")
    scode, sout, ccode, cout = server_client([f"{BINDIR}/ucmatose", "-b", RED_A, "-c", "4", "-C", "10"],
                                             [f"{BINDIR}/ucmatose", "-s", RED_A, "-b", RED_B, "-c", "4", "-C", "10"])
    check(ccode == 0 and scode == 0 and "return status 0" in cout and "return status 0" in sout,
          f"ucmatose, 4 connections x 10 messages: exit {scode}/{ccode}")
    # UD over SIDR: the server answers each datagram at its GRH source (ibv_create_ah_from_wc),
    # which the ingress entry for the client's underlay names.
    scode, sout, ccode, cout = server_client([f"{BINDIR}/udaddy", "-b", RED_A, "-c", "2", "-C", "10"],
                                             [f"{BINDIR}/udaddy", "-s", RED_A, "-b", RED_B, "-c", "2", "-C", "10"])
    check(ccode == 0 and scode == 0 and "return status 0" in cout and "return status 0" in sout,
          f"udaddy, 2 UD endpoints x 10 messages both ways: exit {scode}/{ccode}: {' '.join((sout + cout).split())[-160:]}")

    # A REQ to a port nobody listens on.
    a0 = stats("A")
    code, out = run([CLIENT, "-b", RED_B, "connect", RED_A, "4444"])
    a1 = stats("A")
    check(code == 1 and "EVENT RDMA_CM_EVENT_REJECTED 8" in out and a1["cm_no_listener"] == a0["cm_no_listener"] + 1,
          f"REQ to port 4444 (no listener): {out.strip()[-120:]}; cm_no_listener +{a1['cm_no_listener'] - a0['cm_no_listener']}")

    # Another tenant: red (B) aims at blue's listener on A through its hostile route.
    blue = subprocess.Popen([RUN, f"{BINDIR}/rping", "-s", "-v", "-a", BLUE_A, "-p", "7300", "-C", "1"], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(1.0)
    code, out = run([CLIENT, "-b", RED_B, "connect", BLUE_A, "7300"])
    a2 = stats("A")
    check(code == 1 and "EVENT RDMA_CM_EVENT_REJECTED 8" in out and a2["cm_tenant_refused"] == a1["cm_tenant_refused"] + 1,
          f"red's REQ to blue's listener refused: {out.strip()[-120:]}; cm_tenant_refused "
          f"+{a2['cm_tenant_refused'] - a1['cm_tenant_refused']}")
    # Blue itself still connects to its listener.
    code, out = run([f"{BINDIR}/rping", "-c", "-v", "-a", BLUE_A, "-I", BLUE_B, "-p", "7300", "-C", "1"])
    try:
        bout, _ = blue.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        blue.kill()
        bout, _ = blue.communicate()
    check(code == 0 and "server ping data: rdma-ping-0" in bout,
          f"blue's own client reaches blue's listener (exit {code}; server saw {bout.count('ping data')} ping)")

    # A half-open connection: the client never takes its CONNECT_RESPONSE (no RTU).
    srv = subprocess.Popen([RUN, f"{BINDIR}/rping", "-s", "-v", "-a", RED_A, "-p", "7400", "-C", "1"], env=ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(1.0)
    t0 = time.time()
    half = subprocess.Popen([RUN, CLIENT, "-b", RED_B, "halfopen", RED_A, "7400", "6"], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        sout, _ = srv.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        srv.kill()
        sout, _ = srv.communicate()
    waited = time.time() - t0
    half.communicate(timeout=20)
    a3 = stats("A")
    check(srv.returncode not in (None, 0) and "UNREACHABLE" in sout and a3["cm_timeouts"] >= a2["cm_timeouts"] + 1,
          f"half-open connection timed out on the server's side after {waited:.1f} s (rping server exit "
          f"{srv.returncode}: {' '.join(sout.split())[-100:]}; cm_timeouts +{a3['cm_timeouts'] - a2['cm_timeouts']})")
    check(a3["cm_retries"] >= 3, f"the REP was resent before giving up (cm_retries {a3['cm_retries']})")

    for n, w in workers.items():
        check(w.poll() is None, f"worker {n} still runs")
    b = stats("B")
    check(b["cm_ring_full"] == 0 and a3["cm_ring_full"] == 0, "no MAD lost between the CM and the lcores")


run_checked("rdmacm_lab", main, checks, lab)
