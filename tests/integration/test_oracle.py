# SPDX-License-Identifier: MIT
"""The error oracle, tried as an attacker would against the real daemon.

An attacker who captured a SEIPD v1 message replays its PKESK with chosen
CFB blocks: block k-1, block k XOR a mask, then filler.  The decrypted
packet stream then starts with plaintext block k XOR mask: if any reply
depended on how those unauthenticated octets parse (status, sentence, TLVs,
offsets), the replies for the 256 masks of one octet would differ and give
the octet away.  They must all be the same: INTEGRITY, one fixed sentence,
no key or decrypted-data TLVs.

Run: PD_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/integration/test_oracle.py
"""
import collections
import os
import random
import struct
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pdwire  # noqa: E402
from test_daemon import Daemon, PGPDECD, world  # noqa: E402,F401

BS = 16  # AES: gpg's default cipher for these keys
# longer than the engine's 64 KiB buffers, so the packet parser runs before the MDC
FILLER = random.Random(9580).randbytes(96 * 1024)


def packets(data):
    """[(tag, body)] of a binary OpenPGP stream; partial lengths joined."""
    out, off = [], 0
    while off < len(data):
        h = data[off]
        assert h & 0x80
        off += 1
        if h & 0x40:
            tag, body = h & 0x3F, b""
            while True:
                o = data[off]
                if o < 192:
                    n, off = o, off + 1
                elif o < 224:
                    n, off = ((o - 192) << 8) + data[off + 1] + 192, off + 2
                elif o == 255:
                    n, off = struct.unpack_from(">I", data, off + 1)[0], off + 5
                else:  # partial
                    n = 1 << (o & 0x1F)
                    body += data[off + 1:off + 1 + n]
                    off += 1 + n
                    continue
                body += data[off:off + n]
                off += n
                break
        else:
            tag, lt = (h >> 2) & 0x0F, h & 3
            ln = {0: 1, 1: 2, 2: 4}[lt]
            n = int.from_bytes(data[off:off + ln], "big")
            off += ln
            body = data[off:off + n]
            off += n
        out.append((tag, body))
    return out


def packet(tag, body):
    return bytes([0xC0 | tag, 0xFF]) + struct.pack(">I", len(body)) + body


def forge(pkesks, seipd, k, octet, mask):
    """PKESKs || SEIPD v1 of: C[k-1], C[k] with octet XOR mask, filler."""
    assert seipd[0] == 1
    ct = seipd[1:]
    blocks = bytearray(ct[(k - 1) * BS:(k + 1) * BS])
    blocks[BS + octet] ^= mask
    return b"".join(packet(1, p) for p in pkesks) + packet(18, b"\x01" + bytes(blocks) + FILLER)


def split(msg):
    pk = [b for t, b in packets(msg) if t == 1]
    (seipd,) = [b for t, b in packets(msg) if t == 18]
    return pk, seipd


# TLVs a failed RESULT may carry: all taken from the request itself
PUBLIC_TLVS = {pdwire.T_ERRNAME, pdwire.T_SENTENCE, pdwire.T_ARMORED, pdwire.T_CONTAINER,
               pdwire.T_RECIPIENT, pdwire.T_N_RECIPIENTS, pdwire.T_N_SKESK, pdwire.T_N_SIGNATURES}


def replies(c, msgs, flags):
    """For each message: (RESULT payload, plaintext) of its reply."""
    out = []
    for m in msgs:
        rid = c.send_decrypt(m, flags=flags)
        c.send(b"")
        while True:
            ftype, fid, p = c.recv_frame()
            assert fid == rid
            if ftype == pdwire.RESULT:
                out.append(p)
                break
    return out


def check_identical(results, what):
    distinct = collections.Counter(results)
    r = pdwire.parse_result(results[0])
    print(f"{what}: {len(results)} replies, {len(distinct)} distinct")
    assert len(distinct) == 1, (f"{what}: {len(distinct)} distinct replies, e.g. "
                                + "; ".join(pdwire.parse_result(p).get("sentence", "?") for p in list(distinct)[:6]))
    assert r["name"] == "INTEGRITY", r
    assert r["bytes_out"] == 0 and r["integrity"] == 0, r
    assert {t for t, _ in r["tlv"]} <= PUBLIC_TLVS, r["tlv"]
    return r


@pytest.fixture
def oracle_daemon(world, tmp_path):
    d = Daemon(world, tmp_path)
    yield d
    assert d.stop() == 0, d.logtext()


@pytest.fixture(scope="module")
def captured(world):
    """Messages gpg wrote to alice: literal only, and compressed."""
    g = world["gpg"]
    text = b"Attack at dawn. The key is under the third flowerpot; bring the ledger.\n" * 4
    return {"literal": g.encrypt(text, "alice@example.org", compress=0),
            "zlib": g.encrypt(text, "alice@example.org", compress=6),
            "other": g.encrypt(b"another message\n", "alice@example.org", compress=0)}


@pytest.mark.parametrize("flags", [pdwire.F_VERIFIED_ONLY, 0], ids=["verified-only", "streaming"])
@pytest.mark.parametrize("kind", ["literal", "zlib"])
def test_masks_on_one_octet(oracle_daemon, captured, kind, flags):
    """256 masks on the first octet the packet parser reads: one reply."""
    pk, seipd = split(captured[kind])
    c = oracle_daemon.client()
    for k in (1, 3):
        res = replies(c, [forge(pk, seipd, k, 2, mask) for mask in range(256)], flags)
        r = check_identical(res, f"block {k}, octet 2")
    assert "offset" not in r["sentence"] and "layer" not in r["sentence"], r


def test_masks_on_every_octet_of_a_block(oracle_daemon, captured):
    """The same for every other octet of the block (the packet header's
    length octets and beyond): 16 x 256 replays, one reply."""
    pk, seipd = split(captured["literal"])
    c = oracle_daemon.client()
    everything = []
    for octet in range(BS):
        msgs = [forge(pk, seipd, 2, octet, mask) for mask in range(256)]
        res = replies(c, msgs, pdwire.F_VERIFIED_ONLY)
        check_identical(res, f"octet {octet}")
        everything += res
    check_identical(everything, "all octets")


def test_two_pkesks(oracle_daemon, captured):
    """A second PKESK for the held key (from another captured message, so it
    opens another session key) in front of the forged one: the replies for
    the 256 masks are the same, and none names the key that decoded."""
    pk, seipd = split(captured["literal"])
    pk_other, _ = split(captured["other"])
    c = oracle_daemon.client()
    for order in ((pk_other[0], pk[0]), (pk[0], pk_other[0])):
        res = replies(c, [forge(list(order), seipd, 1, 2, mask) for mask in range(256)], pdwire.F_VERIFIED_ONLY)
        r = check_identical(res, "two PKESKs")
        tags = {t for t, _ in r["tlv"]}
        assert pdwire.T_KEY_FPR not in tags and pdwire.T_PK_ALGO not in tags and pdwire.T_SYM_ALGO not in tags
    # and the untouched message still decrypts, naming its key
    plain, res, _ = c.read_reply(c.send_decrypt(captured["literal"]))
    assert res["name"] == "OK" and plain.startswith(b"Attack at dawn.")
    assert pdwire.T_KEY_FPR in {t for t, _ in res["tlv"]}


def test_real_error_only_after_the_mdc(oracle_daemon, world):
    """An inner error in a message whose MDC verifies is the real one (the
    sender knew the session key: nothing to learn); the same message with
    one ciphertext bit flipped past the error gives the fixed INTEGRITY
    reply, although the parser met the same error first."""
    import pgp
    cert = world["gpg"].run("--export", "alice@example.org")
    # compression algorithm 48, then enough filler that the parser runs first
    inner = pgp.pkt(8, b"\x30" + FILLER)
    msg = bytearray(pgp.encrypt_to_rsa(cert, inner))
    c = oracle_daemon.client()
    _, res, _ = c.read_reply(c.send_decrypt(bytes(msg), flags=pdwire.F_VERIFIED_ONLY))
    assert res["name"] == "UNSUPPORTED", res
    assert "compression algorithm 48" in res["sentence"], res
    msg[-100] ^= 0x01
    res = check_identical(replies(c, [bytes(msg)] * 2, pdwire.F_VERIFIED_ONLY)
                          + replies(c, [bytes(msg)], 0), "forged")
    assert "48" not in res["sentence"], res


def test_verified_only_hold_limit_waits_for_the_verdict(world, tmp_path):
    """How much plaintext a forged message yields depends on its
    unauthenticated octets: a verified-only hold limit hit before the MDC
    must not answer LIMIT then.  The authentic message over the limit gets
    LIMIT after its MDC verified; the same with one bit flipped near its
    end gets the fixed INTEGRITY reply (before: LIMIT for both, at once)."""
    d = Daemon(world, tmp_path, "--max-verified-size", "256K")
    try:
        plain, msg = world["msgs"][6]  # 3 MB of plaintext, binary, uncompressed
        assert len(plain) > 256 * 1024 and msg[0] & 0x80  # binary: the flip below hits ciphertext
        c = d.client()
        _, res, _ = c.read_reply(c.send_decrypt(msg, flags=pdwire.F_VERIFIED_ONLY))
        assert res["name"] == "LIMIT", res
        forged = bytearray(msg)
        forged[-40] ^= 0x01
        check_identical(replies(c, [bytes(forged)], pdwire.F_VERIFIED_ONLY), "forged, over the hold limit")
    finally:
        assert d.stop() == 0, d.logtext()


def test_masks_with_padding_after_the_container(oracle_daemon, captured):
    """Padding packets after the SEIPD: how far the engine had read when
    the MDC failed depended on how fast the layers inside drained, i.e.
    on the decrypted octets; a failed RESULT's bytes_in must not show it."""
    pk, seipd = split(captured["literal"])
    pad = packet(21, bytes(100 * 1024))
    c = oracle_daemon.client()
    res = replies(c, [forge(pk, seipd, 1, 2, mask) + pad for mask in range(256)], pdwire.F_VERIFIED_ONLY)
    r = check_identical(res, "block 1, octet 2, padding after")
    assert r["bytes_in"] == 0, r


def test_metadata_before_the_mdc_names_no_key(oracle_daemon, captured):
    """METADATA streams before a SEIPD v1 message's MDC: it may carry the
    literal's header (provisional, like the plaintext) but not which key's
    trial was taken, which stays secret until the MDC verified; the
    RESULT OK names it."""
    c = oracle_daemon.client()
    plain, res, meta = c.read_reply(c.send_decrypt(captured["literal"], flags=pdwire.F_WANT_METADATA))
    assert res["name"] == "OK" and meta is not None, res
    tags = {t for t, _ in pdwire.tlvs(meta)}
    assert not tags & {pdwire.T_KEY_FPR, pdwire.T_PK_ALGO, pdwire.T_SYM_ALGO}, tags
    assert pdwire.T_KEY_FPR in {t for t, _ in res["tlv"]}
