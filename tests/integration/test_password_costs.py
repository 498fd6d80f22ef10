# SPDX-License-Identifier: MIT
"""What a password-encrypted message may make the engine derive, and what
its replies may say, tried with hand-built SKESKs through pd-decrypt.

- The costs a sender chooses are capped per message (SKESKs tried, total
  key-derivation work, Argon2 passes and lanes) and checked from the
  packets before any work: a message asking for more is ELIMIT at once.
- A v4 SKESK's encrypted session key has one check (a known cipher of the
  right size) over unauthenticated octets: its verdict must not show.
"""
import hashlib
import os
import struct
import sys

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

sys.path.insert(0, os.path.dirname(__file__))
import pgp  # noqa: E402
from conftest import expect_err, expect_ok  # noqa: E402

PW = "correct horse"
HELLO = b"Hello, password world!\n"


def s2k_iterated(count_octet, salt=b"saltsalt"):
    return bytes([3, 8]) + salt + bytes([count_octet])  # SHA-256


def s2k_argon2(t, p, m, salt=b"argon2 salt 16oc"):
    return bytes([4]) + salt + bytes([t, p, m])


def derive_iterated(pw, salt, count_octet, keylen=32):
    count = (16 + (count_octet & 15)) << ((count_octet >> 4) + 6)
    data = salt + pw
    reps = max(count, len(data))
    stream = (data * (reps // len(data) + 1))[:reps]
    return hashlib.sha256(stream).digest()[:keylen]


def skesk_v4(s2k, esk=b"", cipher=9):
    return pgp.pkt(3, bytes([4, cipher]) + s2k + esk)


def esk_for(kek, session_key, algo=9):
    enc = Cipher(algorithms.AES(kek), modes.CFB(bytes(16))).encryptor()
    return enc.update(bytes([algo]) + session_key) + enc.finalize()


def write(tools, name, data):
    f = tools.tmp(name)
    f.write_bytes(data)
    return f


def v4_esk_message(session_key=None):
    sk = session_key or os.urandom(32)
    kek = derive_iterated(PW.encode(), b"saltsalt", 0x60)
    esk = esk_for(kek, sk)
    body = pgp.seipd_v1(sk, pgp.literal(HELLO, b"h.txt"))
    return esk, body


def test_v4_esk_builder_agrees_with_gpg(pd, tools, matrix):
    matrix("password", "python", "SKESK v4 with ESK")
    esk, body = v4_esk_message()
    f = write(tools, ".pgp", skesk_v4(s2k_iterated(0x60), esk) + body)
    assert tools.gpg("--passphrase", PW, "--pinentry-mode", "loopback", "--decrypt", str(f)).stdout == HELLO
    expect_ok(pd(f, password=PW), plaintext=HELLO)


def test_v4_esk_check_is_no_oracle(pd, tools, matrix):
    """256 masks on the decrypted algorithm octet: mask 0 decrypts, and the
    255 others give one and the same answer whether or not the octet they
    make names a cipher of the right size (before: EBADPASS for most,
    EINTEGRITY for the AES-256/Twofish/Camellia-256 ones)."""
    matrix("password", "python", "SKESK v4 ESK check, 256 masks")
    esk, body = v4_esk_message()
    answers = set()
    for mask in range(256):
        e = bytes([esk[0] ^ mask]) + esk[1:]
        r = pd(write(tools, ".pgp", skesk_v4(s2k_iterated(0x60), e) + body), password=PW, info=False)
        if mask == 0:
            expect_ok(r, plaintext=HELLO)
            continue
        answers.add((r.rc, r.name, r.stderr.strip()))
    assert len(answers) == 1, answers
    assert next(iter(answers))[1] == "EINTEGRITY", answers


def test_wrong_password_two_v4_skesks(pd, tools, matrix):
    """The right password's SKESK second: it is still found (every planned
    SKESK is derived, the first that passes is taken in constant time)."""
    matrix("password", "python", "two SKESK v4, second opens")
    sk = os.urandom(32)
    other = esk_for(derive_iterated(b"another password", b"saltsalt", 0x60), os.urandom(32))
    esk, _ = v4_esk_message(sk)
    body = pgp.seipd_v1(sk, pgp.literal(HELLO))
    f = write(tools, ".pgp", skesk_v4(s2k_iterated(0x60), other) + skesk_v4(s2k_iterated(0x60), esk) + body)
    expect_ok(pd(f, password=PW), plaintext=HELLO)


def test_many_costly_skesks_bounded(pd, tools, matrix):
    """20 SKESKs at the largest iteration count (4.6 s of derivations
    before): by default 4 are derived (0.9 s); a work budget below what
    those 4 need refuses the message from the packets, before any work."""
    matrix("password", "python", "20 SKESKs x 65011712")
    body = pgp.seipd_v1(os.urandom(32), pgp.literal(HELLO))
    f = write(tools, ".pgp", b"".join(skesk_v4(s2k_iterated(0xFF, os.urandom(8))) for _ in range(20)) + body)
    r = pd(f, password="wrong", info=False)
    expect_err(r, "EINTEGRITY")
    refused = pd(f, password="wrong", info=False, args=["--max-kdf-mib", "200"])
    expect_err(refused, "ELIMIT")
    assert "key derivation" in refused.stderr
    print(f"\n20 SKESKs x 65011712: {r.elapsed:.3f} s (4 derived), refused in {refused.elapsed:.3f} s")
    expect_err(pd(f, password="wrong", info=False, args=["--max-skesk-trials", "1", "--max-kdf-mib", "63"]),
               "EINTEGRITY")


def test_skesks_beyond_the_cap_not_tried(pd, tools, matrix):
    """Only the first max_skesk_trials (4) SKESKs are tried: the right
    password's SKESK in fifth place does not open the message.

    The decoys' session keys decrypt, under the password, to algorithm 0,
    which fails the v4 check for certain.  (Random decoys decrypt to a
    random octet, which names a cipher with a 32-octet key, AES-256,
    Twofish or Camellia-256, 3 times in 256: the engine then takes that
    decoy's key, the first whose check passed, by design, and the message
    fails INTEGRITY; with three decoys ahead of the right SKESK the test
    failed 11 times in 300 runs, and once in CI.)"""
    matrix("password", "python", "SKESK in fifth place")
    sk = os.urandom(32)
    esk, _ = v4_esk_message(sk)
    body = pgp.seipd_v1(sk, pgp.literal(HELLO))
    kek = derive_iterated(PW.encode(), b"saltsalt", 0x60)
    decoys = b"".join(skesk_v4(s2k_iterated(0x60), esk_for(kek, os.urandom(32), algo=0)) for _ in range(4))
    expect_ok(pd(write(tools, ".pgp", decoys[:len(decoys) * 3 // 4] + skesk_v4(s2k_iterated(0x60), esk) + body),
                 password=PW), plaintext=HELLO)
    expect_err(pd(write(tools, ".pgp", decoys + skesk_v4(s2k_iterated(0x60), esk) + body), password=PW),
               "EINTEGRITY")


@pytest.mark.parametrize("t,p,m,why", [(255, 1, 10, "passes"), (1, 64, 10, "lanes"), (4, 4, 18, "work")])
def test_argon2_costs_capped(pd, tools, matrix, t, p, m, why):
    """Argon2 t=255 (about 100 s at 256 MiB), p=64, and t=4 at 256 MiB
    (1.8 s, over the work budget): ELIMIT before any derivation."""
    matrix("password", "python", f"Argon2 over the {why} cap")
    body = pgp.seipd_v1(os.urandom(32), pgp.literal(HELLO))
    f = write(tools, ".pgp", skesk_v4(s2k_argon2(t, p, m)) + body)
    expect_err(pd(f, password="wrong", info=False), "ELIMIT")


def test_kdf_work_counts_every_hash_pass(pd, tools, matrix):
    """An iterated S2K hashes its count once per hash-sized block of key:
    SHA-1 for an AES-256 key, twice.  Four such SKESKs at the largest count
    are twice the 256 MiB budget (before: planned at 248 MiB, 1.9 s)."""
    matrix("password", "python", "SHA-1 S2K for AES-256, x4")
    body = pgp.seipd_v1(os.urandom(32), pgp.literal(HELLO))
    sha1 = [bytes([3, 2]) + os.urandom(8) + b"\xff" for _ in range(4)]
    f = write(tools, ".pgp", b"".join(skesk_v4(s) for s in sha1) + body)
    r = pd(f, password="wrong", info=False)
    expect_err(r, "ELIMIT")
    assert "key derivation" in r.stderr
