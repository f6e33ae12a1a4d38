"""Self-test of tandem_harness's signal check: a process that dies by a signal the script did
not send (SIGSEGV here, as a crashing worker would) becomes a failed check at Lab.cleanup();
processes the script stopped itself (kill, SIGINT through stop(), a subprocess.run timeout) and
clean exits do not. Exit 0 when the check behaves."""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tandem_harness import Checks, Lab, stop  # noqa: E402

checks = Checks()
lab = Lab()
crash = lab.start(["sh", "-c", "kill -SEGV $$"], subprocess.DEVNULL)
killed = lab.start(["sleep", "30"], subprocess.DEVNULL)
stopped = lab.start(["sleep", "30"], subprocess.DEVNULL)
nice_bus = subprocess.run(["nice", "-n", "19", "sh", "-c", "kill -BUS $$"])
try:
    subprocess.run(["sleep", "30"], timeout=0.2)
except subprocess.TimeoutExpired:
    pass
subprocess.run(["true"])
killed.kill()
killed.wait()
stop(stopped)
crash.wait()
lab.cleanup()
got = checks.failed
ok = (len(got) == 2 and got[0] == f"sh (pid {crash.pid}) died by SIGSEGV, a signal the test did not send"
      and got[1].startswith("sh (pid ") and "died by SIGBUS" in got[1] and nice_bus.returncode == -signal.SIGBUS
      and stopped.returncode == -signal.SIGINT)
print("harness_selftest:", "ok" if ok else f"FAILED: {got}")
sys.exit(0 if ok else 1)
