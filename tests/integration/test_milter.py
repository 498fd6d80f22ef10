# SPDX-License-Identifier: MIT
"""pgpdecd-milter with a real Postfix (postfix_harness) and the real daemon:
before-queue (smtpd_milters) an inline and a PGP/MIME mail are decrypted,
a plain mail passes unchanged, forged result headers are removed, the MTA's
Received: header is neither lost nor doubled, a tampered mail is refused
550 5.7.1, the daemon down gives 451 4.7.1 (and the same mail goes through
once it is back), a mail over max-message-size 552 5.3.4; the after-queue
pattern (content_filter to a second smtpd running the milter) decrypts.

Needs root, postfix, swaks, gpg and the built daemon and milter."""
import os
import shutil
import signal
import subprocess
import time
from email import message_from_bytes
from pathlib import Path

import pytest

from conftest import kill_gpg_agent
from mailcorpus import armor, tamper
from postfix_harness import Postfix, require_postfix

SRC = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PD_BUILD_DIR", SRC / "build")).resolve()
MILTER = BUILD / "mail" / "pgpdecd-milter"
DAEMON = BUILD / "daemon" / "pgpdecd"
KEYS = SRC / "tests" / "data" / "keys"

pytestmark = pytest.mark.skipif(
    not (shutil.which("gpg") and DAEMON.exists() and MILTER.exists()),
    reason="needs gpg, the built daemon and pgpdecd-milter")

BODY = "Quarterly audit report.\nLine two, \u00e4\u00f6\u00fc.\n"
HDR = ("From: alice@test.example\nTo: bob@test.example\nSubject: report\n"
       "Message-ID: <m1@test.example>\n")


def wait_path(p, timeout=10):
    t = time.time() + timeout
    while not Path(p).exists():
        assert time.time() < t, f"{p} did not appear"
        time.sleep(0.05)


class Daemon:
    def __init__(self, sock, log, *extra):
        self.sock, self.log = Path(sock), Path(log)
        self.extra = list(extra)
        self.p = None

    def start(self):
        if self.sock.exists():
            self.sock.unlink()
        self.p = subprocess.Popen([str(DAEMON), "--listen", f"unix:{self.sock}", "--key",
                                   str(KEYS / "rsa2048.gpg"), "--workers", "1", *self.extra],
                                  stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        wait_path(self.sock)

    def stop(self):
        if self.p:
            self.p.terminate()
            self.p.wait(timeout=30)
            self.p = None


class Milter:
    def __init__(self, d, name, daemon_sock, **conf):
        self.dir = Path(d)
        self.sock = self.dir / f"{name}.sock"
        self.log = self.dir / f"{name}.log"
        lines = {"listen": f"unix:{self.sock}", "socket-group": "postfix", "socket-mode": "0660",
                 "socket": str(daemon_sock), "timeout": "10s", "concurrency": "2",
                 "spool-dir": str(self.dir)}
        lines.update(conf)
        self.conf = self.dir / f"{name}.conf"
        self.conf.write_text("# test\n" + "".join(f"{k} = {v}\n" for k, v in lines.items()))
        self.p = None

    def start(self):
        r = subprocess.run([str(MILTER), "-c", str(self.conf), "--check-config"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        self.p = subprocess.Popen([str(MILTER), "-c", str(self.conf), "--foreground"],
                                  stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        wait_path(self.sock)
        st = self.sock.stat()
        assert oct(st.st_mode & 0o777) == "0o660"

    def stop(self):
        if self.p:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
            self.p = None

    def text(self):
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    require_postfix()
    # postfix (smtpd) must reach the milter sockets: a 0755 directory
    d = Path(subprocess.check_output(["mktemp", "-d", "/var/tmp/pd-milter-XXXXXX"], text=True).strip())
    d.chmod(0o755)
    home = d / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--yes", "--quiet", "--trust-model", "always"]
    subprocess.run(gpg + ["--import", str(KEYS / "rsa2048-public.gpg")], check=True, capture_output=True)
    out = subprocess.run(gpg + ["--with-colons", "--list-keys"], check=True, capture_output=True,
                         text=True).stdout
    fpr = [l.split(":")[9] for l in out.splitlines() if l.startswith("fpr:")][0]

    def encrypt(data: bytes, binary=False) -> bytes:
        return subprocess.run(gpg + ([] if binary else ["--armor"]) + ["--encrypt", "-r", fpr],
                              input=data, check=True, capture_output=True).stdout

    daemon = Daemon(d / "pd.sock", d / "daemon.log")
    daemon.start()
    milter = Milter(d, "milter", daemon.sock, **{"max-message-size": "1M"})
    milter.start()
    yield {"dir": d, "encrypt": encrypt, "daemon": daemon, "milter": milter,
           "artifacts": tmp_path_factory.mktemp("milter-postfix")}
    milter.stop()
    daemon.stop()
    kill_gpg_agent(home)
    if os.environ.get("PD_KEEP_POSTFIX") != "1":
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def pf(env):
    p = Postfix(artifacts=env["artifacts"] / "before-queue",
                main={"milter_default_action": "tempfail", "milter_protocol": "6"})
    p.smtpd.options["smtpd_milters"] = f"unix:{env['milter'].sock}"
    p.start()
    yield p
    p.stop()


def send_and_get(pf, mail: bytes, rcpt="bob@test.example"):
    before = len(pf.messages())
    r = pf.send(mail, "alice@test.example", [rcpt])
    assert r.code == 250, r
    pf.wait_delivered(before + 1)
    msgs = [m for m in pf.messages() if m.queue_id == r.queue_id]
    assert len(msgs) == 1, (r, pf.messages())
    return r, msgs[0].data


def check_received(data: bytes):
    # exactly one Received: the before-queue smtpd's own, kept in place at the top
    heads = data.split(b"\n\n", 1)[0]
    assert heads.lower().count(b"\nreceived:") + heads.lower().startswith(b"received:") == 1, heads
    assert heads.lower().startswith(b"received:"), heads


def test_inline(env, pf):
    mail = (HDR + "Content-Type: text/plain; charset=utf-8\n\n").encode() + env["encrypt"](BODY.encode())
    r, data = send_and_get(pf, mail)
    check_received(data)
    m = message_from_bytes(data)
    assert m["X-Pgpdecd-Status"].startswith("decrypted"), data
    assert m["Subject"] == "report" and m["Message-ID"] == "<m1@test.example>"
    assert b"BEGIN PGP" not in data
    assert m.get_payload(decode=True).decode(m.get_content_charset() or "utf-8") == BODY
    log = env["milter"].text()
    assert f"{r.queue_id}: written decrypted" in log, log
    assert "report" not in log and "Quarterly" not in log   # never the subject or plaintext


def test_pgp_mime(env, pf):
    entity = "Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: 8bit\n\n" + BODY
    mail = (HDR + "MIME-Version: 1.0\nContent-Type: multipart/encrypted;\n"
            ' protocol="application/pgp-encrypted"; boundary="b1"\n\n'
            "--b1\nContent-Type: application/pgp-encrypted\n\nVersion: 1\n\n"
            "--b1\nContent-Type: application/octet-stream\n\n").encode() \
        + env["encrypt"](entity.encode()) + b"\n--b1--\n"
    r, data = send_and_get(pf, mail)
    check_received(data)
    m = message_from_bytes(data)
    assert m["X-Pgpdecd-Status"].startswith("decrypted"), data
    assert m.get_content_type() == "text/plain", data
    assert len(m.get_all("Content-Type")) == 1
    assert m.get_payload(decode=True).decode("utf-8") == BODY
    assert b"multipart/encrypted" not in data and b"BEGIN PGP" not in data


def test_empty_decrypted_body(env, pf):
    # The decrypted entity has an empty body: the ciphertext must not stay
    # in place (a zero-length smfi_replacebody sends nothing at all).
    entity = "Content-Type: text/plain; charset=utf-8\n\n"
    mail = (HDR + "MIME-Version: 1.0\nContent-Type: multipart/encrypted;\n"
            ' protocol="application/pgp-encrypted"; boundary="b1"\n\n'
            "--b1\nContent-Type: application/pgp-encrypted\n\nVersion: 1\n\n"
            "--b1\nContent-Type: application/octet-stream\n\n").encode() \
        + env["encrypt"](entity.encode()) + b"\n--b1--\n"
    r, data = send_and_get(pf, mail)
    m = message_from_bytes(data)
    assert m["X-Pgpdecd-Status"].startswith("decrypted"), data
    assert b"BEGIN PGP" not in data and b"multipart/encrypted" not in data, data
    assert m.get_payload(decode=True).strip() == b""


def test_plain_and_forged(env, pf):
    body = b"nothing secret\nsecond line\n"
    mail = (HDR + "X-Pgpdecd-Status: decrypted\nX-Pgpdecd-Status: forged too\n\n").encode() + body
    r, data = send_and_get(pf, mail)
    check_received(data)
    m = message_from_bytes(data)
    assert m.get_all("X-Pgpdecd-Status") == [m["X-Pgpdecd-Status"]], data
    assert not m["X-Pgpdecd-Status"].startswith("decrypted"), data
    assert data.split(b"\n\n", 1)[1] == body    # the body untouched
    assert f"{r.queue_id}: written not-encrypted" in env["milter"].text()


def test_tampered_rejected(env, pf):
    before = len(pf.messages())
    ct = armor(tamper(env["encrypt"](BODY.encode(), binary=True))).decode()
    mail = (HDR + "\n" + ct).encode()
    r = pf.send(mail, "alice@test.example", ["bob@test.example"])
    assert r.code == 550, r
    assert "5.7.1" in r.text and "INTEGRITY" in r.text, r
    assert "/" not in r.text.split("5.7.1", 1)[1]          # no path, no detail
    time.sleep(0.5)
    assert len(pf.messages()) == before


def test_too_big(env, pf):
    mail = (HDR + "\n").encode() + b"x" * 70 + b"\n"
    mail += b"y" * 76 * 15000   # > 1M
    r = pf.send(mail.replace(b"y" * 76, b"y" * 75 + b"\n"), "alice@test.example", ["bob@test.example"])
    assert r.code == 552 and "5.3.4" in r.text, r


def test_daemon_down(env, pf):
    """The daemon down: 451 4.7.1, nothing delivered; back up: the same mail passes."""
    d = env["dir"]
    down = Daemon(d / "down.sock", d / "down.log")
    m2 = Milter(d, "milter-down", down.sock)
    m2.start()
    p = Postfix(artifacts=env["artifacts"] / "down",
                main={"milter_default_action": "tempfail", "milter_protocol": "6"})
    p.smtpd.options["smtpd_milters"] = f"unix:{m2.sock}"
    try:
        p.start()
        mail = (HDR + "\n").encode() + env["encrypt"](BODY.encode())
        r = p.send(mail, "alice@test.example", ["bob@test.example"])
        assert r.code == 451 and "4.7.1" in r.text, r
        assert "deferred unavailable" in m2.text(), m2.text()
        down.start()
        r = p.send(mail, "alice@test.example", ["bob@test.example"])
        assert r.code == 250, r
        got = p.wait_delivered(1)["bob@test.example"][0]
        assert message_from_bytes(got)["X-Pgpdecd-Status"].startswith("decrypted")
    finally:
        p.stop()
        m2.stop()
        down.stop()


def test_pooled_connection_closed_by_the_daemon(env):
    """The milter keeps its daemon connections between mails; the daemon
    closes idle ones (--idle-timeout) and a restart closes them all.  The
    next mail on such a connection is sent again on a fresh one, not
    deferred."""
    d = env["dir"]
    idle = Daemon(d / "idle.sock", d / "idle.log", "--idle-timeout", "1s")
    idle.start()
    m3 = Milter(d, "milter-idle", idle.sock, concurrency="1")
    m3.start()
    p = Postfix(artifacts=env["artifacts"] / "idle",
                main={"milter_default_action": "tempfail", "milter_protocol": "6"})
    p.smtpd.options["smtpd_milters"] = f"unix:{m3.sock}"
    try:
        p.start()
        mail = (HDR + "\n").encode() + env["encrypt"](BODY.encode())
        for i, between in enumerate(["idle", "restart"]):
            r = p.send(mail, "alice@test.example", ["bob@test.example"])
            assert r.code == 250, r
            if between == "idle":
                time.sleep(2.5)      # past the daemon's idle timeout: it closed the connection
            else:
                idle.stop()
                idle.start()
        r = p.send(mail, "alice@test.example", ["bob@test.example"])
        assert r.code == 250, (r, m3.text())
        got = p.wait_delivered(3)["bob@test.example"]
        assert all(message_from_bytes(g)["X-Pgpdecd-Status"].startswith("decrypted") for g in got)
    finally:
        p.stop()
        m3.stop()
        idle.stop()


def test_daemon_over_tls(env):
    """The milter reaches the daemon over TCP with mutual TLS (connect,
    tls-ca, tls-cert, tls-key): a mail is decrypted; with a client
    certificate the daemon does not accept, mail is deferred."""
    from test_daemon_tls import free_port, make_ca, make_cert, wait_port
    d = env["dir"] / "pki"
    d.mkdir()
    ca = make_ca(d, "ca")
    other = make_ca(d, "other")
    srv = make_cert(d, "localhost", ca, 'dns_name = "localhost"\nip_address = "127.0.0.1"\n'
                    "tls_www_server\nexpiration_days = 30\n")
    good = make_cert(d, "client", ca, "tls_www_client\nexpiration_days = 30\n")
    foreign = make_cert(d, "foreign", other, "tls_www_client\nexpiration_days = 30\n")
    port = free_port()
    log = open(env["dir"] / "tls-daemon.log", "ab")
    dp = subprocess.Popen([str(DAEMON), "--listen", f"tcp:127.0.0.1:{port}", "--tls-cert", str(srv[1]),
                           "--tls-key", str(srv[0]), "--tls-ca", str(ca[1]),
                           "--key", str(KEYS / "rsa2048.gpg"), "--workers", "1"],
                          stdout=log, stderr=subprocess.STDOUT)
    milters = []
    p = None
    try:
        wait_port(port)
        tls = {"socket": "", "connect": f"127.0.0.1:{port}", "tls-ca": str(ca[1]),
               "tls-server-name": "localhost"}
        good_m = Milter(d, "milter-tls", None, **tls, **{"tls-cert": str(good[1]), "tls-key": str(good[0])})
        bad_m = Milter(d, "milter-tls-bad", None, **tls,
                       **{"tls-cert": str(foreign[1]), "tls-key": str(foreign[0])})
        for m in (good_m, bad_m):
            m.start()
            milters.append(m)
        p = Postfix(artifacts=env["artifacts"] / "tls",
                    main={"milter_default_action": "tempfail", "milter_protocol": "6"})
        p.smtpd.options["smtpd_milters"] = f"unix:{good_m.sock}"
        bad_port = p.add_smtpd("badtls", options={"smtpd_milters": f"unix:{bad_m.sock}"})
        p.start()
        mail = (HDR + "\n").encode() + env["encrypt"](BODY.encode())
        r = p.send(mail, "alice@test.example", ["bob@test.example"])
        assert r.code == 250, (r, good_m.text())
        got = p.wait_delivered(1)["bob@test.example"][0]
        assert message_from_bytes(got)["X-Pgpdecd-Status"].startswith("decrypted")
        r = p.send(mail, "alice@test.example", ["bob@test.example"], port=bad_port)
        assert r.code == 451, (r, bad_m.text())
    finally:
        if p:
            p.stop()
        for m in milters:
            m.stop()
        dp.terminate()
        dp.wait(timeout=30)
        log.close()


def test_after_queue(env):
    """main smtpd -> queue -> smtp client -> smtpd with the milter -> queue -> delivery."""
    p = Postfix(artifacts=env["artifacts"] / "after-queue",
                main={"milter_default_action": "tempfail", "milter_protocol": "6"})
    port = p.add_smtpd("milter", options={"content_filter": "", "smtpd_milters": f"unix:{env['milter'].sock}",
                                          "receive_override_options": "no_address_mappings"})
    p.after_queue_filter(name="pgpdecrypt", port=port)
    try:
        p.start()
        mail = (HDR + "Content-Type: text/plain; charset=utf-8\n\n").encode() + env["encrypt"](BODY.encode())
        r = p.send(mail, "alice@test.example", ["bob@test.example"])
        assert r.code == 250, r
        got = p.wait_delivered(1)["bob@test.example"][0]
        m = message_from_bytes(got)
        assert m["X-Pgpdecd-Status"].startswith("decrypted"), got
        assert m.get_payload(decode=True).decode("utf-8") == BODY
        # two smtpd hops, each one Received:
        assert len(m.get_all("Received")) == 2, got
    finally:
        p.stop()


def test_two_mails_one_connection(env, pf):
    """Per-message state is reset: an encrypted and a plain mail in one SMTP session."""
    import smtplib
    enc = (HDR + "Content-Type: text/plain; charset=utf-8\n\n").encode() + env["encrypt"](BODY.encode())
    plain = (HDR.replace("m1@", "m2@") + "\nplain second\n").encode()
    before = len(pf.messages())
    with smtplib.SMTP("127.0.0.1", pf.port, timeout=60) as s:
        for m in (enc, plain):
            s.sendmail("alice@test.example", ["carol@test.example"], m.replace(b"\n", b"\r\n"))
    pf.wait_delivered(before + 2)
    got = sorted((m.data for m in pf.messages() if m.recipient == "carol@test.example"),
                 key=lambda d: b"m2@" in d)
    a, b = (message_from_bytes(d) for d in got[-2:])
    assert a["X-Pgpdecd-Status"].startswith("decrypted")
    assert a.get_payload(decode=True).decode("utf-8") == BODY
    assert b["X-Pgpdecd-Status"].startswith("not-encrypted")
    assert b.get_payload() == "plain second\n"
    check_received(got[-1])


def test_quarantine(env):
    """on-failure = quarantine: the tampered mail is accepted, tagged and held."""
    d = env["dir"]
    mq = Milter(d, "milter-q", env["daemon"].sock, **{"on-failure": "quarantine"})
    mq.start()
    p = Postfix(artifacts=env["artifacts"] / "quarantine",
                main={"milter_default_action": "tempfail", "milter_protocol": "6"})
    p.smtpd.options["smtpd_milters"] = f"unix:{mq.sock}"
    try:
        p.start()
        ct = armor(tamper(env["encrypt"](BODY.encode(), binary=True))).decode()
        r = p.send((HDR + "\n" + ct).encode(), "alice@test.example", ["bob@test.example"])
        assert r.code == 250, r
        q = p.wait_queue(lambda q: any(e["queue_id"] == r.queue_id and e["queue_name"] == "hold"
                                       for e in q))
        assert q and not p.delivered()
        assert f"{r.queue_id}: quarantined failed status=INTEGRITY" in mq.text(), mq.text()
    finally:
        p.stop()
        mq.stop()
