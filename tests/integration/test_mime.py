# SPDX-License-Identifier: MIT
"""pgpdecd-client --mime (mail/pdmail.c) against the real daemon: the
command-line contract (stdout to a pipe, -o, exit codes, nothing written
on failure), forged result headers, the part-count limit, and a 100 MB mail
with a 60 MB encrypted attachment decrypted in bounded memory.  The mail
layouts of real clients are in test_mime_layouts.py."""
import base64
import email
import email.policy
import hashlib
import os
import shutil
import subprocess
import tempfile
from email.message import EmailMessage
from pathlib import Path

import pytest

from conftest import kill_gpg_agent
from mailgw import LocalDaemon

SRC = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PD_BUILD_DIR", SRC / "build")).resolve()
CLIENT = BUILD / "client" / "pgpdecd-client"
KEYS = SRC / "tests" / "data" / "keys"

pytestmark = pytest.mark.skipif(
    not (shutil.which("gpg") and (BUILD / "daemon" / "pgpdecd").exists()),
    reason="needs gpg and the built daemon")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("mime")
    home = d / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--yes", "--quiet", "--trust-model", "always"]
    subprocess.run(gpg + ["--import", str(KEYS / "rsa2048-public.gpg")], check=True,
                   capture_output=True)
    out = subprocess.run(gpg + ["--with-colons", "--list-keys"], check=True, capture_output=True,
                         text=True).stdout
    fpr = [l.split(":")[9] for l in out.splitlines() if l.startswith("fpr:")][0]

    def encrypt(data: bytes, armor=True, extra=()) -> bytes:
        return subprocess.run(gpg + (["--armor"] if armor else []) + list(extra)
                              + ["--encrypt", "-r", fpr], input=data, check=True,
                              capture_output=True).stdout

    daemon = LocalDaemon(d / "pd.sock", d / "daemon.log")
    try:
        daemon.start()
        yield {"dir": d, "encrypt": encrypt, "sock": daemon.sock, "gpg": gpg, "fpr": fpr}
    finally:
        try:
            daemon.stop()   # a clean exit: a sanitizer report fails it
        finally:
            kill_gpg_agent(home)


def mime(env, mail: bytes, *args, sock=None, stdout=subprocess.PIPE, timeout=120):
    return subprocess.run([str(CLIENT), "--socket", str(sock or env["sock"]), "--mime", *args],
                          input=mail, stdout=stdout, stderr=subprocess.PIPE, timeout=timeout)


def parse(b: bytes):
    return email.message_from_bytes(b, policy=email.policy.default)


def inline_mail(env, text: bytes, subject="inline", extra_headers=()):
    m = EmailMessage()
    m["From"], m["To"], m["Subject"] = "a@example.org", "b@example.org", subject
    for k, v in extra_headers:
        m[k] = v
    m.set_content("before\n" + env["encrypt"](text).decode() + "after\n")
    return bytes(m)


def test_stdout_is_a_pipe(env):
    # The output goes through a pipe to a consumer (| sendmail): no fsync
    # of a pipe, nothing lost.
    mail = inline_mail(env, b"secret line\n")
    p1 = subprocess.Popen([str(CLIENT), "--socket", str(env["sock"]), "--mime"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p2 = subprocess.Popen(["cat"], stdin=p1.stdout, stdout=subprocess.PIPE)
    p1.stdout.close()
    p1.stdin.write(mail)
    p1.stdin.close()
    out = p2.communicate(timeout=60)[0]
    assert p1.wait(timeout=60) == 0, p1.stderr.read()
    m = parse(out)
    assert m["X-Pgpdecd-Status"] == "decrypted; pieces=1; decrypted=1; no-key=0; failed=0"
    assert m.get_content() == "before\nsecret line\nafter\n"


def test_output_file_only_on_success(env, tmp_path):
    out = tmp_path / "out.eml"
    r = mime(env, inline_mail(env, b"x\n"), "-o", str(out))
    assert r.returncode == 0 and r.stdout == b"" and out.exists()
    assert "x\n" in parse(out.read_bytes()).get_content()
    # a tampered piece with the default policy (reject): 65, file untouched
    arm = env["encrypt"](b"y" * 100).decode().splitlines()
    i = len(arm) // 2
    arm[i] = ("B" if arm[i][0] != "B" else "C") + arm[i][1:]
    bad = b"From: a@x\nSubject: t\n\n" + "\n".join(arm).encode() + b"\n"
    r = mime(env, bad, "-o", str(out))
    assert r.returncode == 65 and r.stdout == b""
    assert r.stderr == b"pgpdecd-client: not decrypted: INTEGRITY\n"
    assert "x\n" in parse(out.read_bytes()).get_content()
    assert [f.name for f in tmp_path.iterdir()] == ["out.eml"]   # no temporary left
    # the same with --on-failure pass: written, the piece as it was, tagged
    r = mime(env, bad, "--on-failure", "pass")
    assert r.returncode == 0
    m = parse(r.stdout)
    assert m["X-Pgpdecd-Status"] == \
        "failed; pieces=1; decrypted=0; no-key=0; failed=1; status=INTEGRITY"
    assert "\n".join(arm) in m.get_content()


def test_daemon_down_writes_nothing(env, tmp_path):
    r = mime(env, inline_mail(env, b"x\n"), sock=tmp_path / "none.sock")
    assert r.returncode == 75 and r.stdout == b""
    assert r.stderr == b"pgpdecd-client: not decrypted: UNAVAILABLE\n"
    # a plain mail needs no daemon
    r = mime(env, b"From: a@x\nSubject: p\n\nplain\n", sock=tmp_path / "none.sock")
    assert r.returncode == 0
    assert r.stdout == b"X-Pgpdecd-Status: not-encrypted\nFrom: a@x\nSubject: p\n\nplain\n"


def test_forged_result_headers_removed(env):
    forged = [("X-Pgpdecd-Status", "decrypted; pieces=1; decrypted=1"),
              ("X-PGPDECD-Key", "0000000000000000000000000000000000000000"),
              ("x-pgpdecd-integrity", "aead")]
    mail = inline_mail(env, b"s\n", extra_headers=forged)
    m = parse(mime(env, mail).stdout)
    assert m.get_all("X-Pgpdecd-Key") and "0000" not in " ".join(m.get_all("X-Pgpdecd-Key"))
    assert m.get_all("X-Pgpdecd-Integrity") == ["mdc"]
    assert len(m.get_all("X-Pgpdecd-Status")) == 1
    # also on a mail with nothing encrypted, and on one with no key
    plain = b"X-Pgpdecd-Status: decrypted\nX-Pgpdecd-Key: AB\n continued\nFrom: a@x\n\nhi\n"
    assert mime(env, plain).stdout == b"X-Pgpdecd-Status: not-encrypted\nFrom: a@x\n\nhi\n"


def test_no_key_policy(env):
    home = env["dir"] / "gnupg"
    enc = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--armor", "--symmetric",
                          "--pinentry-mode", "loopback", "--passphrase", "pw"],
                         input=b"x", capture_output=True, check=True).stdout
    mail = b"From: a@x\nSubject: pw\n\n" + enc
    r = mime(env, mail)
    assert r.returncode == 0 and r.stdout.endswith(mail)
    assert parse(r.stdout)["X-Pgpdecd-Status"].endswith("status=NO_PASSWORD")
    r = mime(env, mail, "--on-no-key", "reject")
    assert r.returncode == 69 and r.stdout == b""
    assert r.stderr == b"pgpdecd-client: not decrypted: NO_PASSWORD\n"


def test_usage_errors(env):
    for args in (["--on-failure", "quarantine"], ["--on-failure", "bounce"],
                 ["--protected-headers", "some"], ["a.eml", "b.eml"]):
        r = mime(env, b"", *args)
        assert r.returncode == 64, (args, r.stderr)
    r = subprocess.run([str(CLIENT), "--keep-original", "x"], capture_output=True)
    assert r.returncode == 64 and b"belong to --mime" in r.stderr


def test_too_many_parts_not_parsed(env):
    # 100,000 parts would take GMime 200 MB; past max_mime_parts (10,000
    # lines starting with --) the mail is not parsed and fails LIMIT.
    body = b"".join(b"--w\nContent-Type: text/plain\n\nx\n" for _ in range(20000))
    mail = (b"From: a@x\nX-Pgpdecd-Status: decrypted\nMIME-Version: 1.0\n"
            b"Content-Type: multipart/mixed; boundary=\"w\"\n\n" + body + b"--w--\n")
    r = mime(env, mail)
    assert r.returncode == 65 and r.stderr == b"pgpdecd-client: not decrypted: LIMIT\n"
    r = mime(env, mail, "--on-failure", "pass")
    assert r.returncode == 0
    assert r.stdout == (b"X-Pgpdecd-Status: failed; pieces=0; decrypted=0; no-key=0; failed=1;"
                        b" status=LIMIT\n" + mail.replace(b"X-Pgpdecd-Status: decrypted\n", b""))


def test_crlf_input(env):
    mail = inline_mail(env, b"crlf body\n").replace(b"\n", b"\r\n")
    r = mime(env, mail)
    assert r.returncode == 0, r.stderr
    assert b"\r" not in r.stdout
    assert parse(r.stdout).get_content() == "before\ncrlf body\nafter\n"


def peak_rss(cmd, stdin_path):
    """(exit code, stderr, peak RSS in MiB) of cmd, measured by GNU time: a
    child forked from pytest would count pytest's own RSS in ru_maxrss."""
    with tempfile.NamedTemporaryFile() as t, open(stdin_path, "rb") as fin:
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", t.name, *cmd], stdin=fin,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
        return p.returncode, p.stderr, int(open(t.name).read().split()[-1]) / 1024


def test_100mb_mail_bounded_memory(env, tmp_path):
    """A 100 MB mail: 20 MB of plain attachment and a 60 MB encrypted one
    (base64).  The client's peak RSS stays small: parts stay on disk."""
    secret = tmp_path / "secret.bin"
    h = hashlib.sha256()
    with open(secret, "wb") as f:
        for i in range(60):
            chunk = os.urandom(1 << 20)
            h.update(chunk)
            f.write(chunk)
    enc = tmp_path / "secret.pgp"
    subprocess.run(env["gpg"] + ["-z0", "--encrypt", "-r", env["fpr"], "-o", str(enc), str(secret)],
                   check=True, capture_output=True)
    mail = tmp_path / "big.eml"
    with open(mail, "wb") as f:
        f.write(b"From: a@x\nTo: b@x\nSubject: big\nMIME-Version: 1.0\n"
                b"Content-Type: multipart/mixed; boundary=\"BB\"\n\n--BB\n"
                b"Content-Type: text/plain\n\nsee attachments\n--BB\n"
                b"Content-Type: application/octet-stream\n"
                b"Content-Disposition: attachment; filename=\"filler.bin\"\n"
                b"Content-Transfer-Encoding: base64\n\n")
        for _ in range(20):
            f.write(base64.encodebytes(os.urandom(1 << 20)))
        f.write(b"--BB\nContent-Type: application/octet-stream\n"
                b"Content-Disposition: attachment; filename=\"secret.bin.pgp\"\n"
                b"Content-Transfer-Encoding: base64\n\n")
        with open(enc, "rb") as g:
            while True:
                c = g.read(57 * 4096)
                if not c:
                    break
                f.write(base64.encodebytes(c))
        f.write(b"--BB--\n")
    size = mail.stat().st_size
    assert size > 100_000_000
    out = tmp_path / "out.eml"
    code, err, rss_mib = peak_rss([str(CLIENT), "--socket", str(env["sock"]), "--mime",
                                   "--spool-dir", str(tmp_path), "-o", str(out)], mail)
    assert code == 0, err
    print(f"100 MB mail ({size} octets, 60 MiB encrypted attachment): client peak RSS "
          f"{rss_mib:.1f} MiB")
    assert rss_mib < 32, rss_mib
    m = email.message_from_binary_file(open(out, "rb"), policy=email.policy.default)
    parts = {p.get_filename(): p for p in m.walk() if not p.is_multipart()}
    assert set(parts) == {None, "filler.bin", "secret.bin"}
    assert hashlib.sha256(parts["secret.bin"].get_payload(decode=True)).digest() == h.digest()
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith("pgpdecd-mail")] == []


def test_decrypted_entity_within_the_same_bound(env):
    # 20,000 parts compress to little: the decrypted entity is held to the
    # bound of the mail itself (max_mime_parts), not parsed into GMime.  A
    # bound a plaintext reaches is reported, never the verdict (a sender
    # would learn about someone's plaintext): delivered under either policy.
    entity = (b"Content-Type: multipart/mixed; boundary=\"w\"\n\n"
              + b"".join(b"--w\nContent-Type: text/plain\n\nx\n" for _ in range(20000))
              + b"--w--\n")
    enc = env["encrypt"](entity).decode()
    mail = ("From: a@x\nSubject: bomb\nMIME-Version: 1.0\n"
            "Content-Type: multipart/encrypted; protocol=\"application/pgp-encrypted\";"
            " boundary=\"b1\"\n\n--b1\nContent-Type: application/pgp-encrypted\n\nVersion: 1\n\n"
            "--b1\nContent-Type: application/octet-stream\n\n" + enc + "\n--b1--\n").encode()
    assert len(mail) < 20000
    for policy in ("reject", "pass"):
        r = mime(env, mail, "--on-failure", policy)
        assert r.returncode == 0 and enc.encode() in r.stdout, (policy, r.stderr)
        assert parse(r.stdout)["X-Pgpdecd-Status"] == \
            "failed; pieces=1; decrypted=0; no-key=0; failed=1; status=LIMIT"


def test_nesting_beyond_64_is_a_limit(env):
    depth = 100
    mail = "From: a@x\nSubject: deep\nMIME-Version: 1.0\n"
    for i in range(depth):
        mail += f"Content-Type: multipart/mixed; boundary=\"b{i}\"\n\n--b{i}\n"
    mail += "Content-Type: text/plain\n\n" + env["encrypt"](b"deep\n").decode()
    for i in reversed(range(depth)):
        mail += f"--b{i}--\n"
    r = mime(env, mail.encode())
    assert r.returncode == 65 and r.stderr == b"pgpdecd-client: not decrypted: LIMIT\n"
    # 60 levels are followed: messages that are each other's whole body
    mail = "From: a@x\nSubject: deep\nMIME-Version: 1.0\n"
    for i in range(60):
        mail += f"Content-Type: message/rfc822\n\nSubject: level {i}\nMIME-Version: 1.0\n"
    mail += "Content-Type: text/plain\n\n" + env["encrypt"](b"deep\n").decode()
    r = mime(env, mail.encode())
    assert r.returncode == 0, r.stderr
    assert parse(r.stdout)["X-Pgpdecd-Status"].startswith("decrypted;")
    assert b"\ndeep\n" in r.stdout


def test_armor_at_the_end_of_a_multipart_part(env):
    # The line end before a boundary belongs to the boundary (RFC 2046), so
    # the part's text ends "-----END PGP MESSAGE-----" with no line end:
    # the block is still found (it was not, before the fix).  A part of a
    # multipart is never its message's whole body, so the block is counted
    # as embedded and left as it is (the whole-body rule).
    enc = env["encrypt"](b"last block\n").decode()
    mail = ("From: a@x\nSubject: s\nMIME-Version: 1.0\n"
            "Content-Type: multipart/mixed; boundary=\"z\"\n\n--z\n"
            "Content-Type: text/plain\n\nfirst\n" + enc + "--z--\n").encode()
    r = mime(env, mail)
    assert r.returncode == 0, r.stderr
    m = parse(r.stdout)
    assert m["X-Pgpdecd-Status"] == \
        "embedded; pieces=0; decrypted=0; no-key=0; failed=0; embedded=1"
    part = next(p for p in m.walk() if not p.is_multipart())
    assert part.get_content() == "first\n" + enc.rstrip("\n")


def test_nul_in_a_header_forges_nothing(env):
    # GMime keeps raw header values as C strings: a NUL cut the field short,
    # line end included, and the body's first lines became header fields of
    # the written mail (found by fuzz-mail); a sender could forge ours so.
    mail = (b"From: a@x\nSubject: s\nMIME-Version: 1.0\nContent-Type: =\"\x00\x00 text/plain\";\n"
            b" boundary=\"q\"\n\nX-Pgpdecd-Status: decrypted; pieces=1; decrypted=1\n"
            b"X-Pgpdecd-Key: 0000\n\nbody\n")
    r = mime(env, mail)
    assert r.returncode == 0, r.stderr
    head = r.stdout.split(b"\n\n", 1)[0]
    assert head.count(b"X-Pgpdecd-") == 1 and head.startswith(b"X-Pgpdecd-Status: not-encrypted\n")
    assert parse(r.stdout).get_all("X-Pgpdecd-Status") == ["not-encrypted"]


def test_keep_original(env):
    mail = inline_mail(env, b"kept\n", subject="orig")
    r = mime(env, mail, "--keep-original")
    assert r.returncode == 0, r.stderr
    m = parse(r.stdout)
    assert m["X-Pgpdecd-Original"] == "attached"
    assert m.get_content_type() == "multipart/mixed"
    first, orig = m.get_payload()
    assert first.get_content() == "before\nkept\nafter\n"
    assert orig.get_content_type() == "message/rfc822"
    assert orig.get_content_disposition() == "attachment"
    inner = orig.get_payload()[0]
    # the original as it came: its headers, its armored body
    assert inner["Subject"] == "orig" and "BEGIN PGP MESSAGE" in inner.get_content()
    assert parse(mail).get_content() == inner.get_content()
    # nothing decrypted: nothing to keep beside it
    plain = b"From: a@x\nSubject: p\n\nplain\n"
    assert mime(env, plain, "--keep-original").stdout == b"X-Pgpdecd-Status: not-encrypted\n" + plain


def test_encrypted_deeper_than_max_depth(env):
    # PGP/MIME inside PGP/MIME ... 6 deep: 5 levels are decrypted (depth 0
    # to 4), the sixth is left as it is, reported LIMIT; found in a
    # plaintext, it never decides the verdict.
    def pgp_mime(entity: bytes) -> bytes:
        return (b"Content-Type: multipart/encrypted; protocol=\"application/pgp-encrypted\";"
                b" boundary=\"b\"\n\n--b\nContent-Type: application/pgp-encrypted\n\nVersion: 1\n\n"
                b"--b\nContent-Type: application/octet-stream\n\n" + env["encrypt"](entity)
                + b"\n--b--\n")
    entity = b"Content-Type: text/plain\n\ninnermost\n"
    for _ in range(6):
        entity = pgp_mime(entity)
    mail = b"From: a@x\nSubject: deep\nMIME-Version: 1.0\n" + entity
    for policy in ("reject", "pass"):
        r = mime(env, mail, "--on-failure", policy)
        assert r.returncode == 0, (policy, r.stderr)
        assert parse(r.stdout)["X-Pgpdecd-Status"] == \
            "partly-decrypted; pieces=5; decrypted=5; no-key=0; failed=1; status=LIMIT"
        assert b"innermost" not in r.stdout and r.stdout.count(b"BEGIN PGP MESSAGE") == 1
    # 5 deep decrypts whole
    entity = b"Content-Type: text/plain\n\ninnermost\n"
    for _ in range(5):
        entity = pgp_mime(entity)
    r = mime(env, b"From: a@x\nSubject: deep\nMIME-Version: 1.0\n" + entity)
    assert r.returncode == 0 and b"innermost" in r.stdout and b"BEGIN PGP" not in r.stdout


def test_protected_section_replaces_no_trace_fields(env):
    # With --protected-headers all, the protected section (written by the
    # sender) replaces what a reader sees, never the gateway's trace and
    # authentication fields.
    entity = (b"Content-Type: text/plain; protected-headers=\"v1\"\nSubject: real\n"
              b"From: inner@x\nReceived: from forged.example\n"
              b"Authentication-Results: gw.example; dkim=pass\nX-Spam-Flag: NO\n\nbody\n")
    mail = (b"Received: from mx.example by gw.example\n"
            b"Authentication-Results: gw.example; dkim=fail\nX-Spam-Flag: YES\n"
            b"From: outer@x\nSubject: ...\nMIME-Version: 1.0\n"
            b"Content-Type: multipart/encrypted; protocol=\"application/pgp-encrypted\"; boundary=\"b\"\n\n"
            b"--b\nContent-Type: application/pgp-encrypted\n\nVersion: 1\n\n"
            b"--b\nContent-Type: application/octet-stream\n\n" + env["encrypt"](entity) + b"\n--b--\n")
    r = mime(env, mail, "--protected-headers", "all")
    assert r.returncode == 0, r.stderr
    m = parse(r.stdout)
    assert m["Subject"] == "real" and m["From"] == "inner@x"
    assert m.get_all("Received") == ["from mx.example by gw.example"]
    assert m.get_all("Authentication-Results") == ["gw.example; dkim=fail"]
    assert m.get_all("X-Spam-Flag") == ["YES"]


def test_plaintext_budget_per_mail(env):
    # Compressed plaintext: 3 blocks of 4 MiB each from little ciphertext.
    # With --max-plaintext 10 (MiB) the third piece fails LIMIT and is left
    # as it is: the disk a mail can take is bounded whatever the
    # compression.  Reported, never the verdict (the length of a plaintext).
    blocks = [env["encrypt"](bytes([65 + i]) * (4 << 20), extra=("-z", "9")) for i in range(3)]
    assert sum(map(len, blocks)) < 100_000
    mail = b"From: a@x\nSubject: z\n\n" + b"".join(blocks)
    for policy in ("reject", "pass"):
        r = mime(env, mail, "--max-plaintext", "10", "--on-failure", policy)
        assert r.returncode == 0, (policy, r.stderr)
        assert parse(r.stdout)["X-Pgpdecd-Status"] == \
            "partly-decrypted; pieces=3; decrypted=2; no-key=0; failed=1; status=LIMIT"
    r = mime(env, mail)    # the default, 256 MiB
    assert r.returncode == 0 and parse(r.stdout)["X-Pgpdecd-Status"].startswith("decrypted;")


def test_end_line_with_more_dashes(env):
    # "-----END PGP MESSAGE--------" (gpg, sq, rnp and gosop accept it): the
    # engine decrypts it (it was MALFORMED), and --mime finds the block
    # (GMime's filter knows the five-dash form only).
    arm = env["encrypt"](b"dashes\n").decode().replace(
        "-----END PGP MESSAGE-----", "-----END PGP MESSAGE--------")
    r = subprocess.run([str(CLIENT), "--socket", str(env["sock"]), "--verified-only"],
                       input=arm.encode(), capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout == b"dashes\n", r.stderr
    mail = ("From: a@x\nSubject: d\n\nbefore\n" + arm + "after\n").encode()
    r = mime(env, mail)
    assert r.returncode == 0, r.stderr
    m = parse(r.stdout)
    assert m["X-Pgpdecd-Status"].startswith("decrypted;")
    assert m.get_content() == "before\ndashes\nafter\n"


def test_kept_original_says_8bit(env):
    # message/rfc822 has 7bit by default (RFC 2046 5.2.1): an original
    # with 8-bit octets (a raw UTF-8 header, an 8bit body) attached
    # without a Content-Transfer-Encoding was a 7bit part carrying 8-bit
    # data, which an MTA may mangle or refuse.  A 7-bit original says
    # nothing (7bit is the default).
    mail = inline_mail(env, b"kept\n", subject="orig")
    raw = mail.replace(b"Subject: orig", "Subject: \u00fcber".encode())
    for m_in, want in ((raw, "8bit"), (mail, None)):
        r = mime(env, m_in, "--keep-original")
        assert r.returncode == 0, r.stderr
        orig = parse(r.stdout).get_payload()[1]
        assert orig.get_content_type() == "message/rfc822"
        assert orig["Content-Transfer-Encoding"] == want, r.stdout[-2000:]
        # the original still comes out octet for octet
        assert m_in.split(b"\n\n", 1)[1] in r.stdout


def test_kept_original_with_bare_cr_or_long_line_says_binary(env):
    # 7bit and 8bit data have lines of at most 998 octets and no CR but
    # in CRLF (RFC 2045 2.7, 2.8): an original with a bare CR or a longer
    # line, attached as it came, is binary data whatever its octets.
    mail = inline_mail(env, b"kept\n", subject="orig")
    for m_in in (mail.replace(b"after\n", b"after\rX-Forged: 1\n"),
                 mail.replace(b"after\n", b"after " + b"x" * 1200 + b"\n"),
                 mail.replace(b"Subject: orig", "Subject: \u00fcber".encode()).replace(
                     b"after\n", b"after " + b"x" * 999 + b"\n")):
        r = mime(env, m_in, "--keep-original")
        assert r.returncode == 0, r.stderr
        orig = parse(r.stdout).get_payload()[1]
        assert orig.get_content_type() == "message/rfc822"
        assert orig["Content-Transfer-Encoding"] == "binary", r.stdout[-2000:]
    # 998 octets and CRLF line ends are still 7bit
    r = mime(env, mail.replace(b"after\n", b"after " + b"x" * 992 + b"\n").replace(b"\n", b"\r\n"),
             "--keep-original")
    assert r.returncode == 0, r.stderr
    assert parse(r.stdout).get_payload()[1]["Content-Transfer-Encoding"] is None, r.stdout[-2000:]
