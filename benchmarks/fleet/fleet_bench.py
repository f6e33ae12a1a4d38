"""Fleet mode, measured from outside with real processes: a 3-member etcd
cluster on loopback, N servers (tandem-dpu --etcd --server sK with its own
SQLite, and a tandem-rnic worker in DPU mode; all adaptive idle) on the lab
fabric, and one standalone agent + worker as the same-run baseline.

  single (fleet_probe, one process, no CLI start-up): a vNIC put into etcd
      for server k (round robin) -> the vNIC entry committed in k's RNIC (its
      BAR's committed entry count, read from the channel file every 20 us);
      baseline: the same vNIC add sent to the standalone agent's control
      socket (tandemctl's request) -> committed in its RNIC. Interleaved,
      p50/p99 over --rounds. Also, for scale, the same through the CLIs
      (`tandemctl fleet vnic add` with its validation reads, `tandemctl vnic
      add`), --cli-rounds each.
  burst: 10,000 mappings written with `tandemctl fleet mapping import`
      (100 per etcd transaction) -> every agent's level 1 holds all of them
      (applied and in SQLite; a mapping reaches an RNIC only when a flow
      misses on it, so no RNIC is involved yet); baseline: the same CSV by
      `tandemctl mapping import` into the standalone agent (all or nothing).
  migration: a vNIC with a verified flow to a peer on another server is
      moved (`fleet vnic move`) to a third server; the time until a verify
      pair (WRITE/SEND/READ, rnic_host_app) through it at its new place has
      passed, retried from the move on."""
import argparse
import json
import mmap
import os
import statistics
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib"))
from tandem_harness import Lab  # noqa: E402
from etcd_cluster import EtcdCluster, have_etcd  # noqa: E402

ap = argparse.ArgumentParser()
for a in ("--dpu", "--ctl", "--fabric", "--rnic", "--app", "--probe"):
    ap.add_argument(a, required=True)
ap.add_argument("--agents", type=int, default=4)
ap.add_argument("--rounds", type=int, default=200)
ap.add_argument("--cli-rounds", type=int, default=10)
ap.add_argument("--burst", type=int, default=10000)
ap.add_argument("--json", action="store_true")
args = ap.parse_args()
if not have_etcd():
    sys.exit("fleet bench: etcd/etcdctl not installed (scripts/setup.sh)")
N = args.agents
if not 3 <= N <= 16:
    sys.exit("fleet bench: --agents must be 3..16 (the migration needs three servers)")

TAG = f"flb{os.getpid()}"
lab = Lab(tmp_prefix="tandem-fleet-bench-")
D = lab.d
etcd = EtcdCluster(lab, TAG)
SERVERS = [f"s{i}" for i in range(N)]
RNICS = {s: f"h{i}" for i, s in enumerate(SERVERS)}


def start(argv, name, prefix=None):
    return lab.start(list(map(str, argv)), open(lab.path(f"{name}.log"), "a"), prefix)


def run(argv):
    r = subprocess.run(list(map(str, argv)) + ["--json"], capture_output=True, text=True)
    try:
        return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {"raw": r.stderr}
    except ValueError:
        return r.returncode, {"raw": r.stdout + r.stderr}


def fleet(*a):
    return run([args.ctl, "fleet", "--etcd", etcd.endpoints, *a])


def ctl(sock, *a):
    return run([args.ctl, "--socket", f"{D}/{sock}.sock", *a])


def must(r, what):
    if r[0] != 0:
        raise RuntimeError(f"{what}: {r[1]}")
    return r[1]


def wait(pred, timeout, what, poll=0.0005):
    t0 = time.time()
    while not pred():
        if time.time() - t0 > timeout:
            raise RuntimeError(f"timed out: {what}")
        time.sleep(poll)


class Bar:
    """The committed table in an RNIC's BAR (common/channel/layout.h), read from the channel file."""

    def __init__(self, path):
        f = open(path, "rb")
        self.m = mmap.mmap(f.fileno(), 8192, prot=mmap.PROT_READ)

    def entries(self):
        while True:
            s1 = struct.unpack_from("<Q", self.m, 4096 + 4 * 64)[0]
            n = struct.unpack_from("<Q", self.m, 4096 + 7 * 64)[0]
            if not s1 & 1 and struct.unpack_from("<Q", self.m, 4096 + 4 * 64)[0] == s1:
                return n

    def active(self):
        return struct.unpack_from("<Q", self.m, 4096)[0] == 3


def agent(name, fleet_server=None):
    pre = f"{TAG}-{name}"
    os.makedirs(f"{D}/{name}ch", exist_ok=True)
    extra = ["--etcd", etcd.endpoints, "--server", fleet_server] if fleet_server else []
    p = start([args.dpu, "--db", f"{D}/{name}.sqlite", "--control-socket", f"{D}/{name}.sock",
               "--channel-dir", f"{D}/{name}ch", "--idle", "adaptive", "--heartbeat-timeout-ms", "3000", *extra,
               "--", "--no-pci", "--no-huge", "-m", "64", f"--file-prefix={pre}", "-l", "0",
               "--log-level=lib.eal:error"], f"agent-{name}", pre)
    wait(lambda: ctl(name, "tenant", "list")[0] == 0 or p.poll() is not None, 20, f"agent {name}", 0.05)
    if p.poll() is not None:
        raise RuntimeError(f"agent {name} exited:\n" + lab.text(f"agent-{name}"))


def worker(rnic, chan_dir, port, ip):
    with open(f"{D}/{rnic}.yaml", "w") as f:
        f.write(f"underlay: {{ip: {ip}, mac: 02:00:00:00:00:{port + 1:02x}, gateway_mac: 02:00:00:00:00:fe}}\n")
    pre = f"{TAG}-{rnic}"
    start([args.rnic, "--name", rnic, "--host-socket", f"{D}/{rnic}.rnic", "--table", f"{D}/{rnic}.yaml",
           "--device-dir", f"{D}/devices", "--dpu-channel", f"{D}/{chan_dir}ch/tandem-{rnic}.chan",
           "--dpu-agent-timeout-ms", "3000", "--table-capacity", "8192", "--idle", "adaptive", "--mtu", "1024",
           "--", "--no-pci", f"--file-prefix={pre}", "-l", "1", "-m", "128", "--log-level=lib.eal:error",
           f"--vdev=net_memif0,role=client,socket={D}/p{port}.sock"], rnic, pre)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def verify_pair(tag, a_rnic, a_ip, b_rnic, b_ip, seed):
    """One WRITE/SEND/READ verify pair: a on a_rnic bound to a_ip <-> b on b_rnic bound to b_ip."""
    a = start([args.app, "verify", f"{D}/{a_rnic}.rnic", D, f"{tag}a", f"{tag}b", seed, b_ip, a_ip], f"{tag}a")
    b = start([args.app, "verify", f"{D}/{b_rnic}.rnic", D, f"{tag}b", f"{tag}a", seed + 1, a_ip, b_ip], f"{tag}b")
    ra, rb = a.wait(60), b.wait(60)
    return ra == 0 and rb == 0


def main():
    etcd.start()
    etcd.wait_healthy()
    ports = N + 1  # the last one: the baseline's worker
    routes = []
    for i in range(ports):
        routes += ["--route", f"10.0.0.{i + 1}={i}"]
    vdevs = [f"--vdev=net_memif{i},role=server,socket={D}/p{i}.sock" for i in range(ports)]
    start([args.fabric, *routes, "--paths", "4", "--idle", "adaptive", "--link-wait-ms", "0", "--", "--no-pci",
           f"--file-prefix={TAG}-fab", "-l", "0", "-m", "128", "--log-level=lib.eal:error", *vdevs], "fabric",
          f"{TAG}-fab")
    wait(lambda: "tandem-fabric:" in lab.text("fabric"), 20, "fabric", 0.05)

    must(fleet("tenant", "add", 100, "bench"), "tenant")
    for i, s in enumerate(SERVERS):
        must(fleet("rnic", "add", s, RNICS[s], "--underlay-ip", f"10.0.0.{i + 1}", "--mac", f"02:00:00:00:00:{i + 1:02x}",
                   "--path-base-port", 0xC000, "--path-count", 4), "rnic")
    # The migration's pair: vNIC 1 (peer) on s1, vNIC 2 (moves) on s0.
    must(fleet("vnic", "add", 1, "--vni", 100, "--server", "s1", "--rnic", "h1", "--ip", "192.168.50.1",
               "--mac", "02:00:00:00:50:01"), "vnic 1")
    must(fleet("vnic", "add", 2, "--vni", 100, "--server", "s0", "--rnic", "h0", "--ip", "192.168.50.2",
               "--mac", "02:00:00:00:50:02"), "vnic 2")
    for s in SERVERS:
        agent(s, s)
    agent("base")
    bip = f"10.0.0.{N + 1}"
    must(ctl("base", "rnic", "add", "hb", "--underlay-ip", bip, "--mac", f"02:00:00:00:00:{N + 1:02x}",
             "--path-base-port", 0xC000, "--path-count", 4), "base rnic")
    must(ctl("base", "tenant", "add", 100, "bench"), "base tenant")
    for i, s in enumerate(SERVERS):
        worker(RNICS[s], s, i, f"10.0.0.{i + 1}")
    worker("hb", "base", N, bip)
    bars = {s: Bar(f"{D}/{s}ch/tandem-{RNICS[s]}.chan") for s in SERVERS}
    bars["base"] = Bar(f"{D}/basech/tandem-hb.chan")
    wait(lambda: all(b.active() for b in bars.values()), 60, "workers ACTIVE", 0.05)
    wait(lambda: bars["s0"].entries() >= 1 and bars["s1"].entries() >= 1, 20, "vNICs 1, 2 in their RNICs", 0.05)

    # Single changes, timed inside one process, interleaved with the baseline.
    chan = lambda s, r: f"{D}/{s}ch/tandem-{r}.chan"
    r = subprocess.run([args.probe, "--etcd", etcd.endpoints, "--rounds", str(args.rounds),
                        *sum((["--fleet", f"{s}:{RNICS[s]}:{chan(s, RNICS[s])}"] for s in SERVERS), []),
                        "--socket", f"{D}/base.sock:hb:{chan('base', 'hb')}"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("fleet_probe: " + r.stderr)
    probe = json.loads(r.stdout)
    ours, base = probe["etcd_commit_ms"], probe["socket_commit_ms"]

    # The same through the CLIs, for scale.
    cli_ours, cli_base = [], []
    for k in range(args.cli_rounds):
        s = SERVERS[k % N]
        ip, mac = f"192.168.{60 + k // 250}.{k % 250 + 1}", f"02:00:00:{60 + k // 250:02x}:{k % 250 + 1:02x}:01"
        b = bars[s]
        n0 = b.entries()
        t0 = time.perf_counter()
        must(fleet("vnic", "add", 1000 + k, "--vni", 100, "--server", s, "--rnic", RNICS[s], "--ip", ip, "--mac", mac),
             "fleet vnic add")
        wait(lambda: b.entries() > n0, 20, f"vNIC {1000 + k} committed on {RNICS[s]}")
        cli_ours.append((time.perf_counter() - t0) * 1e3)
        b = bars["base"]
        n0 = b.entries()
        t0 = time.perf_counter()
        must(ctl("base", "vnic", "add", 1000 + k, "--vni", 100, "--rnic", "hb", "--ip", ip, "--mac", mac), "vnic add")
        wait(lambda: b.entries() > n0, 20, f"vNIC {1000 + k} committed on hb")
        cli_base.append((time.perf_counter() - t0) * 1e3)

    # A burst of mappings.
    csv = f"{D}/burst.csv"
    with open(csv, "w") as f:
        for i in range(args.burst):
            f.write(f"100,172.{20 + i // 62500}.{i // 250 % 250}.{i % 250 + 1},"
                    f"10.0.0.99,02:00:00:00:00:63,remote{i % 8}\n")
    with open(csv) as f:
        rows = len({tuple(l.split(",")[:2]) for l in f})
    if rows != args.burst:  # the address form above must give distinct keys
        raise RuntimeError(f"burst CSV has {rows} distinct keys, not {args.burst}")
    before = {s: must(ctl(s, "mapping", "list", "--vni", 100, "--limit", 1), "list")["total"] for s in SERVERS}
    for s in SERVERS + ["base"]:  # a new window for the longest agent-loop gap
        must(ctl(s, "control", "stats", "--reset"), "control stats")
    t0 = time.perf_counter()
    must(fleet("mapping", "import", csv, "--per-txn", 100), "fleet mapping import")
    write_s = time.perf_counter() - t0
    wait(lambda: all(must(ctl(s, "mapping", "list", "--vni", 100, "--limit", 1), "list")["total"] ==
                     before[s] + args.burst for s in SERVERS), 120, "burst applied everywhere", 0.01)
    burst_s = time.perf_counter() - t0
    gap_ms = max(must(ctl(s, "control", "stats"), "stats")["loop_gap_max_us"] for s in SERVERS) / 1e3
    time.sleep(0.3)  # the agents' status (written every 100 ms when it changed)
    step_ms = step_cpu_ms = 0.0
    for s in SERVERS:
        rc, out = etcd.ctl("get", f"/tandem/v1/status/{s}", "--print-value-only")
        st = json.loads(out) if rc == 0 and out.strip() else {}
        step_ms = max(step_ms, st.get("longest_step_ms", 0))
        step_cpu_ms = max(step_cpu_ms, st.get("longest_step_cpu_ms", 0))
    t0 = time.perf_counter()
    must(ctl("base", "mapping", "import", csv), "mapping import")
    base_burst_s = time.perf_counter() - t0
    base_gap_ms = must(ctl("base", "control", "stats"), "stats")["loop_gap_max_us"] / 1e3

    # Migration: a verified flow first, then the move.
    if not verify_pair("warm", "h0", "192.168.50.2", "h1", "192.168.50.1", 10):
        raise RuntimeError("the pair before the move did not verify")
    n0_new, n0_old = bars["s2"].entries(), bars["s0"].entries()
    t0 = time.perf_counter()
    must(fleet("vnic", "move", 2, "--server", "s2", "--rnic", "h2"), "vnic move")
    wait(lambda: bars["s2"].entries() > n0_new and bars["s0"].entries() < n0_old, 20, "moved in the RNICs")
    placed_s = time.perf_counter() - t0
    tries = 0
    while True:
        tries += 1
        if verify_pair(f"mig{tries}", "h2", "192.168.50.2", "h1", "192.168.50.1", 20 + 2 * tries):
            break
        if tries >= 5:
            raise RuntimeError("the moved vNIC never verified")
    migration_s = time.perf_counter() - t0

    res = {"bench": "fleet", "unit": "ms", "ours": round(pct(ours, 99), 2), "baseline": round(pct(base, 99), 2),
           "baseline_name": "the same vNIC add by tandemctl to one standalone agent, p99",
           "ratio": round(pct(ours, 99) / pct(base, 99), 3), "agents": N,
           "single_p50_ms": round(statistics.median(ours), 2), "single_p99_ms": round(pct(ours, 99), 2),
           "baseline_single_p50_ms": round(statistics.median(base), 2),
           "baseline_single_p99_ms": round(pct(base, 99), 2), "rounds": args.rounds,
           "single_etcd_ack_p50_ms": round(statistics.median(probe["etcd_ack_ms"]), 2),
           "baseline_single_ack_p50_ms": round(statistics.median(probe["socket_ack_ms"]), 2),
           "cli_single_p50_ms": round(statistics.median(cli_ours), 2),
           "cli_baseline_single_p50_ms": round(statistics.median(cli_base), 2), "cli_rounds": args.cli_rounds,
           "burst_10k_s": round(burst_s, 3), "burst_write_s": round(write_s, 3),
           "baseline_burst_10k_s": round(base_burst_s, 3), "burst_mappings": args.burst,
           "burst_loop_gap_max_ms": round(gap_ms, 2), "fleet_step_max_ms": round(step_ms, 2),
           "fleet_step_cpu_max_ms": round(step_cpu_ms, 2), "baseline_burst_loop_gap_max_ms": round(base_gap_ms, 2),
           "migration_s": round(migration_s, 3), "migration_placed_s": round(placed_s, 4), "migration_tries": tries}
    if args.json:
        print(json.dumps(res))
    else:
        print(f"{N} agents fed from a 3-member etcd; baseline: one standalone agent (control socket); "
              f"{args.rounds} rounds")
        print(f"{'what':64s} {'ours':>9s} {'baseline':>9s}")
        print(f"{'single vNIC add written -> committed on its RNIC, p50 ms':64s} {res['single_p50_ms']:9.2f} "
              f"{res['baseline_single_p50_ms']:9.2f}")
        print(f"{'single vNIC add written -> committed on its RNIC, p99 ms':64s} {res['single_p99_ms']:9.2f} "
              f"{res['baseline_single_p99_ms']:9.2f}")
        print(f"{'  of which until the write was acknowledged (etcd / socket), p50 ms':64s} "
              f"{res['single_etcd_ack_p50_ms']:9.2f} {res['baseline_single_ack_p50_ms']:9.2f}")
        print(f"{'the same through tandemctl fleet / tandemctl (process start), p50 ms':64s} "
              f"{res['cli_single_p50_ms']:9.2f} {res['cli_baseline_single_p50_ms']:9.2f}")
        print(f"{'burst of %d mappings -> in every agent (ours) / one agent (baseline), s' % args.burst:64s} "
              f"{burst_s:9.3f} {base_burst_s:9.3f}")
        print(f"{'  of which writing them to etcd, s':64s} {write_s:9.3f}")
        print(f"{'  longest agent-loop gap meanwhile (RNICs wait that long), ms':64s} {gap_ms:9.2f} {base_gap_ms:9.2f}")
        print(f"{'  longest fleet apply step in any agent (since start), ms':64s} {step_ms:9.2f}")
        print(f"{'    its CPU time (the rest: the SQLite fsync, or waiting for a core), ms':64s} {step_cpu_ms:9.2f}")
        print(f"{'vNIC move -> placed on the new RNIC, withdrawn from the old, s':64s} {placed_s:9.4f}")
        print(f"{'vNIC move -> a verify pair through it passed, s (tries %d)' % tries:64s} {migration_s:9.3f}")


try:
    main()
except Exception as e:
    for n in ("agent-s0", "agent-s1", "h0", "h2", "fabric"):
        sys.stderr.write(f"--- {n} ---\n{lab.text(n)[-2000:]}\n")
    sys.stderr.write(f"fleet bench failed: {e}\n")
    lab.cleanup()
    etcd.cleanup()
    sys.exit(1)
lab.cleanup()
etcd.cleanup()
