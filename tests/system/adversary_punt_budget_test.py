"""System test of the worker's per-vNIC punt budget (tandem-rnic --punt-budget, issue 16
"fair shares" of the slow path), in DPU mode: tandem-dpu, tandemctl, the lab fabric and two
tandem-rnic workers. Tenant red (VNI 100) has vNIC 1 on worker A and 2 on B; tenant blue
(VNI 200) vNIC 3 on A and 4 and 5 on B.

  * red's verbs program (tests/system/exhaustion_app.c storm) keeps 256 QPs in RTR toward
    256 addresses no route leads to, made again every 4 s: every one a table miss worker A
    punts to the agent;
  * worker A holds red's vNIC to its budget (default 1000/s, bursts of 128): refusals counted
    for vNIC 1 (/tandem/rnic/punts, dpu_punts_over_budget), none for blue's vNIC 3;
  * meanwhile blue's new flow on worker A (a QP bound to vNIC 3 toward vNIC 5, route from the
    agent via its own punt) is set up and verifies WRITE/SEND/READ with worker B; its set-up time with
    and without the storm is printed (not judged: timing on this box is noisy);
  * worker A stays ACTIVE with the agent and stops cleanly, --stats-json has the budget.

usage: adversary_punt_budget_test.py TANDEM_DPU TANDEMCTL TANDEM_FABRIC TANDEM_RNIC RNIC_HOST_APP EXHAUSTION_APP"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, Tandemctl, poll_until, telemetry_query  # noqa: E402

DPU, CTL, FABRIC, RNIC, APP, EXHAUST = sys.argv[1:7]
A_FLAGS = sys.argv[7:]  # e.g. --punt-budget 0: the same storm without a budget (then nothing is refused)
BUDGET = A_FLAGS[A_FLAGS.index("--punt-budget") + 1] if "--punt-budget" in A_FLAGS else "1000:128"
TAG = f"puntb{os.getpid()}"
lab = Lab(tmp_prefix="tandem-puntbudget-")
D = lab.d
CH = f"{D}/ch"
os.makedirs(CH)
ctl = Tandemctl(CTL, f"{D}/ctl.sock")
checks = Checks()
check, failed = checks.check, checks.failed
ENV = dict(os.environ, TANDEM_DEVICES=f"{D}/devices")
STORM_QPS = 256
PREFIX = {}


def worker(n, sock, flags=()):
    pre = f"{TAG}-{n}"
    PREFIX[n] = pre
    with open(f"{D}/{n}.yaml", "w") as f:
        i = 1 if n == "A" else 2
        f.write(f"underlay: {{ip: 10.0.0.{i}, mac: 02:00:00:00:00:0{i}, gateway_mac: 02:00:00:00:00:fe}}\n")
    return lab.start([RNIC, "--name", n, "--host-socket", f"{D}/{n}.rnic", "--table", f"{D}/{n}.yaml",
                      "--stats-json", f"{D}/{n}.json", "--device-dir", f"{D}/devices",
                      "--dpu-channel", f"{CH}/tandem-{n}.chan", "--dpu-agent-timeout-ms", "3000",
                      "--table-capacity", "8192", "--idle", "adaptive"] + list(flags) + ["--", "--no-pci",
                      f"--file-prefix={pre}",
                      "-l", "1", "-m", "128", "--log-level=lib.eal:error",
                      f"--vdev=net_memif0,role=client,socket={D}/{sock}"], n, pre)


def blue_pair(tag, seed, peer):
    """Blue's verify pair: on A bound to vNIC 3 (192.168.8.1), on B to `peer` (a new one each time, so A
    has no route to it yet and punts); (exit A, exit B, seconds)."""
    t0 = time.time()
    a = lab.start([APP, "verify", f"{D}/A.rnic", D, f"{tag}a", f"{tag}b", str(seed), peer, "192.168.8.1"],
                  f"{tag}a")
    b = lab.start([APP, "verify", f"{D}/B.rnic", D, f"{tag}b", f"{tag}a", str(seed + 1), "192.168.8.1", peer],
                  f"{tag}b")
    ra, rb = a.wait(90), b.wait(90)
    if ra or rb:
        print(lab.text(f"{tag}a")[-1500:], lab.text(f"{tag}b")[-1500:])
    return ra, rb, time.time() - t0


def punts(n="A"):
    return telemetry_query(PREFIX[n], "/tandem/rnic/punts")


def main():
    pre = f"{TAG}-dpu"
    ag = lab.start([DPU, "--db", f"{D}/dpu.sqlite", "--control-socket", f"{D}/ctl.sock", "--channel-dir", CH,
                    "--idle", "adaptive", "--heartbeat-timeout-ms", "3000", "--", "--no-pci", "--no-huge", "-m", "64",
                    f"--file-prefix={pre}", "-l", "0", "--log-level=lib.eal:error"], "agent", pre)
    if not poll_until(lambda: ctl("tenant", "list")[0] == 0 or ag.poll() is not None, 20, "agent"):
        raise RuntimeError("agent did not start:\n" + lab.text("agent"))
    steps = [("rnic", "add", "A", "--underlay-ip", "10.0.0.1", "--mac", "02:00:00:00:00:01",
              "--path-base-port", 0xC000, "--path-count", 4),
             ("rnic", "add", "B", "--underlay-ip", "10.0.0.2", "--mac", "02:00:00:00:00:02",
              "--path-base-port", 0xC000, "--path-count", 4),
             ("tenant", "add", 100, "red"), ("tenant", "add", 200, "blue"),
             ("vnic", "add", 1, "--vni", 100, "--rnic", "A", "--ip", "192.168.7.1", "--mac", "02:00:00:00:01:01"),
             ("vnic", "add", 2, "--vni", 100, "--rnic", "B", "--ip", "192.168.7.2", "--mac", "02:00:00:00:01:02"),
             ("vnic", "add", 3, "--vni", 200, "--rnic", "A", "--ip", "192.168.8.1", "--mac", "02:00:00:00:02:01"),
             ("vnic", "add", 4, "--vni", 200, "--rnic", "B", "--ip", "192.168.8.2", "--mac", "02:00:00:00:02:02"),
             ("vnic", "add", 5, "--vni", 200, "--rnic", "B", "--ip", "192.168.8.3", "--mac", "02:00:00:00:02:03")]
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
    wa, wb = worker("A", "h0.sock", A_FLAGS), worker("B", "h1.sock")
    active = lambda: all(ctl.channel(n).get("state") == "ACTIVE" for n in "AB")
    devs = ["tandem_A_v1.dev", "tandem_A_v3.dev", "tandem_B_v2.dev", "tandem_B_v4.dev", "tandem_B_v5.dev"]
    have = lambda: all(os.path.exists(f"{D}/devices/{d}") for d in devs)
    if not (poll_until(active, 30, "active") and poll_until(have, 20, "devices")):
        raise RuntimeError("workers did not reach ACTIVE with their vNICs:\n" + lab.text("A")[-2000:])

    # Baseline: blue's new flow with no storm.
    ra0, rb0, base_s = blue_pair("calm", 2, "192.168.8.2")
    check(ra0 == 0 and rb0 == 0, f"blue's flow without a storm verifies (exit {ra0}, {rb0}, {base_s:.2f} s)")
    p0 = punts()
    rate, _, burst = BUDGET.partition(":")
    check(p0.get("rate_per_s") == int(rate) and p0.get("burst") == int(burst or 128) and
          p0.get("vnic3", {}).get("admitted", 0) >= 1,
          f"worker A's budget is {BUDGET} (default 1000:128); blue's punt was admitted: {p0}")

    # The storm: red keeps STORM_QPS QPs asking for routes that do not exist.
    storm = lab.start([EXHAUST, "storm", "tandem_A_v1", D, "storm", str(STORM_QPS)], "storm", env=ENV)
    ok = poll_until(lambda: os.path.exists(f"{D}/storm.ready") or storm.poll() is not None, 60, "storm")
    check(ok and storm.poll() is None, f"red's storm is running: {STORM_QPS} QPs in RTR toward unrouted addresses "
                                       f"({lab.text('storm')[-300:].strip()})")
    time.sleep(1)
    ra, rb, storm_s = blue_pair("storm", 4, "192.168.8.3")
    p1 = punts()
    red, blue = p1.get("vnic1", {}), p1.get("vnic3", {})
    check(ra == 0 and rb == 0, f"during red's storm, blue's new flow on the same worker is set up and verifies "
                               f"WRITE/SEND/READ (exit {ra}, {rb}; {storm_s:.2f} s, {base_s:.2f} s without the storm)")
    check((red.get("refused", 0) > 0 or rate == "0") and blue.get("refused", -1) == 0 and
          blue.get("admitted", 0) > p0.get("vnic3", {}).get("admitted", 0),
          f"worker A held red's vNIC 1 to its budget (admitted {red.get('admitted')}, refused {red.get('refused')}) "
          f"and refused none of blue's vNIC 3 (admitted {blue.get('admitted')}, refused {blue.get('refused')})")
    stats = telemetry_query(PREFIX["A"], "/tandem/rnic/stats")
    check(stats.get("dpu_punts_over_budget", 0) >= red.get("refused", 1),
          f"/tandem/rnic/stats dpu_punts_over_budget {stats.get('dpu_punts_over_budget')}")
    check(wa.poll() is None and ctl.channel("A").get("state") == "ACTIVE",
          f"worker A alive and ACTIVE with the agent through the storm ({ctl.channel('A').get('state')})")

    open(f"{D}/storm.stop", "w").close()
    try:
        code = storm.wait(30)
    except Exception:
        code = None
    check(code == 0, f"red's storm program stops cleanly (exit {code}): {lab.text('storm')[-120:].strip()}")
    for n, w in (("A", wa), ("B", wb)):
        w.send_signal(signal.SIGINT)
        rc = w.wait(30)
        check(rc == 0, f"worker {n} stops cleanly on SIGINT (exit {rc})")
    try:
        with open(f"{D}/A.json") as f:
            pb = json.load(f).get("punt_budget", {})
    except (OSError, ValueError):
        pb = {}
    check(pb.get("vnics", {}).get("vnic1", {}).get("refused", 0) >= red.get("refused", 0) and
          pb.get("vnics", {}).get("vnic3", {}).get("refused", -1) == 0,
          f"--stats-json punt_budget: {pb}")
    lab.stop(fab)
    lab.stop(ag)
    print(f"\nPunt storm (worker A, DPU mode, --punt-budget {BUDGET}; red = vNIC 1, blue = vNIC 3):")
    print("| tenant | punts admitted | punts refused | new flow set up + verified |")
    print("|---|---|---|---|")
    print(f"| red (storm: {STORM_QPS} unrouted QPs, remade every 4 s) | {red.get('admitted')} | {red.get('refused')} "
          f"(misses turned away, the same key again on later loop iterations included) | - |")
    print(f"| blue | {blue.get('admitted')} | {blue.get('refused')} | "
          f"{'yes' if ra == 0 and rb == 0 else 'NO'}: {storm_s:.2f} s (without the storm {base_s:.2f} s) |")
    if failed:
        for n in ("A", "agent"):
            print(f"--- {n} log ---\n{lab.text(n)[-3000:]}")


if __name__ == "__main__":
    from tandem_harness import run_checked  # noqa: E402
    run_checked("adversary_punt_budget", main, checks, lab)
