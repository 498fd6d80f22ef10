# SPDX-License-Identifier: MIT
"""pgpdecd-milter's recipient-binding with a real Postfix and the real
daemon: whoever can mail an address behind the gateway must not have a
ciphertext meant for someone else decrypted into their own mailbox.  The
daemon holds bob's key (User ID bob@test.example) and the suite's RSA key
(rsa@test).  With recipient-binding = address a mail encrypted to bob is
decrypted for RCPT bob@test.example, left encrypted (no-key, exactly as
for a key the daemon lacks) for carol@test.example, and for both when
both are recipients of one transaction (one plaintext would reach both);
with domain, any recipient in bob's domain; with none (the default) any
recipient, as before.

Needs root, postfix, swaks, gpg and the built daemon and milter."""
import os
import shutil
import subprocess
from email import message_from_bytes

import pytest

from conftest import kill_gpg_agent
from mailgw import DAEMON, Daemon, Milter, gpg_home, workdir
from postfix_harness import Postfix, require_postfix

pytestmark = pytest.mark.skipif(not (shutil.which("gpg") and DAEMON.exists()),
                                reason="needs gpg and the built daemon")

BODY = b"Payroll for March, bound to bob 7d1e.\n"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    require_postfix()
    d = workdir("pd-bind-")
    home, gpg = gpg_home(d)
    gpg += ["--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run(gpg + ["--quick-gen-key", "Bob <Bob@Test.Example>", "future-default", "default", "never"],
                   check=True, capture_output=True)
    key = d / "bob.gpg"
    key.write_bytes(subprocess.run(gpg + ["--export-secret-keys", "bob@test.example"], check=True,
                                   capture_output=True).stdout)
    os.chmod(key, 0o600)

    def mail(to):
        ct = subprocess.run(gpg + ["--armor", "--encrypt", "-r", "bob@test.example"], input=BODY,
                            check=True, capture_output=True).stdout
        return (f"From: mallory@test.example\nTo: {to}\nSubject: pay\nMessage-ID: <b1@test.example>\n"
                "Content-Type: text/plain\n\n").encode() + ct

    daemon = Daemon(d, d / "daemon.log", workers=1, extra=["--key", str(key)])
    daemon.start()
    try:
        yield {"dir": d, "mail": mail, "daemon": daemon, "artifacts": tmp_path_factory.mktemp("bind-postfix")}
    finally:
        try:
            daemon.stop()
        finally:
            kill_gpg_agent(home)
            if os.environ.get("PD_KEEP_POSTFIX") != "1":
                shutil.rmtree(d, ignore_errors=True)


def gateway(env, binding):
    """A milter with recipient-binding = binding (None: the setting not
    given) behind a real Postfix, both started."""
    conf = {"timeout": "10s", "concurrency": "2"}
    if binding:
        conf["recipient-binding"] = binding
    m = Milter(env["dir"], env["daemon"].sock, name=f"milter-{binding}", **conf)
    m.start()
    p = Postfix(artifacts=env["artifacts"] / str(binding),
                main={"milter_default_action": "tempfail", "milter_protocol": "6"})
    p.smtpd.options["smtpd_milters"] = m.spec
    p.start()
    return m, p


def deliver(p, mail, rcpts):
    """Send one transaction; {recipient: (X-Pgpdecd-Status, decrypted body or None)}."""
    before = len(p.messages())
    r = p.send(mail, "mallory@test.example", rcpts)
    assert r.code == 250, r
    p.wait_delivered(before + len(rcpts))
    got = {}
    for m in p.messages():
        if m.queue_id == r.queue_id:
            msg = message_from_bytes(m.data)
            body = msg.get_payload(decode=True)
            got[m.recipient] = (msg["X-Pgpdecd-Status"], body if b"BEGIN PGP" not in body else None)
    assert sorted(got) == sorted(rcpts), got
    return got


@pytest.mark.parametrize("binding", ["address", "domain", None])
def test_recipient_binding(env, binding):
    m, p = gateway(env, binding)
    try:
        bob, carol = "bob@test.example", "carol@test.example"
        got = deliver(p, env["mail"](bob), [bob])
        assert got[bob][0].startswith("decrypted") and got[bob][1] == BODY, got
        got = deliver(p, env["mail"](carol), [carol])
        if binding == "address":
            assert got[carol][0].startswith("no-key") and got[carol][1] is None, got
        else:  # the same domain, or no binding
            assert got[carol][0].startswith("decrypted") and got[carol][1] == BODY, got
        # one transaction, both: one plaintext would reach carol too
        got = deliver(p, env["mail"](bob), [bob, carol])
        for who in (bob, carol):
            if binding == "address":
                assert got[who][0].startswith("no-key") and got[who][1] is None, got
            else:
                assert got[who][0].startswith("decrypted") and got[who][1] == BODY, got
        # upper case in the envelope is the same address
        got = deliver(p, env["mail"](bob), ["BOB@test.example"])
        assert list(got.values())[0][1] == BODY, got
        log = m.text()
        assert "Payroll" not in log
    finally:
        p.stop()
        m.stop()


def test_after_queue_one_recipient_per_transaction(env):
    """contrib/postfix/README.md's recipe for per-person keys: after the
    queue, the content filter's smtp client hands the milter one recipient
    per transaction (pgpdecrypt_destination_recipient_limit = 1), so one
    mail to bob and carol comes out decrypted for bob and encrypted for
    carol."""
    m = Milter(env["dir"], env["daemon"].sock, name="milter-aq",
               **{"timeout": "10s", "concurrency": "2", "recipient-binding": "address"})
    m.start()
    p = Postfix(artifacts=env["artifacts"] / "after-queue",
                main={"milter_default_action": "tempfail", "milter_protocol": "6",
                      "pgpdecrypt_destination_recipient_limit": "1"})
    port = p.add_smtpd("milter", options={"content_filter": "", "smtpd_milters": m.spec,
                                          "receive_override_options": "no_address_mappings"})
    p.after_queue_filter(name="pgpdecrypt", port=port)
    try:
        p.start()
        bob, carol = "bob@test.example", "carol@test.example"
        r = p.send(env["mail"](f"{bob}, {carol}"), "mallory@test.example", [bob, carol])
        assert r.code == 250, r
        got = p.wait_delivered(2)
        b = message_from_bytes(got[bob][0])
        c = message_from_bytes(got[carol][0])
        assert b["X-Pgpdecd-Status"].startswith("decrypted") and b.get_payload(decode=True) == BODY, got
        assert c["X-Pgpdecd-Status"].startswith("no-key") and b"BEGIN PGP" in c.get_payload(decode=True), got
    finally:
        p.stop()
        m.stop()


def test_address_binding_takes_no_domain_from_the_envelope(env):
    """RCPT TO:<@test.example> (and <@relay:@test.example>, the route
    form) is taken by Postfix and delivered to MAILER-DAEMON@test.example
    (empty_address_recipient); with recipient-binding = address the
    milter made "@test.example" of it, a domain value, so bob's key opened
    the mail for the postmaster's mailbox.  A recipient without a local
    part is no address: no key is bound."""
    import smtplib
    m, p = gateway(env, "address")
    try:
        for rcpt in ("<@test.example>", "<@relay.example:@test.example>", "<@TEST.example>"):
            before = len(p.messages())
            s = smtplib.SMTP("127.0.0.1", p.port, timeout=60)
            try:
                s.ehlo("client.test.example")
                assert s.docmd("MAIL FROM:<mallory@test.example>")[0] == 250
                assert s.docmd("RCPT TO:" + rcpt)[0] == 250
                assert s.docmd("DATA")[0] == 354
                s.send(env["mail"]("bob@test.example").replace(b"\n", b"\r\n") + b".\r\n")
                code, text = s.getreply()
                assert code == 250, (code, text)
            finally:
                s.close()
            got = p.wait_delivered(before + 1)
            msgs = p.messages()[before:]
            assert len(msgs) == 1, got
            msg = message_from_bytes(msgs[0].data)
            assert msg["X-Pgpdecd-Status"].startswith("no-key"), (rcpt, msgs[0].recipient, msg["X-Pgpdecd-Status"])
            assert BODY not in msgs[0].data, rcpt
    finally:
        p.stop()
        m.stop()
