# SPDX-License-Identifier: MIT
"""Load and outage through pgpdecd-milter in a real Postfix (issue 11):

- 500 mails, each with its own plaintext, sent by 20 concurrent SMTP
  clients (smtplib, one connection per mail, CRLF) to the smtpd that runs
  the milter before the queue: 500 accepted, 500 delivered, each exactly
  once (its own Message-ID), each decrypted byte-exact, nothing deferred,
  bounced or left in the queue;
- then the daemon down: mail before the queue is refused 451 4.7.1 (the
  sender keeps it); mail through the after-queue pattern is accepted and
  waits in the deferred queue (Postfix's retry timers are long here: only
  the flush moves it); the daemon back up, the senders retry and
  `postqueue -f`: every one of them delivered exactly once, decrypted;
- the daemon restarted while the milter is idle (its pooled connections to
  the old daemon broken): the next mails pass, none deferred;
- contrib/bench-mail.sh runs (tiny counts) and prints its whole table.

One Postfix instance, daemon and milter (default configuration) for the
module; every wait polls with a deadline."""
import collections
import random
import re
import smtplib
import time
from concurrent.futures import ThreadPoolExecutor
from email import message_from_bytes

import pytest

import pgp
from mailcorpus import PUBLIC_KEY
from mailgw import (DAEMON, Daemon, Milter, after_queue, stop_all, wait_for,
                    workdir)
from postfix_harness import Postfix, require_postfix

# the client and the milter are always built with the daemon (meson requires
# GMime and libmilter): missing, they fail the tests rather than skip them
pytestmark = pytest.mark.skipif(not DAEMON.exists(), reason="needs the built daemon")

N_MAILS = 500
SENDERS = 20
N_OUTAGE = 20
CERT = PUBLIC_KEY.read_bytes()


def plaintext(tag, i):
    rnd = random.Random(f"{tag}-{i}")
    lines = [f"Mail {tag} {i}: audit figures, caf\u00e9 \u20ac {rnd.randrange(10**6)}"]
    lines += [" ".join(f"{rnd.getrandbits(32):08x}" for _ in range(8)) for _ in range(rnd.randrange(1, 40))]
    return ("\n".join(lines) + "\n").encode()


def make_mail(tag, i):
    """(Message-ID, mail in CRLF, plaintext): inline PGP, encrypted to the
    test key in Python (pgp.py), a fresh session key each."""
    plain = plaintext(tag, i)
    msgid = f"<{tag}.{i}@test.example>"
    arm = pgp.armor(pgp.encrypt_to_rsa(CERT, pgp.literal(plain)))
    mail = (f"From: Alice <alice@test.example>\nTo: bob@test.example\nSubject: {tag} {i}\n"
            f"Message-ID: {msgid}\nMIME-Version: 1.0\n"
            f"Content-Type: text/plain; charset=utf-8\n\n").encode() + arm
    return msgid, mail.replace(b"\n", b"\r\n"), plain


def smtp_send(port, mail):
    """One SMTP transaction on a fresh connection: (code, reply text)."""
    with smtplib.SMTP("127.0.0.1", port, "client.test.example", timeout=120) as s:
        code, resp = s.mail("alice@test.example")
        assert code == 250, (code, resp)
        code, resp = s.rcpt("bob@test.example")
        assert code == 250, (code, resp)
        code, resp = s.data(mail)
        return code, resp.decode(errors="replace")


def send_all(port, mails, workers):
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(lambda m: smtp_send(port, m[1]), mails))


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    require_postfix()
    art = tmp_path_factory.mktemp("postfix-load")
    root = workdir("pd-load-")
    daemon = Daemon(root, art / "daemon.log").start()
    milter = Milter(root, daemon.sock).start()
    # long retry timers: deferred mail moves only when flushed
    pf = Postfix(artifacts=art / "postfix",
                 main={"milter_default_action": "tempfail", "milter_protocol": "6",
                       "queue_run_delay": "300s", "minimal_backoff_time": "300s",
                       "maximal_backoff_time": "600s"})
    pf.smtpd.options["smtpd_milters"] = milter.spec
    aq_port, _ = after_queue(pf, milter.spec)
    pf.start()
    yield {"pf": pf, "daemon": daemon, "milter": milter, "aq_port": aq_port}
    stop_all(pf, milter, daemon, root, art)


def by_msgid(pf):
    got = collections.defaultdict(list)
    for m in pf.messages():
        got[message_from_bytes(m.data)["Message-ID"]].append(m)
    return got


def check_decrypted(m, plain):
    msg = message_from_bytes(m.data)
    assert msg["X-Pgpdecd-Status"].startswith("decrypted; pieces=1; decrypted=1"), m.data[:600]
    assert b"BEGIN PGP" not in m.data
    assert msg.get_content_type() == "text/plain" and msg.get_content_charset() == "utf-8"
    assert msg.get_payload(decode=True) == plain, (m.path, msg.get_payload(decode=True)[:200])


def test_500_concurrent(gw):
    pf = gw["pf"]
    mails = [make_mail("load", i) for i in range(N_MAILS)]
    t0 = time.monotonic()
    res = send_all(pf.port, mails, SENDERS)
    t_smtp = time.monotonic() - t0
    bad = [(mails[i][0], r) for i, r in enumerate(res) if r[0] != 250]
    assert not bad, bad[:5]
    qids = [re.search(r"queued as (\w+)", t).group(1) for _, t in res]
    assert len(set(qids)) == N_MAILS
    pf.wait_delivered(N_MAILS, timeout=180)
    t_all = time.monotonic() - t0
    got = by_msgid(pf)
    assert sorted(got) == sorted(m[0] for m in mails)
    for msgid, _, plain in mails:
        assert len(got[msgid]) == 1, (msgid, [x.path for x in got[msgid]])
        check_decrypted(got[msgid][0], plain)
    pf.wait_queue(lambda q: q == [], timeout=60)
    # postlogd writes the maillog asynchronously: wait for the lines
    wait_for(lambda: len(re.findall(r"status=sent", pf.log())) >= N_MAILS, "500 status=sent lines")
    log = pf.log()
    assert not re.search(r"status=(deferred|bounced)", log), \
        [l for l in log.splitlines() if re.search(r"status=(deferred|bounced)", l)][:5]
    assert len(re.findall(r"status=sent", log)) == N_MAILS
    written = r": written decrypted status=- pieces=1 decrypted=1"
    wait_for(lambda: len(re.findall(written, gw["milter"].text())) >= N_MAILS, "the milter's lines")
    assert len(re.findall(written, gw["milter"].text())) == N_MAILS
    print(f"\n{N_MAILS} mails, {SENDERS} senders: accepted in {t_smtp:.1f}s "
          f"({N_MAILS / t_smtp:.0f}/s), delivered in {t_all:.1f}s")


def test_daemon_down_then_back(gw):
    pf, daemon = gw["pf"], gw["daemon"]
    before = len(pf.messages())
    bq = [make_mail("down-bq", i) for i in range(N_OUTAGE)]
    aq = [make_mail("down-aq", i) for i in range(N_OUTAGE)]
    daemon.stop()
    try:
        # before the queue: the sender gets 451 4.7.1 and keeps the mail
        res = send_all(pf.port, bq, 5)
        assert all(c == 451 and "4.7.1" in t for c, t in res), res
        # after the queue: accepted, then deferred by the milter's smtpd
        res = send_all(gw["aq_port"], aq, 5)
        assert all(c == 250 for c, _ in res), res
        qids = {re.search(r"queued as (\w+)", t).group(1) for _, t in res}
        q = pf.wait_queue(lambda q: {e["queue_id"] for e in q if e["queue_name"] == "deferred"}
                          >= qids, timeout=120)
        for e in q:
            if e["queue_id"] in qids:
                reason = e["recipients"][0]["delay_reason"]
                assert "4.7.1" in reason, reason
        assert len(pf.messages()) == before       # nothing delivered, nothing bounced
    finally:
        daemon.start()
    # the senders retry; the queue is flushed
    res = send_all(pf.port, bq, 5)
    assert all(c == 250 for c, _ in res), res
    pf.flush()
    pf.wait_delivered(before + 2 * N_OUTAGE, timeout=120)
    pf.wait_queue(lambda q: q == [], timeout=60)
    got = by_msgid(pf)
    for msgid, _, plain in bq + aq:
        assert len(got[msgid]) == 1, (msgid, got.get(msgid))
        check_decrypted(got[msgid][0], plain)
    assert len(pf.messages()) == before + 2 * N_OUTAGE
    assert not re.search(r"status=bounced", pf.log())


def test_daemon_restart_idle(gw):
    """The milter's pooled connections die with the daemon: after a restart
    with no mail in between, the next mails are decrypted, not deferred."""
    pf, daemon = gw["pf"], gw["daemon"]
    before = len(pf.messages())
    warm = [make_mail("warm", i) for i in range(16)]
    assert all(c == 250 for c, _ in send_all(pf.port, warm, 8))  # every decryptor used
    daemon.stop()
    daemon.start()
    after = [make_mail("restart", i) for i in range(16)]
    res = send_all(pf.port, after, 8)
    assert all(c == 250 for c, _ in res), res
    pf.wait_delivered(before + 32, timeout=120)
    got = by_msgid(pf)
    for msgid, _, plain in warm + after:
        assert len(got[msgid]) == 1, msgid
        check_decrypted(got[msgid][0], plain)


def test_bench_mail_runs():
    """contrib/bench-mail.sh, tiny: it runs and prints its one table (every
    path, every row; its own Postfix, daemon and milter)."""
    import subprocess
    from mailgw import BUILD, SRC
    require_postfix()
    r = subprocess.run([str(SRC / "contrib" / "bench-mail.sh"), "--build", str(BUILD),
                        "--requests", "12", "--small", "2", "--large", "1"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [l for l in r.stdout.splitlines() if re.match(r"^\| (daemon|client|postfix)", l)]
    paths = [l.split("|")[1].strip() for l in rows]
    assert paths == ["daemon", "client --mime", "postfix", "postfix+milter"] * 2, r.stdout
    for l in rows:
        cells = [c.strip() for c in l.strip("|").split("|")]
        assert float(cells[5]) > 0 and float(cells[8]) > 0, l
