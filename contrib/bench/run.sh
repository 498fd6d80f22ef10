#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/bench/run.sh: pgpdecd against its physical limit and against gpg,
# in one run, on 4 KiB messages to RSA-2048 and RSA-4096 keys.
#
# For each key size it measures, one after the other on this machine:
#   1. the raw limit: pd-rsa-limit, RSA private-key operations per second
#      with as many threads as pgpdecd has workers, for both backends;
#   2. pgpdecd (started here on a temporary Unix socket) driven by
#      `pgpdecd-client bench` at concurrency 1, 50 and 200: messages/s,
#      MB/s of plaintext, latency P50/P95/P99/max, and the ratio to the raw
#      limit of the backend pgpdecd uses, measured again with as many
#      threads as workers in ROUNDS rounds interleaved with the bench (raw,
#      bench, raw, bench, ...): the machine's speed drifts by 10-20% from
#      one minute to the next, and only neighbours compare.  Before concurrency 1 the
#      one-thread figure is measured too, for reference: one operation at a
#      time on one core, which pgpdecd beats for keys whose CRT halves it
#      splits across two workers (pgpdecd(8), PERFORMANCE).  With 2 workers
#      on 2 CPUs the concurrency-1 rounds measure the limit as one thread
#      pinned to each CPU at once (the same sum), and print twice the
#      slower CPU too: a split operation waits for its slower half, and on
#      a VM one vCPU often runs 10-20% slower than the other for minutes.
#   3. `gpg --decrypt` of the same messages, a sequential loop with the
#      agent already running and the key loaded (no passphrase): messages/s,
#      and the ratio pgpdecd/gpg.
# Then prints one table (Markdown) with everything.  With --engine it also
# runs contrib/bench-engine.sh (engine MB/s on 50 MiB messages against gpg).
#
# Usage: contrib/bench/run.sh [--seconds S] [--rounds R] [--workers N] [--backend openssl|gcrypt]
#                             [--bits "2048 4096"] [--levels "1 50 200"]
#                             [--gpg-runs N] [--messages N] [--engine] [--keep]
# Needs a build in $BUILD (default build/): meson setup build && ninja -C build
# MB = 10^6 bytes.  The figures are only as quiet as the machine is.
set -eu
cd "$(dirname "$0")/../.."
SRC=$(pwd)
BUILD=${BUILD:-$SRC/build}
case $BUILD in /*) ;; *) BUILD=$SRC/$BUILD ;; esac

SECONDS_PER=3
ROUNDS=3
WORKERS=$(nproc)
BACKEND=openssl
BITS="2048 4096"
LEVELS="1 50 200"
GPG_RUNS=40
NMSG=16
ENGINE=0
KEEP=0
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) SECONDS_PER=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--workers) WORKERS=$2; shift ;;
	--backend) BACKEND=$2; shift ;;
	--bits) BITS=$2; shift ;;
	--levels) LEVELS=$2; shift ;;
	--gpg-runs) GPG_RUNS=$2; shift ;;
	--messages) NMSG=$2; shift ;;
	--engine) ENGINE=1 ;;
	--keep) KEEP=1 ;;
	-h|--help) sed -n '3,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "run.sh: unknown option $1 (--help)" >&2; exit 64 ;;
	esac
	shift
done
case $BACKEND in openssl|gcrypt) ;; *) echo "run.sh: --backend openssl|gcrypt" >&2; exit 64 ;; esac

PGPDECD=$BUILD/daemon/pgpdecd
CLIENT=$BUILD/client/pgpdecd-client
LIMIT=$BUILD/contrib/bench/pd-rsa-limit
for t in "$PGPDECD" "$CLIENT" "$LIMIT"; do
	[ -x "$t" ] || { echo "run.sh: $t missing: meson setup build && ninja -C build" >&2; exit 1; }
done
PY=/usr/bin/python3

WORK=$(mktemp -d /tmp/pgpdecd-bench.XXXXXX)
export GNUPGHOME="$WORK/gnupg"
DPID=
cleanup() {
	if [ -n "$DPID" ]; then
		kill -TERM "$DPID" 2>/dev/null || true
		wait "$DPID" 2>/dev/null || true
	fi
	gpgconf --kill all 2>/dev/null || true
	if [ "$KEEP" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -m 700 "$GNUPGHOME"
G() { gpg --batch --no-tty --pinentry-mode loopback --passphrase '' "$@"; }
log() { echo "# $*" >&2; }

# JSON field (dotted path) from a file
jget() { "$PY" -c 'import json,sys
v=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): v=v[k]
print(v)' "$1" "$2"; }

# ---- keys and messages -------------------------------------------------
for b in $BITS; do
	log "generating an RSA-$b encryption key (ed25519 primary) with gpg"
	G -q --quick-gen-key "<bench$b@pgpdecd.example>" ed25519 cert never 2>>"$WORK/gpg.log"
	fpr=$(gpg --with-colons -k "<bench$b@pgpdecd.example>" 2>>"$WORK/gpg.log" | awk -F: '/^fpr/{print $10; exit}')
	G -q --quick-add-key "$fpr" "rsa$b" encr never 2>>"$WORK/gpg.log"
	G --export-secret-keys "$fpr" >"$WORK/key$b.pgp"
	echo "$fpr" >"$WORK/fpr$b"
	mkdir "$WORK/msg$b"
	i=0
	while [ $i -lt "$NMSG" ]; do
		# 4 KiB plaintext, encrypted as gpg does by default (SEIPD v1, its
		# default cipher and compression)
		head -c 4096 /dev/urandom >"$WORK/plain"
		G --trust-model always -r "$fpr" -o "$WORK/msg$b/m$i.pgp" -e "$WORK/plain"
		i=$((i + 1))
	done
done

# ---- 1. raw limit ------------------------------------------------------
for b in $BITS; do
	log "raw limit, RSA-$b: pd-rsa-limit -t $WORKERS -s $SECONDS_PER"
	"$LIMIT" -t "$WORKERS" -s "$SECONDS_PER" --json "$WORK/key$b.pgp" >"$WORK/limit$b.json"
done

# ---- 2. pgpdecd --------------------------------------------------------
SOCK=$WORK/pgpdecd.sock
set --
for b in $BITS; do set -- "$@" --key "$WORK/key$b.pgp"; done
log "starting pgpdecd: $WORKERS workers, RSA backend $BACKEND"
"$PGPDECD" --listen "unix:$SOCK" "$@" --workers "$WORKERS" --rsa-backend "$BACKEND" \
	--log-level warning --max-connections 4096 --queue-length 4096 2>"$WORK/pgpdecd.log" &
DPID=$!
n=0
until "$CLIENT" --socket "$SOCK" --timeout 2 ping >/dev/null 2>&1; do
	n=$((n + 1))
	if [ $n -gt 100 ] || ! kill -0 "$DPID" 2>/dev/null; then
		echo "run.sh: pgpdecd did not come up:" >&2
		cat "$WORK/pgpdecd.log" >&2
		exit 1
	fi
	sleep 0.1
done
for b in $BITS; do
	# sanity: every message decrypts byte-exact through the daemon
	"$CLIENT" --socket "$SOCK" -o "$WORK/out$b" "$WORK/msg$b/m0.pgp" && [ -s "$WORK/out$b" ]
	for c in $LEVELS; do
		# The raw limit again, interleaved with the bench in rounds: on a
		# shared machine the limit drifts from minute to minute, and the
		# ratio is only meaningful against a neighbour.
		if [ "$c" = 1 ] && [ "$WORKERS" -gt 1 ]; then
			log "raw limit, RSA-$b: pd-rsa-limit -t 1 -s $SECONDS_PER -b $BACKEND (reference)"
			"$LIMIT" -t 1 -s "$SECONDS_PER" -b "$BACKEND" --json "$WORK/key$b.pgp" >"$WORK/limit$b-one.json"
		fi
		r=1
		while [ $r -le "$ROUNDS" ]; do
			if [ "$c" = 1 ] && [ "$WORKERS" = 2 ] && [ "$(nproc)" = 2 ]; then
				# The same limit as two one-thread runs at once, each
				# pinned to its CPU: their sum is the two-thread limit,
				# and the slower CPU is what a lone split operation
				# waits for (its halves run on both at once).
				log "raw limit, RSA-$b, round $r: pd-rsa-limit -t 1 -s $SECONDS_PER -b $BACKEND on CPU 0 and on CPU 1 at once"
				taskset -c 0 "$LIMIT" -t 1 -s "$SECONDS_PER" -b "$BACKEND" --json "$WORK/key$b.pgp" >"$WORK/limit$b-c$c-r$r-cpu0.json" &
				pin=$!
				taskset -c 1 "$LIMIT" -t 1 -s "$SECONDS_PER" -b "$BACKEND" --json "$WORK/key$b.pgp" >"$WORK/limit$b-c$c-r$r-cpu1.json"
				wait $pin
				"$PY" - "$WORK/limit$b-c$c-r$r" "$BACKEND" <<'PYEOF'
import json, sys
base, be = sys.argv[1], sys.argv[2]
cpus = [json.load(open(f"{base}-cpu{i}.json"))["backends"][be]["ops_per_s"] for i in (0, 1)]
json.dump({"threads": 2, "pinned": cpus, "backends": {be: {"ops_per_s": sum(cpus)}}}, open(f"{base}.json", "w"))
PYEOF
			else
				log "raw limit, RSA-$b, round $r: pd-rsa-limit -t $WORKERS -s $SECONDS_PER -b $BACKEND"
				"$LIMIT" -t "$WORKERS" -s "$SECONDS_PER" -b "$BACKEND" --json "$WORK/key$b.pgp" >"$WORK/limit$b-c$c-r$r.json"
			fi
			rate=$(jget "$WORK/limit$b-c$c-r$r.json" "backends.$BACKEND.ops_per_s")
			# enough requests for about SECONDS_PER seconds at the raw limit,
			# and at least 5 per client so that P99 means something
			req=$("$PY" -c "import sys; r=float(sys.argv[1]); print(max(int(r*$SECONDS_PER), $c*5, 50))" "$rate")
			log "pgpdecd, RSA-$b, round $r: pgpdecd-client bench --concurrency $c --requests $req"
			"$CLIENT" --socket "$SOCK" --timeout 120 bench --concurrency "$c" --requests "$req" --json \
				"$WORK/msg$b"/*.pgp >"$WORK/bench$b-$c-r$r.json"
			r=$((r + 1))
		done
	done
done
kill -TERM "$DPID"
wait "$DPID" || { echo "run.sh: pgpdecd exited with $?" >&2; cat "$WORK/pgpdecd.log" >&2; }
DPID=

# ---- 3. gpg --decrypt --------------------------------------------------
for b in $BITS; do
	# warm-up: starts the agent and loads the key, outside the timing
	G -q -d -o /dev/null "$WORK/msg$b/m0.pgp" 2>/dev/null
	log "gpg --decrypt, RSA-$b: $GPG_RUNS messages one after another"
	t0=$(date +%s%N)
	i=0
	while [ $i -lt "$GPG_RUNS" ]; do
		G -q -d -o /dev/null "$WORK/msg$b/m$((i % NMSG)).pgp" 2>/dev/null
		i=$((i + 1))
	done
	t1=$(date +%s%N)
	echo "$GPG_RUNS $t0 $t1" >"$WORK/gpg$b"
done

# ---- table -------------------------------------------------------------
"$PY" - "$WORK" "$BACKEND" "$WORKERS" "$BITS" "$LEVELS" "$ROUNDS" <<'EOF'
import json, sys, os, statistics
work, backend, workers, bits, levels, rounds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5].split(), sys.argv[6]
cpu = next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')), '?')
print(f"CPU: {cpu}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end")
print(f"pgpdecd: {workers} workers, RSA backend {backend}; 4 KiB messages (gpg defaults); MB = 10^6 bytes of plaintext\n")
print(f"Latency columns of a pgpdecd row: the median over its rounds of each round's percentile (max: the largest).\n")
print("| key | measurement | msgs/s | MB/s | P50 ms | P95 ms | P99 ms | max ms | P99/P50 | of raw limit | of raw, interleaved | x gpg |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for b in bits:
    lim = json.load(open(f"{work}/limit{b}.json"))
    n, t0, t1 = open(f"{work}/gpg{b}").read().split()
    gpg = int(n) / ((int(t1) - int(t0)) / 1e9)
    raw = lim["backends"][backend]["ops_per_s"]
    for be, v in lim["backends"].items():
        print(f"| RSA-{b} | raw limit, {be}, {lim['threads']} threads | {v['ops_per_s']:.1f} | | "
              f"{v['ms_per_op']:.2f} | | | | | {'100%' if be == backend else ''} | | {v['ops_per_s']/gpg:.1f} |")
    for c in levels:
        if os.path.exists(f"{work}/limit{b}-one.json") and c == "1":
            lo = json.load(open(f"{work}/limit{b}-one.json"))["backends"][backend]
            print(f"| RSA-{b} | raw limit, {backend}, 1 thread (one operation at a time, for reference) | "
                  f"{lo['ops_per_s']:.1f} | | {lo['ms_per_op']:.2f} | | | | | {100*lo['ops_per_s']/raw:.0f}% | | {lo['ops_per_s']/gpg:.1f} |")
        R = int(rounds)
        lims = [json.load(open(f"{work}/limit{b}-c{c}-r{r}.json")) for r in range(1, R + 1)]
        raws = [l["backends"][backend]["ops_per_s"] for l in lims]
        runs = [json.load(open(f"{work}/bench{b}-{c}-r{r}.json")) for r in range(1, R + 1)]
        rc = sum(raws) / R
        print(f"| RSA-{b} | raw limit, {backend}, {workers} threads, mean of {R} rounds around concurrency {c} "
              f"({min(raws):.0f}-{max(raws):.0f}) | {rc:.1f} | | {1000*int(workers)/rc:.2f} | | | | | {100*rc/raw:.0f}% | | {rc/gpg:.1f} |")
        reqs = sum(j["requests"] for j in runs)
        secs = sum(j["elapsed_s"] for j in runs)
        rate = reqs / secs
        mb = sum(j["mb_per_s_out"] * j["elapsed_s"] for j in runs) / secs
        med = lambda k: statistics.median(j["latency_ms"][k] for j in runs)
        p50, p95, p99, mx = med("p50"), med("p95"), med("p99"), max(j["latency_ms"]["max"] for j in runs)
        ratios = [100 * j["msgs_per_s"] / x for j, x in zip(runs, raws)]
        failed = sum(j["failed"] for j in runs)
        bad = f" ({failed} FAILED)" if failed else ""
        print(f"| RSA-{b} | pgpdecd, concurrency {c}{bad}, {R} rounds, {reqs} msgs | {rate:.1f} | {mb:.2f} | "
              f"{p50:.2f} | {p95:.2f} | {p99:.2f} | {mx:.2f} | {p99/p50:.2f} | "
              f"{100*rate/raw:.0f}% | {100*rate/rc:.0f}% (rounds {min(ratios):.0f}-{max(ratios):.0f}%) | "
              f"{rate/gpg:.1f} |")
        if all("pinned" in l for l in lims):
            pins = [l["pinned"] for l in lims]
            slow = [2 * min(p) for p in pins]
            print(f"| RSA-{b} | raw limit, {backend}, 1 thread pinned to each CPU at once, the rounds above: "
                  f"CPU 0 {', '.join(f'{p[0]:.0f}' for p in pins)}; CPU 1 {', '.join(f'{p[1]:.0f}' for p in pins)}; "
                  f"twice the slower CPU (what a split operation can reach) | {sum(slow)/R:.1f} | | | | | | | | "
                  f"{100*sum(slow)/R/raw:.0f}% | pgpdecd {100*rate/(sum(slow)/R):.0f}% of it "
                  f"(rounds {min(100*j['msgs_per_s']/x for j, x in zip(runs, slow)):.0f}-"
                  f"{max(100*j['msgs_per_s']/x for j, x in zip(runs, slow)):.0f}%) | |")
    print(f"| RSA-{b} | gpg --decrypt, sequential, {n} msgs | {gpg:.1f} | {gpg*4096/1e6:.2f} | "
          f"{1000/gpg:.1f} | | | | | {100*gpg/raw:.1f}% | | 1.0 |")
EOF

if [ "$ENGINE" = 1 ]; then
	echo
	sh "$SRC/contrib/bench-engine.sh"
fi
