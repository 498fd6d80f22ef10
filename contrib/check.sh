#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/check.sh: every test of pgpdecd, from a clean checkout on Debian 12.
#
#   1. installs the Debian packages that are missing (apt-get, as root),
#   2. builds into build/ and runs the whole meson test suite,
#   3. builds into build-asan/ with -Db_sanitize=address,undefined and runs
#      the whole suite again; any sanitizer report fails the run,
#   4. runs every libFuzzer target for 60 s, JOBS at a time (contrib/fuzz.sh 60, clang, in
#      build-libfuzzer/); any finding fails the run,
#   5. prints a summary.  Exit status: 0 only if everything passed.
#
# Environment: JOBS (default 2), PD_CHECK_SKIP_ASAN=1 to skip step 3,
# PD_CHECK_SKIP_FUZZ=1 to skip step 4, PD_CHECK_SKIP_SOAK=1 to skip the
# 60-second soak after step 2, PD_CHECK_FUZZ_SECONDS (default 60),
# PD_CHECK_NO_INSTALL=1 to skip step 1.
set -eu

cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-2}
T0=$(date +%s)

# Build and test dependencies (Debian package names).  Keep in sync with
# README.md and debian/control.
PKGS_BUILD="meson ninja-build pkg-config gcc libc6-dev libgcrypt20-dev libgpg-error-dev
 libssl-dev zlib1g-dev libbz2-dev libcmocka-dev libuv1-dev libgnutls28-dev libsystemd-dev
 libinih-dev libgmime-3.0-dev libmilter-dev libmicrohttpd-dev"
# postfix and swaks: tests/integration/test_postfix_real.py runs a private
# Postfix instance on loopback (tests/integration/postfix_harness.py);
# haproxy: tests/integration/test_haproxy.py runs contrib/haproxy/haproxy.cfg;
# prometheus (and its promtool) and prometheus-node-exporter:
# tests/integration/test_metrics.py scrapes the daemon's /metrics and the
# textfile collector's output with the real servers;
# debootstrap and systemd-container (systemd-nspawn):
# tests/integration/test_systemd_real.py boots a Debian 12 tree from the
# mirror apt uses and runs the packaged units under its systemd;
# python3-gnupg, python3-gpg (GPGME) and pass: tests/integration/test_gpg_front.py
# drives them against pgpdecd-gpg;
# golang-go, golang-github-protonmail-go-crypto-dev, openssl and time:
# tests/integration/test_bench_compare.py runs contrib/bench/compare.sh
# (go-crypto built offline in GOPATH mode, `openssl speed`, /usr/bin/time)
PKGS_TEST="python3 python3-pytest python3-cryptography gnupg sq rnp sqop gosop gnutls-bin
 systemd scdoc man-db groff-base lintian debhelper devscripts postfix swaks time haproxy gnuplot-nox
 prometheus prometheus-node-exporter debootstrap systemd-container python3-gnupg python3-gpg pass
 golang-go golang-github-protonmail-go-crypto-dev openssl"
# contrib/fuzz.sh: clang, and libFuzzer's runtime (libclang_rt.fuzzer, in
# libclang-rt-14-dev on Debian 12)
PKGS_FUZZ="clang libclang-rt-14-dev"

say() { printf '\n=== %s\n' "$*"; }

install_missing() {
	missing=""
	for p in $PKGS_BUILD $PKGS_TEST $PKGS_FUZZ; do
		if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
			missing="$missing $p"
		fi
	done
	# libgcrypt 1.10.1-3+deb12u1 (bookworm-security) fixes Montgomery-curve
	# point decoding (X25519/cv25519); older builds must be upgraded.
	v=$(dpkg-query -W -f='${Version}' libgcrypt20 2>/dev/null || echo 0)
	if ! dpkg --compare-versions "$v" ge 1.10.1-3+deb12u1; then
		missing="$missing libgcrypt20 libgcrypt20-dev"
	fi
	if [ -z "$missing" ]; then
		echo "all packages present"
		return 0
	fi
	echo "missing:$missing"
	SUDO=""
	if [ "$(id -u)" != 0 ]; then
		if command -v sudo >/dev/null 2>&1; then
			SUDO="sudo"
		else
			echo "check.sh: run as root to install:$missing" >&2
			exit 1
		fi
	fi
	export DEBIAN_FRONTEND=noninteractive
	# postfix asks for a mailer type: "No configuration" installs it without
	# a main.cf and without starting the system instance (the tests run
	# their own instances on free loopback ports)
	case " $missing " in *" postfix "*)
		echo "postfix postfix/main_mailer_type select No configuration" | $SUDO debconf-set-selections
	esac
	$SUDO apt-get update -q
	# shellcheck disable=SC2086
	$SUDO apt-get install -y -q --no-install-recommends $missing
}

# Fail on sanitizer reports even where a report did not change an exit
# status (a report inside a child whose output a test only logged).
sanitizer_reports() {
	grep -l -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: UndefinedBehaviorSanitizer' \
		"$1"/meson-logs/testlog.txt 2>/dev/null || true
}

# count_results DIR: "N ok, N fail, N skip" from meson's JSON log
count_results() {
	/usr/bin/python3 - "$1/meson-logs/testlog.json" <<'EOF' 2>/dev/null || echo "no test log"
import json, sys, collections
c = collections.Counter()
for line in open(sys.argv[1]):
    c[json.loads(line)["result"]] += 1
print(", ".join(f"{n} {k.lower()}" for k, n in sorted(c.items())))
EOF
}

# failures DIR: what failed in DIR, by name, for the summary (the summary is
# often all of the log a CI run keeps): each meson test that did not pass,
# and pytest's short "FAILED"/"ERROR" lines from the integration suite.
failures() {
	/usr/bin/python3 - "$1/meson-logs/testlog.json" <<'EOF' 2>/dev/null || true
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    if t["result"] not in ("OK", "SKIP", "EXPECTEDFAIL"):
        print(f"  {t['result']}: {t['name']} ({t.get('duration', 0):.0f}s)")
        for l in (t.get("stdout") or "").splitlines():
            if l.startswith(("FAILED ", "ERROR ")):
                print("    " + l[:300])
EOF
}

build_and_test() { # dir, setup options...
	dir=$1
	shift
	if [ -f "$dir/build.ninja" ]; then
		meson setup --reconfigure "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
	else
		meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
	fi
	# keep the setup log out of the tree's top level
	mv "$dir.setup.log" "$dir/meson-logs/setup-check.log"
	ninja -C "$dir" -j "$JOBS" 2>&1 | tee "$dir/meson-logs/build-check.log" | grep -E 'warning:|error:|FAILED' || true
	# ninja's own status is lost in the pipe: check it again
	ninja -C "$dir" -j "$JOBS" >/dev/null 2>&1 || { echo "build failed in $dir"; return 1; }
	meson test -C "$dir" --print-errorlogs --num-processes "$JOBS"
}

status=0
say "packages"
if [ "${PD_CHECK_NO_INSTALL:-0}" != 1 ]; then
	install_missing
fi

say "build/ (release build, all suites)"
T1=$(date +%s)
if build_and_test build; then r1=PASS; else r1=FAIL; status=1; fi
T2=$(date +%s)
w1=$(grep -c 'warning:' build/meson-logs/build-check.log 2>/dev/null || true)

# contrib/soak.sh for 60 s on the release build: mixed load at 200 in
# flight, SIGHUP every 10 s, kill -9 and restart under socket activation at
# 30 s; it asserts no wrong plaintext, nothing lost, RSS and fds flat.
rs=SKIPPED
Ts0=$(date +%s)
Ts1=$Ts0
if [ "${PD_CHECK_SKIP_SOAK:-0}" != 1 ] && [ "$r1" = PASS ]; then
	say "soak (contrib/soak.sh, 60 s, build/)"
	rm -rf build/soak
	if PD_BUILD_DIR=build contrib/soak.sh --seconds 60 --kill 30 --reload 10 --interval 10 --out build/soak; then
		rs=PASS
	else
		rs=FAIL
		status=1
	fi
	Ts1=$(date +%s)
fi

r2=SKIPPED
w2=0
Ta=$(date +%s)
T3=$Ta
if [ "${PD_CHECK_SKIP_ASAN:-0}" != 1 ]; then
	say "build-asan/ (address,undefined sanitizers, all suites)"
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
	# only one 50 MiB case under the sanitizers: they are 3-10x slower
	PD_TEST_LEAN=1
	export ASAN_OPTIONS UBSAN_OPTIONS PD_TEST_LEAN
	if build_and_test build-asan -Db_sanitize=address,undefined -Db_lundef=false; then
		r2=PASS
	else
		r2=FAIL
		status=1
	fi
	reports=$(sanitizer_reports build-asan)
	if [ -n "$reports" ]; then
		echo "sanitizer reports found in: $reports"
		r2="FAIL (sanitizer report)"
		status=1
	fi
	unset PD_TEST_LEAN ASAN_OPTIONS UBSAN_OPTIONS # for that step only
	T3=$(date +%s)
	w2=$(grep -c 'warning:' build-asan/meson-logs/build-check.log 2>/dev/null || true)
fi

r3=SKIPPED
T4=$T3
if [ "${PD_CHECK_SKIP_FUZZ:-0}" != 1 ]; then
	say "build-libfuzzer/ (every fuzz target for ${PD_CHECK_FUZZ_SECONDS:-60}s)"
	if FUZZ_JOBS=$JOBS contrib/fuzz.sh "${PD_CHECK_FUZZ_SECONDS:-60}"; then r3=PASS; else r3=FAIL; status=1; fi
	T4=$(date +%s)
fi

say "summary"
if [ -f build/interop-matrix.txt ]; then
	echo "interop matrix (build/):"
	sed 's/^/  /' build/interop-matrix.txt
fi
printf 'build/       %-28s %s; %s compiler warnings; %ss\n' "$r1" "$(count_results build)" "$w1" $((T2 - T1))
failures build
printf 'soak         %-28s %ss (table and plot in build/soak/)\n' "$rs" $((Ts1 - Ts0))
if [ "$r2" != SKIPPED ]; then
	printf 'build-asan/  %-28s %s; %s compiler warnings; %ss\n' "$r2" "$(count_results build-asan)" "$w2" $((T3 - Ta))
	failures build-asan
fi
if [ "$r3" != SKIPPED ]; then
	printf 'build-libfuzzer/ %-24s %ss; per target:\n' "$r3" $((T4 - T3))
	sed 's/^/  /' build-libfuzzer/fuzz-out/summary 2>/dev/null || true
fi
printf 'total        %ss\n' $(($(date +%s) - T0))
if [ $status = 0 ]; then echo "check.sh: ALL PASSED"; else echo "check.sh: FAILED"; fi
exit $status
