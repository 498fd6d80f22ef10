# SPDX-License-Identifier: MIT
"""Every mail of the layout corpus (mailcorpus.py: Thunderbird, Enigmail,
Mutt, Evolution/KMail, K-9/FairEmail, Delta Chat, RFC 9788, PGP/MIME in
every transfer encoding, inline PGP in every encoding and charset,
attachments, nesting, signed inside encrypted, CRLF and LF, foreign key,
tampered, garbage, password, plain, forged headers) through
`pgpdecd-client --mime` and the real daemon, each delivered message checked
part by part by mailcorpus.check_delivered, with both failure policies and
both header policies.  The same corpus goes through real Postfix in
test_postfix_real.py and test_milter.py."""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import mailcorpus

SRC = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PD_BUILD_DIR", SRC / "build")).resolve()
CLIENT = BUILD / "client" / "pgpdecd-client"

pytestmark = pytest.mark.skipif(
    not (shutil.which("gpg") and (BUILD / "daemon" / "pgpdecd").exists()),
    reason="needs gpg and the built daemon")


@pytest.fixture(scope="module")
def corpus():
    c = mailcorpus.Corpus()
    yield c
    c.close()


@pytest.fixture(scope="module")
def sock(tmp_path_factory):
    d = tmp_path_factory.mktemp("layouts")
    s = d / "pd.sock"
    log = open(d / "daemon.log", "wb")
    p = subprocess.Popen([str(BUILD / "daemon" / "pgpdecd"), "--listen", f"unix:{s}",
                          "--key", str(mailcorpus.SECRET_KEY), "--workers", "2"],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        if s.exists():
            break
        time.sleep(0.05)
    yield s
    p.terminate()
    p.wait(timeout=30)
    log.close()


def names():
    c = mailcorpus.Corpus()
    try:
        return [case.name for case in c.cases()]
    finally:
        c.close()


CASES = names()


def run(sock, raw, *args):
    return subprocess.run([str(CLIENT), "--socket", str(sock), "--mime", *args], input=raw,
                          capture_output=True, timeout=120)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("failure_policy", ["pass", "reject"])
def test_layout(corpus, sock, name, failure_policy):
    case = corpus.case(name)
    r = run(sock, case.raw, "--on-failure", failure_policy)
    want = case.expected.exit_code(failure_policy)
    assert r.returncode == want, (name, r.returncode, r.stderr)
    if want:
        assert r.stdout == b""
        assert r.stderr == f"pgpdecd-client: not decrypted: {case.expected.status}\n".encode()
        mailcorpus.check_delivered(case, None, failure_policy=failure_policy)
    else:
        assert r.stderr == b""
        mailcorpus.check_delivered(case, r.stdout, failure_policy=failure_policy)


@pytest.mark.parametrize("name", [n for n in CASES if n in (
    "thunderbird", "enigmail-legacy-display", "mutt", "k9", "deltachat", "rfc9788")])
def test_layout_all_protected_headers(corpus, sock, name):
    case = corpus.case(name)
    r = run(sock, case.raw, "--protected-headers", "all")
    assert r.returncode == 0, r.stderr
    mailcorpus.check_delivered(case, r.stdout, header_policy="all")
