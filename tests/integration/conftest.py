# SPDX-License-Identifier: MIT
"""Fixtures of the interop suite: keys generated at test time by the peers
(gpg, sq, rnp, sqop, gosop), messages the peers encrypt to them, and the
engine's test driver (tools/pd-decrypt) that decrypts them.

Everything costly is made once per session and cached: keys are generated
on first use (RSA-4096 once), ciphertexts are cached per (peer, key, size,
armor, options) so that both RSA backends, and both ECDH backends, decrypt
the same bytes.

Environment:
  PD_BUILD_DIR   meson build directory (set by `meson test`)
  PD_DECRYPT     driver to run instead of $PD_BUILD_DIR/tools/pd-decrypt
  PD_TEST_LEAN   1: run only one 50 MiB case (the sanitizer build)
  PD_DEBS_DIR    the .debs of this tree, instead of building them (`debs`)
"""

import collections
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BUILD = Path(os.environ.get("PD_BUILD_DIR", HERE.parent.parent / "build"))
LEAN = os.environ.get("PD_TEST_LEAN", "") not in ("", "0")

# Exit codes of pd-decrypt (its --help documents the same table).
EXIT = {
    "OK": 0, "OTHER": 1, "USAGE": 2,
    "ENOKEY": 10, "EMALFORMED": 11, "EUNSUPPORTED": 12, "EINTEGRITY": 13,
    "ELIMIT": 14, "EBADPASS": 15, "ESED": 16, "ENOTPGP": 17, "ETRUNCATED": 18,
    "ENEEDPASS": 19, "ENOSECRET": 20, "ENOPASSWORD": 21, "EBOMB": 22,
}
NAME_OF = {v: k for k, v in EXIT.items()}

KIB, MIB = 1024, 1024 * 1024
PASSPHRASE = "pd test passphrase \u00e9"  # non-ASCII on purpose: UTF-8 octets


# --------------------------------------------------------------------------
# Keys

class KeySpec:
    """How to make a key: who generates it, its algorithm label (for the
    summary), whether its decryption key is RSA (both RSA backends tested);
    ECDH keys (algo ECDH-*, X25519, X448) get both ECDH backends."""

    def __init__(self, name, maker, algo, rsa=False, passphrase=None, args=()):
        self.name, self.maker, self.algo, self.rsa = name, maker, algo, rsa
        self.ecdh = algo.startswith("ECDH-") or algo in ("X25519", "X448")
        self.passphrase, self.args = passphrase, args


KEYS = {k.name: k for k in [
    # gpg: primary key encrypting itself (no subkey) for RSA-2048; subkeys elsewhere
    KeySpec("gpg-rsa2048", "gpg", "RSA-2048", True, args=("rsa2048", "cert,sign,encr", None)),
    KeySpec("gpg-rsa3072", "gpg", "RSA-3072", True, args=("ed25519", "cert,sign", "rsa3072")),
    KeySpec("gpg-rsa4096", "gpg", "RSA-4096", True, args=("ed25519", "cert,sign", "rsa4096")),
    KeySpec("gpg-cv25519", "gpg", "ECDH-cv25519", args=("ed25519", "cert,sign", "cv25519")),
    KeySpec("gpg-p256", "gpg", "ECDH-P256", args=("nistp256", "cert,sign", "nistp256")),
    KeySpec("gpg-p384", "gpg", "ECDH-P384", args=("nistp384", "cert,sign", "nistp384")),
    KeySpec("gpg-p521", "gpg", "ECDH-P521", args=("nistp521", "cert,sign", "nistp521")),
    KeySpec("gpg-elg", "gpg-elg", "ElGamal-2048"),
    KeySpec("gpg-cv25519-prot", "gpg", "ECDH-cv25519", passphrase=PASSPHRASE,
            args=("ed25519", "cert,sign", "cv25519")),
    KeySpec("gpg-rsa2048-prot", "gpg", "RSA-2048", True, passphrase=PASSPHRASE,
            args=("ed25519", "cert,sign", "rsa2048")),
    KeySpec("sq-cv25519", "sq", "ECDH-cv25519", args=("cv25519",)),
    KeySpec("sq-rsa3k", "sq", "RSA-3072", True, args=("rsa3k",)),
    KeySpec("rnp-rsa2048", "rnp", "RSA-2048", True),
    KeySpec("sqop-cv25519", "sqop", "ECDH-cv25519"),
    KeySpec("gosop-rsa2048", "gosop", "RSA-2048", True),
]}

# The keys of the main matrix (the protected ones have their own tests).
MATRIX_KEYS = [k for k in KEYS if not k.endswith("-prot")]
PEERS = ["gpg", "sq", "rnp", "sqop", "gosop"]
BACKENDS = ["openssl", "gcrypt"]

# (peer, key) pairs a peer cannot encrypt to, with the reason; checked by
# test_peer_limits so that the table stays true.
CANNOT = {
    ("sq", "gpg-elg"): "sq 0.27 does not encrypt to ElGamal keys",
    ("sqop", "gpg-elg"): "sqop 0.27 does not encrypt to ElGamal keys",
}


def backends_for(key):
    """The backends a key's messages are decrypted with: both RSA ones for
    RSA keys, both ECDH ones for ECDH keys (the Driver passes a backend as
    --rsa-backend and --ecdh-backend alike)."""
    return BACKENDS if KEYS[key].rsa or KEYS[key].ecdh else [None]


class Key:
    def __init__(self, spec, key, cert, fpr, enc_keyids):
        self.spec, self.name, self.key, self.cert = spec, spec.name, key, cert
        self.fpr, self.enc_keyids = fpr, enc_keyids
        self.algo, self.rsa, self.passphrase = spec.algo, spec.rsa, spec.passphrase


def run(cmd, input=None, env=None, timeout=600, check=True, **kw):
    p = subprocess.run([str(c) for c in cmd], input=input, env=env, timeout=timeout,
                       stdout=kw.pop("stdout", subprocess.PIPE),
                       stderr=kw.pop("stderr", subprocess.PIPE), **kw)
    if check and p.returncode != 0:
        err = p.stderr.decode(errors="replace") if isinstance(p.stderr, bytes) else ""
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {err[-2000:]}")
    return p


def kill_gpg_agent(home):
    """Stop the gpg-agent (and dirmngr) that gpg started for GNUPGHOME home:
    left running, they outlive the tests and wake up now and then."""
    subprocess.run(["gpgconf", "--kill", "all"], env=dict(os.environ, GNUPGHOME=str(home)),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Tools:
    """The peers, each with its state in the session directory."""

    def __init__(self, root):
        self.root = root
        self.gnupghome = root / "gnupg"
        self.gnupghome.mkdir(mode=0o700)
        (self.gnupghome / "gpg.conf").write_text("no-auto-key-locate\ntrust-model always\n")
        (self.gnupghome / "gpg-agent.conf").write_text("allow-loopback-pinentry\n")
        self.rnphome = root / "rnp"          # keys rnp generates
        self.rnpenc = root / "rnp-enc"       # certs rnp encrypts to
        self.rnphome.mkdir()
        self.rnpenc.mkdir()
        self.rnp_imported = set()
        self.env = dict(os.environ, GNUPGHOME=str(self.gnupghome), LC_ALL="C.UTF-8",
                        HOME=str(root), SQ_HOME=str(root / "sq"))
        self.n = 0

    def tmp(self, suffix=""):
        self.n += 1
        return self.root / f"f{self.n}{suffix}"

    def gpg(self, *args, input=None, passphrase="", check=True):
        cmd = ["gpg", "--batch", "--yes", "--no-tty", "--pinentry-mode", "loopback",
               "--passphrase", passphrase, *args]
        return run(cmd, input=input, env=self.env, check=check)

    def close(self):
        kill_gpg_agent(self.gnupghome)


def plaintext_written(pid, d):
    """Octets of plaintext process pid has put under directory d so far: in
    files there, or in unnamed ones (O_TMPFILE) it holds open."""
    d = os.path.realpath(d)
    n = sum(os.stat(os.path.join(d, f)).st_size for f in os.listdir(d))
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, fd)).startswith(d + "/"):
                n += os.stat(os.path.join(fds, fd)).st_size
        except OSError:
            pass  # closed meanwhile
    return n


def has_o_tmpfile(d):
    """Whether the file system of directory d makes unnamed files."""
    try:
        os.close(os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600))
        return True
    except OSError:
        return False


def _enc_keyids(tools, cert):
    """Key IDs of the encryption-capable (sub)keys of a cert, via gpg."""
    out = tools.gpg("--with-colons", "--show-keys", str(cert)).stdout.decode()
    ids = []
    for line in out.splitlines():
        f = line.split(":")
        if f[0] in ("pub", "sub") and "e" in f[11]:
            ids.append(f[4].upper())
    return ids


def _fpr(tools, cert):
    out = tools.gpg("--with-colons", "--show-keys", str(cert)).stdout.decode()
    return next(l.split(":")[9] for l in out.splitlines() if l.startswith("fpr"))


def make_key(tools, spec):
    d = tools.root / "keys"
    d.mkdir(exist_ok=True)
    key, cert = d / f"{spec.name}.key", d / f"{spec.name}.cert"
    uid = f"<{spec.name}@pd.test>"
    pw = spec.passphrase or ""
    if spec.maker == "gpg":
        palgo, pusage, salgo = spec.args
        tools.gpg("--quick-gen-key", uid, palgo, pusage, "never", passphrase=pw)
        out = tools.gpg("--with-colons", "--list-keys", uid).stdout.decode()
        fpr = next(l.split(":")[9] for l in out.splitlines() if l.startswith("fpr"))
        if salgo:
            tools.gpg("--quick-add-key", fpr, salgo, "encr", "never", passphrase=pw)
        cert.write_bytes(tools.gpg("--export", fpr).stdout)
        key.write_bytes(tools.gpg("--export-secret-keys", fpr, passphrase=pw).stdout)
    elif spec.maker == "gpg-elg":
        batch = (f"%no-protection\nKey-Type: DSA\nKey-Length: 2048\nSubkey-Type: ELG-E\n"
                 f"Subkey-Length: 2048\nName-Email: {spec.name}@pd.test\nExpire-Date: 0\n%commit\n")
        tools.gpg("--gen-key", input=batch.encode())
        cert.write_bytes(tools.gpg("--export", uid).stdout)
        key.write_bytes(tools.gpg("--export-secret-keys", uid).stdout)
    elif spec.maker == "sq":
        run(["sq", "key", "generate", "--userid", uid, "--cipher-suite", spec.args[0],
             "--export", key], env=tools.env)
        cert.write_bytes(run(["sq", "key", "extract-cert", key], env=tools.env).stdout)
    elif spec.maker == "rnp":
        run(["rnpkeys", "--homedir", tools.rnphome, "--generate-key", "--userid", uid,
             "--password", ""], env=tools.env)
        key.write_bytes(run(["rnpkeys", "--homedir", tools.rnphome, "--export-key",
                             "--secret", uid], env=tools.env).stdout)
        cert.write_bytes(run(["rnpkeys", "--homedir", tools.rnphome, "--export-key", uid],
                             env=tools.env).stdout)
    elif spec.maker in ("sqop", "gosop"):
        key.write_bytes(run([spec.maker, "generate-key", uid], env=tools.env).stdout)
        cert.write_bytes(run([spec.maker, "extract-cert"], input=key.read_bytes(),
                             env=tools.env).stdout)
    else:
        raise ValueError(spec.maker)
    return Key(spec, key, cert, _fpr(tools, cert), _enc_keyids(tools, cert))


class Keys:
    def __init__(self, tools):
        self.tools, self.cache = tools, {}

    def __getitem__(self, name):
        if name not in self.cache:
            self.cache[name] = make_key(self.tools, KEYS[name])
        return self.cache[name]


# --------------------------------------------------------------------------
# Encryption by the peers

def encrypt(tools, peer, keys, infile, armor=False, extra=(), stdin=False):
    """Encrypt infile to keys (a list of Key) with peer; returns the path.
    stdin=True feeds the plaintext through a pipe (gpg then writes partial
    body lengths)."""
    out = tools.tmp(".asc" if armor else ".pgp")
    env = tools.env
    if peer == "gpg":
        cmd = ["gpg", "--batch", "--yes", "--no-tty", "--trust-model", "always"]
        cmd += ["--armor"] if armor else []
        for k in keys:
            cmd += ["--recipient-file", k.cert]
        cmd += [*extra, "-o", out, "--encrypt"]
        if stdin:
            with open(infile, "rb") as f:
                run(cmd, env=env, stdin=f)
        else:
            run(cmd + [infile], env=env)
    elif peer == "sq":
        cmd = ["sq", "encrypt"] + ([] if armor else ["--binary"])
        for k in keys:
            cmd += ["--recipient-cert", k.cert]
        run(cmd + [*extra, "-o", out, infile], env=env)
    elif peer == "rnp":
        cmd = ["rnp", "--homedir", tools.rnpenc, "--encrypt"] + (["--armor"] if armor else [])
        for k in keys:
            if k.name not in tools.rnp_imported:
                run(["rnpkeys", "--homedir", tools.rnpenc, "--import", k.cert], env=env)
                tools.rnp_imported.add(k.name)
            cmd += ["-r", k.fpr]
        run(cmd + [*extra, "--output", out, infile], env=env)
    elif peer in ("sqop", "gosop"):
        cmd = [peer, "encrypt"] + ([] if armor else ["--no-armor"]) + [*extra]
        cmd += [k.cert for k in keys]
        with open(infile, "rb") as f, open(out, "wb") as o:
            run(cmd, env=env, stdin=f, stdout=o)
    else:
        raise ValueError(peer)
    return out


# --------------------------------------------------------------------------
# The driver

def driver_path():
    p = os.environ.get("PD_DECRYPT")
    return Path(p) if p else BUILD / "tools" / "pd-decrypt"


class Result:
    def __init__(self, proc, out_path=None, elapsed=0.0):
        self.rc = proc.returncode
        self.stdout = proc.stdout if isinstance(proc.stdout, bytes) else b""
        self.stderr = proc.stderr.decode(errors="replace")
        self.elapsed = elapsed
        self.out_path = out_path
        m = re.search(r"^pd-decrypt: (E[A-Z]+|ESYS|ENOMEM): (.*)$", self.stderr, re.M)
        self.errname = m.group(1) if m else None
        self.detail = m.group(2) if m else ""
        self.info = None
        for line in self.stderr.splitlines():
            if line.startswith("{"):
                self.info = json.loads(line)

    @property
    def name(self):
        return NAME_OF.get(self.rc, f"rc={self.rc}")

    def __repr__(self):
        return f"<pd-decrypt rc={self.rc} ({self.name}) stderr={self.stderr[-800:]!r}>"


def check_sanitizers(stderr):
    for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "SUMMARY: UndefinedBehaviorSanitizer", "AddressSanitizer:"):
        assert marker not in stderr, f"sanitizer report:\n{stderr[-4000:]}"


class Driver:
    def __init__(self, tools):
        self.path, self.tools = driver_path(), tools

    def __call__(self, msg, keys=(), backend=None, slice=None, passphrase=None,
                 password=None, info=True, out=None, args=(), timeout=900, stdin=None):
        cmd = [self.path]
        for k in keys:
            cmd += ["--key", k.key if isinstance(k, Key) else k]
        if backend:
            cmd += ["--rsa-backend", backend, "--ecdh-backend", backend]
        if slice:
            cmd += ["--slice", str(slice)]
        if passphrase is not None:
            pf = self.tools.tmp(".pass")
            pf.write_text(passphrase + "\n", encoding="utf-8")
            cmd += ["--passphrase-file", pf]
        if password is not None:
            pf = self.tools.tmp(".pw")
            pf.write_text(password + "\n", encoding="utf-8")
            cmd += ["--password-file", pf]
        if info:
            cmd += ["--info"]
        if out:
            cmd += ["-o", out]
        cmd += list(args)
        if msg is not None:
            cmd.append(msg)
        t = time.monotonic()
        p = run(cmd, check=False, timeout=timeout, input=stdin)
        r = Result(p, out, time.monotonic() - t)
        check_sanitizers(r.stderr)
        if r.rc not in (0, 2):
            # Every failure names its error, and the name matches the code.
            assert r.errname, f"no 'pd-decrypt: EXXX:' line: {r!r}"
            if r.rc != 1:
                assert EXIT.get(r.errname) == r.rc, f"{r.errname} vs exit {r.rc}"
        return r


def expect_ok(r, plaintext_path=None, plaintext=None):
    assert r.rc == 0, f"decryption failed: {r!r}"
    if plaintext_path is not None:
        if r.out_path:
            got = sha256_file(r.out_path)
            want = sha256_file(plaintext_path)
            assert got == want, "plaintext differs"
            return
        plaintext = Path(plaintext_path).read_bytes()
    if plaintext is not None:
        assert len(r.stdout) == len(plaintext), f"length {len(r.stdout)} != {len(plaintext)}"
        assert r.stdout == plaintext, "plaintext differs"


def expect_err(r, *names):
    assert r.rc != 0, f"expected {names}, got success ({len(r.stdout)} bytes out)"
    assert r.name in names, f"expected {names}, got {r!r}"


def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


# --------------------------------------------------------------------------
# Session fixtures

@pytest.fixture(scope="session")
def tools(tmp_path_factory):
    t = Tools(tmp_path_factory.mktemp("pd"))
    yield t
    t.close()


@pytest.fixture(scope="session")
def keys(tools):
    return Keys(tools)


@pytest.fixture(scope="session")
def pd(tools):
    d = Driver(tools)
    if not d.path.exists():
        pytest.fail(f"driver not built: {d.path}")
    return d


class Plaintexts:
    """Deterministic plaintexts: random (incompressible) or text-like."""

    def __init__(self, tools):
        self.tools, self.cache = tools, {}

    def get(self, size, kind="random"):
        k = (size, kind)
        if k not in self.cache:
            p = self.tools.root / f"plain-{kind}-{size}"
            with open(p, "wb") as f:
                if kind == "random":
                    if size >= 16 * MIB:
                        left = size
                        while left:
                            n = min(left, 4 * MIB)
                            f.write(os.urandom(n))
                            left -= n
                    else:
                        f.write(random.Random(size).randbytes(size))
                else:  # compressible text, not trivially so
                    rnd = random.Random(size + 1)
                    words = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"foxtrot",
                             b"golf", b"hotel", b"india", b"juliet"]
                    buf, n, i = bytearray(), 0, 0
                    while n < size:
                        line = b"%08d " % i + b" ".join(rnd.choice(words) for _ in range(8)) + b"\n"
                        buf += line
                        n += len(line)
                        i += 1
                        if len(buf) > MIB:
                            f.write(buf)
                            buf = bytearray()
                    f.write(buf)
                    f.truncate(size)
            self.cache[k] = p
        return self.cache[k]


def sanitized_build():
    """Whether PD_BUILD_DIR is a sanitizer build (check.sh's second pass)."""
    try:
        opts = json.loads((BUILD / "meson-info" / "intro-buildoptions.json").read_text())
    except (OSError, ValueError):
        return False
    return any(o["name"] == "b_sanitize" and o["value"] not in ("none", "", []) for o in opts)


@pytest.fixture(scope="session")
def debs(tmp_path_factory):
    """The Debian packages of this tree, {name: path} (no -dbgsym), built
    once per session by contrib/build-deb.sh: test_deb.py checks them,
    test_systemd_real.py installs them.  PD_DEBS_DIR: take the .debs there
    instead (a developer's shortcut; they must be of this tree)."""
    if os.environ.get("PD_DEBS_DIR"):
        out = Path(os.environ["PD_DEBS_DIR"])
    else:
        out = tmp_path_factory.mktemp("debs")
        r = subprocess.run([str(HERE.parent.parent / "contrib" / "build-deb.sh"), str(out)],
                           capture_output=True, text=True, timeout=3600)
        assert r.returncode == 0, r.stdout + r.stderr
    return {d.name.split("_")[0]: d for d in out.glob("*.deb")
            if not d.name.split("_")[0].endswith("-dbgsym")}


@pytest.fixture(scope="session")
def plain(tools):
    return Plaintexts(tools)


class Ciphertexts:
    def __init__(self, tools, keys, plain):
        self.tools, self.keys, self.plain, self.cache = tools, keys, plain, {}

    def get(self, peer, key_names, size, armor=False, kind="random", extra=(), stdin=False):
        if isinstance(key_names, str):
            key_names = [key_names]
        k = (peer, tuple(key_names), size, armor, kind, tuple(extra), stdin)
        if k not in self.cache:
            ks = [self.keys[n] for n in key_names]
            self.cache[k] = encrypt(self.tools, peer, ks, self.plain.get(size, kind),
                                    armor, extra, stdin)
        return self.cache[k]


@pytest.fixture(scope="session")
def ct(tools, keys, plain):
    return Ciphertexts(tools, keys, plain)


# --------------------------------------------------------------------------
# The matrix summary: tests label themselves with matrix(category, peer, algo)

_tally = collections.OrderedDict()


@pytest.fixture
def matrix(request):
    def label(category, peer, algo):
        request.node.user_properties.append(("matrix", (category, peer, algo)))
    return label


def pytest_runtest_logreport(report):
    labels = [v for k, v in report.user_properties if k == "matrix"]
    if not labels:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        for lab in labels:
            t = _tally.setdefault(lab, collections.Counter())
            t[report.outcome] += 1


def pytest_terminal_summary(terminalreporter):
    if not _tally:
        return
    rows = [("category", "peer", "algorithm", "passed", "failed", "skipped")]
    tot = collections.Counter()
    for (cat, peer, algo), c in sorted(_tally.items()):
        rows.append((cat, peer, algo, str(c["passed"]), str(c["failed"]), str(c["skipped"])))
        tot.update(c)
    rows.append(("TOTAL", "", "", str(tot["passed"]), str(tot["failed"]), str(tot["skipped"])))
    w = [max(len(r[i]) for r in rows) for i in range(6)]
    lines = ["  ".join(r[i].ljust(w[i]) if i < 3 else r[i].rjust(w[i]) for i in range(6))
             for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    terminalreporter.write_sep("=", "pgpdecd interop matrix")
    for line in lines:
        terminalreporter.write_line(line)
    try:
        (BUILD / "interop-matrix.txt").write_text("\n".join(lines) + "\n")
    except OSError:
        pass
