# SPDX-License-Identifier: MIT
"""The test driver itself: usage errors, the documented exit-code table,
--info JSON, stdin input, --bench."""

import os
import re
import stat

from conftest import EXIT, KIB, expect_ok, run


def test_help_documents_exit_codes(pd):
    p = run([pd.path, "--help"])
    text = p.stdout.decode()
    for name, code in EXIT.items():
        if name.startswith("E"):
            assert re.search(rf"\b{code} {name}\b", text), f"{code} {name} missing from --help"


def test_usage_errors(pd):
    for args in (["--bogus"], ["--slice", "0"], ["--rsa-backend", "rot13"], ["--ecdh-backend", "x"], ["a", "b"],
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


# -o OUT: the temporary file is created exclusively (mkostemp) next to OUT.
# Until it was, its name was OUT.pd-tmp.<pid>: a shell that plants something
# there and then execs the driver (same pid) reproduces the attack exactly.
PLANT = 'ln -s "$PD_VICTIM" "$PD_OUT.pd-tmp.$$" && exec "$@"'
PRECREATE = 'printf precreated > "$PD_OUT.pd-tmp.$$" && chmod 666 "$PD_OUT.pd-tmp.$$" && exec "$@"'


def _decrypt_planted(pd, k, msg, out, script, victim=None):
    env = dict(os.environ, PD_OUT=str(out), PD_VICTIM=str(victim or ""))
    p = run(["sh", "-c", script, "sh", pd.path, "--key", k.key, "-o", out, msg],
            env=env, check=False)
    assert p.returncode == 0, p.stderr
    return p


def test_output_symlink_not_followed(pd, ct, keys, plain, tools, matrix):
    matrix("driver", "gpg", "-o: planted symlink")
    k = keys["gpg-cv25519"]
    victim = tools.tmp(".victim")
    victim.write_bytes(b"victim")
    out = tools.tmp(".out")
    _decrypt_planted(pd, k, ct.get("gpg", k.name, 4 * KIB), out, PLANT, victim)
    assert victim.read_bytes() == b"victim"
    assert out.read_bytes() == plain.get(4 * KIB).read_bytes()
    assert not out.is_symlink()


def test_output_mode_not_inherited(pd, ct, keys, plain, tools, matrix):
    matrix("driver", "gpg", "-o: pre-created file")
    k = keys["gpg-cv25519"]
    msg = ct.get("gpg", k.name, 4 * KIB)
    out = tools.tmp(".out")
    _decrypt_planted(pd, k, msg, out, PRECREATE)
    planted = [p for p in out.parent.iterdir() if p.name.startswith(out.name + ".pd-tmp.")]
    assert [p.read_bytes() for p in planted] == [b"precreated"], planted
    assert out.read_bytes() == plain.get(4 * KIB).read_bytes()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600, oct(out.stat().st_mode)
    # A world-writable OUT that was there before is replaced, not reused.
    out2 = tools.tmp(".out")
    out2.write_bytes(b"old")
    out2.chmod(0o666)
    expect_ok(pd(msg, [k], out=out2), plain.get(4 * KIB))
    assert stat.S_IMODE(out2.stat().st_mode) == 0o600, oct(out2.stat().st_mode)


def test_output_not_regular(pd, ct, keys, plain, tools, matrix):
    # -o /dev/null or a FIFO is written, never replaced by a regular file
    # (a FIFO here: a failure must not cost the machine its /dev/null).
    matrix("driver", "gpg", "-o FIFO")
    k = keys["gpg-cv25519"]
    fifo = tools.tmp(".fifo")
    os.mkfifo(fifo)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # 4 KiB fit in the pipe
    try:
        r = pd(ct.get("gpg", k.name, 4 * KIB), [k], out=fifo)
        expect_ok(r)
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
        assert os.read(rfd, 8 * KIB) == plain.get(4 * KIB).read_bytes()
    finally:
        os.close(rfd)
    assert not any(p.name.startswith(fifo.name + ".pd-tmp") for p in fifo.parent.iterdir())
