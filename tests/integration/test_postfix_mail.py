# SPDX-License-Identifier: MIT
"""Every mail of the layout corpus (mailcorpus.py) sent by swaks through a
real Postfix (postfix_harness) with the real daemon, each delivered
message checked part by part with mailcorpus.check_delivered (issue 11):

- the archive pipe(8) transport of contrib/postfix/README.md, recipe 1
  (whole-mail archiving: `pgpdecd-client --mime --timeout 120 -o
  ARCHIVE/${queue_id}.eml`, user=pgpmail:pgpdecd): the decrypted mail lands
  in the archive file; a failed case (tampered, garbage; the default
  --on-failure reject) bounces 5.x.x and the log line and the DSN carry
  "not decrypted: STATUS", no temporary path, no engine sentence;
- pgpdecd-milter before the queue (smtpd_milters) with the default
  configuration: each case delivered and checked, failed cases refused
  550 5.7.1 at the end of DATA with the reason;
- the after-queue pattern of the README (content_filter -> smtp -> a second
  smtpd running the milter) for a sample: thunderbird, inline QP,
  attachments, tampered (bounced by Postfix with the reason).

Every case goes over the wire as a real SMTP client sends it (CRLF); the
cases whose line ends are the point (thunderbird CRLF, thunderbird-lf,
inline-crlf, inline-lf) also go as they are (bare LF lines stay bare LF).
One Postfix instance, daemon and milter for the whole module."""
import atexit
import os
import re
import shutil

import pytest

import mailcorpus
from mailgw import (CLIENT, DAEMON, Daemon, Milter, after_queue, stop_all, wait_for,
                    workdir)
from postfix_harness import TEST_GROUP, TEST_USER, Postfix, ensure_user, require_postfix

# the client and the milter are always built with the daemon (meson requires
# GMime and libmilter): missing, they fail the tests rather than skip them
pytestmark = pytest.mark.skipif(not (shutil.which("gpg") and DAEMON.exists()),
                                reason="needs gpg and the built daemon")

_CORPUS = []


def corpus_obj():
    """One corpus for collection and the tests (building it runs gpg ~50 times)."""
    if not _CORPUS:
        c = mailcorpus.Corpus()
        _CORPUS.append(c)
        atexit.register(c.close)
    return _CORPUS[0]


def names():
    if not shutil.which("gpg"):
        return []
    return [c.name for c in corpus_obj().cases()]


CASES = names()
# named cases the corpus lacks fail (corpus.case() raises), never drop out
WIRE_CASES = ["thunderbird", "thunderbird-lf", "inline-crlf", "inline-lf"] if CASES else []
AFTER_QUEUE_CASES = ["thunderbird", "inline-quoted-printable-utf-8", "attachments",
                     "tampered"] if CASES else []
ENGINE_SENTENCE = re.compile(r"integrity check failed|modified|session key|packet", re.I)

# contrib/postfix/README.md, recipe 1, as the test runs it: the README's
# argv with the test's client, socket and archive directory
ARCHIVE_ARGV = "{client} --socket {sock} --mime --timeout 120 -o {archive}/${{queue_id}}.eml"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    require_postfix()
    art = tmp_path_factory.mktemp("postfix-mail")
    root = workdir("pd-mail-")
    user = ensure_user(TEST_USER)
    daemon = Daemon(root, art / "daemon.log").start()
    milter = Milter(root, daemon.sock).start()  # the default configuration
    archive = root / "pgp-archive"
    archive.mkdir(mode=0o700)
    os.chown(archive, user.pw_uid, user.pw_gid)
    pf = Postfix(artifacts=art / "postfix",
                 main={"milter_default_action": "tempfail", "milter_protocol": "6",
                       "milter_content_timeout": "300s"})
    pf.smtpd.options["smtpd_milters"] = milter.spec   # before the queue
    # the archive transport's way in: an smtpd without the milter
    archive_port = pf.add_smtpd("archive-in", options={"smtpd_milters": ""})
    argv = ARCHIVE_ARGV.format(client=CLIENT, sock=daemon.sock, archive=archive).split()
    pf.add_pipe("pgparchive", argv, user=f"{TEST_USER}:{TEST_GROUP}", flags="q", maxproc=10)
    pf.add_transport("archive@test.example", "pgparchive:")
    aq_port, _ = after_queue(pf, milter.spec)
    pf.start()
    yield {"pf": pf, "daemon": daemon, "milter": milter, "archive": archive, "root": root,
           "archive_port": archive_port, "aq_port": aq_port, "corpus": corpus_obj()}
    stop_all(pf, milter, daemon, root, art)


def wait_message(pf, qid, recipient=None, timeout=60):
    """The one message delivered with queue id qid."""
    found = []

    def got():
        found[:] = [m for m in pf.messages() if m.queue_id == qid
                    and (recipient is None or m.recipient == recipient)]
        return found
    wait_for(got, f"delivery of {qid}", timeout=timeout)
    assert len(found) == 1, found
    return found[0]


def sender_for(tag, name):
    return f"{tag}-{name}@test.example"


def check_bounce_text(text, status):
    assert f"not decrypted: {status}" in text, text
    assert "/var/tmp" not in text and "/tmp/" not in text, text     # no temporary path
    assert not ENGINE_SENTENCE.search(text), text                  # the status name only


# -- the archive pipe(8) transport -----------------------------------------

WIRES = [(n, "crlf") for n in CASES] + [(n, "raw") for n in WIRE_CASES]


@pytest.mark.parametrize("name,wire", WIRES)
def test_archive(gw, name, wire):
    pf, case = gw["pf"], gw["corpus"].case(name)
    snd = sender_for(f"arch-{wire}", name)
    r = pf.send(case.raw, snd, ["archive@test.example"], port=gw["archive_port"], wire=wire)
    assert r.code == 250 and r.queue_id, r
    qid = r.queue_id
    m = pf.wait_log(rf"{qid}: to=<archive@test.example>, relay=pgparchive, .*"
                    rf"dsn=(\d\.\d\.\d), status=(sent|bounced|deferred) \((.*)\)$", timeout=120)
    out = gw["archive"] / f"{qid}.eml"
    if case.expected.exit_code("reject"):
        # pgpdecd-client exits 65: pipe(8) bounces with the client's one line
        assert m.group(2) == "bounced" and m.group(1).startswith("5."), m.group(0)
        check_bounce_text(m.group(3), case.expected.status)
        wait_for(lambda: pf.delivered(snd), f"the DSN to {snd}")
        dsn = pf.delivered(snd)[snd]
        assert len(dsn) == 1, dsn
        text = dsn[0].decode(errors="replace")
        assert "archive@test.example" in text and m.group(1) in text, text
        check_bounce_text(text, case.expected.status)
        assert not out.exists()
        mailcorpus.check_delivered(case, None, failure_policy="reject")
    else:
        assert m.group(2) == "sent" and m.group(1) == "2.0.0", m.group(0)
        data = out.read_bytes()
        mailcorpus.check_delivered(case, data, failure_policy="reject")
        st = out.stat()
        assert st.st_mode & 0o777 == 0o600
        assert not pf.delivered(snd)          # no DSN
    # -o renames a complete file into place: nothing else is left there
    assert all(p.suffix == ".eml" for p in gw["archive"].iterdir()), list(gw["archive"].iterdir())


# -- the milter before the queue -------------------------------------------

def milter_send(gw, case, wire, port=None, tag="bq"):
    pf = gw["pf"]
    snd = sender_for(f"{tag}-{wire}", case.name)
    r = pf.send(case.raw, snd, ["bob@test.example"], port=port, wire=wire)
    return snd, r


@pytest.mark.parametrize("name,wire", WIRES)
def test_milter_before_queue(gw, name, wire):
    pf, case = gw["pf"], gw["corpus"].case(name)
    snd, r = milter_send(gw, case, wire)
    if case.expected.exit_code("reject"):
        assert r.code == 550 and "5.7.1" in r.text, r
        check_bounce_text(r.text, case.expected.status)
        m = pf.wait_log(rf"(\w+): milter-reject: END-OF-MESSAGE from [^:]*: 5\.7\.1 not decrypted: "
                        rf"{case.expected.status}; from=<{re.escape(snd)}>")
        qid = m.group(1)
        wait_for(lambda: f"{qid}: rejected failed status={case.expected.status}"
                 in gw["milter"].text(), "the milter's log line")
        assert not [q for q in pf.queue() if q["queue_id"] == qid]
        assert not [x for x in pf.messages() if x.queue_id == qid]
        mailcorpus.check_delivered(case, None, failure_policy="reject")
        return
    assert r.code == 250 and r.queue_id, r
    got = wait_message(pf, r.queue_id, recipient="bob@test.example")
    assert got.sender == snd
    mailcorpus.check_delivered(case, got.data, failure_policy="reject")
    heads = got.data.split(b"\n\n", 1)[0].lower()
    assert heads.startswith(b"received:") and heads.count(b"\nreceived:") == 0, heads[:300]


# -- the after-queue pattern -----------------------------------------------

@pytest.mark.parametrize("name", AFTER_QUEUE_CASES)
def test_milter_after_queue(gw, name):
    pf, case = gw["pf"], gw["corpus"].case(name)
    snd, r = milter_send(gw, case, "crlf", port=gw["aq_port"], tag="aq")
    assert r.code == 250 and r.queue_id, r     # accepted first, in every case
    qid = r.queue_id
    m = pf.wait_log(rf"{qid}: to=<bob@test.example>, relay=127\.0\.0\.1\[127\.0\.0\.1\]:\d+, .*"
                    rf"dsn=(\d\.\d\.\d), status=(sent|bounced|deferred) \((.*)\)$", timeout=120)
    if case.expected.exit_code("reject"):
        # the milter smtpd refuses it 550 5.7.1; Postfix bounces it to the sender
        assert m.group(2) == "bounced" and m.group(1) == "5.7.1", m.group(0)
        check_bounce_text(m.group(3), case.expected.status)
        wait_for(lambda: pf.delivered(snd), f"the DSN to {snd}")
        dsn = pf.delivered(snd)[snd]
        assert len(dsn) == 1
        check_bounce_text(dsn[0].decode(errors="replace"), case.expected.status)
        assert not [x for x in pf.messages() if x.sender == snd and x.recipient == "bob@test.example"]
        return
    assert m.group(2) == "sent", m.group(0)
    # queued again by the milter's smtpd under a new queue id: find it by sender
    wait_for(lambda: [x for x in pf.messages() if x.sender == snd], f"delivery for {snd}")
    got = [x for x in pf.messages() if x.sender == snd]
    assert len(got) == 1 and got[0].recipient == "bob@test.example", got
    mailcorpus.check_delivered(case, got[0].data, failure_policy="reject")
    heads = got[0].data.split(b"\n\n", 1)[0].lower()
    assert heads.startswith(b"received:") and heads.count(b"\nreceived:") == 1, heads[:400]
