#!/bin/sh
# How the fixed messages in this folder were made (gpg 2.2.40, Debian 12).
# Each NAME.gpg has NAME.sk holding the session key as gpg prints it
# ("ALGO:HEX") and NAME.txt the plaintext.  Password: "test".
set -eu
cd "$(dirname "$0")"
export GNUPGHOME=$(mktemp -d)
trap 'rm -rf "$GNUPGHOME"' EXIT
printf 'Hello, pgpdecd!\n' > hello.txt
head -c 100000 /dev/urandom > rand100k.txt
yes 'the quick brown fox jumps over the lazy dog' | head -c 300000 > text300k.txt
sk() { # the session key, as gpg --show-session-key prints it when decrypting
	gpg --batch --pinentry-mode loopback --passphrase test --show-session-key -d -o /dev/null "$1.gpg" 2>&1 |
	    sed -n "s/^gpg: session key: '\(.*\)'/\1/p" > "$1.sk"
}
mk() { # name input cipher compress [extra...]
	name=$1 in=$2 cipher=$3 comp=$4; shift 4
	gpg --batch --yes --pinentry-mode loopback --passphrase test --symmetric \
	    --cipher-algo "$cipher" --compress-algo "$comp" "$@" -o "$name.gpg" "$in" 2>/dev/null
	sk "$name"
	cp "$in" "$name.txt"
}
mk aes128-none hello.txt AES none
mk aes256-zlib text300k.txt AES256 zlib
mk aes192-zip text300k.txt AES192 zip
mk cast5-bzip2 text300k.txt CAST5 bzip2
mk twofish-none rand100k.txt TWOFISH none
mk camellia256-zip hello.txt CAMELLIA256 zip
mk 3des-none hello.txt 3DES none
mk blowfish-zlib hello.txt BLOWFISH zlib
mk idea-none hello.txt IDEA none
# partial lengths: input from a pipe
name=aes256-partial
cat rand100k.txt | gpg --batch --yes --pinentry-mode loopback --passphrase test --symmetric \
	--cipher-algo AES256 --compress-algo none -o $name.gpg 2>/dev/null
sk $name; cp rand100k.txt $name.txt
rm hello.txt rand100k.txt text300k.txt
