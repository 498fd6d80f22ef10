#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/fuzz.sh [SECONDS] [TARGET...]: run the libFuzzer targets.
#
#   1. builds every target (tests/fuzz/fuzz-*.c) with clang and
#      -fsanitize=fuzzer,address,undefined into build-libfuzzer/,
#   2. runs each TARGET (default: all) for SECONDS (default 600),
#      FUZZ_PARALLEL of them at a time, on a copy of its corpus
#      tests/fuzz/corpus/TARGET/ (the tree's corpus is never written; new
#      inputs stay in the copy),
#   3. prints per target the executions, libFuzzer's coverage figures
#      (cov: edges, ft: features) and the findings.
#
# A finding is a crash, a failed property check (they abort), a sanitizer
# report, a timeout (-timeout, default 10 s per input) or running out of
# memory (-rss_limit_mb, default 2048).  libFuzzer's fork mode (-fork=1
# with -ignore_*) goes on after one, so that a run lists them all; each is
# kept in build-libfuzzer/fuzz-out/TARGET/findings/.  Exit status: 0 only if
# no target had a finding.  To turn a finding into a regression test, copy
# it to tests/fuzz/corpus/TARGET/ under a name that says what it is: the
# fuzz-regress suite replays it under the sanitizer build.
#
# Environment: FUZZ_TIMEOUT (seconds per input, 10), FUZZ_RSS_MB (2048),
# FUZZ_JOBS (ninja -j, 2), FUZZ_PARALLEL (targets fuzzed at once, default
# one per CPU), FUZZ_BUILD (build directory, build-libfuzzer), FUZZ_ARGS (more
# libFuzzer arguments).
set -eu

cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECONDS_EACH=${1:-600}
[ $# -gt 0 ] && shift
BUILD=${FUZZ_BUILD:-build-libfuzzer}
TIMEOUT=${FUZZ_TIMEOUT:-10}
RSS=${FUZZ_RSS_MB:-2048}
JOBS=${FUZZ_JOBS:-2}

case $SECONDS_EACH in
'' | *[!0-9]*) echo "usage: contrib/fuzz.sh [SECONDS] [TARGET...]" >&2; exit 2 ;;
esac

ALL=$(cd tests/fuzz && ls fuzz-*.c | sed -e 's/^fuzz-//' -e 's/\.c$//' | grep -v '^main$')
TARGETS=""
for t in ${*:-$ALL}; do
	[ -f "tests/fuzz/fuzz-$t.c" ] || { echo "fuzz.sh: no target '$t' (have: $(echo $ALL))" >&2; exit 2; }
	# once each: a second run would remove the first's findings
	case " $TARGETS " in *" $t "*) ;; *) TARGETS="$TARGETS $t" ;; esac
done

command -v clang >/dev/null 2>&1 || { echo "fuzz.sh: clang is missing (Debian: apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }

# What each target needs beyond the defaults: the largest input (msg: as
# the comment in fuzz-msg.c says; armor: past the 64 KiB preamble and
# header caps).
max_len() {
	case $1 in
	msg) echo 65536 ;;
	armor) echo 140000 ;;
	*) echo 16384 ;;
	esac
}

echo "=== building $BUILD/ (clang, fuzzer-no-link, address,undefined)"
if [ ! -f "$BUILD/build.ninja" ]; then
	CC=clang meson setup "$BUILD" -Dbuildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false \
		-Dc_args=-fsanitize=fuzzer-no-link >"$BUILD.setup.log" 2>&1 || { cat "$BUILD.setup.log"; exit 1; }
	mv "$BUILD.setup.log" "$BUILD/meson-logs/setup-fuzz.log"
fi
bins=""
for t in $TARGETS; do
	bins="$bins tests/fuzz/fuzz-$t-libfuzzer"
done
# shellcheck disable=SC2086
ninja -C "$BUILD" -j "$JOBS" $bins >"$BUILD/meson-logs/build-fuzz.log" 2>&1 || {
	tail -40 "$BUILD/meson-logs/build-fuzz.log"
	echo "fuzz.sh: build failed (log: $BUILD/meson-logs/build-fuzz.log)"
	exit 1
}

# -detect_leaks=0: see the top of fuzz-msg.c (OpenSSL's secure heap looks
# like a leak while the process runs); the fuzz-regress suite finds leaks
# at exit when it replays a corpus under the sanitizer build.
# (forced last, whatever the caller's ASAN_OPTIONS say: check.sh's
# sanitizer step asks for leak detection, which is right there, not here)
ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:strict_string_checks=1}:detect_leaks=0"
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS UBSAN_OPTIONS

OUT="$ROOT/$BUILD/fuzz-out"
mkdir -p "$OUT"
rm -f "$OUT/summary" # never last run's, whatever happens below

# One target: fuzz, then its line of the summary in $dir/result and, on a
# finding, the findings' first report lines in $dir/found.
run_target() {
	t=$1
	dir="$OUT/$t"
	rc=0
	# shellcheck disable=SC2086
	# TMPDIR: what an aborted input leaves (fuzz-client's socket) stays in $dir
	TMPDIR="$dir/tmp" "$BUILD/tests/fuzz/fuzz-$t-libfuzzer" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
		-max_total_time="$SECONDS_EACH" -timeout="$TIMEOUT" -rss_limit_mb="$RSS" -max_len="$(max_len "$t")" \
		-print_final_stats=1 -artifact_prefix="$dir/findings/" ${FUZZ_ARGS:-} "$dir/corpus" \
		>"$dir/log" 2>&1 || rc=$?
	# The last status line of fork mode:
	# #EXECS: cov: N ft: N corp: N exec/s N oom/timeout/crash: O/T/C time: Ns job: N dft_time: N
	last=$(grep -E '^#[0-9]+: cov: ' "$dir/log" | tail -1 || true)
	execs=$(echo "$last" | sed -n 's/^#\([0-9]*\):.*/\1/p')
	cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
	ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
	corp=$(echo "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
	otc=$(echo "$last" | sed -n 's/.* oom\/timeout\/crash: \([0-9]*\/[0-9]*\/[0-9]*\).*/\1/p')
	found=$(ls "$dir/findings" | wc -l)
	# A sanitizer report that did not abort (it should: halt_on_error) still counts.
	reports=$(grep -c -E 'ERROR: AddressSanitizer|runtime error:|check failed:' "$dir/log" || true)
	verdict=ok
	: >"$dir/found"
	if [ -z "$last" ]; then
		verdict="NO RUN (exit $rc)"
		tail -20 "$dir/log" >"$dir/found"
	elif [ "$rc" != 0 ] && [ "$found" = 0 ] && [ "$reports" = 0 ]; then
		# killed (the OOM killer, a signal) or failed after running a while
		verdict="EXIT $rc"
		tail -20 "$dir/log" >"$dir/found"
	elif [ "$found" -gt 0 ] || [ "$reports" -gt 0 ] || [ "${otc:-0/0/0}" != 0/0/0 ]; then
		verdict="FINDINGS"
		echo "  fuzz-$t: $reports sanitizer reports, oom/timeout/crash $otc (log: $dir/log)" >"$dir/found"
		for f in "$dir/findings"/*; do
			[ -f "$f" ] || continue
			why=$(TMPDIR="$dir/tmp" "$BUILD/tests/fuzz/fuzz-$t-libfuzzer" -timeout="$TIMEOUT" \
				-rss_limit_mb="$RSS" "$f" 2>&1 | grep -m1 -E 'check failed:|ERROR: |runtime error:|SUMMARY:' || true)
			echo "  finding $f: ${why:-see $dir/log}" >>"$dir/found"
		done
	fi
	printf '%-8s execs %10s  cov %6s  ft %6s  corpus %5s  oom/timeout/crash %-7s findings %3s  %s\n' \
		"$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "${otc:-?}" "$found" "$verdict" >"$dir/result"
}

# FUZZ_PARALLEL targets at a time (default: one per CPU): each libFuzzer
# process (fork mode, one child at a time) keeps one core busy, so two
# targets on two cores take half the wall time for the same fuzzing each.
PAR=${FUZZ_PARALLEL:-$(nproc 2>/dev/null || echo 1)}
case $PAR in '' | *[!0-9]* | 0) PAR=1 ;; esac
set -- $TARGETS
while [ $# -gt 0 ]; do
	batch=""
	i=0
	while [ $# -gt 0 ] && [ $i -lt "$PAR" ]; do
		batch="$batch $1"
		shift
		i=$((i + 1))
	done
	for t in $batch; do
		dir="$OUT/$t"
		rm -rf "$dir"
		mkdir -p "$dir/corpus" "$dir/findings" "$dir/tmp"
		cp tests/fuzz/corpus/"$t"/* "$dir/corpus/" 2>/dev/null || true
		echo "=== fuzz-$t: ${SECONDS_EACH}s on $(ls "$dir/corpus" | wc -l) corpus files"
		run_target "$t" &
	done
	wait
done

status=0
summary=""
for t in $TARGETS; do
	dir="$OUT/$t"
	if [ ! -s "$dir/result" ]; then
		line=$(printf '%-8s no result  NO RUN' "$t")
		status=1
	else
		line=$(cat "$dir/result")
		case $line in *" ok") ;; *) status=1 ;; esac
	fi
	[ -s "$dir/found" ] && cat "$dir/found"
	echo "$line"
	summary="$summary$line
"
done

if [ $status = 0 ]; then verdict="fuzz.sh: no findings"; else verdict="fuzz.sh: FINDINGS (see above)"; fi
printf '%s%s\n' "$summary" "$verdict" >"$OUT/summary" # check.sh prints it
echo
echo "=== fuzz.sh summary (${SECONDS_EACH}s per target; logs and findings in $BUILD/fuzz-out/)"
cat "$OUT/summary"
exit $status
