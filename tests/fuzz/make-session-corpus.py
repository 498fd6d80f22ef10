#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Seeds for fuzz-session: client byte streams (see fuzz-session.c), the
first octet 0x01 (the harness sends a valid HELLO in its place), then
frames: decryptions of the fuzz-msg corpus's whole messages (its "outer-*"
entries, which the key ring rsa2048.gpg or the password "password" open),
verified-only and metadata flags, a tampered message, pipelined requests,
PING/STATS/KEYS, more requests at once than max_inflight, ciphertext in
4-octet frames, a request without END, and a protocol error.

Run from the top of the tree: tests/fuzz/make-session-corpus.py"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "session")
MSG = os.path.join(HERE, "corpus", "msg")
DECRYPT, DATA, END, PING, STATS, KEYS = 0x10, 0x11, 0x12, 0x13, 0x14, 0x15
T_PASSWORD = 0x02


def frame(ftype, fid, payload=b""):
    return struct.pack(">IBI", len(payload), ftype, fid) + payload


def decrypt(fid, msg, flags=0, password=None, end=True, chunk=16384):
    p = struct.pack(">I", flags)
    if password is not None:
        p += struct.pack(">BH", T_PASSWORD, len(password)) + password
    out = frame(DECRYPT, fid, p)
    for o in range(0, len(msg), chunk):
        out += frame(DATA, fid, msg[o:o + chunk])
    return out + (frame(END, fid) if end else b"")


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(b"\x01" + data)


def main():
    os.makedirs(OUT, exist_ok=True)
    msgs = {}
    for name in sorted(os.listdir(MSG)):
        if name.startswith("outer-") and not name.endswith((".bin", ".asc")):
            with open(os.path.join(MSG, name), "rb") as f:
                data = f.read()
            if data and data[0] % 2 == 0 and len(data) < 48 * 1024:
                msgs[name[len("outer-"):]] = data[1:]
    for name, m in msgs.items():
        write("msg-" + name, decrypt(1, m, password=b"password"))
    some = msgs.get("keys-rsa2048-msg.gpg") or next(iter(msgs.values()))
    write("verified-only", decrypt(1, some, flags=1))
    write("metadata", decrypt(1, some, flags=2))
    t = bytearray(some)
    t[-5] ^= 1
    write("tampered-verified-only", decrypt(1, bytes(t), flags=1))
    write("pipelined", decrypt(1, some) + decrypt(2, some, flags=1) + frame(PING, 3, b"hi"))
    write("builtins", frame(PING, 1, b"x") + frame(STATS, 2) + frame(KEYS, 3))
    write("no-end", decrypt(1, some, end=False))
    write("no-data", frame(DECRYPT, 1, struct.pack(">I", 0)))
    write("data-for-nothing", frame(DATA, 9, b"abc") + frame(END, 9))
    write("one-octet-frames", decrypt(1, some, chunk=1)[:4000])
    # more than max_inflight (16) at once: taken again as replies go out
    write("past-max-inflight", b"".join(frame(PING, 1 + i, b"p") for i in range(40))
          + b"".join(frame(KEYS, 100 + i) for i in range(20)) + decrypt(200, some) + frame(STATS, 201))
    write("trickle-verified-only", decrypt(1, some, flags=1, chunk=4))


if __name__ == "__main__":
    main()
