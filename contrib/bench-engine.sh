#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/bench-engine.sh: engine throughput against gpg, in one run.
#
# Encrypts two 50 MiB messages with gpg to a fresh cv25519 key (one random,
# uncompressed; one text, ZLIB), then measures `pd-decrypt --bench` (in
# process, repeated for >= 2 s) and `gpg --decrypt` of the same files, and
# prints the ratio.  The text is C headers from /usr/include (real text,
# ~5:1 under ZLIB; a repeated line would compress 300:1 and trip the
# engine's compression-bomb ratio limit).  MB = 10^6 bytes, rates are
# plaintext bytes per second; the engine's CPU-time rate is printed too
# (steadier on a shared machine).  Needs build/.
set -eu
cd "$(dirname "$0")/.."
PD=$(pwd)/build/tools/pd-decrypt
[ -x "$PD" ] || { echo "build first: meson setup build && ninja -C build" >&2; exit 1; }
WORK=$(mktemp -d /tmp/pgpdecd-bench.XXXXXX)
export GNUPGHOME="$WORK/gnupg"
trap 'gpgconf --kill all 2>/dev/null || true; rm -rf "$WORK"' EXIT INT TERM
mkdir -m 700 "$GNUPGHOME"
G() { gpg --batch --no-tty --pinentry-mode loopback --passphrase '' "$@"; }
G -q --quick-gen-key '<bench@pgpdecd.example>' ed25519 cert never
FPR=$(gpg --with-colons -k '<bench@pgpdecd.example>' | awk -F: '/^fpr/{print $10; exit}')
G -q --quick-add-key "$FPR" cv25519 encr never
G --export-secret-keys >"$WORK/key.pgp"
head -c 52428800 /dev/urandom >"$WORK/random"
{ while :; do find /usr/include -type f -name '*.h' | sort | xargs cat; done; } 2>/dev/null |
	head -c 52428800 >"$WORK/text"
G --trust-model always -r "$FPR" --compress-algo none -o "$WORK/none.pgp" -e "$WORK/random"
G --trust-model always -r "$FPR" --compress-algo zlib -o "$WORK/zlib.pgp" -e "$WORK/text"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for m in none zlib; do
	f="$WORK/$m.pgp"
	echo "== 50 MiB, compression $m (ciphertext $(stat -c %s "$f") bytes)"
	"$PD" --key "$WORK/key.pgp" --bench "$f" >"$WORK/pd.out"
	sed 's/^/  pd-decrypt: /' "$WORK/pd.out"
	pd=$(awk '/^bench: [0-9.]+ MB\/s plaintext/{print $2}' "$WORK/pd.out")
	t0=$(date +%s%N)
	runs=0
	while [ $runs -lt 3 ]; do
		G -q -d -o /dev/null "$f" 2>/dev/null
		runs=$((runs + 1))
	done
	t1=$(date +%s%N)
	/usr/bin/python3 -c "import sys; t=($t1-$t0)/1e9/$runs; g=52428800/1e6/t; print(f'  gpg --decrypt: {g:.1f} MB/s plaintext, {t*1000:.0f} ms per message ($runs runs)'); print(f'  engine/gpg: {$pd/g:.1f}x')"
done
