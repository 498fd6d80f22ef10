#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/soak.sh: a long run of mixed, hostile load on one pgpdecd with
# reloads and kill -9 restarts under socket activation, and a verdict: no
# wrong plaintext, nothing lost, RSS and open fds flat.  A tool, not a test
# (contrib/check.sh runs a 60-second version).  Options and details:
# contrib/soak.sh --help (contrib/soak/soak.py).
#
# Usage: contrib/soak.sh [--minutes 30] [--seconds S] [--concurrency 200]
#   [--reload 10] [--kill 300] [--interval 60] [--out DIR] [--build DIR]
# Needs gpg, a built tree (default $PD_BUILD_DIR, else build/) and, for the
# plot, gnuplot (Debian gnuplot-nox).
set -eu
cd "$(dirname "$0")/.."
exec /usr/bin/python3 contrib/soak/soak.py "$@"
