# SPDX-License-Identifier: MIT
"""pgpdecd-sop, the Stateless OpenPGP interface (draft-dkg-openpgp-stateless-cli)
over the engine, side by side with the two SOP implementations Debian ships,
sqop (Sequoia) and gosop (GopenPGP):

- the interop matrix: messages written by gpg, sq, rnp, sqop and gosop to
  keys they generated, decrypted by all three `decrypt KEY < msg`: the same
  plaintext and exit code 0 from each;
- session keys: `--session-key-out` gives the same ALGO:HEX as sqop's and
  gosop's for the same message, and `--with-session-key` with it opens the
  message in all three, without the key;
- the failures, each with the exit code the draft gives it.  sqop and gosop
  do not always give that code; what each gives is in the CODES table and
  asserted too, so that the table (README, man page) stays true.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD, CANNOT, PASSPHRASE, check_sanitizers

SOP = BUILD / "tools" / "pgpdecd-sop"
DATA = Path(__file__).resolve().parents[1] / "data"
TOOLS = ["pgpdecd-sop", "sqop", "gosop"]

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("sqop", "gosop")),
                                reason="sqop or gosop missing")

# Keys of the matrix: each peer's own and each algorithm family once (no
# RSA-4096: its generation alone would take longer than this whole file).
KEYS = ["gpg-rsa2048", "gpg-cv25519", "gpg-p256", "gpg-elg", "sq-cv25519", "rnp-rsa2048",
        "sqop-cv25519", "gosop-rsa2048"]
PEERS = ["gpg", "sq", "rnp", "sqop", "gosop"]
# What the other two cannot decrypt (checked: they must still fail there).
SOP_CANNOT = {
    ("sqop", "gpg-elg"): "sqop 0.27 does not decrypt with ElGamal keys",
    ("gosop", "gpg-rsa2048"): "gosop (GopenPGP 2.5) does not decrypt with a primary key "
                              "(gpg's rsa2048 key encrypts to its primary key, no subkey)",
}
# gosop's output is the plaintext only for ASCII text without CR: it
# replaces invalid UTF-8 and turns CRLF into LF.  So the plaintexts every
# tool must reproduce are text ("text" kind: ASCII lines, LF).
KIND = "text"


def run(tool, args, stdin=b"", env=None, cwd=None, pass_fds=()):
    exe = str(SOP) if tool == "pgpdecd-sop" else tool
    p = subprocess.run([exe, *map(str, args)], input=stdin, capture_output=True, env=env,
                       cwd=cwd, pass_fds=pass_fds, timeout=120)
    err = p.stderr.decode(errors="replace")
    if tool == "pgpdecd-sop":
        check_sanitizers(err)
    return p.returncode, p.stdout, err


@pytest.fixture(scope="module")
def sop_env(tools):
    if not SOP.exists():
        pytest.fail(f"not built: {SOP}")
    return tools.env


# --------------------------------------------------------------------------
# The interop matrix

def _matrix():
    for peer in PEERS:
        for key in KEYS:
            yield pytest.param(peer, key, id=f"{peer}-{key}")


@pytest.mark.parametrize("peer,key", _matrix())
def test_matrix(sop_env, ct, keys, plain, matrix, peer, key):
    matrix("sop", peer, key)
    if (peer, key) in CANNOT:
        pytest.skip(CANNOT[(peer, key)])
    msg = Path(ct.get(peer, key, 5000, armor=peer in ("sqop", "gosop"), kind=KIND)).read_bytes()
    want = plain.get(5000, KIND).read_bytes()
    for tool in TOOLS:
        rc, out, err = run(tool, ["decrypt", keys[key].key], msg, env=sop_env)
        if (tool, key) in SOP_CANNOT:
            assert rc != 0, f"{tool} decrypts with {key} now: {SOP_CANNOT[(tool, key)]} is stale"
            continue
        assert (rc, out == want) == (0, True), f"{tool}: rc {rc}, {len(out)} octets: {err[-500:]}"


# --------------------------------------------------------------------------
# Session keys

def _sk(text):
    return text.strip().upper()


@pytest.mark.parametrize("peer,key", [("gpg", "gpg-rsa3072"), ("gpg", "gpg-cv25519"),
                                      ("sq", "sq-cv25519"), ("rnp", "rnp-rsa2048"),
                                      ("sqop", "sqop-cv25519"), ("gosop", "gosop-rsa2048"),
                                      ("gpg", "gpg-p256")])
def test_session_key_round_trip(sop_env, ct, keys, plain, tools, matrix, peer, key):
    matrix("sop-session-key", peer, key)
    msg_path = ct.get(peer, key, 5000, kind=KIND)
    msg = Path(msg_path).read_bytes()
    want = plain.get(5000, KIND).read_bytes()
    got = {}
    for tool in TOOLS:
        out_file = tools.tmp(f".{tool}.sk")  # long paths: gosop slices the name's first 4 octets
        rc, out, err = run(tool, ["decrypt", "--session-key-out", out_file, keys[key].key], msg,
                           env=sop_env)
        assert rc == 0 and out == want, f"{tool}: rc {rc}: {err[-500:]}"
        got[tool] = _sk(out_file.read_text())
    assert got["pgpdecd-sop"] == got["sqop"] == got["gosop"], got
    algo, hexkey = got["pgpdecd-sop"].split(":")
    assert int(algo) in (7, 8, 9) and len(hexkey) in (32, 48, 64), got
    # gpg prints the same for the same message
    if key.startswith("gpg-"):  # gpg holds its own keys
        r = tools.gpg("--show-session-key", "--decrypt", "-o", "/dev/null", msg_path)
        line = [l for l in r.stderr.decode().splitlines() if "session key:" in l]
        assert line and _sk(line[0].split("'")[1]) == got["pgpdecd-sop"], r.stderr.decode()
    # and opens the message without the key, in all three
    sk_file = tools.tmp(".sk")
    sk_file.write_text(got["pgpdecd-sop"] + "\n")
    for tool in TOOLS:
        rc, out, err = run(tool, ["decrypt", "--with-session-key", sk_file], msg, env=sop_env)
        assert rc == 0 and out == want, f"{tool} --with-session-key: rc {rc}: {err[-500:]}"


def test_session_key_aead(sop_env, tools):
    """SEIPD v2 (RFC 9580 A.9, password "password"): neither peer reads it
    (Sequoia 1.12, GopenPGP 2.5), so pgpdecd-sop alone: the key of the
    header's cipher, and it opens the message again."""
    msg = (DATA / "aead" / "a09-skesk6-aead-eax-message.pgp").read_bytes()
    pw, out_file = tools.tmp(".pw"), tools.tmp(".sk")
    pw.write_text("password")
    rc, out, err = run("pgpdecd-sop", ["decrypt", "--with-password", pw, "--session-key-out", out_file],
                       msg, env=sop_env)
    assert (rc, out) == (0, b"Hello, world!"), err
    text = out_file.read_text()
    assert text.endswith("\n") and text.count(":") == 1, text
    assert text.split(":")[0] == "7", text  # AES-128, as the SEIPD v2 header names
    rc, out, err = run("pgpdecd-sop", ["decrypt", "--with-session-key", out_file], msg, env=sop_env)
    assert (rc, out) == (0, b"Hello, world!"), err


def test_session_key_fallback(sop_env, ct, keys, plain, tools):
    """A wrong session key is only known at the MDC: the next one (or the
    key) is tried from the first octet again."""
    msg = Path(ct.get("gpg", "gpg-cv25519", 5000)).read_bytes()
    want = plain.get(5000).read_bytes()
    right, wrong = tools.tmp(".sk"), tools.tmp(".sk")
    rc, _, err = run("pgpdecd-sop", ["decrypt", "--session-key-out", right, keys["gpg-cv25519"].key], msg)
    assert rc == 0, err
    algo, hexkey = right.read_text().strip().split(":")
    wrong.write_text(f"{algo}:{'00' * (len(hexkey) // 2)}\n")
    for args in (["--with-session-key", wrong, "--with-session-key", right],
                 ["--with-session-key", wrong, keys["gpg-cv25519"].key]):
        rc, out, err = run("pgpdecd-sop", ["decrypt", *args], msg)
        assert (rc, out == want) == (0, True), err


# --------------------------------------------------------------------------
# Failures: the draft's code (pgpdecd-sop's) and what sqop and gosop give.
# gosop (2022) exits 99 for what it does not classify, a code the draft
# does not define, and has neither --with-key-password nor
# --verifications-out (urfave/cli's usage error, 1).

CODES = {
    # case:                 (pgpdecd-sop = draft, sqop, gosop)
    "wrong-key":            (29, 29, 99),
    "tampered":             (29, 1, 99),
    "garbage":              (41, 1, 99),    # sqop: "IO error"
    "empty-input":          (41, 41, 99),
    "signed-not-encrypted": (41, 0, 99),    # sqop decrypts what is not encrypted
    "missing-key-file":     (61, 61, 99),
    "cert-as-key":          (41, 29, 99),   # draft: BAD_DATA, "no secret key where KEY expected"
    "no-key-given":         (19, 29, 69),
    "password-right":       (0, 0, 0),
    "password-newline":     (0, 0, 0),      # the file's trailing newline is stripped
    "password-wrong":       (29, 29, 99),
    "password-env":         (0, 0, 0),
    "password-env-unset":   (61, 71, 99),
    "password-fd":          (0, 0, 0),
    "unknown-prefix":       (71, 71, 99),
    "ambiguous-input":      (73, 73, 0),    # gosop reads the variable
    "protected-no-pw":      (67, 67, 99),
    "protected-pw":         (0, 0, 1),
    "protected-wrong-pw":   (67, 67, 1),
    "session-key-wrong":    (29, 29, 99),
    "session-key-malformed": (41, 1, 99),
    "session-key-out-exists": (59, 59, 0),  # gosop overwrites the file
    "unsupported-subcommand": (69, 69, 69),
    "unknown-option":       (37, 1, 1),
    "verify-with":          (37, 3, 1),     # pgpdecd-sop does not verify signatures; sqop
                                            # exits 3 (NO_SIGNATURE), where the draft says
                                            # verification leaves decrypt's code alone
}


@pytest.fixture(scope="module")
def cases(sop_env, ct, keys, tools):
    """Inputs of the failure cases, made once."""
    c = {}
    good = Path(ct.get("gpg", "gpg-cv25519", 5000)).read_bytes()
    c["good"] = good
    t = bytearray(good)
    t[len(t) - 30] ^= 1  # inside the SEIPD body: the MDC fails
    c["tampered"] = bytes(t)
    sym = tools.tmp(".pw")
    sym.write_bytes(b"sop test password")
    c["pw"] = sym
    nl = tools.tmp(".pw")
    nl.write_bytes(b"sop test password\n")
    c["pw-nl"] = nl
    bad = tools.tmp(".pw")
    bad.write_bytes(b"not the password")
    c["pw-wrong"] = bad
    rc, out, err = run("sqop", ["encrypt", "--with-password", sym], b"symmetric plaintext\n", env=sop_env)
    assert rc == 0, err
    c["sym"] = out
    rc, out, err = run("sqop", ["inline-sign", keys["sqop-cv25519"].key], b"signed\n", env=sop_env)
    assert rc == 0, err
    c["signed"] = out
    kpw = tools.tmp(".kpw")
    kpw.write_text(PASSPHRASE)
    c["kpw"] = kpw
    c["prot-msg"] = Path(ct.get("gpg", "gpg-cv25519-prot", 5000)).read_bytes()
    sk = tools.tmp(".sk")
    rc, _, err = run("pgpdecd-sop", ["decrypt", "--session-key-out", sk, keys["gpg-cv25519"].key], good)
    assert rc == 0, err
    algo, hexkey = sk.read_text().strip().split(":")
    wrong = tools.tmp(".sk")
    wrong.write_text(f"{algo}:{'11' * (len(hexkey) // 2)}")
    c["sk-wrong"] = wrong
    mal = tools.tmp(".sk")
    mal.write_text("not a session key")
    c["sk-malformed"] = mal
    d = tools.root / "sop-cwd"
    d.mkdir(exist_ok=True)
    (d / "@ENV:SOP_AMBIGUOUS").write_text("a file named like a designator")
    c["cwd"] = d
    return c


def _case(name, c, keys, tools, tool):
    """(args, stdin, env additions, fds to pass) of a case for one tool."""
    k = keys["gpg-cv25519"].key
    if name == "wrong-key":
        return ["decrypt", keys["sq-cv25519"].key], c["good"], {}, None
    if name == "tampered":
        return ["decrypt", k], c["tampered"], {}, None
    if name == "garbage":
        return ["decrypt", k], b"this is not an OpenPGP message\n" * 20, {}, None
    if name == "empty-input":
        return ["decrypt", k], b"", {}, None
    if name == "signed-not-encrypted":
        return ["decrypt", keys["sqop-cv25519"].key], c["signed"], {}, None
    if name == "missing-key-file":
        return ["decrypt", tools.root / "no-such-key-file"], c["good"], {}, None
    if name == "cert-as-key":
        return ["decrypt", keys["gpg-cv25519"].cert], c["good"], {}, None
    if name == "no-key-given":
        return ["decrypt"], c["good"], {}, None
    if name == "password-right":
        return ["decrypt", "--with-password", c["pw"]], c["sym"], {}, None
    if name == "password-newline":
        return ["decrypt", "--with-password", c["pw-nl"]], c["sym"], {}, None
    if name == "password-wrong":
        return ["decrypt", "--with-password", c["pw-wrong"]], c["sym"], {}, None
    if name == "password-env":
        return ["decrypt", "--with-password", "@ENV:SOP_TEST_PW"], c["sym"], \
            {"SOP_TEST_PW": "sop test password"}, None
    if name == "password-env-unset":
        return ["decrypt", "--with-password", "@ENV:SOP_TEST_UNSET"], c["sym"], {}, None
    if name == "password-fd":
        return ["decrypt", "--with-password", "@FD:{fd}"], c["sym"], {}, c["pw"]
    if name == "unknown-prefix":
        return ["decrypt", "--with-password", "@FOO:bar"], c["sym"], {}, None
    if name == "ambiguous-input":
        return ["decrypt", "--with-password", "@ENV:SOP_AMBIGUOUS"], c["sym"], \
            {"SOP_AMBIGUOUS": "sop test password"}, None
    if name == "protected-no-pw":
        return ["decrypt", keys["gpg-cv25519-prot"].key], c["prot-msg"], {}, None
    if name == "protected-pw":
        return ["decrypt", "--with-key-password", c["kpw"], keys["gpg-cv25519-prot"].key], \
            c["prot-msg"], {}, None
    if name == "protected-wrong-pw":
        return ["decrypt", "--with-key-password", c["pw-wrong"], keys["gpg-cv25519-prot"].key], \
            c["prot-msg"], {}, None
    if name == "session-key-wrong":
        return ["decrypt", "--with-session-key", c["sk-wrong"]], c["good"], {}, None
    if name == "session-key-malformed":
        return ["decrypt", "--with-session-key", c["sk-malformed"]], c["good"], {}, None
    if name == "session-key-out-exists":
        f = tools.tmp(".sk-exists")
        f.write_text("already here")
        return ["decrypt", "--session-key-out", f, k], c["good"], {}, None
    if name == "unsupported-subcommand":
        return ["frobnicate"], b"", {}, None
    if name == "unknown-option":
        return ["decrypt", "--frobnicate", k], c["good"], {}, None
    if name == "verify-with":
        return ["decrypt", "--verify-with", keys["gpg-cv25519"].cert, "--verifications-out",
                tools.tmp(f".{tool}.verifications"), k], c["good"], {}, None
    raise ValueError(name)


@pytest.mark.parametrize("name", list(CODES))
def test_failure_codes(sop_env, cases, keys, tools, plain, name):
    want = dict(zip(TOOLS, CODES[name]))
    five = plain.get(5000).read_bytes()
    got = {}
    for tool in TOOLS:
        args, stdin, env_add, fd_file = _case(name, cases, keys, tools, tool)
        env = {k: v for k, v in sop_env.items() if k not in ("SOP_TEST_PW", "SOP_AMBIGUOUS")}
        env.update(env_add)
        fds = ()
        if fd_file is not None:
            fd = os.open(fd_file, os.O_RDONLY)
            args = [a.replace("{fd}", str(fd)) if isinstance(a, str) else a for a in args]
            fds = (fd,)
        try:
            rc, out, err = run(tool, args, stdin, env=env, cwd=cases["cwd"], pass_fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
        got[tool] = rc
        if tool == "pgpdecd-sop":
            if rc != 0:
                # a failure names the draft's code and says nothing on stdout
                assert out == b"", f"{name}: {len(out)} octets on stdout with exit {rc}"
                assert err.startswith("pgpdecd-sop: "), err
            elif name.startswith(("password", "protected")):
                assert out in (b"symmetric plaintext\n", five), out[:40]
    assert got == want, f"{name}: exit codes {got}, the table says {want}"


def test_no_plaintext_before_verdict(sop_env, cases, keys):
    """A tampered message yields no octet on stdout, although SEIPD v1
    releases plaintext before its MDC: decrypt holds it until it verified."""
    rc, out, err = run("pgpdecd-sop", ["decrypt", keys["gpg-cv25519"].key], cases["tampered"])
    assert (rc, out) == (29, b""), err
    assert "integrity check failed" in err, err


def test_version(sop_env):
    rc, out, _ = run("pgpdecd-sop", ["version"])
    assert rc == 0 and out.decode().startswith("pgpdecd-sop "), out
    first = out.decode().splitlines()[0]
    rc, ext, _ = run("pgpdecd-sop", ["version", "--extended"])
    assert rc == 0 and ext.decode().splitlines()[0] == first, ext
    assert len(ext.decode().splitlines()) > 1, ext
    rc, be, _ = run("pgpdecd-sop", ["version", "--backend"])
    assert rc == 0 and be.decode().startswith("libpgpdec ") and "libgcrypt" in be.decode(), be
    rc, spec, _ = run("pgpdecd-sop", ["version", "--sop-spec"])
    assert rc == 0 and spec.decode().startswith("~draft-dkg-openpgp-stateless-cli-"), spec
    # one version option at a time; no stray arguments
    assert run("pgpdecd-sop", ["version", "--backend", "--extended"])[0] == 1
    assert run("pgpdecd-sop", ["version", "--frob"])[0] == 37
    assert run("pgpdecd-sop", ["version", "extra"])[0] == 37
    # sqop and gosop answer the same subcommand (gosop's --sop-spec is newer than it)
    for tool in ("sqop", "gosop"):
        assert run(tool, ["version"])[0] == 0


@pytest.mark.parametrize("sub", ["encrypt", "sign", "verify", "generate-key", "extract-cert",
                                 "armor", "dearmor", "inline-sign", "inline-verify", "inline-detach",
                                 "list-profiles", "change-key-password", "revoke-key"])
def test_other_subcommands(sop_env, sub):
    rc, out, err = run("pgpdecd-sop", [sub], b"")
    assert (rc, out) == (69, b""), err
    assert "UNSUPPORTED_SUBCOMMAND" in err


def test_missing_option_value(sop_env):
    rc, _, err = run("pgpdecd-sop", ["decrypt", "--with-password"], b"")
    assert rc == 19, err


def test_session_key_out_fd(sop_env, cases, keys, tools):
    """@FD:N as the session key's output (the draft's only output designator);
    @ENV: cannot be one."""
    r, w = os.pipe()
    try:
        rc, _, err = run("pgpdecd-sop", ["decrypt", f"--session-key-out=@FD:{w}", keys["gpg-cv25519"].key],
                         cases["good"], pass_fds=(w,))
        os.close(w)
        w = None
        assert rc == 0, err
        text = os.read(r, 200).decode()
    finally:
        os.close(r)
        if w is not None:
            os.close(w)
    assert text.endswith("\n") and ":" in text, text
    rc, _, err = run("pgpdecd-sop", ["decrypt", "--session-key-out=@ENV:X", keys["gpg-cv25519"].key],
                     cases["good"])
    assert rc == 71, err


@pytest.mark.skipif(shutil.which("man") is None, reason="man-db not installed")
def test_man_page():
    """pgpdecd-sop(1) names every option of tools/sop.c and every exit code
    pgpdecd-sop gives in CODES; it renders without warnings (test_units)."""
    import re
    src = (Path(__file__).resolve().parents[2] / "tools" / "sop.c").read_text()
    names = set(re.findall(r'^\s*\{ "([a-z-]+)", (?:true|false), ', src, re.M))
    assert len(names) >= 12, names
    r = subprocess.run(["man", "-l", str(BUILD / "man" / "pgpdecd-sop.1")], capture_output=True,
                       text=True, env=dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="200",
                                           MAN_KEEP_FORMATTING="", GROFF_NO_SGR="1"))
    page = re.sub(r".\x08", "", r.stdout).replace("\u2010", "-").replace("\u2011", "-")
    missing = [n for n in sorted(names) if f"--{n}" not in page]
    assert not missing, f"not in pgpdecd-sop(1): {missing}"
    for code in sorted({c[0] for c in CODES.values()} | {1, 19, 69}):
        assert re.search(rf"^\s+{code}( \([A-Z_]+\))?$", page, re.M), f"exit code {code} not in pgpdecd-sop(1)"
