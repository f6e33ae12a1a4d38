"""tandem-fabric on net_pcap ports: a pcap of RoCEv2 packets goes in on
port 0; checks forwarding by destination, spreading over 4 paths by UDP
source port (predicted with the shared ECMP hash), loss close to the
configured rate on a lossy path, nothing on a failed path, ECN CE marks
with valid IPv4 checksums on a congested path, and the counters."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, ecmp_pick, ip2int  # noqa: E402

from scapy.all import ARP, IP, UDP, Ether, Raw, rdpcap, wrpcap  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402

fabric = sys.argv[1]
PREFIX = f"tandem-fabric-fwd-{os.getpid()}"
N = 4000
PATHS = ["delay_us=100", "loss=0.2", "down", "rate_gbps=1,ecn_bytes=300"]
LOSSY, FAILED, ECN = 1, 2, 3
DSTS = {"10.0.0.2": 1, "10.0.0.3": 2}

lab = Lab()
c = Checks()
try:
    tmp = tempfile.mkdtemp(prefix="tandem-fabric-fwd-")
    pkts = []
    for i in range(N):
        dst = "10.0.0.2" if i % 2 == 0 else "10.0.0.3"
        pkts.append(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") /
                    IP(src="10.0.0.1", dst=dst, tos=0x02) /
                    UDP(sport=49152 + (i * 7) % 512, dport=4791) /
                    BTH(opcode=4, dqpn=17, psn=i) / Raw(b"\x00" * 64))
    for i in range(20):  # no route
        pkts.append(Ether() / IP(src="10.0.0.1", dst="10.0.0.9") / UDP(sport=50000 + i, dport=4791) / Raw(b"y" * 20))
    for i in range(10):  # not IPv4
        pkts.append(Ether() / ARP(pdst="10.0.0.2"))
    wrpcap(f"{tmp}/in.pcap", pkts)
    with open(f"{tmp}/fabric.yaml", "w") as f:
        f.write("routes:\n  10.0.0.1: 0\n  10.0.0.2: 1\n  10.0.0.3: 2\n")
        f.write("paths:\n" + "".join(f'  - "{p}"\n' for p in PATHS))
        f.write("seed: 7\n")

    argv = [fabric, "--config", f"{tmp}/fabric.yaml", "--duration", "3", "--idle", "adaptive",
            "--stats-json", f"{tmp}/stats.json", "--",
            "--no-pci", f"--file-prefix={PREFIX}", "-l", "0", "-m", "64",
            f"--vdev=net_pcap0,rx_pcap={tmp}/in.pcap,tx_pcap={tmp}/out0.pcap",
            f"--vdev=net_pcap1,tx_pcap={tmp}/out1.pcap",
            f"--vdev=net_pcap2,tx_pcap={tmp}/out2.pcap"]
    with open(f"{tmp}/fabric.log", "w") as log:
        p = lab.start(argv, log, PREFIX)
        rc = lab.stop(p, timeout=30) if p.wait(30) is None else p.returncode
    print(open(f"{tmp}/fabric.log").read())
    c.check(rc == 0, f"tandem-fabric exits 0 (got {rc})")
    stats = json.load(open(f"{tmp}/stats.json"))

    outs = {port: rdpcap(f"{tmp}/out{port}.pcap") for port in (0, 1, 2)}
    c.check(len(outs[0]) == 0, "nothing is sent back out of the ingress port (no packet is for 10.0.0.1)")
    for dst, port in DSTS.items():
        wrong = [q for q in outs[port] if q[IP].dst != dst]
        c.check(len(outs[port]) > 0 and not wrong,
                f"port {port} carries only packets for {dst} ({len(outs[port])} packets, {len(wrong)} wrong)")

    # Predict each input packet's path with the shared hash.
    sent = {k: set() for k in range(len(PATHS))}
    for q in pkts[:N]:
        k = ecmp_pick(ip2int(q[IP].src), ip2int(q[IP].dst), q[UDP].sport, q[UDP].dport, len(PATHS))
        sent[k].add((q[IP].dst, q[BTH].psn))
    got = {k: set() for k in range(len(PATHS))}
    for port in (1, 2):
        for q in outs[port]:
            k = ecmp_pick(ip2int(q[IP].src), ip2int(q[IP].dst), q[UDP].sport, q[UDP].dport, len(PATHS))
            got[k].add((q[IP].dst, q[BTH].psn))
    for k in range(len(PATHS)):
        c.check(len(sent[k]) > N // 10, f"source ports spread traffic onto path {k} ({len(sent[k])} packets)")
        c.check(got[k] <= sent[k], f"every packet that left via path {k} was hashed to path {k}")
    for k in (0, ECN):
        c.check(got[k] == sent[k], f"lossless path {k} delivers all {len(sent[k])} packets")
    c.check(len(got[FAILED]) == 0, f"failed path {FAILED} carries nothing ({len(got[FAILED])} delivered)")
    loss = 1 - len(got[LOSSY]) / len(sent[LOSSY])
    c.check(abs(loss - 0.2) < 0.05, f"lossy path loses {loss:.3f}, configured 0.2")

    ce = {k: 0 for k in range(len(PATHS))}
    bad_csum = 0
    for port in (1, 2):
        for q in outs[port]:
            k = ecmp_pick(ip2int(q[IP].src), ip2int(q[IP].dst), q[UDP].sport, q[UDP].dport, len(PATHS))
            if q[IP].tos & 3 == 3:
                ce[k] += 1
            orig = q[IP].chksum
            del q[IP].chksum
            if IP(bytes(q[IP])).chksum != orig:
                bad_csum += 1
    c.check(ce[ECN] > 0, f"congested path {ECN} marks CE ({ce[ECN]} packets)")
    c.check(sum(ce.values()) == ce[ECN], "no other path marks CE")
    c.check(bad_csum == 0, f"every forwarded packet has a valid IPv4 checksum ({bad_csum} bad)")

    ports = {p["port"]: p for p in stats["ports"]}
    paths = {p["path"]: p for p in stats["paths"]}
    c.check(ports[0]["rx_packets"] == len(pkts), f"port 0 received all {len(pkts)} packets")
    c.check(ports[0]["drop_no_route"] == 20, "20 packets to an unknown host counted as no_route")
    c.check(ports[0]["drop_not_ipv4"] == 10, "10 ARP packets counted as not_ipv4")
    for k in range(len(PATHS)):
        c.check(paths[k]["packets"] == len(got[k]), f"path {k} counter matches what was captured")
    c.check(paths[FAILED]["drop_path_down"] == len(sent[FAILED]), "failed path counts its drops as path_down")
    c.check(paths[LOSSY]["drop_random_loss"] == len(sent[LOSSY]) - len(got[LOSSY]),
            "lossy path counts its drops as random_loss")
    c.check(paths[ECN]["ecn_marks"] == ce[ECN], "ECN mark counter matches the CE packets captured")
    c.check(ports[1]["tx_packets"] + ports[2]["tx_packets"] == len(outs[1]) + len(outs[2]),
            "port tx counters match the capture")
finally:
    lab.cleanup()
print(f"{len(c.failed)} check(s) failed")
sys.exit(1 if c.failed else 0)
