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
import subprocess
from email import message_from_bytes

import pytest

from conftest import kill_gpg_agent
from mailcorpus import armor, tamper
from mailgw import DAEMON, KEYS, SECRET_KEY, Daemon, Milter, _check_exit, _stop, gpg_home, wait_for, workdir
from postfix_harness import Postfix, require_postfix

pytestmark = pytest.mark.skipif(not (shutil.which("gpg") and DAEMON.exists()),
                                reason="needs gpg and the built daemon")

BODY = "Quarterly audit report.\nLine two, \u00e4\u00f6\u00fc.\n"
HDR = ("From: alice@test.example\nTo: bob@test.example\nSubject: report\n"
       "Message-ID: <m1@test.example>\n")
# the milter configuration of these tests (mailgw.Milter's defaults but these)
MILTER_CONF = {"timeout": "10s", "concurrency": "2"}


def milter(d, name, daemon_sock, **conf):
    """A pgpdecd-milter in d/NAME (mailgw.Milter) with MILTER_CONF, conf
    overriding it; not started."""
    return Milter(d, daemon_sock, name=name, **{**MILTER_CONF, **conf})


def milter_postfix(env, name, m):
    """A Postfix (not started) whose main smtpd runs milter m, tempfail
    when it is unreachable; artifacts in env["artifacts"]/NAME."""
    p = Postfix(artifacts=env["artifacts"] / name,
                main={"milter_default_action": "tempfail", "milter_protocol": "6"})
    p.smtpd.options["smtpd_milters"] = m.spec
    return p


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    require_postfix()
    # postfix (smtpd) must reach the milter sockets: a 0755 directory
    d = workdir("pd-milter-")
    home, gpg = gpg_home(d)
    subprocess.run(gpg + ["--import", str(KEYS / "rsa2048-public.gpg")], check=True, capture_output=True)
    out = subprocess.run(gpg + ["--with-colons", "--list-keys"], check=True, capture_output=True,
                         text=True).stdout
    fpr = [l.split(":")[9] for l in out.splitlines() if l.startswith("fpr:")][0]

    def encrypt(data: bytes, binary=False) -> bytes:
        return subprocess.run(gpg + ([] if binary else ["--armor"]) + ["--encrypt", "-r", fpr],
                              input=data, check=True, capture_output=True).stdout

    daemon = Daemon(d, d / "daemon.log", workers=1)
    m = milter(d, "milter", daemon.sock, **{"max-message-size": "1M"})
    try:
        daemon.start()
        m.start()
        yield {"dir": d, "encrypt": encrypt, "daemon": daemon, "milter": m,
               "artifacts": tmp_path_factory.mktemp("milter-postfix")}
    finally:
        try:
            stop_both(m, daemon)
        finally:
            kill_gpg_agent(home)
            if os.environ.get("PD_KEEP_POSTFIX") != "1":
                shutil.rmtree(d, ignore_errors=True)


def stop_both(*procs):
    """Stop each (mailgw: asserting a clean exit), all of them even when one
    fails; then raise the first failure."""
    errors = []
    for x in procs:
        try:
            x.stop()
        except Exception as e:  # noqa: BLE001 - raised below
            errors.append(e)
    if errors:
        raise errors[0]


@pytest.fixture(scope="module")
def pf(env):
    p = milter_postfix(env, "before-queue", env["milter"])
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
    assert r.queue_id is None, r
    # refused before the queue: a plain mail sent after it is the only one delivered
    plain = (HDR.replace("m1@", "after-tampered@") + "\nplain\n").encode()
    r2, _ = send_and_get(pf, plain)
    assert [m.queue_id for m in pf.messages()[before:]] == [r2.queue_id]


def test_too_big(env, pf):
    mail = (HDR + "\n").encode() + b"x" * 70 + b"\n"
    mail += b"y" * 76 * 15000   # > 1M
    r = pf.send(mail.replace(b"y" * 76, b"y" * 75 + b"\n"), "alice@test.example", ["bob@test.example"])
    assert r.code == 552 and "5.3.4" in r.text, r


def test_daemon_down(env, pf):
    """The daemon down: 451 4.7.1, nothing delivered; back up: the same mail passes."""
    d = env["dir"]
    down = Daemon(d / "down", d / "down.log", workers=1)
    m2 = milter(d, "milter-down", down.sock)
    p = milter_postfix(env, "down", m2)
    try:
        m2.start()
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
        stop_both(p, m2, down)


def test_pooled_connection_closed_by_the_daemon(env):
    """The milter keeps its daemon connections between mails; the daemon
    closes idle ones (--idle-timeout) and a restart closes them all.  The
    next mail on such a connection is sent again on a fresh one, not
    deferred."""
    d = env["dir"]
    # debug: the daemon logs each connection it closes ("closing: idle timeout")
    idle = Daemon(d / "idle", d / "idle.log", workers=1,
                  extra=("--idle-timeout", "1s", "--log-level", "debug"))
    m3 = milter(d, "milter-idle", idle.sock, concurrency="1")
    p = milter_postfix(env, "idle", m3)
    try:
        idle.start()
        m3.start()
        p.start()
        mail = (HDR + "\n").encode() + env["encrypt"](BODY.encode())
        for i, between in enumerate(["idle", "restart"]):
            r = p.send(mail, "alice@test.example", ["bob@test.example"])
            assert r.code == 250, r
            if between == "idle":
                # past the daemon's idle timeout: it closed the milter's connection
                wait_for(lambda: "closing: idle timeout" in idle.text(),
                         "the daemon closing the idle connection", timeout=30)
            else:
                idle.stop()
                idle.start()
        r = p.send(mail, "alice@test.example", ["bob@test.example"])
        assert r.code == 250, (r, m3.text())
        got = p.wait_delivered(3)["bob@test.example"]
        assert all(message_from_bytes(g)["X-Pgpdecd-Status"].startswith("decrypted") for g in got)
    finally:
        stop_both(p, m3, idle)


def test_daemon_over_tls(env):
    """The milter reaches the daemon over TCP with mutual TLS (connect,
    tls-ca, tls-cert, tls-key): a mail is decrypted; with a client
    certificate the daemon does not accept, mail is deferred."""
    from test_daemon_tls import free_port, make_pki, wait_port
    d = env["dir"] / "pki"
    d.mkdir()
    pki = make_pki(d)
    ca, srv, good, foreign = pki["ca"], pki["srv"], pki["good"], pki["foreign"]
    port = free_port()
    logpath = env["dir"] / "tls-daemon.log"
    log = open(logpath, "ab")
    dp = subprocess.Popen([str(DAEMON), "--listen", f"tcp:127.0.0.1:{port}", "--tls-cert", str(srv[1]),
                           "--tls-key", str(srv[0]), "--tls-ca", str(ca[1]),
                           "--key", str(SECRET_KEY), "--workers", "1"],
                          stdout=log, stderr=subprocess.STDOUT)
    tls = {"socket": "", "connect": f"127.0.0.1:{port}", "tls-ca": str(ca[1]),
           "tls-server-name": "localhost"}
    good_m = milter(d, "milter-tls", None, **tls, **{"tls-cert": str(good[1]), "tls-key": str(good[0])})
    bad_m = milter(d, "milter-tls-bad", None, **tls,
                   **{"tls-cert": str(foreign[1]), "tls-key": str(foreign[0])})
    p = milter_postfix(env, "tls", good_m)
    bad_port = p.add_smtpd("badtls", options={"smtpd_milters": bad_m.spec})
    try:
        wait_port(port)
        assert dp.poll() is None, logpath.read_text()
        good_m.start()
        bad_m.start()
        p.start()
        mail = (HDR + "\n").encode() + env["encrypt"](BODY.encode())
        r = p.send(mail, "alice@test.example", ["bob@test.example"])
        assert r.code == 250, (r, good_m.text())
        got = p.wait_delivered(1)["bob@test.example"][0]
        assert message_from_bytes(got)["X-Pgpdecd-Status"].startswith("decrypted")
        r = p.send(mail, "alice@test.example", ["bob@test.example"], port=bad_port)
        assert r.code == 451 and "4.7.1" in r.text, (r, bad_m.text())
        assert len(p.messages()) == 1
    finally:
        try:
            stop_both(p, good_m, bad_m)
        finally:
            rc = _stop(dp)
            log.close()
        _check_exit("pgpdecd (TLS)", rc, logpath)


def test_after_queue(env):
    """main smtpd -> queue -> smtp client -> smtpd with the milter -> queue -> delivery."""
    p = Postfix(artifacts=env["artifacts"] / "after-queue",
                main={"milter_default_action": "tempfail", "milter_protocol": "6"})
    port = p.add_smtpd("milter", options={"content_filter": "", "smtpd_milters": env["milter"].spec,
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
    mq = milter(d, "milter-q", env["daemon"].sock, **{"on-failure": "quarantine"})
    p = milter_postfix(env, "quarantine", mq)
    try:
        mq.start()
        p.start()
        ct = armor(tamper(env["encrypt"](BODY.encode(), binary=True))).decode()
        r = p.send((HDR + "\n" + ct).encode(), "alice@test.example", ["bob@test.example"])
        assert r.code == 250, r
        q = p.wait_queue(lambda q: any(e["queue_id"] == r.queue_id and e["queue_name"] == "hold"
                                       for e in q))
        assert q and not p.delivered()
        assert f"{r.queue_id}: quarantined failed status=INTEGRITY" in mq.text(), mq.text()
    finally:
        stop_both(p, mq)
