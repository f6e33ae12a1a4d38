"""System test of scripts/tandem-exporter with a real Prometheus (Debian's package): the lab
fabric and two tandem-rnic workers carry a verified write_bw; the exporter serves every
Tandem process's telemetry as Prometheus text; a Prometheus started here on loopback (own
config, own storage directory) scrapes it every second, and its query API must return the
workers' counters with their labels:

  * `tandem_rnic_rx_packets` for both workers (labels process, rnic), > 0, and the
    worker's own telemetry agrees at the time of the scrape (within the traffic since);
  * `tandem_fabric_path_packets` for the fabric's 4 paths (label path);
  * the exporter's text is well formed (every sample line NAME{labels} VALUE, a TYPE line
    per name) and a non-Tandem path gets 404.

usage: metrics_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_PERF EXPORTER
Skips (exit 77) if /usr/bin/prometheus is not installed (scripts/setup.sh installs it)."""
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, free_port, lab_fabric_argv, lab_perf_pair, lab_worker_argv,  # noqa: E402
                            run_checked, telemetry_query, wait_fabric_started, wait_for, write_lab_tables)

FABRIC, RNIC, PERF, EXPORTER = sys.argv[1:5]
PROMETHEUS = "/usr/bin/prometheus"
if not os.access(PROMETHEUS, os.X_OK):
    print("metrics: prometheus not installed (scripts/setup.sh installs it): skipped")
    sys.exit(77)
TAG = f"metrics{os.getpid()}"
lab = Lab(tmp_prefix="tandem-metrics-")
D = lab.d
checks = Checks()
check = checks.check


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def promql(port, q):
    """Prometheus instant query: [(labels, value)]."""
    try:
        j = json.loads(get(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})))
    except (OSError, ValueError):
        return []
    return [(r["metric"], float(r["value"][1])) for r in j.get("data", {}).get("result", [])]


def main():
    write_lab_tables(D)
    pre = {"fab": f"{TAG}-fab", "A": f"{TAG}-a", "B": f"{TAG}-b"}
    fab = lab.start(lab_fabric_argv(FABRIC, pre["fab"], D), "fabric", pre["fab"])
    wait_fabric_started(lab, fab)
    workers = [lab.start(lab_worker_argv(RNIC, n, pre[n], D, sock, ["--timeout-us", "20000"]), n, pre[n])
               for n, sock in (("A", "h0.sock"), ("B", "h1.sock"))]
    wait_for(lambda: os.path.exists(f"{D}/A.rnic") and os.path.exists(f"{D}/B.rnic"), "worker host sockets")
    cc, _, sc, _ = lab_perf_pair(lab, PERF, D, "bw", "write_bw", ["-s", "65536", "-n", "300", "--verify"])
    check(cc == 0 and sc == 0, f"write_bw --verify through the lab (exit {cc}, {sc})")

    eport, pport = free_port(), free_port()
    prefixes = [a for p in pre.values() for a in ("--prefix", p)]
    exp = lab.start([EXPORTER, "--listen", f"127.0.0.1:{eport}"] + prefixes, "exporter")
    wait_for(lambda: "serving" in lab.text("exporter") or exp.poll() is not None, "the exporter did not start")
    text = get(f"http://127.0.0.1:{eport}/metrics")
    samples = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    good = all(re.fullmatch(r'[a-zA-Z_][a-zA-Z0-9_]*\{[^{}]*\} -?[0-9.e+]+', ln) for ln in samples)
    names = {ln.split("{")[0] for ln in samples}
    typed = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")}
    check(good and names and names <= typed, f"the exporter's text is well formed: {len(samples)} samples, "
          f"{len(names)} names, each with a TYPE line")
    try:
        get(f"http://127.0.0.1:{eport}/other")
        check(False, "a path other than /metrics gets 404")
    except urllib.error.HTTPError as e:
        check(e.code == 404, f"a path other than /metrics gets 404 ({e.code})")

    with open(f"{D}/prometheus.yml", "w") as f:
        f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                "scrape_configs:\n"
                f"  - job_name: tandem\n    static_configs: [{{targets: ['127.0.0.1:{eport}']}}]\n")
    prom = lab.start([PROMETHEUS, f"--config.file={D}/prometheus.yml", f"--storage.tsdb.path={D}/tsdb",
                      f"--web.listen-address=127.0.0.1:{pport}"], "prometheus")
    rx = []
    deadline = time.time() + 60
    while time.time() < deadline and prom.poll() is None:
        rx = promql(pport, "tandem_rnic_rx_packets")
        if len(rx) >= 2:
            break
        time.sleep(0.5)
    by = {m.get("rnic"): (m.get("process"), v) for m, v in rx}
    check(set(by) == {"A", "B"} and all(v > 0 for _, v in by.values()) and
          {p for p, _ in by.values()} == {pre["A"], pre["B"]},
          f"Prometheus scraped the exporter: tandem_rnic_rx_packets per worker {by}")
    now = {n: int(telemetry_query(pre[n], "/tandem/rnic/stats").get("rx_packets", -1)) for n in "AB"}
    check(all(n in by and 0 < by[n][1] <= now[n] for n in "AB"),
          f"what Prometheus has is what the workers' telemetry says (scraped {by}, now {now})")
    paths = promql(pport, "tandem_fabric_path_packets")
    check(sorted(m.get("path") for m, _ in paths) == ["0", "1", "2", "3"] and sum(v for _, v in paths) > 0,
          f"the fabric's 4 paths, labelled path: {sorted((m.get('path'), v) for m, v in paths)}")
    up = promql(pport, "up")
    check(any(v == 1 for _, v in up), f"Prometheus's own view of the target: up {up}")
    for p in [prom, exp]:
        lab.stop(p)
    for w in workers:
        lab.stop(w)
    lab.stop(fab)


run_checked("metrics", main, checks, lab, logs=("fabric", "A", "B", "exporter", "prometheus"))
