"""System test of asynchronous events on the drop-in libibverbs (rnic/verbs), between two
tandem-rnic workers on the lab fabric: tests/system/verbs_events_app.c raises each event on
device A and waits for it on A's pollable async_fd (ibv_get_async_event, acknowledged):

  * nothing raised: EAGAIN on the O_NONBLOCK async_fd;
  * IBV_EVENT_QP_FATAL (the worker moves a QP to ERR: a WR with an unknown lkey);
  * IBV_EVENT_CQ_ERR (a CQ of 4 overrun by 16 completions);
  * IBV_EVENT_SRQ_LIMIT_REACHED (srq_limit at creation is kept; armed with ibv_modify_srq,
    raised once the posted receives fall below it, disarmed after);
  * IBV_EVENT_QP_LAST_WQE_REACHED (a QP of the SRQ moved to ERR);
  * IBV_EVENT_PORT_ERR then IBV_EVENT_PORT_ACTIVE (the fabric is stopped, then started again:
    the worker's memif link goes down and up; ibv_query_port follows);
  * IBV_EVENT_DEVICE_FATAL (worker A is killed with SIGKILL), once.
Worker A's async_events counter (telemetry) counts what it wrote.

usage: verbs_events_test.py TANDEM_FABRIC TANDEM_RNIC TANDEM_RUN VERBS_EVENTS_APP"""
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import (Checks, Lab, Telemetry, lab_fabric_argv, lab_worker_argv,  # noqa: E402
                            run_checked, wait_fabric_started, write_lab_tables)

FABRIC, RNIC, RUN, APP = sys.argv[1:5]
TAG = f"verbsevents{os.getpid()}"
lab = Lab(tmp_prefix="tandem-verbsevents-")
D = lab.d
checks = Checks()
check, failed = checks.check, checks.failed
ENV = dict(os.environ, TANDEM_DEVICES=f"{D}/devices")
FAB_PRE = f"{TAG}-fab"


def start_fabric():
    fab = lab.start(lab_fabric_argv(FABRIC, FAB_PRE, D), "fabric", FAB_PRE)
    wait_fabric_started(lab, fab)
    return fab


def main():
    write_lab_tables(D)
    fab = start_fabric()
    workers, prefixes = {}, {}
    for n, sock in (("A", "h0.sock"), ("B", "h1.sock")):
        prefixes[n] = f"{TAG}-{n.lower()}"
        workers[n] = lab.start(lab_worker_argv(RNIC, n, prefixes[n], D, sock, ["--mtu", "1024"]), n, prefixes[n])
    t0 = time.time()
    while not all(os.path.exists(f"{D}/devices/tandem_{n}_v1.dev") for n in workers):
        if time.time() - t0 > 30 or any(w.poll() is not None for w in workers.values()):
            raise RuntimeError("workers did not register their verbs devices")
        time.sleep(0.1)
    tel = Telemetry(prefixes["A"], ready="/tandem/rnic/stats")

    app = subprocess.Popen([RUN, APP, "tandem_A_v1", "tandem_B_v1"], env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    lines = []
    written_before_kill = None

    def follow():
        nonlocal fab, written_before_kill
        for line in app.stdout:
            lines.append(line.rstrip())
            if line.startswith("ready port"):
                lab.stop(fab)            # the memif server goes: the workers' links go down
                time.sleep(1.0)
                fab = start_fabric()     # and come back up when they reconnect
            elif line.startswith("ready kill"):
                written_before_kill = tel.cmd("/tandem/rnic/stats").get("host_async_events")
                workers["A"].send_signal(signal.SIGKILL)
                workers["A"].wait()

    th = threading.Thread(target=follow)
    th.start()
    try:
        code = app.wait(timeout=150)
    except subprocess.TimeoutExpired:
        app.kill()
        code = None
    th.join(timeout=10)
    out = "\n".join(lines)
    for step in ("nonblocking", "qp_fatal", "cq_err", "srq_limit", "last_wqe", "port", "device_fatal"):
        check(f"ok {step}" in lines, f"event step {step}: " + next((l for l in lines if l.startswith("FAIL")), "done"))
    check(code == 0 and "events ok" in lines, f"verbs_events_app exit {code}")
    check(written_before_kill is not None and written_before_kill >= 6,
          f"worker A counted the events it wrote (host_async_events {written_before_kill})")
    if failed:
        print(f"--- app ---\n{out[-3000:]}")
        for n in ("A", "B"):
            print(f"--- {n} log ---\n{lab.text(n)[-2000:]}")
    lab.stop(fab)


run_checked("verbs_events", main, checks, lab)
