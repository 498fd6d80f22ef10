# SPDX-License-Identifier: MIT
"""Just enough OpenPGP in Python to take messages apart and to build the
hostile ones no peer will write: packet boundaries for truncation tests,
and SEIPD v1 messages with a hand-made inner packet stream (deep nesting,
absurd lengths, two literals).  Encryption uses python3-cryptography;
every builder is checked against gpg in the tests that use it."""

import base64
import hashlib
import os
import struct
import zlib
import bz2

from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


class Packet:
    def __init__(self, offset, tag, hdr_len, body_len, end, partial, old):
        self.offset, self.tag, self.hdr_len = offset, tag, hdr_len
        self.body_len, self.end, self.partial, self.old = body_len, end, partial, old

    def __repr__(self):
        return (f"Packet(off={self.offset}, tag={self.tag}, hdr={self.hdr_len}, "
                f"len={self.body_len}, end={self.end}, partial={self.partial})")


def _new_len(data, i):
    """New-format length at data[i]: (length, octets used, partial?)."""
    o = data[i]
    if o < 192:
        return o, 1, False
    if o < 224:
        return ((o - 192) << 8) + data[i + 1] + 192, 2, False
    if o == 255:
        return struct.unpack(">I", data[i + 1:i + 5])[0], 5, False
    return 1 << (o & 0x1F), 1, True


def packets(data):
    """Top-level packets of a binary message.  Partial-length bodies are
    walked to their end; 'header_points' of each gives every offset where
    a length header begins (partial chunk headers included)."""
    out, i = [], 0
    while i < len(data):
        ctb = data[i]
        if not ctb & 0x80:
            raise ValueError(f"not a packet at {i}")
        start = i
        points = [i]
        if ctb & 0x40:  # new format
            tag = ctb & 0x3F
            ln, n, partial = _new_len(data, i + 1)
            hdr = 1 + n
            pos = i + hdr
            total, was_partial = 0, partial
            while partial:
                pos += ln
                total += ln
                points.append(pos)
                ln, n, partial = _new_len(data, pos)
                pos += n
            pos += ln
            total += ln
            p = Packet(start, tag, hdr, total, pos, was_partial, False)
        else:
            tag = (ctb >> 2) & 0x0F
            lt = ctb & 3
            if lt == 3:
                hdr, ln = 1, len(data) - i - 1
            else:
                n = (1, 2, 4)[lt]
                hdr = 1 + n
                ln = int.from_bytes(data[i + 1:i + 1 + n], "big")
            p = Packet(start, tag, hdr, ln, i + hdr + ln, False, True)
        p.header_points = points
        out.append(p)
        i = p.end
    return out


def new_header(tag, length):
    """New-format header with a 5-octet length (any length, even absurd)."""
    return bytes([0xC0 | tag, 0xFF]) + struct.pack(">I", length)


def pkt(tag, body):
    n = len(body)
    if n < 192:
        return bytes([0xC0 | tag, n]) + body
    if n < 8384:
        n -= 192
        return bytes([0xC0 | tag, 192 + (n >> 8), n & 0xFF]) + body
    return new_header(tag, n) + body


def partial_pkt(tag, body, chunk_log=9):
    """Packet with partial body lengths (chunks of 2^chunk_log octets)."""
    out = bytearray([0xC0 | tag])
    c = 1 << chunk_log
    while len(body) > c:
        out.append(224 + chunk_log)
        out += body[:c]
        body = body[c:]
    out += pkt(0, body)[1:]  # final definite length
    return bytes(out)


def literal(data, name=b"", fmt=b"b", date=0):
    return pkt(11, fmt + bytes([len(name)]) + name + struct.pack(">I", date) + data)


def compressed(algo, inner):
    """Compressed data packet: 0 none, 1 ZIP (raw deflate), 2 ZLIB, 3 BZip2."""
    if algo == 0:
        body = inner
    elif algo == 1:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        body = c.compress(inner) + c.flush()
    elif algo == 2:
        body = zlib.compress(inner, 9)
    else:
        body = bz2.compress(inner, 9)
    return pkt(8, bytes([algo]) + body)


def mpi(b):
    """MPI from a big-endian unsigned integer (bytes or int)."""
    if isinstance(b, int):
        b = b.to_bytes((b.bit_length() + 7) // 8 or 1, "big")
    b = b.lstrip(b"\0")
    return struct.pack(">H", (len(b) * 8 - (8 - b[0].bit_length())) if b else 0) + b


def _read_mpi(body, i):
    bits = struct.unpack(">H", body[i:i + 2])[0]
    n = (bits + 7) // 8
    return int.from_bytes(body[i + 2:i + 2 + n], "big"), i + 2 + n


class RsaCert:
    """First RSA encryption-capable key (primary or subkey) of a v4 cert."""

    def __init__(self, cert):
        for p in packets(cert):
            if p.tag not in (6, 14):
                continue
            body = cert[p.offset + p.hdr_len:p.end]
            if body[0] != 4 or body[5] not in (1, 2):
                continue
            n, i = _read_mpi(body, 6)
            e, i = _read_mpi(body, i)
            self.n, self.e = n, e
            fp = hashlib.sha1(b"\x99" + struct.pack(">H", len(body)) + body).digest()
            self.keyid = fp[-8:]
            if p.tag == 14:
                return  # prefer the subkey, as peers do
        if not hasattr(self, "n"):
            raise ValueError("no RSA key in cert")

    def pkesk(self, sym_algo, session_key):
        m = bytes([sym_algo]) + session_key + struct.pack(">H", sum(session_key) & 0xFFFF)
        pub = rsa.RSAPublicNumbers(self.e, self.n).public_key()
        c = pub.encrypt(m, padding.PKCS1v15())
        return pkt(1, b"\x03" + self.keyid + b"\x01" + mpi(c))


def seipd_v1(session_key, inner, sym_algo=9, partial=False):
    """SEIPD v1 (tag 18) over an arbitrary inner packet stream, AES only."""
    assert sym_algo in (7, 8, 9)
    prefix = os.urandom(16)
    prefix += prefix[-2:]
    plain = prefix + inner + b"\xD3\x14"
    plain += hashlib.sha1(plain).digest()
    enc = Cipher(algorithms.AES(session_key), modes.CFB(bytes(16))).encryptor()
    body = b"\x01" + enc.update(plain) + enc.finalize()
    return partial_pkt(18, body) if partial else pkt(18, body)


def encrypt_to_rsa(cert, inner, partial=False):
    """A whole message: PKESK to the RSA key of cert + SEIPD v1 (AES-256)."""
    key = os.urandom(32)
    return RsaCert(cert).pkesk(9, key) + seipd_v1(key, inner, 9, partial)


def crc24(data):
    crc = 0xB704CE
    for b in data:
        crc ^= b << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def armor(data, kind="MESSAGE", line=64, crc=True, headers=(), eol="\n"):
    b64 = base64.b64encode(data).decode()
    lines = [f"-----BEGIN PGP {kind}-----"]
    lines += list(headers)
    lines.append("")
    lines += [b64[i:i + line] for i in range(0, len(b64), line)] or [""]
    if crc:
        lines.append("=" + base64.b64encode(crc24(data).to_bytes(3, "big")).decode())
    lines.append(f"-----END PGP {kind}-----")
    return (eol.join(lines) + eol).encode()


def dearmor(text):
    lines = text.decode().splitlines()
    i = next(k for k, l in enumerate(lines) if l.startswith("-----BEGIN PGP"))
    i += 1
    while lines[i].strip():
        i += 1
    body = []
    for l in lines[i + 1:]:
        if l.startswith("=") or l.startswith("-----END"):
            break
        body.append(l.strip())
    return base64.b64decode("".join(body))
