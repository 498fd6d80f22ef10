# SPDX-License-Identifier: MIT
"""The test driver itself: usage errors, the documented exit-code table,
--info JSON, stdin input, --bench."""

import re

from conftest import EXIT, KIB, expect_ok, run


def test_help_documents_exit_codes(pd):
    p = run([pd.path, "--help"])
    text = p.stdout.decode()
    for name, code in EXIT.items():
        if name.startswith("E"):
            assert re.search(rf"\b{code} {name}\b", text), f"{code} {name} missing from --help"


def test_usage_errors(pd):
    for args in (["--bogus"], ["--slice", "0"], ["--rsa-backend", "rot13"], ["a", "b"],
                 ["--bench"], ["--max-output", "-1"]):
        p = run([pd.path, *args], check=False)
        assert p.returncode == 2, (args, p)


def test_missing_files(pd, tools):
    r = pd(tools.root / "does-not-exist")
    assert r.rc == 1 and r.errname == "ESYS", r
    r = pd(tools.root / "does-not-exist", keys=[tools.root / "no-key"])
    assert r.rc == 1, r


def test_stdin_and_info(pd, ct, keys, plain, matrix):
    matrix("driver", "gpg", "stdin + --info")
    k = keys["gpg-cv25519"]
    msg = ct.get("gpg", k.name, 4 * KIB)
    r = pd(None, [k], stdin=msg.read_bytes())
    expect_ok(r, plain.get(4 * KIB))
    i = r.info
    for field in ("recipients", "sym_algo", "pk_algo", "literal", "issuers", "integrity",
                  "key_fpr", "bytes_in", "bytes_out", "compression"):
        assert field in i, field
    assert i["bytes_in"] == msg.stat().st_size
    assert i["key_fpr"].upper().endswith(k.enc_keyids[0].upper())


def test_bench(pd, ct, keys, matrix):
    matrix("driver", "gpg", "--bench")
    k = keys["gpg-cv25519"]
    p = run([pd.path, "--key", k.key, "--bench", "--bench-seconds", "0.2",
             ct.get("gpg", k.name, 4 * KIB)], check=False)
    assert p.returncode == 0, p.stderr
    assert re.search(rb"[0-9.]+ MB/s plaintext", p.stdout), p.stdout
