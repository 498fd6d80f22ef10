# SPDX-License-Identifier: MIT
"""Every mail of the layout corpus (mailcorpus.py: Thunderbird, Enigmail,
Mutt, Evolution/KMail, K-9/FairEmail, Delta Chat, RFC 9788, PGP/MIME in
every transfer encoding, inline PGP in every encoding and charset,
attachments, nesting, signed inside encrypted, CRLF and LF, foreign key,
tampered, garbage, password, plain, forged headers) through
`pgpdecd-client --mime` and the real daemon, each delivered message checked
part by part by mailcorpus.check_delivered, with both failure policies and
both header policies.  The same corpus goes through real Postfix in
test_postfix_mail.py."""
import atexit
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import mailcorpus
from mailgw import LocalDaemon

SRC = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PD_BUILD_DIR", SRC / "build")).resolve()
CLIENT = BUILD / "client" / "pgpdecd-client"

pytestmark = pytest.mark.skipif(
    not (shutil.which("gpg") and (BUILD / "daemon" / "pgpdecd").exists()),
    reason="needs gpg and the built daemon")


# one corpus for collection and the tests (building it runs gpg ~50 times);
# without gpg none (the module is skipped)
_CORPUS = mailcorpus.Corpus() if shutil.which("gpg") else None
if _CORPUS:
    atexit.register(_CORPUS.close)
CASES = [case.name for case in _CORPUS.cases()] if _CORPUS else []


@pytest.fixture(scope="module")
def corpus():
    return _CORPUS


@pytest.fixture(scope="module")
def sock(tmp_path_factory):
    d = tmp_path_factory.mktemp("layouts")
    daemon = LocalDaemon(d / "pd.sock", d / "daemon.log")
    try:
        yield daemon.start().sock
    finally:
        daemon.stop()   # a clean exit: a sanitizer report fails it




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


# every one of them must be in the corpus (corpus.case() raises otherwise)
@pytest.mark.parametrize("name", ["thunderbird", "enigmail-legacy-display", "mutt", "k9",
                                  "deltachat", "rfc9788"])
def test_layout_all_protected_headers(corpus, sock, name):
    case = corpus.case(name)
    r = run(sock, case.raw, "--protected-headers", "all")
    assert r.returncode == 0, r.stderr
    mailcorpus.check_delivered(case, r.stdout, header_policy="all")
