# SPDX-License-Identifier: MIT
"""Scale-out with Debian's haproxy (issue 14), running the shipped
contrib/haproxy/haproxy.cfg: its frontend, leastconn backend and HELLO+PING
health check over TLS with haproxy's own client certificate, in front of two
daemons on loopback TLS ports.  Only the addresses, certificate paths and
the check interval are changed (and a stats socket added to read the
servers' state).  With pgpdecd-client's retry on:

- kill -9 of one daemon in the middle of a bench: no request fails, every
  plaintext is identical to what gpg encrypted, and haproxy marks the dead
  server DOWN;
- SIGTERM of one: no request fails; started again, it comes back UP and
  takes load;
- two daemons with one worker each against one: the throughput ratio is
  printed (on two cores, close to 2)."""
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_daemon import Daemon, PGPDECD, world  # noqa: E402,F401
from test_daemon_tls import make_pki, free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..")
BUILD = os.environ.get("PD_BUILD_DIR", os.path.join(SRC, "build"))
CLIENT = os.path.join(BUILD, "client", "pgpdecd-client")
HAPROXY_CFG = os.path.join(SRC, "contrib", "haproxy", "haproxy.cfg")
LEAN = os.environ.get("PD_TEST_LEAN") == "1"  # sanitizer builds: no throughput figures

pytestmark = pytest.mark.skipif(not os.path.exists(PGPDECD) or not os.path.exists(CLIENT)
                                or not shutil.which("certtool") or not shutil.which("gpg"),
                                reason="needs the daemon, the client, certtool and gpg")


def require_haproxy():
    if not shutil.which("haproxy"):
        pytest.fail("haproxy is not installed (contrib/check.sh installs Debian's haproxy)")


def haproxy_config(tmp, port, backends, check_pem, ca_pem, stats_sock):
    """The shipped file with this test's addresses and paths."""
    text = open(HAPROXY_CFG).read()
    text = text.replace("    log /dev/log local0\n", f"    log stderr format raw local0\n"
                        f"    stats socket {stats_sock} level admin\n")
    text = text.replace("    bind :7443\n", f"    bind 127.0.0.1:{port}\n")
    text = text.replace("check inter 5s fall 3 rise 2", "check inter 300ms fall 2 rise 1")
    text = text.replace("ca-file /etc/haproxy/pgpdecd-ca.pem", f"ca-file {ca_pem}")
    text = text.replace("crt /etc/haproxy/pgpdecd-check.pem", f"crt {check_pem}")
    text = re.sub(r"    server pd1 .*\n    server pd2 .*\n    server pd3 .*\n",
                  "".join(f"    server pd{i + 1} 127.0.0.1:{p} check-sni localhost\n"
                          for i, p in enumerate(backends)), text)
    assert all(f"127.0.0.1:{p}" in text for p in backends) and f"127.0.0.1:{port}" in text
    cfg = tmp / "haproxy.cfg"
    cfg.write_text(text)
    return cfg


class Haproxy:
    def __init__(self, tmp, pki, backends):
        require_haproxy()
        check = tmp / "check.pem"
        check.write_text(pki["good"][1].read_text() + pki["good"][0].read_text())
        self.port = free_port()
        self.stats = str(tmp / "haproxy.stat")
        self.cfg = haproxy_config(tmp, self.port, backends, check, pki["ca"][1], self.stats)
        r = subprocess.run(["haproxy", "-c", "-f", str(self.cfg)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        self.log = open(tmp / "haproxy.log", "w+")
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", str(self.cfg)], stdout=self.log, stderr=self.log)

    def state(self):
        """{server: status} from the stats socket (UP, DOWN, ...)."""
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.stats)
        s.sendall(b"show stat\n")
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        s.close()
        lines = data.decode().splitlines()
        head = lines[0].lstrip("# ").split(",")
        out = {}
        for ln in lines[1:]:
            f = dict(zip(head, ln.split(",")))
            if f.get("pxname") == "pgpdecd_pool" and f.get("svname", "").startswith("pd"):
                out[f["svname"]] = f["status"]
        return out

    def wait_state(self, want, timeout=30):
        deadline = time.time() + timeout
        while True:
            try:
                st = self.state()
            except OSError:
                st = {}
            if all(st.get(k, "").startswith(v) for k, v in want.items()):
                return st
            assert time.time() < deadline, (want, st, open(self.log.name).read()[-3000:])
            time.sleep(0.1)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("hapki"))


@pytest.fixture(scope="module")
def msg(world, tmp_path_factory):
    d = tmp_path_factory.mktemp("hamsg")
    plain = os.urandom(4096)
    f = d / "m.gpg"
    f.write_bytes(world["gpg"].encrypt(plain, "alice@example.org", compress=0))
    return f, plain


def backend(world, tmp, pki, port, workers=1, keydir=None):
    tmp.mkdir(exist_ok=True)
    return Daemon(world, tmp, "--workers", str(workers), "--listen", f"tcp:127.0.0.1:{port}",
                  "--tls-cert", str(pki["srv"][1]), "--tls-key", str(pki["srv"][0]), "--tls-ca", str(pki["ca"][1]),
                  "--log-requests", "info", keydir=keydir)


@pytest.fixture(scope="module")
def rsa4096(world, tmp_path_factory):
    """An RSA-4096 key and a message to it: the private-key operation (a
    few ms) outweighs TLS and haproxy, so the worker is what scales."""
    d = tmp_path_factory.mktemp("ha4096")
    g = world["gpg"]
    g.run("--passphrase", "", "--quick-gen-key", "scale@example.org", "rsa4096", "encr", "never")
    keys = d / "keys"
    keys.mkdir()
    g.export_secret("scale@example.org", str(keys / "k.gpg"))
    f = d / "m.gpg"
    f.write_bytes(g.encrypt(os.urandom(4096), "scale@example.org", compress=0))
    return keys, f


def client_args(pki, port):
    return [CLIENT, "--connect", f"127.0.0.1:{port}", "--tls-ca", str(pki["ca"][1]), "--tls-cert",
            str(pki["good"][1]), "--tls-key", str(pki["good"][0]), "--tls-server-name", "localhost",
            "--timeout", "30"]


def bench(pki, port, f, n, conc=8):
    return subprocess.Popen(client_args(pki, port) + ["bench", "--concurrency", str(conc), "--requests", str(n),
                                                      "--json", str(f)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def result(p):
    out, err = p.communicate(timeout=600)
    assert out.strip(), err.decode()
    return p.returncode, json.loads(out.decode().strip().splitlines()[-1]), err.decode()


def served(d):
    return d.logtext().count("[REQ] request ")


@pytest.fixture
def pool(world, tmp_path, pki):
    ports = [free_port(), free_port()]
    ds = [backend(world, tmp_path / f"d{i}", pki, p) for i, p in enumerate(ports)]
    h = Haproxy(tmp_path, pki, ports)
    try:
        h.wait_state({"pd1": "UP", "pd2": "UP"})
        yield h, ds, ports
    finally:
        h.stop()
        for d in ds:
            d.stop()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_one_backend_dies_mid_bench(pool, msg, pki, sig):
    h, ds, _ = pool
    f, plain = msg
    p = bench(pki, h.port, f, 800)
    deadline = time.time() + 120
    while served(ds[0]) < 50:
        assert time.time() < deadline and p.poll() is None, (p.poll(), ds[0].logtext()[-2000:])
        time.sleep(0.01)
    ds[0].proc.send_signal(sig)
    rc, j, err = result(p)
    print(f"\n{signal.Signals(sig).name} of pd1 mid-bench through haproxy: ok {j['ok']}/{j['requests']}, "
          f"failed {j['failed']}, sent again {j['resent']}, served pd1 {served(ds[0])} pd2 {served(ds[1])}")
    assert rc == 0, err
    assert j["ok"] == 800 and j["failed"] == 0 and j["mismatched"] == 0, j
    assert j["plaintext_sha256"] == [hashlib.sha256(plain).hexdigest().upper()], j
    assert served(ds[1]) > 0
    st = h.wait_state({"pd1": "DOWN", "pd2": "UP"})
    print(f"haproxy: {st}")
    assert ds[0].proc.wait(30) == (-signal.SIGKILL if sig == signal.SIGKILL else 0)


def test_stopped_backend_rejoins(pool, msg, world, pki, tmp_path):
    h, ds, ports = pool
    f, plain = msg
    p = bench(pki, h.port, f, 400)
    while served(ds[0]) < 30:
        assert p.poll() is None
        time.sleep(0.01)
    ds[0].proc.send_signal(signal.SIGTERM)
    rc, j, err = result(p)
    assert rc == 0 and j["failed"] == 0 and j["mismatched"] == 0, (j, err)
    assert ds[0].proc.wait(30) == 0
    h.wait_state({"pd1": "DOWN"})
    # Started again on its port: haproxy's check brings it back, and it
    # takes its share of a new bench.
    back = backend(world, tmp_path / "again", pki, ports[0])
    ds.append(back)
    h.wait_state({"pd1": "UP", "pd2": "UP"})
    p = bench(pki, h.port, f, 400)
    rc, j, err = result(p)
    print(f"\nafter the restart: ok {j['ok']}/400, served by the restarted pd1 {served(back)}")
    assert rc == 0 and j["ok"] == 400 and j["mismatched"] == 0, (j, err)
    assert served(back) >= 40, served(back)


def test_scale_out_ratio(world, tmp_path, pki, rsa4096):
    """Two daemons of one worker each behind haproxy against one (RSA-4096,
    so the worker is the bottleneck): on two cores the pair should decrypt
    close to twice as fast.  The figure is printed; the test asserts
    that the pair was used (a timed assertion would be a coin toss on a
    shared machine; CI's first run under load gave 1.25)."""
    keys, f = rsa4096
    ports = [free_port(), free_port()]
    ds = [backend(world, tmp_path / f"s{i}", pki, p, keydir=keys) for i, p in enumerate(ports)]
    figures = {}
    try:
        for n in (1, 2):
            t = tmp_path / f"h{n}"
            t.mkdir()
            h = Haproxy(t, pki, ports[:n])
            try:
                h.wait_state({f"pd{i + 1}": "UP" for i in range(n)})
                result(bench(pki, h.port, f, 20))  # warm: connections, key caches
                rc, j, err = result(bench(pki, h.port, f, 60 if LEAN else 400, conc=8))
                assert rc == 0 and j["failed"] == 0, (j, err)
                figures[n] = j["msgs_per_s"]
            finally:
                h.stop()
    finally:
        for d in ds:
            d.stop()
    ratio = figures[2] / figures[1]
    print(f"\nscale-out through haproxy (RSA-4096, 4 KiB, 8 in flight): one daemon x 1 worker "
          f"{figures[1]:.0f} msg/s, two daemons x 1 worker {figures[2]:.0f} msg/s: ratio {ratio:.2f}")
    # A figure, not a verdict: the ratio depends on the machine's other
    # load (1.65-2.06 on this project's 2-core machine alone); what is
    # asserted is that both daemons served the second run's requests.
    assert all(served(d) > 0 for d in ds), [served(d) for d in ds]
