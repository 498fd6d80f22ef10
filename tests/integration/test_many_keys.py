# SPDX-License-Identifier: MIT
"""Many keys: the real daemon with a key directory of a few hundred keys
made by contrib/bench/mkring.py (cv25519 and RSA-2048, some protected with
an iterated+salted S2K and FILE.passphrase beside), messages by gpg.

- every key loads (unlocked on the load's threads) and the KEYS listing is
  in file order, as a one-by-one load makes it; a message to a key deep in
  the ring decrypts, protected or not, at start and after a reload;
- a file that repeats keys already loaded is reported as before ("holds
  no decryption key that is not loaded already") and changes nothing;
- a wrong passphrase deep in the directory fails the load naming that
  file, and no other;
- secure memory too small for the ring: the start fails with a sentence
  naming secmem-size and a size, and that size works; secmem-size 0 (the
  default) sizes it from the key files and says so.

Run: PD_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/integration/test_many_keys.py
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import kill_gpg_agent  # noqa: E402
from test_keys import PGPDECD, Daemon, Gpg, decrypts, refused  # noqa: E402

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COUNT = 240

pytestmark = pytest.mark.skipif(not shutil.which("gpg") or not os.path.exists(PGPDECD),
                                reason="needs gpg and a built daemon/pgpdecd")


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    base = tmp_path_factory.mktemp("ring")
    subprocess.run(["/usr/bin/python3", os.path.join(SRC, "contrib/bench/mkring.py"), str(base),
                    "--count", str(COUNT), "--mix", "0,0,2,1", "--rsa-pool", "2", "--protected", "0.1",
                    "--s2k-count", "0x60"], check=True, capture_output=True)
    rows = [ln.rstrip("\n").split("\t") for ln in open(base / "index.tsv")]
    g = Gpg(base / "gnupg")
    msgs = {}
    # deep keys: a cv25519 and an RSA-2048 one, protected and not
    want = {("cv25519", "0"), ("cv25519", "1"), ("rsa2048", "0"), ("rsa2048", "1")}
    for i in range(COUNT * 3 // 4, COUNT):
        name, kind, fpr, prot = rows[i]
        if (kind, prot) in want:
            want.discard((kind, prot))
            g.run("--import", str(base / "keys" / name))
            plain = os.urandom(3000)
            msgs[(kind, prot)] = (i, fpr, g.run("--encrypt", "-r", fpr, input=plain).stdout, plain)
    assert not want, want
    yield {"base": base, "keys": base / "keys", "rows": rows, "msgs": msgs}
    kill_gpg_agent(g.home)


def keys_listing(d):
    r = subprocess.run([os.path.join(os.path.dirname(PGPDECD), "..", "client", "pgpdecd-client"),
                        "--socket", d.sock, "keys"], capture_output=True, text=True, check=True)
    return r.stdout


def test_many_keys_load_in_order_and_decrypt(ring, tmp_path):
    d = Daemon(tmp_path, "--keydir", ring["keys"], "--log-level", "info")
    try:
        text = d.text()
        assert f"{COUNT} decryption keys loaded" in text, text[-3000:]
        # one decryption key per file, listed in file order
        out = keys_listing(d)
        fprs = [ln.split()[0] for ln in out.splitlines() if re.match(r"^[0-9A-F]{40}\b", ln)]
        assert fprs == [r[2] for r in ring["rows"]], out[:2000]
        loaded = re.findall(r"loaded key ([0-9A-F]{40}) .* from (\S+)", text)
        assert [f for f, _ in loaded] == [r[2] for r in ring["rows"]]
        assert [os.path.basename(p) for _, p in loaded] == [r[0] for r in ring["rows"]]
        for (kind, prot), (i, fpr, msg, plain) in ring["msgs"].items():
            decrypts(d, msg, plain)
        # a reload loads them all again, and the deep keys still decrypt
        d.proc.send_signal(1)
        d.wait_log(f"reload: keys unchanged ({COUNT} decryption keys)")
        for (kind, prot), (i, fpr, msg, plain) in ring["msgs"].items():
            decrypts(d, msg, plain)
    finally:
        assert d.stop() == 0


def test_duplicates_reported(ring, tmp_path):
    keys = tmp_path / "keys"
    shutil.copytree(ring["keys"], keys)
    # the same keys again under later names (one protected, with its passphrase)
    rows = ring["rows"]
    prot = next(r for r in rows if r[3] == "1")
    plain = next(r for r in rows if r[3] == "0")
    for r in (prot, plain):
        shutil.copy(keys / r[0], keys / ("zz-again-" + r[0]))
        if r[3] == "1":
            shutil.copy(keys / (r[0] + ".passphrase"), keys / ("zz-again-" + r[0] + ".passphrase"))
    d = Daemon(tmp_path, "--keydir", keys, "--log-level", "info")
    try:
        text = d.text()
        for r in (prot, plain):
            assert re.search(re.escape(f"key file {keys}/zz-again-{r[0]}") +
                             r".* holds no decryption key that is not loaded already", text), text[-3000:]
        assert f"{COUNT} decryption keys loaded" in text
        fprs = [ln.split()[0] for ln in keys_listing(d).splitlines() if re.match(r"^[0-9A-F]{40}\b", ln)]
        assert fprs == [r[2] for r in rows]
    finally:
        assert d.stop() == 0


def test_bad_passphrase_deep_names_that_file(ring, tmp_path):
    keys = tmp_path / "keys"
    shutil.copytree(ring["keys"], keys)
    rows = ring["rows"]
    bad = [r for r in rows if r[3] == "1"][-2]   # deep, not the last
    (keys / (bad[0] + ".passphrase")).write_text("not the passphrase\n")
    code, err = refused(tmp_path, "--keydir", keys)
    assert code == 78, err
    errs = [ln for ln in err.splitlines() if " error " in ln]
    assert len(errs) == 1, err[-3000:]
    assert f"key file {keys}/{bad[0]}:" in errs[0] and "passphrase" in errs[0], errs


def test_secure_memory_too_small_says_what_to_set(ring, tmp_path):
    code, err = refused(tmp_path, "--keydir", ring["keys"], "--secmem-size", "64K")
    assert code == 78, err
    m = re.search(r"key file \S+: out of secure memory: the 64K of secmem-size are full after (\d+) of "
                  rf"{COUNT} key files; set secmem-size = (\d+M) in the configuration \(or --secmem-size "
                  r"(\d+M)\) and restart", err)
    assert m, err[-3000:]
    assert 0 < int(m.group(1)) < COUNT and m.group(2) == m.group(3)
    # the size it names is enough
    d = Daemon(tmp_path, "--keydir", ring["keys"], "--secmem-size", m.group(2), "--log-level", "info")
    try:
        assert f"{COUNT} decryption keys loaded" in d.text()
        i, fpr, msg, plain = ring["msgs"][("rsa2048", "1")]
        decrypts(d, msg, plain)
    finally:
        assert d.stop() == 0


def test_secure_memory_sized_from_key_files(ring, tmp_path):
    keys = ring["keys"]
    total = sum(os.path.getsize(keys / r[0]) for r in ring["rows"])
    d = Daemon(tmp_path, "--keydir", keys, "--log-level", "info")
    try:
        m = re.search(r"secure memory: (\d+)M \(secmem-size 0: twice the (\d+) bytes of (\d+) key files "
                      r"and 1M, at least 4M\)", d.text())
        assert m, d.text()[-3000:]
        assert int(m.group(2)) == total and int(m.group(3)) == COUNT
        assert int(m.group(1)) == max(4, -(-(2 * total + (1 << 20)) // (1 << 20)))
    finally:
        assert d.stop() == 0
