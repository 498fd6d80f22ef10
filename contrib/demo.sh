#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/demo.sh: see the engine, then the daemon, decrypt what gpg and sq wrote.
#
# Installs the Debian packages that are missing, builds into build/,
# generates fresh keys in a temporary GNUPGHOME, has gpg (and sq) encrypt a
# few sample messages, decrypts each through the engine (tools/pd-decrypt)
# and prints what happened: algorithms, sizes, and whether the SHA-256 of
# the plaintext matches.  Then starts pgpdecd on a temporary socket with the
# same keys, decrypts the messages through pgpdecd-client, prints digests,
# the daemon's stats and a short bench, and stops it with SIGTERM.
# Nothing outside build/ and a temp dir is touched.
set -eu

cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
PKGS="meson ninja-build pkg-config gcc libc6-dev libgcrypt20-dev libgpg-error-dev libssl-dev
 zlib1g-dev libbz2-dev libcmocka-dev libuv1-dev libgnutls28-dev libsystemd-dev libinih-dev
 python3 gnupg sq"

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "installing:$missing"
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -q
	# shellcheck disable=SC2086
	$SUDO apt-get install -y -q --no-install-recommends $missing
fi

echo "== building (build/)"
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build -j "$JOBS" >/dev/null
PD=$(pwd)/build/tools/pd-decrypt

WORK=$(mktemp -d /tmp/pgpdecd-demo.XXXXXX)
export GNUPGHOME="$WORK/gnupg"
cleanup() { gpgconf --kill all 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM
mkdir -m 700 "$GNUPGHOME"
gpg() { command gpg --batch --no-tty --pinentry-mode loopback --passphrase '' "$@"; }

echo "== generating keys in $GNUPGHOME"
gpg -q --quick-gen-key '<demo-ecc@pgpdecd.example>' ed25519 sign never 2>/dev/null
FPR_ECC=$(gpg --with-colons -k '<demo-ecc@pgpdecd.example>' | awk -F: '/^fpr/{print $10; exit}')
gpg -q --quick-add-key "$FPR_ECC" cv25519 encr never 2>/dev/null
gpg -q --quick-gen-key '<demo-rsa@pgpdecd.example>' rsa3072 cert,sign,encr never 2>/dev/null
gpg --export-secret-keys >"$WORK/keys.pgp" # both keys in one file
gpg --export '<demo-ecc@pgpdecd.example>' >"$WORK/ecc.cert"
gpg --export '<demo-rsa@pgpdecd.example>' >"$WORK/rsa.cert"
gpg -k --keyid-format long | sed -n 's/^\(pub\|sub\) /  \1 /p'

echo "== sample plaintexts"
printf 'Hello from pgpdecd.\n' >"$WORK/hello.txt"
head -c 1048576 /dev/urandom >"$WORK/random-1MiB.bin"
seq 1 200000 | sed 's/$/ the quick brown fox/' >"$WORK/text-5MB.txt"
: >"$WORK/empty"

n=0
fail=0
show() { # label, message, plaintext, [extra pd-decrypt args]
	label=$1 msg=$2 plain=$3
	shift 3
	n=$((n + 1))
	t0=$(date +%s%N)
	if "$PD" --key "$WORK/keys.pgp" --info -o "$WORK/out" "$@" "$msg" 2>"$WORK/err"; then
		rc=0
	else
		rc=$?
	fi
	t1=$(date +%s%N)
	want=$(sha256sum <"$plain" | cut -c1-16)
	got=$( [ -f "$WORK/out" ] && sha256sum <"$WORK/out" | cut -c1-16 || echo none)
	verdict="digest MATCH"
	[ "$rc" = 0 ] && [ "$want" = "$got" ] || { verdict="MISMATCH/ERROR (exit $rc)"; fail=$((fail + 1)); }
	printf '\n[%d] %s\n' "$n" "$label"
	printf '    ciphertext %s bytes -> plaintext %s bytes in %s ms; %s\n' \
		"$(stat -c %s "$msg")" "$( [ -f "$WORK/out" ] && stat -c %s "$WORK/out" || echo 0)" \
		$(((t1 - t0) / 1000000)) "$verdict"
	/usr/bin/python3 - "$WORK/err" <<'EOF' || sed 's/^/    /' "$WORK/err"
import json, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
info = next((json.loads(l) for l in lines if l.startswith("{")), None)
for l in lines:
    if l.startswith("pd-decrypt:"):
        print("    " + l)
if info:
    rc = ", ".join(f"{r['pk_algo']} {r['keyid']}" + (" (hidden)" if r["wildcard"] else "")
                   for r in info["recipients"])
    print(f"    recipients: {rc or '-'}")
    print(f"    opened by:  {info['pk_algo']} key {info['key_fpr']}")
    print(f"    cipher:     {info['sym_algo']}, integrity {info['integrity']}, "
          f"compression {'+'.join(info['compression']) or 'none'}, armored {info['armored']}")
    if info["issuers"]:
        print(f"    signed by:  key ID {', '.join(info['issuers'])} "
              f"({info['n_signatures']} signature(s), reported, not verified)")
    lit = info["literal"] or {}
    print(f"    literal:    format {lit.get('format')!s} name {lit.get('name')!r} date {lit.get('date')}")
EOF
	rm -f "$WORK/out"
}

E="gpg -q --trust-model always"
$E -o "$WORK/m1.asc" --armor --recipient-file "$WORK/ecc.cert" --encrypt "$WORK/hello.txt"
show "gpg, armored, to cv25519" "$WORK/m1.asc" "$WORK/hello.txt"
$E -o "$WORK/m2.pgp" --recipient-file "$WORK/rsa.cert" --compress-algo none --encrypt "$WORK/random-1MiB.bin"
show "gpg, binary, 1 MiB, no compression, to RSA-3072 (OpenSSL backend)" "$WORK/m2.pgp" "$WORK/random-1MiB.bin" --rsa-backend openssl
show "same message, libgcrypt RSA backend, fed 7 bytes at a time" "$WORK/m2.pgp" "$WORK/random-1MiB.bin" --rsa-backend gcrypt --slice 7
$E -o "$WORK/m3.pgp" --recipient-file "$WORK/rsa.cert" --recipient-file "$WORK/ecc.cert" \
	--compress-algo bzip2 --throw-keyids --set-filename report.txt --encrypt "$WORK/text-5MB.txt"
show "gpg, two hidden recipients, BZip2, 5 MB of text" "$WORK/m3.pgp" "$WORK/text-5MB.txt"
$E -o "$WORK/m4.pgp" --recipient-file "$WORK/ecc.cert" --local-user "$FPR_ECC" --sign --encrypt "$WORK/empty"
show "gpg, signed and encrypted, empty message" "$WORK/m4.pgp" "$WORK/empty"
if command -v sq >/dev/null 2>&1; then
	sq encrypt --recipient-cert "$WORK/ecc.cert" -o "$WORK/m5.asc" "$WORK/text-5MB.txt" 2>/dev/null
	show "sq, armored (sq pads with a compressed packet), to cv25519" "$WORK/m5.asc" "$WORK/text-5MB.txt"
fi
# A tampered message must fail, and -o must leave no file behind.
cp "$WORK/m2.pgp" "$WORK/m6.pgp"
printf '\377' | dd of="$WORK/m6.pgp" bs=1 seek=$(($(stat -c %s "$WORK/m2.pgp") - 5)) conv=notrunc status=none
printf '\n[tamper] the 1 MiB message with one byte changed near the end:\n'
if "$PD" --key "$WORK/keys.pgp" -o "$WORK/out" "$WORK/m6.pgp" 2>"$WORK/err"; then
	echo "    accepted: WRONG"
	fail=$((fail + 1))
else
	echo "    refused, exit $?: $(cat "$WORK/err")"
	[ ! -e "$WORK/out" ] && echo "    no output file was created"
fi

# The daemon: the same key loaded once, the messages sent by pgpdecd-client.
PGPDECD=$(pwd)/build/daemon/pgpdecd
CLIENT=$(pwd)/build/client/pgpdecd-client
SOCK="$WORK/pgpdecd.sock"
printf '\n== pgpdecd on %s (keys loaded once, 2 workers)\n' "$SOCK"
"$PGPDECD" --listen "unix:$SOCK" --key "$WORK/keys.pgp" --workers 2 2>"$WORK/pgpdecd.log" &
DPID=$!
i=0
while [ ! -S "$SOCK" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
"$CLIENT" --socket "$SOCK" ping
"$CLIENT" --socket "$SOCK" keys
for pair in "m1.asc hello.txt" "m2.pgp random-1MiB.bin" "m3.pgp text-5MB.txt" "m4.pgp empty"; do
	set -- $pair
	n=$((n + 1))
	if "$CLIENT" --socket "$SOCK" -o "$WORK/out" "$WORK/$1"; then
		want=$(sha256sum < "$WORK/$2" | cut -c1-16)
		got=$(sha256sum < "$WORK/out" | cut -c1-16)
		if [ "$want" = "$got" ]; then
			echo "  $1 -> sha256 $got... matches"
		else
			echo "  $1 -> sha256 $got... DIFFERS from $want..."
			fail=$((fail + 1))
		fi
	else
		echo "  $1 -> refused (exit $?): WRONG"
		fail=$((fail + 1))
	fi
	rm -f "$WORK/out"
done
if "$CLIENT" --socket "$SOCK" -o "$WORK/out" "$WORK/m6.pgp" 2>"$WORK/err"; then
	echo "  m6.pgp (tampered) -> accepted: WRONG"
	fail=$((fail + 1))
else
	echo "  m6.pgp (tampered) -> exit $? (65 = bad data): $(cat "$WORK/err")"
fi
echo "-- stats"
"$CLIENT" --socket "$SOCK" stats | grep -E '^pgpdecd_(requests_total|bytes_(in|out)_total|keys)' || true
echo "-- a short bench: 200 requests of the cv25519 message, 20 at a time"
"$CLIENT" --socket "$SOCK" bench --concurrency 20 --requests 200 "$WORK/m1.asc" || fail=$((fail + 1))
kill -TERM $DPID
if wait $DPID; then
	echo "-- pgpdecd stopped cleanly (SIGTERM, exit 0)"
else
	echo "-- pgpdecd exited with $?: WRONG"
	fail=$((fail + 1))
fi

echo
if [ $fail = 0 ]; then
	echo "demo: all $n decryptions byte-exact (engine and daemon); the tampered message was refused."
else
	echo "demo: $fail problem(s); see above."
	exit 1
fi
