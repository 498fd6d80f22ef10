#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/bench-mail.sh: mail throughput of the gateway side in one run, as
# one table: mails/s and per-mail latency through a private Postfix with
# pgpdecd-milter before the queue (and without it), through
# `pgpdecd-client --mime` alone, and of the bare ciphertext through the
# daemon alone (`pgpdecd-client bench`), for a small (4 KiB inline) and a
# 1 MB (PGP/MIME attachment) mail at a few concurrencies.  See
# contrib/bench/mail.py for what each row measures.
#
# Usage (as root; needs postfix and gpg): contrib/bench-mail.sh [--build DIR]
#   [--workers N] [--small 1,4,16] [--large 1,4] [--requests 500]
# The build defaults to $PD_BUILD_DIR, else build/.
set -eu
cd "$(dirname "$0")/.."
exec /usr/bin/python3 contrib/bench/mail.py "$@"
