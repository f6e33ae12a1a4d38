"""Runs a stock verbs test program (perftest, ibverbs-utils) as a server/client pair through
scripts/tandem-run, and reads perftest's result rows. Shared by the verbs system tests."""
import subprocess
import time

from tandem_harness import free_port


def pair(run, bindir, env, prog, args, timeout=60):
    """Server on tandem_A_v1, client on tandem_B_v1; returns ((exit, output) of client, of server)."""
    port = ["-p", str(free_port())]
    srv = subprocess.Popen([run, f"{bindir}/{prog}", "-d", "tandem_A_v1"] + port + args, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    cli = subprocess.Popen([run, f"{bindir}/{prog}", "-d", "tandem_B_v1"] + port + args + ["127.0.0.1"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    for p in (cli, srv):
        try:
            o, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, _ = p.communicate()
            o += "\n(hung: killed)"
        out.append((p.returncode, o))
    return out


def result_row(out, size):
    """perftest's result line for `size` bytes: the numbers after it, or None."""
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] == str(size) and all(x.replace(".", "").isdigit() for x in f[1:4]):
            return [float(x) for x in f[1:]]
    return None
