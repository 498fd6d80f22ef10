# SPDX-License-Identifier: MIT
"""The packaged daemon and milter under a real PID-1 systemd.

test_units.py checks the units with systemd-analyze and runs their ExecStart
by hand; here systemd itself runs them.  A minimal Debian 12 tree is
debootstrapped (nspawn.py: --variant=minbase, systemd, systemd-sysv,
miltertest, and the packages the .debs depend on, from the mirror apt is
configured with), booted with systemd-nspawn -b, and the .debs of
contrib/build-deb.sh (the session's `debs` fixture, shared with test_deb.py)
are installed into it with dpkg -i while it runs.  Every command runs inside
(nsenter into the namespaces of the container's PID 1): systemctl and
journalctl as root, pgpdecd-client as "pdclient" (in group pgpdecd),
miltertest as "mta" (in group pgpdecd-milter).  Keys are made by gpg on the
host and installed where the unit's LoadCredential= reads them,
/etc/pgpdecd/keys.pgp and /etc/pgpdecd/passphrase.

Cases: socket activation (the first connection starts pgpdecd.service; ping,
a decryption, a user outside the group refused); the per-request journal
entries (journalctl -u pgpdecd PGPDECD_STATUS=INTEGRITY finds a tampered
request, with its peer and sizes); reload after replacing the
key file (the reload succeeds but the credential copies stay: the old key
still decrypts, the new one is NO_KEY) and the restart that reads the new
credentials; socket-owner/socket-group on an extra listener under the unit's
system-call filter; systemctl stop while a 200 MB message is in flight (the
client still gets every byte of the plaintext and exits 0; the daemon exits
0); the watchdog (WatchdogSec=30s of the unit) killing a SIGSTOPped daemon
and systemd restarting it; pgpdecd-milter.service started, decrypting a
mail from miltertest through the daemon, and stopped.

Differences from a real host, all of this machine (a container without
systemd, cgroup v1): nspawn runs with --register=no --keep-unit (no D-Bus on
the host) and --private-network; its seccomp filter is widened by @memlock
(see nspawn.py); the container lacks CAP_SYS_RESOURCE, so systemd there
cannot raise LimitMEMLOCK=16M above the host's 8 MiB hard limit and sets
the closest value (8 MiB: enough for the default secmem-size).

Needs root, debootstrap, systemd-container (systemd-nspawn) and util-linux
(nsenter, setpriv) on the host, the Debian mirror, gpg, and the package
build tools of test_deb.py.  Takes about two minutes (debootstrap about one;
timings in build/systemd-real.txt).  Skipped in sanitizer builds (the
packages are built in the release pass) and with PD_SKIP_SYSTEMD=1 or
PD_SKIP_DEB=1; missing tools fail the test.  PD_KEEP_NSPAWN=1 keeps the
tree (its path is printed).
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

import nspawn
from conftest import BUILD, kill_gpg_agent, sanitized_build
from mailcorpus import tamper

pytestmark = [
    pytest.mark.skipif(os.environ.get("PD_SKIP_SYSTEMD") == "1", reason="PD_SKIP_SYSTEMD=1"),
    pytest.mark.skipif(os.environ.get("PD_SKIP_DEB") == "1", reason="PD_SKIP_DEB=1 (no packages)"),
    pytest.mark.skipif(sanitized_build(), reason="packages are built once, not in the sanitizer pass"),
]

SOCK = "/run/pgpdecd/pgpdecd.sock"
MILTER_SOCK = "/run/pgpdecd-milter/milter.sock"
DATA = "/srv/pdtest"           # the test's files inside the container
CLIENT_USER, MTA_USER, OUTSIDER = "pdclient", "mta", "outsider"
INSTALL = ["libpdclient0", "pgpdecd", "pgpdecd-client", "pgpdecd-milter"]
BIG = 200 * 1024 * 1024
EX_DATAERR, EX_UNAVAILABLE, EX_NOPERM = 65, 69, 77


def wait_for(pred, what, timeout):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"{what} within {timeout}s")
        time.sleep(0.1)


class Box:
    """The booted container with the packages installed, and the keys."""

    def __init__(self, m, gpg, keys):
        self.m, self.gpg, self.keys = m, gpg, keys
        self.timings = {}

    def client(self, *args, user=CLIENT_USER, sock=SOCK, check=False, **kw):
        return self.m.run(["pgpdecd-client", "-s", sock, "-t", "30", *args], user=user,
                          check=check, text=False, **kw)

    def put(self, name, data, mode=0o644):
        p = self.m.path(DATA) / name
        p.write_bytes(data)
        p.chmod(mode)
        return f"{DATA}/{name}"

    def install_key(self, k):
        """Key k's secret key and passphrase where LoadCredential= reads them."""
        etc = self.m.path("/etc/pgpdecd")
        for name, data in (("keys.pgp", self.keys[k]["secret"]),
                           ("passphrase", self.keys[k]["passphrase"].encode() + b"\n")):
            tmp = etc / (name + ".new")
            tmp.write_bytes(data)
            tmp.chmod(0o600)
            tmp.replace(etc / name)

    def keys_listed(self):
        r = self.client("keys", check=True)
        return set(re.findall(r"^([0-9A-F]{40}) ", r.stdout.decode(), re.M))

    def main_pid(self):
        return int(self.m.prop("pgpdecd.service", "MainPID"))

    def active(self, unit="pgpdecd.service"):
        return self.m.systemctl("is-active", unit, check=False).stdout.strip()

    def restart(self):
        self.m.systemctl("restart", "pgpdecd.service")
        assert self.active() == "active"


def _gpg_keys(home):
    """Two RSA-2048 keys (gpg, passphrase-protected) and a message to each."""
    env = dict(os.environ, GNUPGHOME=str(home), LC_ALL="C.UTF-8")
    home.mkdir(mode=0o700)

    def gpg(*args, input=None):
        return subprocess.run(["gpg", "--batch", "--yes", "--no-tty", "--pinentry-mode",
                               "loopback", "--trust-model", "always", *args], input=input,
                              env=env, capture_output=True, check=True).stdout

    keys = {}
    for k in ("a", "b"):
        pw = f"systemd test passphrase {k}"
        gpg("--passphrase", pw, "--quick-gen-key", f"key {k} <{k}@test.example>", "rsa2048",
            "cert,sign,encr", "never")
        cols = gpg("--with-colons", "--list-keys", f"{k}@test.example").decode()
        fpr = re.search(r"^fpr:+([0-9A-F]{40}):", cols, re.M).group(1)
        keys[k] = {"fpr": fpr, "passphrase": pw,
                   "secret": gpg("--passphrase", pw, "--export-secret-keys", fpr)}
    return gpg, keys


@pytest.fixture(scope="module")
def box(debs, tmp_path_factory):
    why = nspawn.have_tools()
    if why:
        pytest.fail(f"{why}; PD_SKIP_SYSTEMD=1 skips this test")
    if not shutil.which("gpg"):
        pytest.fail("gpg missing")
    t0 = time.monotonic()
    work = tmp_path_factory.mktemp("systemd-real")
    root = work / "root"
    pkgs = [debs[p] for p in INSTALL]
    timings = {}
    deps = nspawn.package_deps(pkgs)
    timings["debootstrap"] = nspawn.debootstrap(root, deps + ["miltertest"], work / "debootstrap.log")
    m = nspawn.Machine(root, work / "console.log")
    gpg = None
    try:
        timings["boot"] = m.boot()
        t = time.monotonic()
        d = m.path("/var/tmp/debs")
        d.mkdir()
        for p in pkgs:
            shutil.copy(p, d)
        r = m.run(["sh", "-c", "dpkg -i /var/tmp/debs/*.deb"], check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        timings["dpkg -i"] = time.monotonic() - t
        print(r.stdout)
        m.run(["useradd", "--system", "--no-create-home", "-G", "pgpdecd", CLIENT_USER])
        m.run(["useradd", "--system", "--no-create-home", "-G", "pgpdecd-milter", MTA_USER])
        m.run(["useradd", "--system", "--no-create-home", OUTSIDER])
        m.path(DATA).mkdir(mode=0o755, parents=True)
        gpg, keys = _gpg_keys(work / "gnupg")
        b = Box(m, gpg, keys)
        b.timings = timings
        for k in keys:
            b.put(f"{k}.gpg", gpg("--encrypt", "-r", keys[k]["fpr"], input=f"hello {k}\n".encode()))
        b.install_key("a")
        yield b
    finally:
        if gpg:
            kill_gpg_agent(work / "gnupg")
        m.poweroff()
        timings["whole module"] = time.monotonic() - t0
        report = "".join(f"{k}: {v:.1f} s\n" for k, v in timings.items())
        print(report)
        try:
            (BUILD / "systemd-real.txt").write_text(report)
        except OSError:
            pass
        mounted = [l.split()[1] for l in Path("/proc/self/mounts").read_text().splitlines()
                   if l.split()[1].startswith(str(root) + "/")]
        assert not mounted, f"still mounted below the tree: {mounted}"
        if os.environ.get("PD_KEEP_NSPAWN") == "1":
            print(f"tree kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def journal_on_failure(request, box):
    """The journal of the units since the test began: pytest shows what a
    test printed only when it fails."""
    cur = box.m.run(["journalctl", "--show-cursor", "-n", "0", "-q"], check=False).stdout
    m = re.search(r"-- cursor: (\S+)", cur)
    yield
    args = ["-u", "pgpdecd.service", "-u", "pgpdecd.socket", "-u", "pgpdecd-milter.service"]
    if m:
        args += ["--after-cursor", m.group(1)]
    print("--- journalctl " + " ".join(args) + "\n" + box.m.journal(None, *args))


def test_installed_not_started(box):
    """dpkg -i made the users and left the units disabled and inactive."""
    m = box.m
    for u in ("pgpdecd.socket", "pgpdecd.service", "pgpdecd-milter.service"):
        assert m.systemctl("is-enabled", u, check=False).stdout.strip() == "disabled", u
        assert box.active(u) == "inactive", u
    ids = m.run(["id", "pgpdecd-milter"]).stdout
    assert "(pgpdecd)" in ids, ids
    assert m.run(["stat", "-c", "%U:%G %a", "/run/pgpdecd"]).stdout.split() == ["pgpdecd:pgpdecd", "750"]


def test_socket_activation(box):
    m = box.m
    m.systemctl("enable", "--now", "pgpdecd.socket")
    assert box.active("pgpdecd.socket") == "active"
    assert box.active() == "inactive", "the service started before any connection"
    assert m.run(["stat", "-c", "%U:%G %a", SOCK]).stdout.split() == ["root:pgpdecd", "660"]
    r = box.client("ping")
    print("pgpdecd-client ping:", r.stdout.decode(), r.stderr.decode())
    assert r.returncode == 0 and r.stdout.startswith(b"pong from pgpdecd"), r.stderr
    assert box.active() == "active"
    assert box.m.prop("pgpdecd.service", "TriggeredBy") == "pgpdecd.socket"
    j = m.journal("pgpdecd.service")
    assert "listening on unix:(fd 3) (socket activation)" in j, j
    r = box.client(f"{DATA}/a.gpg")
    assert (r.returncode, r.stdout) == (0, b"hello a\n"), r.stderr
    assert box.keys_listed() == {box.keys["a"]["fpr"]}
    status = m.prop("pgpdecd.service", "StatusText")
    assert status.startswith("1 keys, "), status
    r = box.client("ping", user=OUTSIDER)
    # the sentence names the cause and the fix (test_operator_errors)
    assert r.returncode == EX_NOPERM and b"permission denied on /run/pgpdecd (group pgpdecd)" in r.stderr \
        and b"add your user to group pgpdecd" in r.stderr, r.stderr


def test_request_journal_fields(box):
    """Each finished request is a native journal entry with PGPDECD_*
    fields: journalctl PGPDECD_STATUS=INTEGRITY finds a tampered one."""
    m = box.m
    if box.active() != "active":
        box.restart()
    ct = box.gpg("-z", "0", "--encrypt", "-r", box.keys["a"]["fpr"],
                 input=b"tamper target line\n" * 40)
    path = box.put("tampered.gpg", tamper(ct))
    r = box.client(path)
    assert r.returncode == EX_DATAERR and b"INTEGRITY" in r.stderr, r.stderr
    r = box.client(f"{DATA}/a.gpg")
    assert r.returncode == 0, r.stderr
    uid = m.run(["id", "-u", CLIENT_USER]).stdout.strip()

    def entries(*match):
        out = m.run(["journalctl", "-u", "pgpdecd.service", "-o", "json", *match]).stdout
        return [json.loads(l) for l in out.splitlines() if l.strip()]

    bad = wait_for(lambda: entries("PGPDECD_STATUS=INTEGRITY"),
                   "journalctl PGPDECD_STATUS=INTEGRITY", 10)
    print("journalctl -u pgpdecd PGPDECD_STATUS=INTEGRITY:", bad[-1]["MESSAGE"])
    e = bad[-1]
    assert e["PGPDECD_PEER"] == f"uid {uid}", e
    assert e["PGPDECD_KEY"] == "-" and e["PGPDECD_BYTES_OUT"] == "0", e
    assert e["PGPDECD_BYTES_IN"] == str(len(tamper(ct))), e
    assert "INTEGRITY" in e["MESSAGE"] and e["_SYSTEMD_UNIT"] == "pgpdecd.service", e
    ok = entries("PGPDECD_STATUS=OK")
    assert ok and ok[-1]["PGPDECD_KEY"] == box.keys["a"]["fpr"], ok[-1:]
    assert ok[-1]["PGPDECD_BYTES_OUT"] == str(len(b"hello a\n")), ok[-1]


def test_reload_keeps_credentials_restart_reads_them(box):
    """The unit passes keys as credentials: reload re-reads the copies made
    at start, only a restart copies the replaced files."""
    m, a, b = box.m, box.keys["a"]["fpr"], box.keys["b"]["fpr"]
    if box.active() != "active":
        box.restart()
    assert box.keys_listed() == {a}
    pid = box.main_pid()
    box.install_key("b")
    try:
        r = m.systemctl("reload", "pgpdecd.service", check=False)
        print("systemctl reload:", r.returncode, r.stdout, r.stderr)
        assert r.returncode == 0, "systemctl reload failed:\n" + r.stdout + r.stderr + \
            m.journal("pgpdecd.service", "-n", "10")
        # ExecReload= only sends SIGHUP (systemd 252 has no notify-reload):
        # the reload itself is done when the daemon has counted it
        wait_for(lambda: re.search(rb'pgpdecd_reloads_total\{result="ok"\} [1-9]',
                                   box.client("stats", check=True).stdout),
                 "the daemon counted the reload", 30)
        assert box.main_pid() == pid
        assert box.keys_listed() == {a}, "reload read the new key file, not the credential"
        r = box.client(f"{DATA}/b.gpg")
        print("after reload, b.gpg:", r.returncode, r.stderr.decode())
        assert r.returncode == EX_UNAVAILABLE and b"NO_KEY" in r.stderr, r.stderr
        r = box.client(f"{DATA}/a.gpg")
        assert (r.returncode, r.stdout) == (0, b"hello a\n"), r.stderr
        j = m.journal("pgpdecd.service")
        assert "reloaded: 1 decryption keys" in j, j

        box.restart()
        assert box.main_pid() != pid
        assert box.keys_listed() == {b}
        r = box.client(f"{DATA}/b.gpg")
        assert (r.returncode, r.stdout) == (0, b"hello b\n"), r.stderr
        r = box.client(f"{DATA}/a.gpg")
        print("after restart, a.gpg:", r.returncode, r.stderr.decode())
        assert r.returncode == EX_UNAVAILABLE, r.stderr
    finally:
        box.install_key("a")
        box.restart()
    assert box.keys_listed() == {a}


def test_socket_owner_group_under_the_syscall_filter(box):
    """socket-owner/socket-group chown() the daemon's own sockets: the
    unit's system-call filter must let it (it denied @chown with
    @privileged: "listen ...: chown: Operation not permitted", exit 1, and
    a restart loop)."""
    m = box.m
    conf = m.path("/etc/pgpdecd/pgpdecd.conf")
    orig = conf.read_bytes()
    # (/etc, where systemctl edit writes: the container's /run is a tmpfs
    # that the tree's run/ directory seen from the host is not)
    dropin = m.path("/etc/systemd/system/pgpdecd.service.d/test-group.conf")
    extra = "/run/pgpdecd/extra.sock"
    m.run(["groupadd", "--system", "pdextra"])
    m.run(["usermod", "-a", "-G", "pdextra", CLIENT_USER])
    try:
        # a group the daemon is in by SupplementaryGroups=; its own user
        dropin.parent.mkdir(parents=True, exist_ok=True)
        dropin.write_text("[Service]\nSupplementaryGroups=pdextra\n")
        conf.write_bytes(orig + f"\nlisten = unix:{extra}\nsocket-owner = pgpdecd\n"
                         "socket-group = pdextra\nsocket-mode = 0660\n".encode())
        m.systemctl("daemon-reload")
        r = m.systemctl("restart", "pgpdecd.service", check=False)
        st = box.active()
        assert "SupplementaryGroups=pdextra" in m.systemctl("cat", "pgpdecd.service").stdout
        assert r.returncode == 0 and st == "active", \
            f"restart: {r.returncode} {r.stderr} ({st})\n" + m.journal("pgpdecd.service", "-n", "8") + \
            m.systemctl("cat", "pgpdecd.service", check=False).stdout
        assert m.run(["stat", "-c", "%U:%G %a", extra]).stdout.split() == ["pgpdecd:pdextra", "660"]
        r = box.client("ping", sock=extra)
        assert r.returncode == 0, r.stderr
        r = box.client(f"{DATA}/a.gpg", sock=extra)
        assert (r.returncode, r.stdout) == (0, b"hello a\n"), r.stderr
    finally:
        conf.write_bytes(orig)
        dropin.unlink(missing_ok=True)
        m.systemctl("daemon-reload")
        m.systemctl("reset-failed", "pgpdecd.service", check=False)
        box.restart()


def test_stop_drains_in_flight_message(box, tmp_path):
    """systemctl stop (SIGTERM) while a 200 MB message is being sent: the
    daemon stops accepting, finishes the message (drain-timeout 30 s) and
    exits 0; the client gets the whole plaintext and exits 0."""
    m = box.m
    if box.active() != "active":
        box.restart()
    plain = os.urandom(BIG)
    data = box.gpg("-z", "0", "--encrypt", "-r", box.keys["a"]["fpr"], input=plain)
    want = hashlib.sha256(plain).hexdigest()
    del plain
    half = len(data) // 2
    out = tmp_path / "out"
    pid = box.main_pid()
    with open(out, "wb") as o:
        p = m.popen(["pgpdecd-client", "-s", SOCK, "-t", "60", "-"], user=CLIENT_USER,
                    stdin=subprocess.PIPE, stdout=o, stderr=subprocess.PIPE)
        err = []
        t = threading.Thread(target=lambda: err.append(p.stderr.read()))
        t.start()
        try:
            p.stdin.write(data[:half])
            p.stdin.flush()
            # in flight: plaintext is coming back
            wait_for(lambda: out.stat().st_size > 0, "plaintext of the first half", 60)
            t_stop = time.monotonic()
            m.systemctl("stop", "--no-block", "pgpdecd.service")
            wait_for(lambda: box.active() == "deactivating", "pgpdecd.service deactivating", 30)
            print(f"stop sent with {out.stat().st_size} of {BIG} plaintext bytes out; "
                  f"{box.active()}, status: {m.prop('pgpdecd.service', 'StatusText')}")
            p.stdin.write(data[half:])
            p.stdin.close()
            rc = p.wait(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            t.join()
    stderr = err[0].decode(errors="replace") if err else ""
    assert rc == 0, f"client exited {rc}: {stderr}"
    assert out.stat().st_size == BIG
    assert hashlib.sha256(out.read_bytes()).hexdigest() == want, "the plaintext differs"
    out.unlink()
    wait_for(lambda: box.active() in ("inactive", "failed"), "pgpdecd.service stopped", 60)
    print(f"stopped {time.monotonic() - t_stop:.1f} s after systemctl stop")
    assert box.active() == "inactive"
    assert m.prop("pgpdecd.service", "Result") == "success"
    assert m.prop("pgpdecd.service", "ExecMainStatus") == "0"
    j = m.journal(None, "_PID=" + str(pid))
    assert "Terminated: stopping; 1 messages in progress, 1 connections" in j, j
    # the next connection starts it again (the socket stayed with systemd)
    assert box.client("ping").returncode == 0
    assert box.main_pid() != pid


def test_kill9_under_load_loses_nothing(box):
    """SIGKILL of the daemon in the middle of a bench (8 connections, retry
    on, as installed): systemd restarts it (Restart=on-failure, 2 s) on the
    socket it kept, connections made meanwhile wait in its backlog, and the
    client sends again what was in flight: every request ends OK with the
    same plaintext, and some were sent again."""
    m = box.m
    if box.active() != "active":
        box.restart()
    restarts = int(m.prop("pgpdecd.service", "NRestarts"))
    pid = box.main_pid()
    n = 6000
    p = m.popen(["pgpdecd-client", "-s", SOCK, "-t", "60", "bench", "--concurrency", "8",
                 "--requests", str(n), "--json", f"{DATA}/a.gpg"], user=CLIENT_USER,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # in the middle: the killed daemon has served some of the requests
        wait_for(lambda: p.poll() is not None or
                 m.journal(None, f"_PID={pid}").count("[REQ] request ") >= 200,
                 "200 requests served", 60)
        assert p.poll() is None, "the bench ended before the kill"
        m.systemctl("kill", "--kill-who=main", "-s", "SIGKILL", "pgpdecd.service")
        t = time.monotonic()
        new = wait_for(lambda: box.active() == "active" and box.main_pid() not in (0, pid)
                       and box.main_pid(), "a new MainPID", 60)
        print(f"SIGKILL to pid {pid}: new MainPID {new} after {time.monotonic() - t:.1f} s")
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, err.decode(errors="replace")
    j = json.loads(out.decode().strip().splitlines()[-1])
    print({k: j[k] for k in ("ok", "failed", "mismatched", "resent", "seconds") if k in j})
    assert j["ok"] == n and j["failed"] == 0 and j["mismatched"] == 0, j
    assert j["plaintext_sha256"] == [hashlib.sha256(b"hello a\n").hexdigest().upper()], j
    assert j["resent"] > 0, j
    assert int(m.prop("pgpdecd.service", "NRestarts")) == restarts + 1
    assert m.journal(None, f"_PID={new}").count("[REQ] request ") > 0, "the new daemon served nothing"


def test_watchdog_restarts_a_stopped_daemon(box):
    """WatchdogSec=30s: a daemon that stops feeding the watchdog (SIGSTOP)
    is killed (SIGABRT) and restarted (Restart=on-failure)."""
    m = box.m
    if box.active() != "active":
        box.restart()
    assert m.prop("pgpdecd.service", "WatchdogUSec") == "30s"
    # It feeds the watchdog (every 15 s): systemd records the last
    # WATCHDOG=1 it got (until the first, the time it became ready).
    start = int(m.prop("pgpdecd.service", "ExecMainStartTimestampMonotonic"))
    fed = wait_for(lambda: int(m.prop("pgpdecd.service", "WatchdogTimestampMonotonic")) - start
                   > 5_000_000 and m.prop("pgpdecd.service", "WatchdogTimestamp"),
                   "a WATCHDOG=1 from the daemon", 25)
    print(f"last WATCHDOG=1 at {fed}")
    restarts = int(m.prop("pgpdecd.service", "NRestarts"))
    pid = box.main_pid()
    assert box.client("ping").returncode == 0, "the daemon died before SIGSTOP"
    t = time.monotonic()
    m.systemctl("kill", "--kill-who=main", "-s", "SIGSTOP", "pgpdecd.service")
    new = wait_for(lambda: box.active() == "active" and box.main_pid() not in (0, pid)
                   and box.main_pid(), "a new MainPID", 30 + 45 + 30)
    took = time.monotonic() - t
    print(f"SIGSTOP to pid {pid}: new MainPID {new} after {took:.1f} s")
    assert int(m.prop("pgpdecd.service", "NRestarts")) == restarts + 1
    j = m.journal("pgpdecd.service", "-n", "30")
    assert "Watchdog timeout (limit 30s)!" in j, j
    assert "Failed with result 'watchdog'" in j, j
    r = box.client("ping")
    assert r.returncode == 0, r.stderr
    r = box.client(f"{DATA}/a.gpg")
    assert (r.returncode, r.stdout) == (0, b"hello a\n"), r.stderr


MILTER_SCRIPT = """\
conn = mt.connect("unix:%(sock)s", 100, 0.1)
if conn == nil then error("cannot connect to the milter") end
local function ok(r, what) if r ~= nil then error(what .. ": " .. r) end end
ok(mt.negotiate(conn, nil, nil, nil), "negotiate")
-- only the steps the milter did not opt out of (SMFIP_NO*)
local function step(opt, what, f, ...)
  if not mt.test_option(conn, opt) then ok(f(conn, ...), what) end
end
step(SMFIP_NOCONNECT, "conninfo", mt.conninfo, "client.test.example", "127.0.0.1")
step(SMFIP_NOHELO, "helo", mt.helo, "client.test.example")
step(SMFIP_NOMAIL, "mailfrom", mt.mailfrom, "<alice@test.example>")
step(SMFIP_NORCPT, "rcptto", mt.rcptto, "<bob@test.example>")
step(SMFIP_NOHDRS, "header", mt.header, "From", "alice@test.example")
step(SMFIP_NOHDRS, "header", mt.header, "To", "bob@test.example")
step(SMFIP_NOHDRS, "header", mt.header, "Subject", "numbers")
step(SMFIP_NOEOH, "eoh", mt.eoh)
step(SMFIP_NOBODY, "body", mt.bodyfile, "%(body)s")
ok(mt.eom(conn), "eom")
mt.echo("reply " .. string.char(mt.getreply(conn)))
mt.echo("body replaced " .. tostring(mt.eom_check(conn, MT_BODYCHANGE, "%(plain)s")))
mt.echo("status " .. tostring(mt.getheader(conn, "X-Pgpdecd-Status", 0)))
mt.disconnect(conn)
"""


def test_milter_service(box):
    m = box.m
    if box.active() != "active":
        box.restart()
    m.systemctl("start", "pgpdecd-milter.service")
    assert box.active("pgpdecd-milter.service") == "active"
    wait_for(lambda: m.run(["test", "-S", MILTER_SOCK], check=False).returncode == 0,
             MILTER_SOCK, 30)
    assert m.run(["stat", "-c", "%U:%G %a", MILTER_SOCK]).stdout.split() == \
        ["pgpdecd-milter:pgpdecd-milter", "660"]
    plain = "Secret quarterly numbers.\nLine two.\n"
    arm = box.gpg("--armor", "--encrypt", "-r", box.keys["a"]["fpr"], input=plain.encode())
    body = box.put("mail.body", arm.replace(b"\n", b"\r\n"))
    script = box.put("mail.lua", (MILTER_SCRIPT % {
        "sock": MILTER_SOCK, "body": body,
        "plain": plain.replace("\n", "\\r\\n")}).encode())
    r = m.run(["miltertest", "-s", script], user=MTA_USER, check=False)
    print("miltertest:", r.returncode, r.stdout, r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    # 'c': continue (the mail goes on, with the edits)
    assert "reply c\n" in r.stdout and "body replaced true\n" in r.stdout, r.stdout
    assert re.search(r"^status +decrypted; pieces=1; decrypted=1", r.stdout, re.M), r.stdout
    j = m.journal("pgpdecd-milter.service")
    assert "written decrypted" in j and "body=replaced" in j, j
    r = m.systemctl("stop", "pgpdecd-milter.service", check=False)
    assert r.returncode == 0, r.stderr
    assert box.active("pgpdecd-milter.service") == "inactive"
    assert m.prop("pgpdecd-milter.service", "Result") == "success"
    assert m.prop("pgpdecd-milter.service", "ExecMainStatus") == "0"
    assert m.run(["test", "-e", MILTER_SOCK], check=False).returncode != 0, "socket left behind"
