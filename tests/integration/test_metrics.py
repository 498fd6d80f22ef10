# SPDX-License-Identifier: MIT
"""The metrics-listen endpoint: the real daemon on a real loopback port,
scraped with urllib, by Debian's real Prometheus server (its values read
back through the query API) and, for the textfile alternative, the README's
own command line read by a real prometheus-node-exporter.

Run: PD_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/integration/test_metrics.py
"""
import http.client
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pdwire  # noqa: E402
from pdwire import frame  # noqa: E402
from test_daemon import BUILD, Daemon, PGPDECD, check_ok, world  # noqa: E402,F401

SRC = Path(__file__).resolve().parents[2]
CLIENT = os.path.join(BUILD, "client", "pgpdecd-client")
KEY = SRC / "tests" / "data" / "keys" / "rsa2048.gpg"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# daemon/metrics.h
CONN_LIMIT, PER_IP, IDLE_TIMEOUT = 16, 8, 5

pytestmark = pytest.mark.skipif(not shutil.which("gpg") or not os.path.exists(PGPDECD),
                                reason="needs gpg and a built daemon/pgpdecd")
needs_prometheus = pytest.mark.skipif(not shutil.which("prometheus") or not shutil.which("promtool"),
                                      reason="needs Debian's prometheus (contrib/check.sh installs it)")
needs_node_exporter = pytest.mark.skipif(not shutil.which("prometheus-node-exporter"),
                                         reason="needs prometheus-node-exporter (contrib/check.sh installs it)")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fetch(port, path="/metrics", method="GET", host="127.0.0.1", timeout=10):
    """(status, headers, body) of one request, any status."""
    h = f"[{host}]" if ":" in host else host
    req = urllib.request.Request(f"http://{h}:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def scrape(port, **kw):
    status, headers, body = fetch(port, **kw)
    assert status == 200, (status, body)
    assert headers["Content-Type"] == CONTENT_TYPE
    return body.decode()


def promtool_check(text):
    """Prometheus's own parser and linter: no complaint at all."""
    r = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


def build_info(vals):
    keys = [k for k in vals if k.startswith("pgpdecd_build_info{")]
    assert len(keys) == 1, keys
    assert vals[keys[0]] == 1
    return dict(re.findall(r'(\w+)="([^"]*)"', keys[0]))


def modversion(pkg):
    return subprocess.run(["pkg-config", "--modversion", pkg], capture_output=True, text=True,
                          check=True).stdout.strip()


def requests_three(world, d):
    """A good decryption, a tampered message, a message for a key the daemon
    lacks; returns the ciphertext octets sent."""
    c = d.client()
    plain, msg = world["msgs"][2]
    got, res, _ = c.decrypt(msg)
    check_ok(got, res, plain)
    bad = bytearray(world["msgs"][4][1])  # binary; its last octet is inside the encrypted MDC
    bad[-1] ^= 0x01
    _, res, _ = c.decrypt(bytes(bad))
    assert res["name"] == "INTEGRITY", res
    other = world["gpg"].encrypt(b"for bob", "bob@example.org")
    _, res, _ = c.decrypt(other)
    assert res["name"] == "NO_KEY", res
    c.close()
    return len(msg) + len(bad) + len(other)


def proc_status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith(field + ":"):
                return int(ln.split()[1])
    raise KeyError(field)


def nofile_soft(pid):
    with open(f"/proc/{pid}/limits") as f:
        for ln in f:
            if ln.startswith("Max open files"):
                return int(ln.split()[3])
    raise KeyError("Max open files")


def stopped_clean(d):
    rc = d.stop()
    assert rc == 0, d.logtext()


# --------------------------------------------------------------------------

def test_scrape_counters_process_and_build_info(world, tmp_path):
    port = free_port()
    t0 = time.time()
    d = Daemon(world, tmp_path, "--metrics-listen", f"127.0.0.1:{port}", "--rsa-backend", "openssl",
               "--ecdh-backend", "openssl")
    try:
        sent = requests_three(world, d)
        stats = d.client().stats()  # the STATS reply, before the scrape
        text = scrape(port)
        promtool_check(text)
        vals = pdwire.parse_prometheus(text)
        assert vals['pgpdecd_requests_total{status="OK"}'] == 1
        assert vals['pgpdecd_requests_total{status="INTEGRITY"}'] == 1
        assert vals['pgpdecd_requests_total{status="NO_KEY"}'] == 1
        assert vals["pgpdecd_bytes_in_total"] == sent
        assert vals["pgpdecd_request_duration_seconds_count"] == 3
        # Every counter of STATS, with STATS's value (one renderer).
        svals = pdwire.parse_prometheus(stats)
        counters = [k for k in svals if re.match(r"[a-z_]+(_total|_bucket|_sum|_count)(\{|$)", k)]
        assert len(counters) > 20
        for k in counters:
            assert vals[k] == svals[k], k
        assert set(svals) <= set(vals)
        # Process metrics, against what /proc says of the daemon's pid.
        pid = d.proc.pid
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        assert vals["process_open_fds"] > 5
        assert abs(vals["process_open_fds"] - fds) <= 2, (vals["process_open_fds"], fds)
        assert vals["process_max_fds"] == nofile_soft(pid)
        rss = proc_status(pid, "VmRSS") * 1024
        assert 0 < vals["process_resident_memory_bytes"] and rss / 2 < vals["process_resident_memory_bytes"] < rss * 2
        assert vals["process_virtual_memory_bytes"] >= vals["process_resident_memory_bytes"]
        assert t0 - 2 < vals["process_start_time_seconds"] <= time.time() + 1, (t0, vals["process_start_time_seconds"])
        assert 0 < vals["process_cpu_seconds_total"] < (time.time() - t0) * os.cpu_count() + 1
        info = build_info(vals)
        version = subprocess.run([PGPDECD, "--version"], capture_output=True, text=True).stdout.split()[1]
        assert info == {"version": version, "rsa_backend": "openssl", "ecdh_backend": "openssl",
                        "libgcrypt": modversion("libgcrypt"),
                        "openssl": modversion("libcrypto"), "gnutls": modversion("gnutls"),
                        "libuv": modversion("libuv"), "libmicrohttpd": modversion("libmicrohttpd")}, info
        # HEAD: the headers alone.
        status, headers, body = fetch(port, method="HEAD")
        assert status == 200 and body == b"" and headers["Content-Type"] == CONTENT_TYPE
        # The counters move with the next request; the scrape itself is no request.
        c = d.client()
        check_ok(*c.decrypt(world["msgs"][2][1])[:2], world["msgs"][2][0])
        vals = pdwire.parse_prometheus(scrape(port))
        assert vals['pgpdecd_requests_total{status="OK"}'] == 2
        assert vals["pgpdecd_connections"] == 1
    finally:
        stopped_clean(d)
    assert f"metrics on http://127.0.0.1:{port}/metrics" in d.logtext()


def test_build_info_names_the_backend_in_use(world, tmp_path):
    port = free_port()
    d = Daemon(world, tmp_path, "--metrics-listen", str(port), "--rsa-backend", "gcrypt",  # a port alone
               "--ecdh-backend", "gcrypt")
    try:
        info = build_info(pdwire.parse_prometheus(scrape(port)))
        assert info["rsa_backend"] == "gcrypt" and info["ecdh_backend"] == "gcrypt", info
    finally:
        stopped_clean(d)


def _raw(port, data, wait=5):
    """Send raw octets, read until the server closes (or wait passes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    try:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out, True
            out += chunk
    except TimeoutError:
        return out, False
    except ConnectionResetError:
        return out, True
    finally:
        s.close()


def test_404_405_and_malformed_requests(world, tmp_path):
    port = free_port()
    d = Daemon(world, tmp_path, "--metrics-listen", f"127.0.0.1:{port}")
    try:
        for path in ("/", "/metrics/", "/metricsx", "/favicon.ico", "/secret-path-x"):
            status, _, body = fetch(port, path=path)
            assert status == 404, path
            assert b"secret" not in body  # nothing of the request is echoed
        for method in ("POST", "PUT", "DELETE", "OPTIONS", "PATCH"):
            status, headers, _ = fetch(port, method=method)
            assert status == 405, method
            assert headers["Allow"] == "GET, HEAD"
        # Not HTTP at all: closed (with or without a 400), nothing else.
        out, closed = _raw(port, b"GARBAGE\r\n\r\n")
        assert closed and (out == b"" or out.startswith(b"HTTP/1.1 400")), out
        # Binary noise: held until the idle timeout (the connection-limit
        # test shows it); meanwhile others are served.
        noise = socket.create_connection(("127.0.0.1", port), timeout=5)
        noise.sendall(b"\x00\xff" * 100 + b"\r\n\r\n")
        scrape(port)
        # Headers beyond the 16 KiB a connection may hold: 431 and closed.
        out, closed = _raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n")
        assert closed and out.startswith(b"HTTP/1.1 431"), out[:100]
        # A body is never read: a 10 MB upload announced, 1 KB sent, answered
        # at once and the connection closed without waiting for the rest.
        t = time.time()
        out, closed = _raw(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n" + b"a" * 1024)
        assert closed and out.startswith(b"HTTP/1.1 405"), out[:100]
        assert time.time() - t < 3
        out, closed = _raw(port, b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n")
        assert closed and out.startswith(b"HTTP/1.1 404"), out[:100]
        # HTTP/1.0 works too, and each answer closes its connection.
        out, closed = _raw(port, b"GET /metrics HTTP/1.0\r\n\r\n")
        assert closed and (out.startswith(b"HTTP/1.0 200") or out.startswith(b"HTTP/1.1 200")), out[:100]
        assert b"pgpdecd_build_info{" in out
        # The daemon is unharmed.
        assert d.proc.poll() is None
        check_ok(*d.client().decrypt(world["msgs"][2][1])[:2], world["msgs"][2][0])
        promtool_check(scrape(port))
        noise.close()
    finally:
        stopped_clean(d)


def _idle(port, src):
    s = socket.socket()
    s.settimeout(10)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def _closed(socks, wait):
    """Those of socks the server has closed (EOF or reset) within wait seconds."""
    ready, _, _ = select.select(socks, [], [], wait)
    out = []
    for s in ready:
        try:
            if s.recv(1) == b"":
                out.append(s)
        except OSError:
            out.append(s)
    return out


def test_connection_limits_and_idle_timeout(world, tmp_path):
    """Idle connections beyond the limits are not served, decryption goes on
    meanwhile, the idle ones are closed after the idle timeout, and a
    scrape works again once they are gone (MHD re-arms its listening socket
    only on a run after connections closed)."""
    port = free_port()
    d = Daemon(world, tmp_path, "--metrics-listen", f"127.0.0.1:{port}")
    conns = []
    try:
        # Per address: PER_IP held, the next one closed at once.
        per_ip = [_idle(port, "127.0.0.9") for _ in range(PER_IP + 1)]
        conns += per_ip
        assert _closed(per_ip, 1) == [per_ip[PER_IP]]
        for s in per_ip:
            s.close()
        time.sleep(0.3)
        # In all: CONN_LIMIT + 4 idle connections from 5 addresses (4 each).
        t_open = time.time()
        idle = [_idle(port, f"127.0.0.{2 + i % 5}") for i in range(CONN_LIMIT + 4)]
        conns += idle
        time.sleep(0.3)
        # A scrape now is not answered (it waits in the backlog, or is closed).
        with pytest.raises((OSError, http.client.HTTPException)):
            fetch(port, timeout=1)
        # The daemon decrypts meanwhile, and answers STATS.
        t = time.time()
        c = d.client()
        check_ok(*c.decrypt(world["msgs"][3][1])[:2], world["msgs"][3][0])
        assert time.time() - t < 5
        assert pdwire.parse_prometheus(c.stats())['pgpdecd_requests_total{status="OK"}'] == 1
        # The server closes the held idle connections after IDLE_TIMEOUT
        # (those over the limit it closed at once, or holds in its backlog).
        gone = _closed(idle, 0)
        held = [s for s in idle[:CONN_LIMIT] if s not in gone]
        assert len(held) >= CONN_LIMIT - 2, len(gone)
        deadline = time.time() + IDLE_TIMEOUT + 5
        while held and time.time() < deadline:
            for s in _closed(held, 0.2):
                held.remove(s)
        assert not held
        waited = time.time() - t_open
        assert IDLE_TIMEOUT - 1 < waited < IDLE_TIMEOUT + 4, waited
        # Then a scrape is served again (while the backlogged idle ones
        # are in their own idle time), with the request counted above.
        vals = pdwire.parse_prometheus(scrape(port, timeout=5))
        assert vals['pgpdecd_requests_total{status="OK"}'] == 1
    finally:
        for s in conns:
            s.close()
        stopped_clean(d)


def _run(*args, timeout=30):
    return subprocess.run([PGPDECD, "--key", str(KEY), "--workers", "1", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_bad_values_and_addresses(tmp_path):
    sock = str(tmp_path / "pd.sock")
    for value in ("localhost:9469", "127.0.0.1:0", "127.0.0.1:65536", "nonsense", "[::1]", "[::1:9469",
                  "127.0.0.1:80x"):
        r = _run("--listen", "unix:" + sock, "--metrics-listen", value)
        assert r.returncode == 64, (value, r.returncode, r.stderr)
        assert f"metrics-listen {value}: want PORT, IPV4:PORT or [IPV6]:PORT" in r.stderr, r.stderr
    for value in ("0.0.0.0:9469", "[::]:9469", "192.0.2.1:9469"):
        r = _run("--listen", "unix:" + sock, "--metrics-listen", value)
        assert r.returncode == 64, (value, r.returncode, r.stderr)
        assert "not a loopback address" in r.stderr and "metrics-allow-remote = yes" in r.stderr, r.stderr
    # The same in the config file.
    conf = tmp_path / "pd.conf"
    conf.write_text("[pgpdecd]\nmetrics-listen = 0.0.0.0:9469\n")
    r = _run("--config", str(conf), "--listen", "unix:" + sock)
    assert r.returncode == 64 and "metrics-allow-remote" in r.stderr, r.stderr
    assert not os.path.exists(sock)


def test_port_in_use_fails_start_before_any_socket(world, tmp_path):
    """A taken port is exit 1 with the reason; the metrics port is bound
    before the Unix listener, so a second daemon with the same settings
    does not take over the first one's socket."""
    port = free_port()
    a = tmp_path / "a"
    a.mkdir()
    d = Daemon(world, a, "--metrics-listen", f"127.0.0.1:{port}")
    try:
        r = subprocess.run([PGPDECD, "--listen", "unix:" + d.sock, "--keydir", str(world["keys"]),
                            "--metrics-listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert f"metrics-listen 127.0.0.1:{port}: Address already in use: another process listens there" \
            in r.stderr, r.stderr
        assert d.answers()  # the first daemon's socket is still there and its own
        assert d.client().ping() == b"hi"
        scrape(port)
    finally:
        stopped_clean(d)
    # An address that is not this host's.
    r = _run("--listen", "unix:" + str(tmp_path / "b.sock"), "--metrics-listen", "192.0.2.1:9469",
             "--metrics-allow-remote")
    assert r.returncode == 1 and "Cannot assign requested address: not an address of this host" in r.stderr, r.stderr


def test_ipv6_loopback(world, tmp_path):
    port = free_port()
    try:
        s = socket.socket(socket.AF_INET6)
        s.bind(("::1", port))
        s.close()
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    d = Daemon(world, tmp_path, "--metrics-listen", f"[::1]:{port}")
    try:
        promtool_check(scrape(port, host="::1"))
    finally:
        stopped_clean(d)
    assert f"metrics on http://[::1]:{port}/metrics" in d.logtext()


def test_remote_address_when_allowed(world, tmp_path):
    """0.0.0.0 with metrics-allow-remote: served, with a notice (reached
    here over loopback only)."""
    port = free_port()
    d = Daemon(world, tmp_path, "--metrics-listen", f"0.0.0.0:{port}", "--metrics-allow-remote")
    try:
        scrape(port)
        assert "not a loopback address (metrics-allow-remote)" in d.logtext()
    finally:
        stopped_clean(d)


def test_reload_keeps_the_listener_and_drain_closes_it(world, tmp_path):
    p1, p2 = free_port(), free_port()
    conf = tmp_path / "pd.conf"
    conf.write_text(f"[pgpdecd]\nmetrics-listen = 127.0.0.1:{p1}\n")
    d = Daemon(world, tmp_path, "--config", str(conf))
    try:
        conf.write_text(f"[pgpdecd]\nmetrics-listen = 127.0.0.1:{p2}\n")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log("metrics-listen take effect at restart only")
        d.wait_log("reloaded")
        vals = pdwire.parse_prometheus(scrape(p1))
        assert vals['pgpdecd_reloads_total{result="ok"}'] == 1
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", p2), timeout=5)
        # A message half sent holds the drain open; the metrics port closes
        # at SIGTERM all the same.
        plain, msg = world["msgs"][4]
        c = d.client()
        rid = c.new_id()
        c.send(frame(pdwire.DECRYPT, rid, struct.pack(">I", 0)) + frame(pdwire.DATA, rid, msg[:1000]))
        deadline = time.time() + 10
        while pdwire.parse_prometheus(scrape(p1))["pgpdecd_in_flight"] != 1:
            assert time.time() < deadline
            time.sleep(0.05)
        d.proc.send_signal(signal.SIGTERM)
        d.wait_log("stopping")
        d.wait_log(f"metrics 127.0.0.1:{p1}: closed")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", p1), timeout=5)
        assert d.proc.poll() is None  # still draining
        body = msg[1000:]
        c.send(b"".join(frame(pdwire.DATA, rid, body[o:o + 60000]) for o in range(0, len(body), 60000))
               + frame(pdwire.END, rid))
        got, res, _ = c.read_reply(rid)
        check_ok(got, res, plain)
        assert d.proc.wait(30) == 0
    finally:
        stopped_clean(d)


# --------------------------------------------------------------------------
# Real servers

def _get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _wait(pred, what, timeout, proc=None, log=None):
    deadline = time.time() + timeout
    while True:
        try:
            v = pred()
            if v:
                return v
        except (OSError, ValueError, KeyError, IndexError, http.client.HTTPException):
            pass
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        if time.time() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s" + (f":\n{log.read_text()[-3000:]}" if log else ""))
        time.sleep(0.2)


def _stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@needs_prometheus
def test_prometheus_scrapes_the_daemon(world, tmp_path):
    """Debian's prometheus scrapes the daemon every second; the values it
    stored, read back through its HTTP query API, are what the daemon
    counted."""
    port, pport = free_port(), free_port()
    d = Daemon(world, tmp_path, "--metrics-listen", f"127.0.0.1:{port}")
    prom_dir = tmp_path / "prometheus"
    prom_dir.mkdir()
    (prom_dir / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: pgpdecd\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{port}']\n")
    log = prom_dir / "prometheus.log"
    prom = None
    api = f"http://127.0.0.1:{pport}/api/v1"

    def query(q):
        r = _get_json(f"{api}/query?" + urllib.parse.urlencode({"query": q}))
        assert r["status"] == "success", r
        return r["data"]["result"]

    def by_status():
        return {s["metric"]["status"]: float(s["value"][1]) for s in query("pgpdecd_requests_total")}

    try:
        requests_three(world, d)
        c = d.client()
        check_ok(*c.decrypt(world["msgs"][2][1])[:2], world["msgs"][2][0])
        # Run directly, not through its unit (no /etc/default/prometheus):
        # its storage, config and web port are all here.
        with open(log, "wb") as lf:
            prom = subprocess.Popen(
                ["prometheus", f"--config.file={prom_dir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={prom_dir / 'data'}", f"--web.listen-address=127.0.0.1:{pport}",
                 f"--web.console.templates={prom_dir}", f"--web.console.libraries={prom_dir}"],
                stdout=lf, stderr=subprocess.STDOUT, cwd=prom_dir)

        def target_up():
            ts = _get_json(f"{api}/targets")["data"]["activeTargets"]
            return ts and ts[0]["health"] == "up" and ts[0]["scrapeUrl"] == f"http://127.0.0.1:{port}/metrics"

        _wait(target_up, "prometheus: target up", 60, prom, log)
        _wait(lambda: by_status(), "prometheus: pgpdecd_requests_total", 30, prom, log)
        daemon = pdwire.parse_prometheus(c.stats())
        got = by_status()
        print("prometheus query pgpdecd_requests_total:", got)
        assert got == {"OK": 2, "INTEGRITY": 1, "NO_KEY": 1}, got
        for st, v in got.items():
            assert daemon[f'pgpdecd_requests_total{{status="{st}"}}'] == v
        assert float(query('up{job="pgpdecd"}')[0]["value"][1]) == 1
        (b,) = query("pgpdecd_build_info")
        assert b["metric"]["version"] in subprocess.run([PGPDECD, "--version"], capture_output=True,
                                                        text=True).stdout
        assert float(query("pgpdecd_bytes_in_total")[0]["value"][1]) == daemon["pgpdecd_bytes_in_total"]
        assert float(query("process_open_fds")[0]["value"][1]) > 5
        assert float(query("process_resident_memory_bytes")[0]["value"][1]) > 1e6
        # A request now shows up in the next scrapes.
        check_ok(*c.decrypt(world["msgs"][2][1])[:2], world["msgs"][2][0])
        _wait(lambda: by_status().get("OK") == 3, "prometheus: the new request", 15, prom, log)
        print("after one more:", by_status())
    finally:
        if prom is not None:
            _stop(prom)
        stopped_clean(d)


def _readme_textfile_command():
    """The ExecStart= command of the README's pgpdecd-textfile.service."""
    text = (SRC / "README.md").read_text()
    block = text[text.index("# /etc/systemd/system/pgpdecd-textfile.service"):]
    m = re.search(r"^ExecStart=/bin/sh -c '([^']+)'$", block, re.M)
    assert m, "no ExecStart in the README's textfile unit"
    return m.group(1)


@needs_prometheus
@needs_node_exporter
def test_textfile_collector_command(world, tmp_path):
    """The README's textfile command, run against the daemon, writes a file
    that promtool accepts and that a real node_exporter serves."""
    d = Daemon(world, tmp_path)
    out = tmp_path / "textfile"
    out.mkdir()
    cmd = _readme_textfile_command()
    assert "/var/lib/prometheus/node-exporter/pgpdecd.prom.tmp" in cmd and " mv " in cmd
    cmd = cmd.replace("/var/lib/prometheus/node-exporter", str(out))
    env = dict(os.environ, PGPDECD_SOCKET=d.sock, PATH=os.path.dirname(CLIENT) + ":" + os.environ["PATH"])
    nport = free_port()
    log = tmp_path / "node-exporter.log"
    ne = None
    try:
        requests_three(world, d)
        r = subprocess.run(["/bin/sh", "-c", cmd], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert sorted(os.listdir(out)) == ["pgpdecd.prom"]  # the temporary file was moved
        text = (out / "pgpdecd.prom").read_text()
        promtool_check(text)
        with open(log, "wb") as lf:
            ne = subprocess.Popen(["prometheus-node-exporter", "--collector.disable-defaults", "--collector.textfile",
                                   f"--collector.textfile.directory={out}", f"--web.listen-address=127.0.0.1:{nport}"],
                                  stdout=lf, stderr=subprocess.STDOUT)

        def served():
            body = urllib.request.urlopen(f"http://127.0.0.1:{nport}/metrics", timeout=5).read().decode()
            return body if "pgpdecd_requests_total" in body else None

        vals = pdwire.parse_prometheus(_wait(served, "node_exporter: pgpdecd metrics", 30, ne, log))
        assert vals['pgpdecd_requests_total{status="OK"}'] == 1
        assert vals['pgpdecd_requests_total{status="INTEGRITY"}'] == 1
        assert vals['pgpdecd_requests_total{status="NO_KEY"}'] == 1
        assert vals["node_textfile_scrape_error"] == 0
        assert any(k.startswith("node_textfile_mtime_seconds{") and "pgpdecd.prom" in k for k in vals)
    finally:
        if ne is not None:
            _stop(ne)
        stopped_clean(d)
    # The daemon down: the command fails and the last file is kept (the
    # empty temporary file beside it is not read by the collector).
    r = subprocess.run(["/bin/sh", "-c", cmd], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert (out / "pgpdecd.prom").read_text() == text
