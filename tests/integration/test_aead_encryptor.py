# SPDX-License-Identifier: MIT
"""Password-encrypted AEAD messages from the test encryptor
(tests/tools/pd-test-encrypt) through the driver: SKESK v6 + SEIPD v2
(OCB/EAX/GCM) and SKESK v5 + the LibrePGP OCB packet (tag 20), every AES
key size, chunk sizes from 64 octets to 4 MiB, partial and definite body
lengths, sizes around the chunk boundaries, empty final chunks, ZLIB.

Tampering (a flipped bit in any chunk or tag, a dropped chunk, two chunks
swapped, a cut final tag) must fail with EINTEGRITY (ETRUNCATED when the
file itself is cut short), create no -o file, and release on stdout only
plaintext of chunks whose tags verified: a prefix of the plaintext that ends
on a chunk boundary before the damaged chunk."""

import json
import random

import pytest

from conftest import BUILD, KIB, LEAN, MIB, expect_err, expect_ok, run

ENCRYPTOR = BUILD / "tests" / "tools" / "pd-test-encrypt"
PASSWORD = "pd aead test password"

FORMATS = [("v2", "ocb"), ("v2", "eax"), ("v2", "gcm"), ("ocbpkt", "ocb"), ("ocbpkt", "eax")]
CIPHERS = ["aes128", "aes192", "aes256"]
# Chunk octets c (chunk = 2^(c+6)): the smallest, small, medium, the RFC's
# largest (4 MiB), and one the encryptor picks from the seed.
CHUNKS = [0, 1, 2, 4, 6, 10, 16, "random"]
TAGLEN = 16


class Encryptor:
    def __init__(self, tools):
        self.tools = tools
        self.pwfile = tools.tmp(".encpw")
        self.pwfile.write_text(PASSWORD + "\n")

    def __call__(self, infile, fmt="v2", aead="ocb", cipher="aes256", chunk="random",
                 partial="none", compress="none", seed=1, empty_final=False, faults=()):
        out, layout = self.tools.tmp(".pgp"), self.tools.tmp(".json")
        cmd = [ENCRYPTOR, "--format", fmt, "--aead", aead, "--cipher", cipher,
               "--chunk", str(chunk), "--partial", partial, "--compress", compress,
               "--password-file", self.pwfile, "--seed", str(seed), "--layout", layout]
        cmd += ["--empty-final-chunk"] if empty_final else []
        for f in faults:
            cmd += ["--fault", f]
        run(cmd + [infile, out])
        return out, json.loads(layout.read_text())


@pytest.fixture(scope="session")
def enc(tools):
    if not ENCRYPTOR.exists():
        pytest.fail(f"test encryptor not built: {ENCRYPTOR}")
    return Encryptor(tools)


def data_file(tools, size, seed):
    """Deterministic incompressible data of `size` octets."""
    p = tools.root / f"aead-data-{size}-{seed}"
    if not p.exists():
        p.write_bytes(random.Random(seed * 7919 + size).randbytes(size))
    return p


def chunk_size(c):
    return 1 << (c + 6)


def case_chunk(fmt, aead, cipher, partial):
    """Spread the chunk octets over the cases deterministically."""
    i = FORMATS.index((fmt, aead)) * 6 + CIPHERS.index(cipher) * 2 + (partial == "random")
    return CHUNKS[i % len(CHUNKS)]


# --------------------------------------------------------------------------
# Round trips

@pytest.mark.parametrize("partial", ["none", "random"])
@pytest.mark.parametrize("cipher", CIPHERS)
@pytest.mark.parametrize("fmt,aead", FORMATS)
def test_roundtrip(pd, enc, tools, matrix, fmt, aead, cipher, partial):
    matrix("AEAD encryptor", f"{fmt} {aead.upper()}", f"{cipher} partial={partial}")
    c = case_chunk(fmt, aead, cipher, partial)
    seed = FORMATS.index((fmt, aead)) * 100 + CIPHERS.index(cipher) * 10 + (partial == "random")
    if c == "random":
        # The chunk octet the encryptor draws from this seed (a 0-octet probe).
        _, lay = enc(data_file(tools, 0, 0), fmt, aead, cipher, "random", partial, seed=seed)
        c = lay["chunk_octet"]
    ch = chunk_size(c)
    sizes = [0, 1, ch - 1, ch, ch + 1, 100 * KIB, 1 * MIB]
    if LEAN:
        sizes = [s for s in sizes if s <= 100 * KIB]
    for i, size in enumerate(sorted(set(sizes))):
        data = data_file(tools, size, seed)
        compress = "zlib" if i % 3 == 2 else "none"
        msg, lay = enc(data, fmt, aead, cipher, c, partial, compress, seed=seed + i)
        assert lay["chunk"] == ch
        slices = [7, 65536] + ([1] if size <= 4 * KIB else [])
        if size > 1 * MIB:
            slices = [65536] if LEAN else [7, 65536]
        for sl in slices:
            r = pd(msg, password=PASSWORD, slice=sl)
            expect_ok(r, plaintext=data.read_bytes())
            assert r.info["integrity"] == "aead" and r.info["aead_algo"] == aead.upper()
            assert r.info["container"] == (18 if fmt == "v2" else 20)


def literal_header_len(n):
    """Octets of a definite-length literal packet header + its 6 fixed body
    octets ('b', no name, date) for n data octets."""
    body = n + 6
    return 1 + (1 if body < 192 else 2 if body < 8384 else 5) + 6


@pytest.mark.parametrize("fmt,aead", FORMATS)
@pytest.mark.parametrize("c", [0, 3])
def test_empty_final_chunk(pd, enc, tools, matrix, fmt, aead, c):
    """A stream of whole chunks followed by an empty chunk and the final tag."""
    matrix("AEAD encryptor", f"{fmt} {aead.upper()}", "empty final chunk")
    ch = chunk_size(c)
    for k in (1, 2, 5):
        if fmt == "v2":
            size = k * ch + 3  # the padding packet is grown to the boundary
        else:
            size = k * ch - literal_header_len(k * ch - 9)
            assert size + literal_header_len(size) == k * ch
        data = data_file(tools, size, 40 + k)
        msg, lay = enc(data, fmt, aead, "aes128", c, "none", seed=k, empty_final=True)
        assert lay["chunks"][-1][2] == 0 and lay["inner_len"] % ch == 0
        for sl in (1, 7, 65536):
            expect_ok(pd(msg, password=PASSWORD, slice=sl), plaintext=data.read_bytes())


@pytest.mark.parametrize("fmt,aead", [("v2", "ocb"), ("ocbpkt", "eax")])
def test_deterministic_and_password(pd, enc, tools, matrix, fmt, aead):
    matrix("AEAD encryptor", f"{fmt} {aead.upper()}", "seed, wrong password")
    data = data_file(tools, 3000, 5)
    a, _ = enc(data, fmt, aead, partial="random", seed=77)
    b, _ = enc(data, fmt, aead, partial="random", seed=77)
    d, _ = enc(data, fmt, aead, partial="random", seed=78)
    assert a.read_bytes() == b.read_bytes() != d.read_bytes()
    expect_err(pd(a, password="not the password"), "EBADPASS")
    expect_err(pd(a), "ENOPASSWORD")


# --------------------------------------------------------------------------
# Tampering

# (format, mode, cipher, chunk octet, partial, compress): small chunks so
# that a modest message has many of them.
TAMPER = [
    ("v2", "ocb", "aes128", 0, "none", "none"),
    ("v2", "gcm", "aes256", 2, "random", "none"),
    ("v2", "eax", "aes192", 1, "none", "zlib"),
    ("ocbpkt", "ocb", "aes256", 0, "random", "none"),
    ("ocbpkt", "eax", "aes128", 2, "none", "none"),
]


def check_release(r, data, lay, k, what):
    """stdout before the error: a prefix of the plaintext that ends where a
    verified chunk ends (chunk j <= k), never inside or past chunk k."""
    out = r.stdout
    assert data[:len(out)] == out, f"{what}: released octets differ from the plaintext"
    dbc = lay["data_before_chunk"]
    if dbc is None:
        # ZLIB: the octets inside the chunks are compressed; the inflated
        # prefix can only be bounded by the whole message.
        assert len(out) < len(data) or len(data) == 0, f"{what}: all plaintext released"
        return
    assert len(out) <= dbc[min(k, len(dbc) - 1)], \
        f"{what}: released {len(out)} octets, only {dbc[k]} lie before chunk {k}"
    assert len(out) in dbc[:k + 1], \
        f"{what}: released {len(out)} octets, not a chunk boundary ({dbc[:k + 1][-4:]})"


def full_chunks_kept(lay, body_len):
    """Number of leading full chunks whose tag and 16 more octets lie within
    the first body_len octets of the container body (what a streaming
    decryptor may verify and release before eof)."""
    ch, n = lay["chunk"], 0
    for i, (_, _, clen, _) in enumerate(lay["chunks"]):
        end = lay["hdrlen"] + (i + 1) * (ch + TAGLEN)
        if clen == ch and end + TAGLEN <= body_len:
            n = i + 1
    return n


def tampered(pd, msg, data, lay, k, what, names=("EINTEGRITY",), slices=(7, 65536)):
    for sl in slices:
        r = pd(msg, password=PASSWORD, slice=sl)
        expect_err(r, *names)
        check_release(r, data, lay, k, f"{what} slice {sl}")
    out = msg.with_suffix(".out")
    r = pd(msg, password=PASSWORD, out=out)
    expect_err(r, *names)
    assert not out.exists(), f"{what}: -o file exists after a failure"


@pytest.mark.parametrize("fmt,aead,cipher,c,partial,compress", TAMPER)
def test_tamper(pd, enc, tools, matrix, fmt, aead, cipher, c, partial, compress):
    matrix("AEAD encryptor", f"{fmt} {aead.upper()}", "tampering")
    ch = chunk_size(c)
    size = 23 * ch + 5 if compress == "none" else 60 * KIB
    data_path = data_file(tools, size, 99)
    if compress == "zlib":
        # Compressible but not trivially: several chunks of ZLIB output.
        rnd = random.Random(3)
        data_path.write_bytes(b"".join(b"%06d %s\n" % (i, rnd.randbytes(8).hex().encode())
                                       for i in range(size // 24))[:size])
    data = data_path.read_bytes()
    kw = dict(fmt=fmt, aead=aead, cipher=cipher, chunk=c, partial=partial, compress=compress,
              seed=11)
    good, lay = enc(data_path, **kw)
    expect_ok(pd(good, password=PASSWORD), plaintext=data)
    n = lay["nchunks"]
    assert n >= 4, lay
    raw = good.read_bytes()

    def variant(name, b):
        p = tools.tmp(f"-{name}.pgp")
        p.write_bytes(b)
        return p

    picks = sorted({0, 1, n // 2, n - 2, n - 1})
    # Bit flips at the byte level, in the ciphertext and in the tag of
    # chunks at the start, middle and end (file offsets from --layout).
    for k in picks:
        ct_off, tag_off, clen, _ = lay["chunks"][k]
        for where, off in (("ciphertext", ct_off + clen // 2), ("tag", tag_off + 7)):
            if where == "ciphertext" and clen == 0:
                continue
            b = bytearray(raw)
            b[off] ^= 0x10
            tampered(pd, variant(f"flip{k}{where[0]}", b), data, lay, k,
                     f"flip chunk {k} {where}")
    # The final tag.
    b = bytearray(raw)
    b[lay["final_tag"] + 3] ^= 0x01
    tampered(pd, variant("flipfinal", b), data, lay, n, "flip final tag")
    # Dropped and swapped chunks, and a cut final tag, with valid framing.
    for k in picks:
        msg, _ = enc(data_path, faults=[f"drop:{k}"], **kw)
        tampered(pd, msg, data, lay, k, f"drop chunk {k}")
        if k + 1 < n and lay["chunks"][k + 1][2] == ch:
            msg, _ = enc(data_path, faults=[f"swap:{k}"], **kw)
            tampered(pd, msg, data, lay, k, f"swap chunks {k},{k + 1}")
    for cut in (1, 8, 16):
        msg, _ = enc(data_path, faults=[f"cut:{cut}"], **kw)
        kept = full_chunks_kept(lay, lay["body_len"] - cut)
        tampered(pd, msg, data, lay, min(kept, n), f"cut {cut} of the final tag")
    # The file itself cut inside the final tag: the packet is truncated.
    for cut in (1, 15, 16):
        msg = variant(f"trunc{cut}", raw[:-cut])
        kept = full_chunks_kept(lay, lay["body_len"] - cut)
        tampered(pd, msg, data, lay, min(kept, n), f"file cut by {cut}",
                 names=("ETRUNCATED", "EINTEGRITY"))


def test_layout_matches_file(enc, tools):
    """The layout's offsets point into the encrypted packet: flipping the
    bit the layout names changes exactly the octet the tests rely on."""
    data_path = data_file(tools, 5000, 3)
    msg, lay = enc(data_path, "v2", "ocb", "aes128", 0, "random", seed=5)
    raw = msg.read_bytes()
    assert lay["file_len"] == len(raw)
    offs = [o for ch in lay["chunks"] for o in ch[:2]] + [lay["final_tag"]]
    assert offs == sorted(offs) and len(set(offs)) == len(offs) and offs[-1] + TAGLEN == len(raw)
    # A definite-length ZLIB-free literal puts data octet 0 right after the
    # 2-octet packet header and its 6 fixed octets.
    msg, lay = enc(data_path, "ocbpkt", "eax", "aes128", 0, "none", seed=5)
    assert lay["data_before_chunk"][1] == 64 - literal_header_len(5000)


@pytest.mark.parametrize("fmt,aead,partial", [("v2", "ocb", "random"), ("ocbpkt", "eax", "none")])
def test_flip_every_chunk(pd, enc, tools, matrix, fmt, aead, partial):
    """A flipped bit in every chunk in turn (alternately in its ciphertext
    and its tag) and in the final tag: slice 7, so that the driver releases
    each verified chunk as early as it can."""
    matrix("AEAD encryptor", f"{fmt} {aead.upper()}", "flip in every chunk")
    data_path = data_file(tools, 17 * 64 + 30, 123)
    data = data_path.read_bytes()
    good, lay = enc(data_path, fmt, aead, "aes192", 0, partial, seed=21)
    raw = good.read_bytes()
    n = lay["nchunks"]
    for k in range(n + 1):
        if k == n:
            off = lay["final_tag"] + k % 16
        else:
            ct_off, tag_off, clen, _ = lay["chunks"][k]
            off = ct_off + (k * 5) % clen if k % 2 == 0 and clen else tag_off + k % 16
        b = bytearray(raw)
        b[off] ^= 1 << (k % 8)
        p = tools.tmp(f"-every{k}.pgp")
        p.write_bytes(b)
        r = pd(p, password=PASSWORD, slice=7)
        expect_err(r, "EINTEGRITY")
        check_release(r, data, lay, k, f"flip in chunk {k}/{n}")
