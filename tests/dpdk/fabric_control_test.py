"""tandem-fabric at run time: continuous RoCEv2 traffic (net_pcap with
infinite_rx) towards net_null ports; through DPDK telemetry, failing a path
stops it carrying packets (its drops count as path_down) while the others
go on, healing it brings traffic back, loss=1 drops everything on a path,
and malformed commands are refused."""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, Telemetry  # noqa: E402

from scapy.all import IP, UDP, Ether, Raw, wrpcap  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402

fabric = sys.argv[1]
PREFIX = f"tandem-fabric-ctl-{os.getpid()}"
K = 4

lab = Lab()
c = Checks()


def paths(t):
    return {int(k): v for k, v in t.cmd("/tandem/fabric/paths").items()}


def wait_progress(t, k, key, timeout=10.0):
    """Waits until counter `key` of path k grows; returns whether it did."""
    start = paths(t)[k][key]
    deadline = time.time() + timeout
    while time.time() < deadline:
        time.sleep(0.1)
        if paths(t)[k][key] > start:
            return True
    return False


try:
    tmp = tempfile.mkdtemp(prefix="tandem-fabric-ctl-")
    pkts = [Ether() / IP(src="10.0.0.1", dst="10.0.0.2", tos=2) / UDP(sport=49152 + i, dport=4791) /
            BTH(opcode=4, dqpn=5, psn=i) / Raw(b"\x00" * 32) for i in range(128)]
    wrpcap(f"{tmp}/in.pcap", pkts)
    argv = [fabric, "--route", "10.0.0.2=1", "--paths", str(K), "--idle", "adaptive", "--",
            "--no-pci", f"--file-prefix={PREFIX}", "-l", "0", "-m", "64",
            f"--vdev=net_pcap0,rx_pcap={tmp}/in.pcap,infinite_rx=1", "--vdev=net_null1"]
    log = open(f"{tmp}/fabric.log", "w")
    p = lab.start(argv, log, PREFIX)
    t = Telemetry(PREFIX, "/tandem/fabric/ports", timeout=15.0)
    for k in range(K):
        c.check(wait_progress(t, k, "packets"), f"path {k} carries traffic at start")

    r = t.cmd("/tandem/fabric/path_set,1,down")
    c.check(r.get("applied") == "down", f"path_set,1,down is accepted ({r})")
    time.sleep(0.3)
    before = paths(t)
    c.check(before[1]["up"] == 0, "path 1 reports down")
    c.check(wait_progress(t, 0, "packets") and wait_progress(t, 3, "packets"), "paths 0 and 3 go on carrying")
    after = paths(t)
    c.check(after[1]["packets"] == before[1]["packets"], "failed path 1 delivers nothing more")
    c.check(after[1]["drop_path_down"] > before[1]["drop_path_down"], "its packets count as path_down drops")

    r = t.cmd("/tandem/fabric/path_set,1,up")
    c.check(r.get("applied") == "up", "path_set,1,up is accepted")
    c.check(wait_progress(t, 1, "packets"), "healed path 1 carries traffic again")

    r = t.cmd("/tandem/fabric/path_set,2,loss=1")
    c.check(r.get("applied") == "loss=1", "path_set,2,loss=1 is accepted")
    time.sleep(0.3)
    before = paths(t)
    c.check(wait_progress(t, 2, "drop_random_loss"), "path 2 drops as random_loss")
    c.check(paths(t)[2]["packets"] == before[2]["packets"], "path 2 with loss=1 delivers nothing more")

    for bad in ["/tandem/fabric/path_set,9,down", "/tandem/fabric/path_set,1,sideways",
                "/tandem/fabric/path_set,1,delay_us=5", "/tandem/fabric/path_set"]:
        r = t.cmd(bad)
        c.check(isinstance(r, dict) and "error" in r, f"'{bad}' is refused with an error ({r})")
    ports = {int(k): v for k, v in t.cmd("/tandem/fabric/ports").items()}
    c.check(ports[0]["rx_packets"] > 0 and ports[1]["tx_packets"] > 0, "port counters are exported")

    rc = lab.stop(p, 10)
    log.close()
    out = open(f"{tmp}/fabric.log").read()
    print(out[-1500:])
    c.check(rc == 0, f"SIGINT stops tandem-fabric cleanly (exit {rc})")
    c.check("delivered" in out, "counters are printed at exit")
finally:
    lab.cleanup()
print(f"{len(c.failed)} check(s) failed")
sys.exit(1 if c.failed else 0)
