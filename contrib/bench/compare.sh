#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/bench/compare.sh: pgpdecd side by side with gpg, sq, sqop, rnp,
# gosop and go-crypto in-process, and against the raw RSA and X25519
# limits, in one run, printed as one Markdown table.  The work is done by
# compare.py beside this file: `contrib/bench/compare.sh --help` says what
# it measures and how.
#   contrib/bench/compare.sh --quick     a subset, about 2-3 minutes
#   contrib/bench/compare.sh             every key, size and level
# Needs a build in $BUILD (default build/): meson setup build && ninja -C build
exec /usr/bin/python3 "$(dirname "$0")/compare.py" "$@"
