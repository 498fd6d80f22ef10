#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Seeds for fuzz-msg (tests/fuzz/corpus/msg/): real messages from
tests/data for the outer mode (first octet even) and hand-built inner packet
streams for the inner mode (first octet odd), the same streams with a
forged MDC too (odd, bit 4 set; see fuzz-msg.c).  Run from the
source tree: tests/fuzz/make-msg-corpus.py"""
import os
import struct
import zlib

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "msg")


def pkt(tag, body):
    """New-format packet with a 5-octet length."""
    return bytes([0xC0 | tag, 0xFF]) + struct.pack(">I", len(body)) + body


def partial(tag, body, part=512):
    """New-format packet in partial-length parts of 512 octets."""
    out = bytes([0xC0 | tag])
    while len(body) > part:
        out += bytes([0xE0 | 9]) + body[:part]
        body = body[part:]
    return out + bytes([0xFF]) + struct.pack(">I", len(body)) + body


def literal(data, fmt=b"b", name=b"x.txt"):
    return pkt(11, fmt + bytes([len(name)]) + name + struct.pack(">I", 0x5F000000) + data)


def zdeflate(data, wbits):
    c = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return c.compress(data) + c.flush()


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {}
    # outer mode: slice selector 5 (1000 octets) and 0 (1 octet) for the small ones
    for sub in ("aead", "armor", "msg", "keys"):
        for f in sorted(os.listdir(os.path.join(SRC, sub))):
            if not f.endswith((".gpg", ".pgp", ".asc", ".bin")) or "key" in f and sub != "keys":
                continue
            if sub == "keys" and f != "rsa2048-msg.gpg":
                continue
            data = open(os.path.join(SRC, sub, f), "rb").read()
            if len(data) > 65536:
                continue
            seeds[f"outer-{sub}-{f}"] = bytes([5 << 1]) + data
            if len(data) < 2000:
                seeds[f"outer1-{sub}-{f}"] = bytes([0]) + data
    # inner mode
    text = b"Hello, world!\r\nsecond line\r\n" * 20
    lit = literal(text)
    inner = {
        "literal": lit,
        "literal-text": literal(text, b"t"),
        "literal-partial": partial(11, b"b\x05x.txt\x00\x00\x00\x00" + text * 4),
        "zip": pkt(8, b"\x01" + zdeflate(lit, -15)),
        "zlib": pkt(8, b"\x02" + zdeflate(lit, 15)),
        "uncompressed": pkt(8, b"\x00" + lit),
        "nested": pkt(8, b"\x02" + zdeflate(pkt(8, b"\x01" + zdeflate(lit, -15)), 15)),
        "onepass": pkt(4, bytes([3, 0, 8, 1]) + b"\x11" * 8 + b"\x01") + lit
                   + pkt(2, bytes([4, 0, 1, 8, 0, 0, 0, 0, 0xAB, 0xCD]) + b"\x00\x08\x01\x02"),
        "marker-padding": pkt(10, b"PGP") + lit + pkt(21, b"\x00" * 32),
        "two-literals": lit + lit,
        # several compressed packets in one layer leaked a decompressor (found by fuzz-msg)
        "two-compressed": pkt(8, b"\x00") + pkt(8, b"\x00" + lit) + pkt(8, b"\x02" + zdeflate(lit, 15)),
        "empty": b"",
    }
    for f in sorted(os.listdir(os.path.join(SRC, "inflate"))):
        inner["inflate-" + f] = open(os.path.join(SRC, "inflate", f), "rb").read()
    for i, (name, data) in enumerate(inner.items()):
        seeds[f"inner-{name}"] = bytes([(5 << 1) | 1]) + data
        seeds[f"inner1-{name}"] = bytes([1]) + data
        # bit 4: the same plaintext again with an MDC that does not verify,
        # bits 5-6 the forgery (each seed gets one, in turn)
        seeds[f"forged-{name}"] = bytes([(5 << 1) | 1 | 0x10 | (i % 4) << 5]) + data
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {OUT}")


if __name__ == "__main__":
    main()
