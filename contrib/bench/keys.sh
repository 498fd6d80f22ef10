#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/bench/keys.sh: pgpdecd with many secret keys (an audit host with
# years of rotated keys) against pgpdecd with one, in one run.
#
# 1. Makes (once, cached in --cache DIR) a key directory of --count keys
#    (default 10,000) with contrib/bench/mkring.py: interleaved RSA-3072,
#    RSA-4096 and cv25519 (4:3:3), every tenth passphrase-protected with
#    the S2K gpg writes (iterated+salted SHA-256, FILE.passphrase beside).
#    The RSA keys share 16 real moduli per size and differ in creation
#    time, hence in fingerprint and key ID: 10,000 fresh RSA keys take
#    hours on two cores, and loading a key costs the same either way
#    (parse, S2K, pd_rsa_setup's private-key operation); see mkring.py.
#    The cv25519 keys are all fresh.  Every self-signature is real.
# 2. Starts pgpdecd with the whole directory (--keydir) and prints the time
#    from exec to sd_notify READY=1, a reload's time (SIGHUP to READY=1,
#    with the daemon pinged all along: the slowest round trip shows the
#    loop kept serving), RSS after load and after reload, and secure-heap
#    use (pgpdecd_secure_heap_* of `pgpdecd-client stats`).
# 3. Starts one pgpdecd per target key holding only that key, and drives
#    both with `pgpdecd-client bench` (4 KiB messages made by gpg, -c 1 and
#    -c 50, ROUNDS rounds alternating the two daemons): messages to an
#    RSA-4096 key and a cv25519 key 78% deep into the ring, and a message
#    to a key neither holds (ENOKEY).  Prints msg/s, P50 and the ratio
#    many keys / one key: it should be 1.
#
# Usage: contrib/bench/keys.sh [--cache DIR] [--count N] [--workers N]
#                              [--requests N] [--rounds R] [--keep]
# Needs a build in $BUILD (default build/), gpg and python3-cryptography.
# Making the 10,000-key ring takes a few minutes the first time.
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-$(pwd)/build}
exec /usr/bin/python3 contrib/bench/keys.py --build "$BUILD" "$@"
