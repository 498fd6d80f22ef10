#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Seeds for fuzz-armor, fuzz-skesk and fuzz-config (tests/fuzz/corpus/
{armor,skesk,config}/); fuzz-msg has make-msg-corpus.py, fuzz-client
make-client-corpus.c.  Deterministic: run from anywhere,
tests/fuzz/make-corpus.py.  Needs python3-cryptography (Argon2id: 44 or
later)."""
import base64
import hashlib
import os
import struct

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
try:
    from cryptography.hazmat.decrepit.ciphers.modes import CFB
except ImportError:  # before 47
    from cryptography.hazmat.primitives.ciphers.modes import CFB
from cryptography.hazmat.primitives.kdf.argon2 import Argon2id

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
PW = b"password"


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(*path):
    return open(os.path.join(DATA, *path), "rb").read()


# ---------------------------------------------------------------- armor

def crc24(data):
    crc = 0xB704CE
    for b in data:
        crc ^= b << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def armor(data, kind="MESSAGE", eol="\n", width=64, crc=True, headers=(), preamble=""):
    b64 = base64.b64encode(data).decode()
    lines = [b64[i:i + width] for i in range(0, len(b64), width)] or [""]
    out = preamble + f"-----BEGIN PGP {kind}-----" + eol
    for h in headers:
        out += h + eol
    out += eol + eol.join(lines) + eol
    if crc is True:
        out += "=" + base64.b64encode(struct.pack(">I", crc24(data))[1:]).decode() + eol
    elif crc:
        out += crc + eol
    out += f"-----END PGP {kind}-----" + eol
    return out.encode()


def armor_seeds():
    n = 0

    def seed(name, text):
        nonlocal n
        n += 1
        write("armor", name, bytes([n & 0xFF, (n * 37) & 0xFF]) + text)

    for f in sorted(os.listdir(os.path.join(DATA, "armor"))):
        if f.endswith(".asc"):
            seed("file-" + f, read("armor", f))
    msg = read("armor", "rnp-message.bin")
    seed("crlf", armor(msg, eol="\r\n"))
    seed("no-crc", armor(msg, crc=False))
    seed("bad-crc", armor(msg, crc="=AAAA"))
    seed("malformed-crc", armor(msg, crc="=A*A"))
    seed("long-lines", armor(msg, width=400))
    seed("short-lines", armor(msg, width=4))
    seed("headers", armor(msg, headers=("Version: x", "Comment: a comment line", "Charset: UTF-8")))
    seed("preamble", armor(msg, preamble="From: someone\n\nHello, here it is:\n\n"))
    seed("private-key", armor(read("armor", "a04-v6-secret-key.bin"), kind="PRIVATE KEY BLOCK"))
    seed("public-key", armor(read("armor", "a01-v4-ed25519legacy-pubkey.bin"), kind="PUBLIC KEY BLOCK"))
    seed("signature", armor(b"\x88\x00", kind="SIGNATURE"))
    seed("two-blocks", armor(msg) + b"between\n" + armor(msg[:100]))
    seed("trailing-text", armor(msg) + b"-- \nsignature of a mail\n")
    seed("empty-body", armor(b""))
    seed("whitespace", armor(msg).replace(b"\n", b" \t\n"))
    seed("truncated", armor(msg)[:-30])
    seed("no-end", armor(msg).split(b"-----END")[0])
    seed("padding-1", armor(msg[:10]))
    seed("padding-2", armor(msg[:11]))
    seed("data-after-padding", armor(msg[:10]).replace(b"==\n", b"==AAAA\n"))
    seed("cleartext", b"-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\nhello\n"
         + armor(b"\x88\x00", kind="SIGNATURE"))
    seed("multipart", armor(msg, kind="MESSAGE, PART 1/2"))
    seed("binary", msg)
    seed("not-pgp", b"Dear all,\nnothing to see here.\n" * 4)
    seed("mixed-eol", armor(msg).replace(b"\n", b"\r\n", 5))


# ---------------------------------------------------------------- skesk

def s2k_key(spec, keylen):
    """Derive keylen octets from PW with an S2K specifier (types 0, 1, 3, 4)."""
    t = spec[0]
    if t == 4:
        salt, tp, p, m = spec[1:17], spec[17], spec[18], spec[19]
        return Argon2id(salt=salt, length=keylen, iterations=tp, lanes=p, memory_cost=1 << m).derive(PW)
    assert spec[1] == 8  # SHA-256
    if t == 0:
        data = PW
    elif t == 1:
        data = spec[2:10] + PW
    else:
        c = spec[10]
        count = (16 + (c & 15)) << ((c >> 4) + 6)
        unit = spec[2:10] + PW
        count = max(count, len(unit))
        data = (unit * (count // len(unit) + 1))[:count]
    return hashlib.sha256(data).digest()[:keylen]


def cfb(key, data, iv=bytes(16)):
    e = Cipher(algorithms.AES(key), CFB(iv)).encryptor()
    return e.update(data) + e.finalize()


def pkt(tag, body):
    return bytes([0xC0 | tag, 0xFF]) + struct.pack(">I", len(body)) + body


def skesk4(spec, sk=None):
    """SKESK v4 with AES-128; with sk, an ESK (algo || key) under the S2K key."""
    body = bytes([4, 7]) + spec
    if sk is not None:
        body += cfb(s2k_key(spec, 16), bytes([7]) + sk)
    return body


def seipd1(sk, plain):
    prefix = bytes(range(16))
    prefix += prefix[14:16]
    data = prefix + plain + b"\xd3\x14"
    data += hashlib.sha1(data).digest()
    return pkt(18, b"\x01" + cfb(sk, data))


def literal(text):
    return pkt(11, b"b\x05x.txt" + struct.pack(">I", 0) + text)


SALT = bytes(range(0x40, 0x48))
SIMPLE = bytes([0, 8])
SALTED = bytes([1, 8]) + SALT
ITER_1K = bytes([3, 8]) + SALT + b"\x00"      # 1024 octets
ITER_64K = bytes([3, 8]) + SALT + b"\x60"     # 65536: the cap
ITER_OVER = bytes([3, 8]) + SALT + b"\x61"    # 69632: one step over
ITER_MAX = bytes([3, 8]) + SALT + b"\xff"     # 65011712
ARGON_SMALL = bytes([4]) + bytes(range(16)) + bytes([1, 1, 4])  # t 1, p 1, 16 KiB
ARGON_CAP = bytes([4]) + bytes(range(16)) + bytes([2, 2, 6])    # t 2, p 2, 64 KiB: the caps
ARGON_MEM = bytes([4]) + bytes(range(16)) + bytes([1, 1, 7])    # 128 KiB: over
ARGON_T = bytes([4]) + bytes(range(16)) + bytes([3, 1, 3])      # 3 passes: over
ARGON_P = bytes([4]) + bytes(range(16)) + bytes([1, 3, 5])      # 3 lanes: over


def first_packet_body(data):
    """Body of the first packet (new or old format, definite length)."""
    h = data[0]
    if h & 0x40:
        l0 = data[1]
        if l0 < 192:
            return data[2:2 + l0]
        if l0 < 224:
            n = ((l0 - 192) << 8) + data[2] + 192
            return data[3:3 + n]
        n = struct.unpack(">I", data[2:6])[0]
        return data[6:6 + n]
    lt = h & 3
    if lt == 0:
        return data[2:2 + data[1]]
    if lt == 1:
        return data[3:3 + struct.unpack(">H", data[1:3])[0]]
    return data[5:5 + struct.unpack(">I", data[1:5])[0]]


def skesk_seeds():
    sk = bytes(range(0xA0, 0xB0))
    # even mode: bodies after a one-octet length
    bodies = {
        "simple": skesk4(SIMPLE),
        "salted": skesk4(SALTED),
        "iter-1k": skesk4(ITER_1K),
        "iter-1k-esk": skesk4(ITER_1K, sk),
        "iter-cap-esk": skesk4(ITER_64K, sk),
        "iter-over": skesk4(ITER_OVER),
        "iter-max": skesk4(ITER_MAX),
        "argon2-small-esk": skesk4(ARGON_SMALL, sk),
        "argon2-cap": skesk4(ARGON_CAP),
        "argon2-memory-over": skesk4(ARGON_MEM),
        "argon2-passes-over": skesk4(ARGON_T),
        "argon2-lanes-over": skesk4(ARGON_P),
    }
    for f in ("a09-skesk6-aead-eax-message.pgp", "a10-skesk6-aead-ocb-message.pgp",
              "a11-skesk6-aead-gcm-message.pgp", "a12-1-skesk4-argon2-aes128-message.pgp", "librepgp-a3.pgp"):
        bodies["vector-" + f.split("-")[0]] = first_packet_body(read("aead", f))
    for name, b in bodies.items():
        write("skesk", "skesk-" + name, b"\x00" + bytes([len(b)]) + b)
    write("skesk", "skesk-all-caps", b"\x00" + b"".join(bytes([len(b)]) + b for b in bodies.values()))

    # odd mode: whole messages for the password "password"
    body = seipd1(sk, literal(b"hello, world\n"))
    msgs = {
        "iter-1k-esk": pkt(3, skesk4(ITER_1K, sk)) + body,
        "iter-cap-esk": pkt(3, skesk4(ITER_64K, sk)) + body,
        "argon2-small-esk": pkt(3, skesk4(ARGON_SMALL, sk)) + body,
        "no-esk": pkt(3, skesk4(ITER_1K)) + seipd1(s2k_key(ITER_1K, 16), literal(b"direct key\n")),
        "over-then-ok": pkt(3, skesk4(ITER_MAX, sk)) + pkt(3, skesk4(ITER_1K, sk)) + body,
        "five-skesks": b"".join(pkt(3, skesk4(ITER_1K, bytes([i]) * 16)) for i in range(4))
                       + pkt(3, skesk4(ITER_1K, sk)) + body,
        "work-over": b"".join(pkt(3, skesk4(ITER_64K, bytes([i]) * 16)) for i in range(20)) + body,
        "argon2-over": pkt(3, skesk4(ARGON_MEM, sk)) + body,
        "forged": pkt(3, skesk4(ITER_1K, sk)) + body[:-1] + bytes([body[-1] ^ 1]),
    }
    for f in ("a09-skesk6-aead-eax-message.pgp", "a12-1-skesk4-argon2-aes128-message.pgp", "librepgp-a3.pgp"):
        msgs["vector-" + f.split("-")[0]] = read("aead", f)
    msgs["gpg-symmetric"] = read("armor", "gpg-symmetric.asc")
    for name, m in msgs.items():
        write("skesk", "msg-" + name, b"\x01" + m)


# ---------------------------------------------------------------- config

def config_seeds():
    def seed(name, ini, *args):
        write("config", name, ini.encode() + b"\0" + b"".join(a.encode() + b"\0" for a in args))

    base = "[server]\nlisten = unix:/run/pgpdecd/pgpdecd.sock\n[keys]\nkey = /etc/pgpdecd/keys/a.key\n"
    seed("minimal", base)
    seed("flags-only", "", "--listen", "unix:/run/x.sock", "-k", "a.key", "--workers=3", "--max-message-size",
         "10M", "--idle-timeout", "500ms", "--message-timeout", "2m", "--allow-plain-tcp", "--socket-mode", "0600")
    seed("file-then-flags", base + "[limits]\nqueue-length = 7\nrequest-buffer = 64K\n", "--listen", "unix:/c",
         "--workers", "5")
    seed("limits", base + "[limits]\nmax-frame-size = 16M\nmax-output-size = 1G\nwrite-high-watermark = 2M\n"
         "write-low-watermark = 1M\nmax-write-buffer = 4M\nmax-kdf-work = 1M\nmax-argon2-memory = 0\n"
         "max-skesk-trials = 1\nmax-argon2-passes = 1\nmax-argon2-lanes = 1\nmax-verified-size = 1K\n"
         "max-memory = 16M\ndrain-timeout = 1h\nwrite-timeout = 30s\n")
    pin = "ab" * 32
    seed("tls", "[server]\nlisten = tcp:127.0.0.1:7000\nlisten = tcp:[::1]:7000\n[keys]\nkeydir = /k\n"
         "[tls]\ntls-cert = /c.pem\ntls-key = /k.pem\ntls-pin = " + pin + "\ntls-pin = sha256:" + pin
         + "\ntls-min-version = 1.3\ntls-handshake-timeout = 5s\n")
    seed("tls-colons", base, "--tls-cert", "c", "--tls-key", "k", "--tls-ca", "ca.pem",
         "--tls-pin", ":".join(["ab"] * 32), "--tls-require-client-cert", "no")
    seed("users", base + "[unix]\nallow-user = root\nallow-user = 0\nallow-group = root\nsocket-owner = root\n"
         "socket-group = 0\nsocket-mode = 0660\n")
    seed("unknown-user", base, "--allow-user", "no-such-user-pgpdecd")
    seed("help", "", "--help")
    seed("version", "", "-V")
    seed("bad-size", base, "--max-message-size", "12Q")
    seed("bad-duration", base, "--idle-timeout", "forever")
    seed("bad-bool", base, "--allow-sed", "maybe")
    seed("bad-mode", base, "--socket-mode", "999")
    seed("bad-level", base, "--log-level", "loud")
    seed("unknown-key", base + "[x]\nno-such-setting = 1\n")
    seed("syntax", "[server\nlisten\n")
    seed("watermarks", base, "--write-low-watermark", "1M", "--write-high-watermark", "1M")
    seed("too-large", base, "--max-frame-size", "17179869184", "--workers", "4294967296")
    seed("no-listen", "[keys]\nkey = a\n")
    seed("needs-value", base, "--workers")
    seed("rsa-backend", base, "--rsa-backend", "gcrypt", "--passphrase-file", "/p", "--secmem-size", "4M")


def main():
    armor_seeds()
    skesk_seeds()
    config_seeds()
    for t in ("armor", "skesk", "config"):
        print(t, len(os.listdir(os.path.join(HERE, "corpus", t))), "files")


if __name__ == "__main__":
    main()
