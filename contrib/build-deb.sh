#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/build-deb.sh OUTDIR: build the Debian packages of this tree.
#
# Copies the source tree (git's tracked and untracked-but-not-ignored files,
# so no build directories) to a temporary directory, puts packaging/debian
# there as debian/, runs "dpkg-buildpackage -us -uc -b" and moves the .deb
# files (and the .buildinfo/.changes) to OUTDIR.  The repository itself is
# never written to.
#
# Environment: PD_DEB_CHECK=1 runs the unit tests during the build (default:
# nocheck, since check.sh runs every test anyway); JOBS (default 2).
set -eu

[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 64; }
OUT=$1
SRC=$(cd "$(dirname "$0")/.." && pwd)
JOBS=${JOBS:-2}

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/pgpdecd-deb.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM

# dpkg-buildpackage writes the packages next to the source directory.
TREE="$TMP/pgpdecd"
mkdir "$TREE"
if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# One tar reading the list (xargs would split a long list over several
	# tars, whose archives the extracting tar reads only the first of).
	(cd "$SRC" && git ls-files -z --cached --others --exclude-standard) |
		tar -C "$SRC" --null --no-recursion -T - -cf - | tar -C "$TREE" -xf -
else
	tar -C "$SRC" --exclude='./build*' --exclude='./obj-*' --exclude=./.git -cf - . |
		tar -C "$TREE" -xf -
fi
# Deleted-but-not-committed files are listed by git yet absent: tar warns
# and skips them, which is what we want.
rm -rf "$TREE/debian"
cp -a "$TREE/packaging/debian" "$TREE/debian"

opts="parallel=$JOBS"
[ "${PD_DEB_CHECK:-0}" = 1 ] || opts="$opts nocheck"
profiles=""
[ "${PD_DEB_CHECK:-0}" = 1 ] || profiles=nocheck
# A clean environment: a developer's PATH (pyenv shims, ~/.local) must not
# leak into the package (a shell hook's error once landed in a triggers file).
(
	cd "$TREE"
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$TMP" LC_ALL=C.UTF-8 \
		DEB_BUILD_OPTIONS="$opts" DEB_BUILD_PROFILES="$profiles" \
		dpkg-buildpackage -us -uc -b
) >"$OUT/build-deb.log" 2>&1 || {
	tail -n 60 "$OUT/build-deb.log" >&2
	echo "build-deb.sh: dpkg-buildpackage failed (log: $OUT/build-deb.log)" >&2
	exit 1
}
for f in "$TMP"/*.deb "$TMP"/*.buildinfo "$TMP"/*.changes; do
	[ -e "$f" ] && mv "$f" "$OUT/"
done
ls "$OUT"/*.deb
