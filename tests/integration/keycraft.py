# SPDX-License-Identifier: MIT
"""Secret key files no Debian 12 peer writes, built from the RFC 9580 packet
formats (sections 5.2.3, 5.5.2, 5.5.3) and the LibrePGP draft, for the
key-loading tests: a v4 RSA key whose self-signature has no Key Flags (as
PGP 2.6 / 5.x era keys have, and gpg still accepts), v3 and LibrePGP v5
keys, an ECDH key on the SM2 curve, a v6 key with an ML-KEM-768+X25519
subkey (draft-ietf-openpgp-pqc, algorithm 35), a v6 key whose subkey uses
the legacy Curve25519 OID that RFC 9580 section 9.2 forbids in v6 keys.

Only what the tests need is real: the flagless RSA key is a valid
transferable secret key (gpg imports it and encrypts to it), the v6
Curve25519Legacy subkey has a secret that matches its public key (so a
loader that accepts it really could decrypt with it); the others are well
formed packets with random key material, enough for a loader to identify
and refuse."""

import hashlib
import os
import struct
import time

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa, x25519

from pgp import mpi, pkt

CV25519_OID = bytes.fromhex("2B060104019755010501")   # 1.3.6.1.4.1.3029.1.5.1
SM2_OID = bytes.fromhex("2A811CCF5501822D")           # 1.2.156.10197.1.301
ED25519_OID = bytes.fromhex("2B06010401DA470F01")     # 1.3.6.1.4.1.11591.15.1
NOW = int(time.time()) - 3600


def csum16(b):
    return struct.pack(">H", sum(b) & 0xFFFF)


def fpr_v4(pub_body):
    return hashlib.sha1(b"\x99" + struct.pack(">H", len(pub_body)) + pub_body).digest()


def fpr_v6(pub_body):
    return hashlib.sha256(b"\x9B" + struct.pack(">I", len(pub_body)) + pub_body).digest()


def subpacket(typ, data):
    assert len(data) + 1 < 192
    return bytes([len(data) + 1, typ]) + data


# --------------------------------------------------------------------------
# v4 RSA without Key Flags

class RsaKey:
    """A v4 RSA key made here (python3-cryptography), unprotected."""

    def __init__(self, bits=2048):
        self.priv = rsa.generate_private_key(public_exponent=65537, key_size=bits)
        n = self.priv.private_numbers()
        self.n, self.e, self.d = n.public_numbers.n, n.public_numbers.e, n.d
        self.p, self.q = sorted((n.p, n.q))      # RFC 9580 5.5.5.1: p < q, u = p^-1 mod q
        self.u = pow(self.p, -1, self.q)
        self.created = NOW
        self.pub_body = b"\x04" + struct.pack(">I", self.created) + b"\x01" + mpi(self.n) + mpi(self.e)
        self.fpr = fpr_v4(self.pub_body)
        self.keyid = self.fpr[-8:]

    def secret_body(self):
        sec = mpi(self.d) + mpi(self.p) + mpi(self.q) + mpi(self.u)
        return self.pub_body + b"\x00" + sec + csum16(sec)

    def uid_selfsig(self, uid, flags=None):
        """A positive certification (0x13) of uid, SHA-256; Key Flags only
        when flags is not None."""
        hashed = subpacket(2, struct.pack(">I", self.created))
        if flags is not None:
            hashed += subpacket(27, bytes([flags]))
        hashed += subpacket(33, b"\x04" + self.fpr)
        head = b"\x04\x13\x01\x08" + struct.pack(">H", len(hashed)) + hashed
        data = (b"\x99" + struct.pack(">H", len(self.pub_body)) + self.pub_body +
                b"\xB4" + struct.pack(">I", len(uid)) + uid +
                head + b"\x04\xFF" + struct.pack(">I", len(head)))
        sig = self.priv.sign(data, padding.PKCS1v15(), hashes.SHA256())
        unhashed = subpacket(16, self.keyid)
        return pkt(2, head + struct.pack(">H", len(unhashed)) + unhashed +
                   hashlib.sha256(data).digest()[:2] + mpi(sig))

    def transferable(self, uid, flags=None, secret=True):
        body = self.secret_body() if secret else self.pub_body
        return pkt(5 if secret else 6, body) + pkt(13, uid) + self.uid_selfsig(uid, flags)


# --------------------------------------------------------------------------
# Keys a loader must refuse

def v3_rsa_key(k):
    """RFC 9580 5.5.2.1: a v3 key (created, 2-octet validity, RSA only)."""
    body = (b"\x03" + struct.pack(">IH", k.created, 0) + b"\x01" + mpi(k.n) + mpi(k.e))
    sec = mpi(k.d) + mpi(k.p) + mpi(k.q) + mpi(k.u)
    return pkt(5, body + b"\x00" + sec + csum16(sec)) + pkt(13, b"v3 <v3@pd.test>")


def v5_key():
    """LibrePGP v5 (draft-koch-librepgp 5.5.2): like v6 with 0x9A; Ed25519
    primary (algorithm 27 here only to be well formed)."""
    pub = os.urandom(32)
    body = b"\x05" + struct.pack(">I", NOW) + bytes([27]) + struct.pack(">I", len(pub)) + pub
    sec = os.urandom(32)
    return pkt(5, body + b"\x00" + struct.pack(">I", len(sec)) + sec)


def v4_eddsa_primary():
    """A v4 Ed25519Legacy (EdDSALegacy, algorithm 22) primary secret key."""
    sk = ed25519.Ed25519PrivateKey.generate()
    pub = sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    seed = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    body = b"\x04" + struct.pack(">I", NOW) + bytes([22, len(ED25519_OID)]) + ED25519_OID + mpi(b"\x40" + pub)
    sec = mpi(seed)
    return pkt(5, body + b"\x00" + sec + csum16(sec))


def sm2_subkey():
    """A v4 ECDH subkey on SM2 (OID 1.2.156.10197.1.301), random point."""
    q = b"\x04" + os.urandom(64)
    body = (b"\x04" + struct.pack(">I", NOW) + bytes([18, len(SM2_OID)]) + SM2_OID + mpi(q) +
            b"\x03\x01\x08\x07")
    sec = mpi(os.urandom(32))
    return pkt(7, body + b"\x00" + sec + csum16(sec))


def v6_ed25519_primary():
    sk = ed25519.Ed25519PrivateKey.generate()
    pub = sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    seed = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    pubbody = b"\x06" + struct.pack(">I", NOW) + bytes([27]) + struct.pack(">I", 32) + pub
    return pkt(5, pubbody + b"\x00" + seed), fpr_v6(pubbody)


def v6_mlkem_subkey():
    """v6 key: Ed25519 primary + ML-KEM-768+X25519 subkey (algorithm 35:
    32 octets X25519 + 1184 octets ML-KEM-768 public key)."""
    prim, pfpr = v6_ed25519_primary()
    pub = os.urandom(32 + 1184)
    pubbody = b"\x06" + struct.pack(">I", NOW) + bytes([35]) + struct.pack(">I", len(pub)) + pub
    return prim + pkt(7, pubbody + b"\x00" + os.urandom(32 + 64)), pfpr, fpr_v6(pubbody)


def v6_legacy_cv25519_subkey():
    """v6 key: Ed25519 primary + ECDH subkey with the Curve25519Legacy OID,
    its secret matching its public key (RFC 9580 5.5.5.6.1.1 encoding)."""
    prim, pfpr = v6_ed25519_primary()
    sk = x25519.X25519PrivateKey.generate()
    native = bytearray(sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                        serialization.NoEncryption()))
    native[0] &= 248
    native[31] = (native[31] & 127) | 64
    pub = x25519.X25519PrivateKey.from_private_bytes(bytes(native)).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    material = bytes([len(CV25519_OID)]) + CV25519_OID + mpi(b"\x40" + pub) + b"\x03\x01\x08\x07"
    pubbody = b"\x06" + struct.pack(">I", NOW) + bytes([18]) + struct.pack(">I", len(material)) + material
    return prim + pkt(7, pubbody + b"\x00" + mpi(bytes(reversed(native)))), pfpr, fpr_v6(pubbody)
