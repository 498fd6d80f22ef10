#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/bench/aead.sh: engine throughput on one password-encrypted message
# of random data (default 50 MiB), in one run on this machine:
#   SEIPD v2 AES-256 with OCB and with GCM (written by the test encryptor
#   build/tests/tools/pd-test-encrypt, SKESK v6, chunk octet(s) --chunks),
#   beside SEIPD v1 (MDC) AES-256 of the same data written by
#   `gpg -c --cipher-algo AES256 --compress-algo none`.
# Each is decrypted repeatedly by `pd-decrypt --bench` (plaintext discarded,
# the S2K included: both sides use 65536 octets of iterated SHA-256 so that
# it costs well under a millisecond).  Prints a Markdown table of MB/s of
# plaintext (MB = 10^6 bytes) and the ratio to SEIPD v1.
#
# Usage: contrib/bench/aead.sh [--size-mib N] [--seconds S] [--chunks "16 6"]
#                              [--slice N] [--keep]
# Needs a build in $BUILD (default build/): meson setup build && ninja -C build
set -eu
cd "$(dirname "$0")/../.."
SRC=$(pwd)
BUILD=${BUILD:-$SRC/build}
case $BUILD in /*) ;; *) BUILD=$SRC/$BUILD ;; esac

SIZE_MIB=50
SECS=3
CHUNKS="16"
SLICE=65536
KEEP=0
while [ $# -gt 0 ]; do
	case $1 in
	--size-mib) SIZE_MIB=$2; shift 2 ;;
	--seconds) SECS=$2; shift 2 ;;
	--chunks) CHUNKS=$2; shift 2 ;;
	--slice) SLICE=$2; shift 2 ;;
	--keep) KEEP=1; shift ;;
	-h|--help) sed -n '3,18p' "$0"; exit 0 ;;
	*) echo "aead.sh: unknown option $1" >&2; exit 2 ;;
	esac
done

PD=$BUILD/tools/pd-decrypt
ENC=$BUILD/tests/tools/pd-test-encrypt
for t in "$PD" "$ENC"; do
	[ -x "$t" ] || { echo "aead.sh: $t not built (ninja -C $BUILD)" >&2; exit 1; }
done
command -v gpg >/dev/null || { echo "aead.sh: needs gpg" >&2; exit 1; }

T=$(mktemp -d "${TMPDIR:-/tmp}/pd-aead-bench.XXXXXX")
cleanup() {
	GNUPGHOME=$T/gnupg gpgconf --kill all 2>/dev/null || true
	[ "$KEEP" = 1 ] && echo "kept $T" >&2 || rm -rf "$T"
}
trap cleanup EXIT INT TERM
mkdir -m 700 "$T/gnupg"
echo "pd aead bench password" > "$T/pw"

head -c $((SIZE_MIB * 1048576)) /dev/urandom > "$T/plain"

# name|file lines, in the order of the table
: > "$T/cases"
for c in $CHUNKS; do
	for m in ocb gcm; do
		f=$T/v2-$m-c$c.pgp
		"$ENC" --format v2 --aead $m --cipher aes256 --chunk "$c" --partial none \
			--compress none --password-file "$T/pw" --seed 1 "$T/plain" "$f"
		echo "SEIPD v2 $(echo $m | tr a-z A-Z) AES-256, chunk $((1 << (c + 6))) B|$f" >> "$T/cases"
	done
done
GNUPGHOME=$T/gnupg gpg --batch --yes --quiet --pinentry-mode loopback \
	--passphrase-file "$T/pw" --s2k-count 65536 --s2k-digest-algo SHA256 \
	--cipher-algo AES256 --compress-algo none -c -o "$T/v1.pgp" "$T/plain"
echo "SEIPD v1 (MDC) AES-256, gpg -c|$T/v1.pgp" >> "$T/cases"

# Every message must decrypt to the plaintext before it is timed.
want=$(sha256sum < "$T/plain")
while IFS='|' read -r name f; do
	got=$("$PD" --password-file "$T/pw" "$f" | sha256sum)
	[ "$got" = "$want" ] || { echo "aead.sh: $name does not decrypt to the plaintext" >&2; exit 1; }
done < "$T/cases"

echo "AEAD throughput: ${SIZE_MIB} MiB of random data, pd-decrypt --bench (>= ${SECS} s each," \
	"slice $SLICE), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%F %H:%M') UTC"
echo
echo "| message | MB/s plaintext | CPU-time MB/s | runs | vs SEIPD v1 |"
echo "|---|---:|---:|---:|---:|"
: > "$T/results"
while IFS='|' read -r name f; do
	out=$("$PD" --bench --bench-seconds "$SECS" --slice "$SLICE" --password-file "$T/pw" "$f")
	# bench: <file>: N runs in T s, ...
	# bench: X MB/s plaintext, Y MB/s ciphertext, Z ms per message
	# bench: CPU time X MB/s plaintext, Z ms per message
	runs=$(echo "$out" | sed -n 's/^bench: .*: \([0-9]*\) runs in.*/\1/p')
	mbs=$(echo "$out" | sed -n 's/^bench: \([0-9.]*\) MB\/s plaintext.*/\1/p')
	cpu=$(echo "$out" | sed -n 's/^bench: CPU time \([0-9.]*\) MB\/s plaintext.*/\1/p')
	echo "$name|$mbs|$cpu|$runs" >> "$T/results"
done < "$T/cases"
v1=$(tail -n 1 "$T/results" | cut -d'|' -f2)
while IFS='|' read -r name mbs cpu runs; do
	ratio=$(awk -v a="$mbs" -v b="$v1" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
	echo "| $name | $mbs | $cpu | $runs | $ratio |"
done < "$T/results"
