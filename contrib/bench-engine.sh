#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/bench-engine.sh: engine throughput against gpg, in one run.
#
# Encrypts two 50 MiB messages with gpg to a fresh cv25519 key (one random,
# uncompressed; one text, ZLIB), then measures `pd-decrypt --bench` (in
# process, repeated for >= 2 s) and `gpg --decrypt` of the same files, and
# prints the ratio.  The text compresses about 2:1 (a repeated line would
# compress 300:1 and trip the engine's bomb ratio limit).  MB = 10^6 bytes, rates are
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
G -q --quick-gen-key '<bench@pgpdecd.example>' ed25519 cert never 2>/dev/null
FPR=$(gpg --with-colons -k '<bench@pgpdecd.example>' | awk -F: '/^fpr/{print $10; exit}')
G -q --quick-add-key "$FPR" cv25519 encr never 2>/dev/null
G --export-secret-keys >"$WORK/key.pgp"
head -c 52428800 /dev/urandom >"$WORK/random"
# text of random hex words: ZLIB gets about 2:1, far from the bomb limit
/usr/bin/python3 - "$WORK/text" <<'EOF'
import random, sys
r = random.Random(1)
words = \
    [("%x" % r.getrandbits(r.choice((8, 12, 16, 20, 24)))) for _ in range(5000)]
with open(sys.argv[1], "wb") as f:
    n = 0
    while n < 52428800:
        line = (" ".join(r.choice(words) for _ in range(12)) + "\n").encode()
        f.write(line)
        n += len(line)
    f.truncate(52428800)
EOF
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
