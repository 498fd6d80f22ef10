#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Write a key directory of many OpenPGP secret keys, fast, for
contrib/bench/keys.sh and tests/integration/test_many_keys.py.

Generating 10,000 RSA-3072/4096 keys for real takes hours on two cores
(prime search).  What a key ring costs the daemon per key does not depend on
the primes being new, so the RSA keys here share a small pool of real RSA
moduli (--rsa-pool of each size, python3-cryptography): key i takes modulus
i mod pool and its own creation time, and the creation time is part of the
hashed public key packet, so every key has its own fingerprint and key ID
(RFC 9580 5.5.4), and a message to one key cannot be opened by another
(the ring tries keys by key ID).  Loading one costs exactly what a key with
fresh primes costs: parsing, the S2K if protected, and pd_rsa_setup's
private-key operation and calibration.  The cv25519 keys (an Ed25519
primary and a cv25519 subkey, what gpg makes by default) are all fresh:
they cost nothing to make.  Every self-signature is real (gpg imports the
public keys and encrypts to them).

Protected keys (--protected, a fraction) use what gpg writes: S2K usage
254, iterated and salted S2K with SHA-256 (count --s2k-count octets),
AES-128 CFB, SHA-1 check; their passphrase is in FILE.passphrase beside
the key file, the form the daemon's keydir reads.

Layout of DIR: keys/kNNNNN.key (binary transferable secret key, one per
file) and keys/kNNNNN.key.passphrase for protected ones (keys/ is the
keydir), index.tsv (file, kind, fingerprint, protected), pub/kNNNNN.pub
for the --export-public keys (to encrypt messages to), rsa-pool/ (the RSA
moduli, PEM; --pool-dir puts them elsewhere, to share them between rings).  Kinds are interleaved so that every kind sits
deep in the ring."""

import argparse
import hashlib
import os
import struct
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa, x25519
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

CV25519_OID = bytes.fromhex("2B060104019755010501")
ED25519_OID = bytes.fromhex("2B06010401DA470F01")
RAW = serialization.Encoding.Raw


def pkt(tag, body):
    n = len(body)
    if n < 192:
        return bytes([0xC0 | tag, n]) + body
    if n < 8384:
        n -= 192
        return bytes([0xC0 | tag, 192 + (n >> 8), n & 0xFF]) + body
    return bytes([0xC0 | tag, 255]) + struct.pack(">I", n) + body


def mpi(b):
    if isinstance(b, int):
        b = b.to_bytes((b.bit_length() + 7) // 8 or 1, "big")
    b = b.lstrip(b"\0")
    return struct.pack(">H", (len(b) * 8 - (8 - b[0].bit_length())) if b else 0) + b


def sub(typ, data):
    return bytes([len(data) + 1, typ]) + data


def fpr_v4(pub):
    return hashlib.sha1(b"\x99" + struct.pack(">H", len(pub)) + pub).digest()


def keyhash(pub):
    return b"\x99" + struct.pack(">H", len(pub)) + pub


def s2k_count(c):
    return (16 + (c & 15)) << ((c >> 4) + 6)


def protect(pub, sec, passphrase, count_byte):
    """RFC 9580 5.5.3: usage 254, AES-128, iterated+salted SHA-256, SHA-1 check."""
    salt = os.urandom(8)
    iv = os.urandom(16)
    data = salt + passphrase
    total = max(s2k_count(count_byte), len(data))
    h = hashlib.sha256()
    # the salt+passphrase stream in 64 KiB chunks (whole repeats of data,
    # so the stream stays aligned): one 62 MiB string for count 0xff took
    # 0.5 s a key in allocation and page faults, the chunks 0.04 s
    chunk = data * max(1, (1 << 16) // len(data))
    whole, left = divmod(total, len(chunk))
    for _ in range(whole):
        h.update(chunk)
    full, rest = divmod(left, len(data))
    h.update(data * full + data[:rest])
    key = h.digest()[:16]
    plain = sec + hashlib.sha1(sec).digest()
    enc = Cipher(algorithms.AES(key), modes.CFB(iv)).encryptor()
    ct = enc.update(plain) + enc.finalize()
    return pub + bytes([254, 7, 3, 8]) + salt + bytes([count_byte]) + iv + ct


def clear(pub, sec):
    return pub + b"\x00" + sec + struct.pack(">H", sum(sec) & 0xFFFF)


def sig_packet(sigtype, pk_algo, hashed, data_prefix, signer, keyid):
    head = bytes([4, sigtype, pk_algo, 8]) + struct.pack(">H", len(hashed)) + hashed
    data = data_prefix + head + b"\x04\xFF" + struct.pack(">I", len(head))
    digest = hashlib.sha256(data).digest()
    mpis = signer(data, digest)
    unhashed = sub(16, keyid)
    return pkt(2, head + struct.pack(">H", len(unhashed)) + unhashed + digest[:2] + mpis)


def uid_data(pub, uid):
    return keyhash(pub) + b"\xB4" + struct.pack(">I", len(uid)) + uid


# ------------------------------------------------------------------ RSA

_pool = {}


def rsa_pool(bits, n, cache):
    """n real RSA keys of bits, cached as PEM in cache/ (made once)."""
    keys = []
    os.makedirs(cache, exist_ok=True)
    for i in range(n):
        path = os.path.join(cache, f"rsa{bits}-{i}.pem")
        if os.path.exists(path):
            with open(path, "rb") as f:
                k = serialization.load_pem_private_key(f.read(), None)
        else:
            k = rsa.generate_private_key(public_exponent=65537, key_size=bits)
            with open(path + ".tmp", "wb") as f:
                f.write(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()))
            os.rename(path + ".tmp", path)
        keys.append(k)
    return keys


def rsa_key(priv, created, uid, passphrase, count_byte):
    nums = priv.private_numbers()
    n, e, d = nums.public_numbers.n, nums.public_numbers.e, nums.d
    p, q = sorted((nums.p, nums.q))
    u = pow(p, -1, q)
    pub = b"\x04" + struct.pack(">I", created) + b"\x01" + mpi(n) + mpi(e)
    fpr = fpr_v4(pub)
    sec = mpi(d) + mpi(p) + mpi(q) + mpi(u)
    body = protect(pub, sec, passphrase, count_byte) if passphrase else clear(pub, sec)
    # certify, sign, encrypt communications and storage: one key does all
    hashed = sub(2, struct.pack(">I", created)) + sub(27, b"\x0F") + sub(33, b"\x04" + fpr)
    sig = sig_packet(0x13, 1, hashed, uid_data(pub, uid),
                     lambda data, dg: mpi(priv.sign(data, padding.PKCS1v15(), hashes.SHA256())), fpr[-8:])
    secret = pkt(5, body) + pkt(13, uid) + sig
    public = pkt(6, pub) + pkt(13, uid) + sig
    return fpr, secret, public


# ------------------------------------------------------------------ cv25519

def cv25519_key(created, uid, passphrase, count_byte):
    sk = ed25519.Ed25519PrivateKey.generate()
    epub = sk.public_key().public_bytes(RAW, serialization.PublicFormat.Raw)
    seed = sk.private_bytes(RAW, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    ppub = b"\x04" + struct.pack(">I", created) + bytes([22, len(ED25519_OID)]) + ED25519_OID + mpi(b"\x40" + epub)
    pfpr = fpr_v4(ppub)

    native = bytearray(x25519.X25519PrivateKey.generate().private_bytes(
        RAW, serialization.PrivateFormat.Raw, serialization.NoEncryption()))
    native[0] &= 248
    native[31] = (native[31] & 127) | 64
    xpub = x25519.X25519PrivateKey.from_private_bytes(bytes(native)).public_key().public_bytes(
        RAW, serialization.PublicFormat.Raw)
    spub = (b"\x04" + struct.pack(">I", created) + bytes([18, len(CV25519_OID)]) + CV25519_OID +
            mpi(b"\x40" + xpub) + b"\x03\x01\x08\x07")
    sfpr = fpr_v4(spub)

    def eddsa(data, digest):
        s = sk.sign(digest)  # EdDSALegacy signs the digest (RFC 9580 5.2.4)
        return mpi(s[:32]) + mpi(s[32:])

    uhashed = sub(2, struct.pack(">I", created)) + sub(27, b"\x03") + sub(33, b"\x04" + pfpr)
    usig = sig_packet(0x13, 22, uhashed, uid_data(ppub, uid), eddsa, pfpr[-8:])
    bhashed = sub(2, struct.pack(">I", created)) + sub(27, b"\x0C") + sub(33, b"\x04" + pfpr)
    bsig = sig_packet(0x18, 22, bhashed, keyhash(ppub) + keyhash(spub), eddsa, pfpr[-8:])

    psec, ssec = mpi(seed), mpi(bytes(reversed(native)))
    if passphrase:
        pbody, sbody = protect(ppub, psec, passphrase, count_byte), protect(spub, ssec, passphrase, count_byte)
    else:
        pbody, sbody = clear(ppub, psec), clear(spub, ssec)
    secret = pkt(5, pbody) + pkt(13, uid) + usig + pkt(7, sbody) + bsig
    public = pkt(6, ppub) + pkt(13, uid) + usig + pkt(14, spub) + bsig
    return sfpr, secret, public


# ------------------------------------------------------------------

KINDS = ("rsa3072", "rsa4096", "cv25519", "rsa2048")


def kind_of(i, mix):
    """Interleaved by weight: key i's kind (mix: weights of KINDS)."""
    total = sum(mix)
    slot = (i * 7919) % total  # spread, deterministic
    for k, w in zip(KINDS, mix):
        if slot < w:
            return k
        slot -= w
    return KINDS[-1]


def make(args):
    i, kind, protected, count_byte, base_time, pools, export = args
    uid = f"Audit key {i} <audit{i}@pgpdecd.example>".encode()
    created = base_time + i * 3600  # one rotation an hour: distinct fingerprints
    passphrase = f"pass-{i}-{os.urandom(6).hex()}".encode() if protected else None
    if kind == "cv25519":
        fpr, secret, public = cv25519_key(created, uid, passphrase, count_byte)
    else:
        pool = _pool[kind]
        fpr, secret, public = rsa_key(pool[i % len(pool)], created, uid, passphrase, count_byte)
    return i, kind, fpr.hex().upper(), secret, public if export else None, passphrase


def init_worker(cache, pools):
    for kind, n in pools.items():
        _pool[kind] = rsa_pool(int(kind[3:]), n, cache)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--mix", default="4,3,3,0",
                    help="weights of rsa3072,rsa4096,cv25519,rsa2048 (default 4,3,3,0)")
    ap.add_argument("--protected", type=float, default=0.1, help="fraction passphrase-protected (default 0.1)")
    ap.add_argument("--s2k-count", type=lambda s: int(s, 0), default=0xA0,
                    help="S2K count octet (default 0xA0: 1 MiB hashed per key)")
    ap.add_argument("--rsa-pool", type=int, default=16, help="real RSA moduli per size (default 16)")
    ap.add_argument("--pool-dir", default="", help="where the RSA moduli are cached (default DIR/rsa-pool)")
    ap.add_argument("--export-public", default="", help="comma-separated key numbers whose public key to write")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    mix = ([int(x) for x in a.mix.split(",")] + [0] * len(KINDS))[:len(KINDS)]
    export = {int(x) for x in a.export_public.split(",") if x}
    os.makedirs(os.path.join(a.dir, "pub"), exist_ok=True)
    os.makedirs(os.path.join(a.dir, "keys"), exist_ok=True)
    cache = a.pool_dir or os.path.join(a.dir, "rsa-pool")
    pools = {k: a.rsa_pool for k in KINDS if k.startswith("rsa") and mix[KINDS.index(k)]}
    t0 = time.monotonic()
    init_worker(cache, pools)  # make the pool once, in this process
    print(f"mkring: RSA pool ready ({time.monotonic() - t0:.1f} s)", file=sys.stderr)
    base_time = 1262304000  # 2010-01-01: years of rotated keys
    every = round(1 / a.protected) if a.protected > 0 else 0
    work = [(i, kind_of(i, mix), bool(every) and i % every == every - 1, a.s2k_count, base_time, pools,
             i in export) for i in range(a.count)]
    rows = []
    with ProcessPoolExecutor(max_workers=a.jobs, initializer=init_worker, initargs=(cache, pools)) as ex:
        for i, kind, fpr, secret, public, passphrase in ex.map(make, work, chunksize=64):
            name = f"k{i:05d}.key"
            with open(os.path.join(a.dir, "keys", name), "wb") as f:
                f.write(secret)
            if passphrase:
                with open(os.path.join(a.dir, "keys", name + ".passphrase"), "wb") as f:
                    f.write(passphrase + b"\n")
            if public:
                with open(os.path.join(a.dir, "pub", f"k{i:05d}.pub"), "wb") as f:
                    f.write(public)
            rows.append(f"{name}\t{kind}\t{fpr}\t{int(bool(passphrase))}\n")
    with open(os.path.join(a.dir, "index.tsv.tmp"), "w") as f:
        f.writelines(rows)
    os.rename(os.path.join(a.dir, "index.tsv.tmp"), os.path.join(a.dir, "index.tsv"))
    print(f"mkring: {a.count} keys in {a.dir} ({time.monotonic() - t0:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
