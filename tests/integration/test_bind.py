# SPDX-License-Identifier: MIT
"""Binding (PROTOCOL.md 5.1, BIND): a request bound to addresses or
domains is opened only with the daemon's keys whose User IDs carry them,
and a key left out is as if the daemon did not hold it: the same RESULT,
status, name and sentence as from a daemon without it, for a named and
for an anonymous recipient.  Several values: a key bound to every one.
Passwords and session keys are not bound.  A value that is no address is
BAD_REQUEST, more than 16 a bad request too; pgpdecd-client --bind.
Real gpg keys and messages, the real daemon on a real socket."""
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pdwire  # noqa: E402
from conftest import kill_gpg_agent  # noqa: E402
from pdwire import tlv  # noqa: E402
from test_daemon import CLIENT, PGPDECD, Daemon, Gpg  # noqa: E402

pytestmark = pytest.mark.skipif(not shutil.which("gpg") or not os.path.exists(PGPDECD) or not os.path.exists(CLIENT),
                                reason="needs gpg, a built daemon and pgpdecd-client")

T_BIND = 0x85
PLAIN = b"for alice only 41c7\n" * 20


@pytest.fixture(scope="module")
def bw(tmp_path_factory):
    base = tmp_path_factory.mktemp("bind")
    g = Gpg(str(base / "gnupg"))
    g.genkey("Alice <Alice@Example.ORG>")
    g.genkey("carol@other.example")
    # one key, two addresses (a role key): bound to both at once
    g.genkey("Team <team@example.org>")
    g.run("--quick-add-uid", g.fpr("team@example.org"), "Shared <shared@other.example>")
    full, carol_only = base / "full", base / "carol"
    full.mkdir()
    carol_only.mkdir()
    g.export_secret("alice@example.org", str(full / "alice.gpg"))
    g.export_secret("carol@other.example", str(full / "carol.gpg"))
    g.export_secret("team@example.org", str(full / "team.gpg"))
    g.export_secret("carol@other.example", str(carol_only / "carol.gpg"))
    msgs = {
        "alice": g.encrypt(PLAIN, "alice@example.org"),
        "team": g.encrypt(PLAIN, "team@example.org"),
        "hidden": g.run("--encrypt", "--hidden-recipient", "alice@example.org", input=PLAIN),
        "password": g.run("--symmetric", "--passphrase", "pw 1", input=PLAIN),
    }
    yield {"base": base, "full": full, "carol": carol_only, "msgs": msgs}
    kill_gpg_agent(g.home)


@pytest.fixture(scope="module")
def daemons(bw, tmp_path_factory):
    full = Daemon(None, tmp_path_factory.mktemp("full"), keydir=bw["full"])
    carol = Daemon(None, tmp_path_factory.mktemp("carol"), keydir=bw["carol"])
    yield full, carol
    full.stop()
    carol.stop()


def bind_opts(*vals):
    return b"".join(tlv(T_BIND, v.encode()) for v in vals)


def ask(d, msg, *vals, opts=b""):
    c = pdwire.Client(d.sock)
    try:
        return c.decrypt(msg, opts=bind_opts(*vals) + opts)
    finally:
        c.close()


def outcome(res):
    return res["status"], res.get("errname"), res.get("sentence"), res["integrity"]


def test_bound_key_opens(bw, daemons):
    full, _ = daemons
    for vals in (["alice@example.org"], ["ALICE@example.org"], ["@EXAMPLE.org"], []):
        got, res, _ = ask(full, bw["msgs"]["alice"], *vals)
        assert res["name"] == "OK", (vals, res)
        assert got == PLAIN


def test_unbound_key_is_as_if_not_held(bw, daemons):
    """Alice's message, bound to carol (whose key the daemon holds, and
    which is not a recipient): exactly what a daemon holding only carol's
    key answers without a binding.  Bound to no key at all: what a daemon
    holding none answers (for an anonymous recipient NO_KEY, where a held
    key's trial gives INTEGRITY)."""
    full, carol = daemons
    to_carol = (["carol@other.example"], ["@other.example"], ["CAROL@other.example"])
    to_none = (["nobody@example.org"], ["alice@example.org", "carol@other.example"],
               ["alice@example.org.evil"], ["lice@example.org"], ["@xample.org"])
    for name, want in (("alice", "NO_KEY"), ("hidden", "INTEGRITY")):
        msg = bw["msgs"][name]
        _, ref, _ = ask(carol, msg)
        assert ref["name"] == want, ref
        for vals in to_carol:
            got, res, _ = ask(full, msg, *vals)
            assert got == b"", (name, vals)
            assert outcome(res) == outcome(ref), (name, vals, res, ref)
        none = None
        for vals in to_none:
            got, res, _ = ask(full, msg, *vals)
            assert got == b"" and res["name"] == "NO_KEY", (name, vals, res)
            assert none is None or outcome(res) == none, (name, vals, res, none)
            none = outcome(res)
        if name == "alice":
            assert none == outcome(ref)
    # and the hidden recipient opens when bound to alice
    got, res, _ = ask(full, bw["msgs"]["hidden"], "alice@example.org")
    assert res["name"] == "OK" and got == PLAIN, res


def test_every_value_must_bind(bw, daemons):
    full, _ = daemons
    msg = bw["msgs"]["team"]
    for vals in (["team@example.org", "shared@other.example"], ["@example.org", "@other.example"],
                 ["shared@other.example"]):
        got, res, _ = ask(full, msg, *vals)
        assert res["name"] == "OK" and got == PLAIN, (vals, res)
    got, res, _ = ask(full, msg, "team@example.org", "carol@other.example")
    assert res["name"] == "NO_KEY" and got == b"", res


def test_password_and_session_key_are_not_bound(bw, daemons):
    full, _ = daemons
    got, res, _ = ask(full, bw["msgs"]["password"], "carol@other.example", opts=tlv(0x02, b"pw 1"))
    assert res["name"] == "OK" and got == PLAIN, res


def test_bad_values(bw, daemons):
    full, _ = daemons
    for vals in (["nobody"], ["a@b@c"], ["<a@b>"], ["a b@c"], ["a@"], ["@"]):
        got, res, _ = ask(full, bw["msgs"]["alice"], *vals)
        assert res["name"] == "BAD_REQUEST" and got == b"", (vals, res)
        assert "BIND" in res.get("sentence", ""), res
    # more than 16, or a value over 254 octets: not a request of this protocol
    for opts in (bind_opts(*["alice@example.org"] * 17), tlv(T_BIND, b"a@" + b"b" * 253), tlv(T_BIND, b"")):
        c = pdwire.Client(full.sock)
        try:
            got, res, _ = c.decrypt(bw["msgs"]["alice"], opts=opts)
        finally:
            c.close()
        assert res["name"] == "BAD_REQUEST" and got == b"", res
    # 16 values and 254 octets are fine
    got, res, _ = ask(full, bw["msgs"]["alice"], *["alice@example.org"] * 16)
    assert res["name"] == "OK", res
    got, res, _ = ask(full, bw["msgs"]["alice"], "a@" + "b" * 252)
    assert res["name"] == "NO_KEY", res


def client(d, *args, input=None):
    return subprocess.run([CLIENT, "--socket", d.sock, *args], input=input, capture_output=True, timeout=60)


def test_client_bind(bw, daemons):
    full, carol = daemons
    r = client(full, "--bind", "alice@example.org", input=bw["msgs"]["alice"])
    assert r.returncode == 0 and r.stdout == PLAIN, r.stderr
    r = client(full, "--bind", "carol@other.example", input=bw["msgs"]["alice"])
    ref = client(carol, input=bw["msgs"]["alice"])
    assert r.returncode == ref.returncode != 0, (r, ref)
    assert r.stdout == b"" and r.stderr == ref.stderr, (r.stderr, ref.stderr)
    r = client(full, "--bind", "nobody", input=bw["msgs"]["alice"])
    assert r.returncode == 64 and b"--bind" in r.stderr, r.stderr
    r = client(full, "--bind", "alice@example.org", "ping")
    assert r.returncode == 64, r.stderr


def test_keys_lists_the_addresses(bw, daemons):
    """KEYS carries each key's addresses (ADDRESS), what --bind matches;
    pgpdecd-client keys prints them after "bound"."""
    full, _ = daemons
    r = client(full, "keys")
    assert r.returncode == 0, r.stderr
    bound = sorted(ln.split(" bound ")[1] for ln in r.stdout.decode().splitlines())
    # each certificate's encryption subkey (its primary is certify+sign only)
    assert bound == ["alice@example.org", "carol@other.example", "team@example.org,shared@other.example"], r.stdout


def test_unbound_key_takes_no_late_slot(bw, tmp_path_factory):
    """Past max_esk (1,000) the engine keeps only PKESKs that name a held
    key, at most max-key-trials (8) of them, so that ours is found.  A key
    held but not bound must not take one of those slots: nine PKESKs to
    carol (held, unbound) after 1,000 others, then alice's, bound to
    alice: a daemon that also holds carol's key answers what one holding
    alice's alone does (before: NO_KEY, carol's packets had filled the late
    slots and alice's was skipped)."""
    import pgp
    g = Gpg(str(bw["base"] / "gnupg"))
    to_carol = g.encrypt(b"x", "carol@other.example")
    carol_pkesk = [to_carol[p.offset:p.end] for p in pgp.packets(to_carol) if p.tag == 1][0]
    msg = bw["msgs"]["alice"]
    ps = pgp.packets(msg)
    alice_pkesk = b"".join(msg[p.offset:p.end] for p in ps if p.tag == 1)
    rest = b"".join(msg[p.offset:p.end] for p in ps if p.tag != 1)
    crafted = carol_pkesk * 1009 + alice_pkesk + rest
    alice_only = tmp_path_factory.mktemp("alice-only")
    (alice_only / "alice.gpg").write_bytes((bw["full"] / "alice.gpg").read_bytes())
    ref_d = Daemon(None, tmp_path_factory.mktemp("alice-d"), keydir=alice_only)
    try:
        got_ref, ref, _ = ask(ref_d, crafted, "alice@example.org")
    finally:
        ref_d.stop()
    full = Daemon(None, tmp_path_factory.mktemp("full-late"), keydir=bw["full"])
    try:
        got, res, _ = ask(full, crafted, "alice@example.org")
    finally:
        full.stop()
    assert ref["name"] == "OK" and got_ref == PLAIN, ref
    assert outcome(res) == outcome(ref) and got == got_ref, (res, ref)


def test_mime_bind(bw, daemons):
    """pgpdecd-client --mime --bind: every piece of the mail is bound."""
    full, _ = daemons
    g = Gpg(str(bw["base"] / "gnupg"))
    mail = (b"From: m@example.org\nTo: alice@example.org\nSubject: s\n\n"
            + g.encrypt(PLAIN, "alice@example.org", armor=True))
    for args, want in ((["--bind", "alice@example.org"], "decrypted"), (["--bind", "@example.org"], "decrypted"),
                       (["--bind", "carol@other.example"], "no-key"), ([], "decrypted")):
        r = client(full, "--mime", *args, input=mail)
        assert r.returncode == 0, (args, r.stderr)
        status = r.stdout.split(b"\n", 1)[0].decode()
        assert status.startswith("X-Pgpdecd-Status: " + want), (args, status)
        assert (PLAIN in r.stdout) == (want == "decrypted"), args
