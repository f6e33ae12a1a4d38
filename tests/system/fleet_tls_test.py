"""Fleet mode against an etcd that requires TLS with client certificates and
password authentication (a one-member cluster on loopback; a CA, a server and
a client certificate made here with openssl):

  * `tandemctl fleet` with --etcd-cacert/--etcd-cert/--etcd-key and
    --etcd-user (password from $TANDEM_ETCD_PASSWORD) writes the desired
    state; without the client certificate, or with a wrong password, it is
    refused and nothing is written;
  * a tandem-dpu started with the same options applies it (its level 1 holds
    the tenant, RNIC and vNIC) and its status appears in etcd.

usage: fleet_tls_test.py TANDEM_DPU TANDEMCTL
Skips (exit 77) if etcd/etcdctl or openssl are not installed."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tandem_harness import Checks, Lab, Tandemctl, free_port, poll_until  # noqa: E402
from etcd_cluster import ETCD, ETCDCTL, have_etcd  # noqa: E402

DPU, CTL = sys.argv[1:3]
OPENSSL = shutil.which("openssl")
if not have_etcd() or not OPENSSL:
    print("SKIP: etcd/etcdctl or openssl not installed")
    sys.exit(77)

TAG = f"fltls{os.getpid()}"
lab = Lab(tmp_prefix="tandem-fleet-tls-")
D = lab.d
DATA = tempfile.mkdtemp(prefix="tandem-etcd-tls-", dir="/dev/shm")
checks = Checks()
check, failed = checks.check, checks.failed
CPORT, PPORT = free_port(), free_port()
EP = f"127.0.0.1:{CPORT}"
PW = "s3cret-tandem"


def sh(*argv):
    r = subprocess.run(list(argv), capture_output=True, text=True, cwd=D)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {r.stderr}")


def certs():
    """A CA; a server certificate for 127.0.0.1; a client certificate."""
    sh(OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=tandem-test-ca",
       "-keyout", "ca-key.pem", "-out", "ca.pem")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth"),
                      ("client", "extendedKeyUsage=clientAuth")):
        with open(f"{D}/{name}.ext", "w") as f:
            f.write(ext + "\n")
        sh(OPENSSL, "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=tandem-{name}", "-keyout",
           f"{name}-key.pem", "-out", f"{name}.csr")
        sh(OPENSSL, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
           "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.pem")


def etcdctl(*args, user=True):
    cmd = [ETCDCTL, f"--endpoints=https://{EP}", f"--cacert={D}/ca.pem", f"--cert={D}/client.pem",
           f"--key={D}/client-key.pem", "--command-timeout=3s"] + ([f"--user=root:{PW}"] if user else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, ETCDCTL_API="3"))
    return r.returncode, r.stdout + r.stderr


TLS = ["--etcd-cacert", f"{D}/ca.pem", "--etcd-cert", f"{D}/client.pem", "--etcd-key", f"{D}/client-key.pem"]


def fleet(*args, tls=TLS, password=PW):
    env = dict(os.environ, TANDEM_ETCD_PASSWORD=password)
    r = subprocess.run([CTL, "fleet", "--etcd", EP, *tls, "--etcd-user", "root", *map(str, args), "--json"],
                       capture_output=True, text=True, env=env)
    try:
        return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {"raw": r.stderr}
    except ValueError:
        return r.returncode, {"raw": r.stdout + r.stderr}


def main():
    certs()
    lab.start([ETCD, "--name", "e0", "--data-dir", f"{DATA}/e0", "--listen-client-urls", f"https://{EP}",
               "--advertise-client-urls", f"https://{EP}", "--listen-peer-urls", f"http://127.0.0.1:{PPORT}",
               "--initial-advertise-peer-urls", f"http://127.0.0.1:{PPORT}",
               "--initial-cluster", f"e0=http://127.0.0.1:{PPORT}", "--initial-cluster-token", TAG,
               "--cert-file", f"{D}/server.pem", "--key-file", f"{D}/server-key.pem",
               "--trusted-ca-file", f"{D}/ca.pem", "--client-cert-auth", "--log-level", "warn", "--logger", "zap"],
              open(lab.path("etcd.log"), "w"))
    if not poll_until(lambda: etcdctl("endpoint", "health", user=False)[0] == 0, 30, "etcd"):
        raise RuntimeError("etcd (TLS) did not become healthy:\n" + lab.text("etcd"))
    rc1, out1 = etcdctl("user", "add", "root", f"--new-user-password={PW}", user=False)
    rc2, out2 = etcdctl("auth", "enable", user=False)
    check(rc1 == 0 and rc2 == 0, f"etcd on TLS with client certificates, authentication enabled ({out2.strip()})")

    rc, j = fleet("tenant", "add", 100, "red")
    check(rc == 0, f"tandemctl fleet with CA, client certificate and user/password writes ({j.get('error', 'ok')})")
    rc_nocert, j_nocert = fleet("tenant", "add", 200, "blue", tls=["--etcd-cacert", f"{D}/ca.pem"])
    rc_badpw, j_badpw = fleet("tenant", "add", 300, "green", password="wrong")
    rc_show, j_show = fleet("show")
    vnis = [t["vni"] for t in j_show.get("tenants", [])]
    check(rc_nocert == 2 and rc_badpw == 2 and "authentication failed" in j_badpw.get("error", "") and vnis == [100],
          f"without the client certificate ({j_nocert.get('error', '?')[:90]}) or with a wrong password "
          f"({j_badpw.get('error', '?')[:90]}) it is refused and nothing is written (tenants {vnis})")
    rcs = [fleet(*a)[0] for a in (
        ("rnic", "add", "s1", "A", "--underlay-ip", "10.0.0.1", "--mac", "02:00:00:00:00:01"),
        ("vnic", "add", 1, "--vni", 100, "--server", "s1", "--rnic", "A", "--ip", "192.168.7.1",
         "--mac", "02:00:00:00:01:01"))]
    os.makedirs(f"{D}/ch")
    pre = f"{TAG}-dpu"
    lab.start([DPU, "--db", f"{D}/dpu.sqlite", "--control-socket", f"{D}/ctl.sock", "--channel-dir", f"{D}/ch",
               "--idle", "adaptive", "--etcd", f"https://{EP}", "--server", "s1", *TLS, "--etcd-user", "root", "--",
               "--no-pci", "--no-huge", "-m", "64", f"--file-prefix={pre}", "-l", "0", "--log-level=lib.eal:error"],
              open(lab.path("agent.log"), "w"), pre)
    ctl = Tandemctl(CTL, f"{D}/ctl.sock")
    # The agent reads TANDEM_ETCD_PASSWORD from its environment: the harness passes ours.
    l1 = lambda: ctl("table", "dump", "--level", 1)[1]
    got = poll_until(lambda: [v["id"] for v in l1().get("vnics", [])] == [1], 20, "agent applied")

    def status_now():
        rc, st = etcdctl("get", "/tandem/v1/status/s1", "--print-value-only")
        return json.loads(st) if rc == 0 and st.strip().startswith("{") else {}
    # The status is published by its own thread, a moment after the change is applied.
    poll_until(lambda: status_now().get("applied_revision", 0) > 0, 20, "agent status")
    status = status_now()
    check(rcs == [0, 0] and got and status.get("applied_revision", 0) > 0,
          f"tandem-dpu with the same TLS and authentication options applies the desired state (level 1 "
          f"{[t['vni'] for t in l1().get('tenants', [])]}, vNICs {[v['id'] for v in l1().get('vnics', [])]}) and "
          f"writes its status (applied revision {status.get('applied_revision')})")
    if failed:
        print("--- agent log ---\n" + lab.text("agent")[-3000:])


os.environ["TANDEM_ETCD_PASSWORD"] = PW  # inherited by the agent
try:
    main()
except Exception as e:
    check(False, f"set-up: {e}")
    for n in ("etcd", "agent"):
        print(f"--- {n} log ---\n{lab.text(n)[-3000:]}")
finally:
    lab.cleanup()
    shutil.rmtree(DATA, ignore_errors=True)
print(f"fleet_tls: {len(failed)} check(s) failed" if failed else "fleet_tls: all checks passed")
sys.exit(1 if failed else 0)
