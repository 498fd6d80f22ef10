#!/bin/sh
# SPDX-License-Identifier: MIT
#
# contrib/bench/bulk.sh: one large message through pgpdecd against the
# engine alone, in one run.
#
# Makes a SIZE MiB (default 64) random file and encrypts it with gpg to a
# fresh cv25519 key as SEIPD v1, AES-256, uncompressed (--compress-algo
# none), starts pgpdecd on a Unix socket and on TLS (127.0.0.1, certificates
# made here by certtool, mutual TLS as the daemon's default asks), then
# measures in ROUNDS interleaved rounds (engine, unix, tls, engine, ...;
# the machine drifts, only neighbours compare):
#   engine  pd-decrypt --bench: the engine in process on one thread;
#   unix    pgpdecd-client bench --concurrency 1 --no-digest over the Unix
#           socket: the client counts the plaintext (and compares its length
#           with the first reply's) and drops it, as the engine column does;
#   sha     the same with the client's SHA-256 of every plaintext (its
#           default), which on a 2-core machine takes ~0.6 ms of CPU per MB
#           from the cores the daemon runs on;
#   tls     as unix, over TLS 1.3;
# and prints each round's MB/s of plaintext and the ratios to the engine
# of that round, then the median of the ratios.  Every path's plaintext is
# checked byte for byte once before the rounds.  Last, PARALLEL
# messages at once (--concurrency PARALLEL over the Unix socket): MB/s and
# the CPU time the daemon and the client used per second of wall time
# (their cores busy, and together: whether the machine was), against the
# engine's one-thread rate times the workers.
#
# The socket column is what a Unix socket pair alone carries in that round
# (contrib/bench/sockpair.py: one process writing SIZE MiB, another reading
# it), the kernel's share of the path.  Last, where the CPU went per message
# over the Unix socket (the unix column) and over TLS: the daemon's loop
# thread, its workers and the client; the three share the machine's
# cores, so their sum over the cores is the shortest a message can take,
# whatever the daemon does with its own share: the ratio to the engine it
# allows is printed beside it.
#
# The CPU columns divide plaintext by CPU time instead of wall time: the
# engine's (pd-decrypt's own CPU time) and the whole daemon's (all its
# threads, from /proc); on a machine shared with other work they are the
# steadier figures (the daemon's wall time suffers each time one of its
# threads waits for the other and the scheduler runs someone else).
#
# In the sha column the client checks every plaintext (SHA-256 of each
# reply against the first of its file) on a core of its own when there is
# one; on a 2-core machine it shares them with the daemon's loop thread
# and worker.
#
# Usage: contrib/bench/bulk.sh [--size MIB] [--rounds R] [--seconds S]
#                              [--parallel N] [--workers N] [--keep]
# Needs a build in $BUILD (default build/), gpg and certtool (gnutls-bin).
# MB = 10^6 bytes.
set -eu
cd "$(dirname "$0")/../.."
SRC=$(pwd)
BUILD=${BUILD:-$SRC/build}
case $BUILD in /*) ;; *) BUILD=$SRC/$BUILD ;; esac

SIZE=64
ROUNDS=3
SECS=3
PARALLEL=4
WORKERS=$(nproc)
KEEP=0
while [ $# -gt 0 ]; do
	case $1 in
	--size) SIZE=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--seconds) SECS=$2; shift ;;
	--parallel) PARALLEL=$2; shift ;;
	--workers) WORKERS=$2; shift ;;
	--keep) KEEP=1 ;;
	-h|--help) sed -n '3,50p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bulk.sh: unknown option $1 (--help)" >&2; exit 64 ;;
	esac
	shift
done

PGPDECD=$BUILD/daemon/pgpdecd
CLIENT=$BUILD/client/pgpdecd-client
PD=$BUILD/tools/pd-decrypt
for t in "$PGPDECD" "$CLIENT" "$PD"; do
	[ -x "$t" ] || { echo "bulk.sh: $t missing: meson setup build && ninja -C build" >&2; exit 1; }
done
command -v certtool >/dev/null || { echo "bulk.sh: needs certtool (gnutls-bin)" >&2; exit 1; }
PY=/usr/bin/python3

WORK=$(mktemp -d /tmp/pgpdecd-bulk.XXXXXX)
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
log() { echo "[bulk] $*" >&2; }

# ---- the message ---------------------------------------------------------
mkdir -m 700 "$GNUPGHOME"
G() { gpg --batch --no-tty --pinentry-mode loopback --passphrase '' "$@"; }
G -q --quick-gen-key '<bulk@pgpdecd.example>' ed25519 cert never 2>>"$WORK/gpg.log"
FPR=$(gpg --with-colons -k '<bulk@pgpdecd.example>' 2>>"$WORK/gpg.log" | awk -F: '/^fpr/{print $10; exit}')
G -q --quick-add-key "$FPR" cv25519 encr never 2>>"$WORK/gpg.log"
G --export-secret-keys >"$WORK/key.pgp"
head -c $((SIZE * 1048576)) /dev/urandom >"$WORK/plain"
G --trust-model always -r "$FPR" --cipher-algo AES256 --compress-algo none -o "$WORK/msg.pgp" \
	-e "$WORK/plain" 2>>"$WORK/gpg.log"
PLAIN_SHA=$(sha256sum <"$WORK/plain" | cut -d' ' -f1)
log "message: $(stat -c %s "$WORK/msg.pgp") bytes of ciphertext, $SIZE MiB of plaintext"

# ---- TLS certificates (as tests/integration/test_daemon_tls.py) ---------
CT() { certtool "$@" >>"$WORK/certtool.log" 2>&1; }
cd "$WORK"
CT --generate-privkey --key-type=ecdsa --outfile ca.key
printf 'cn = "bulk-ca"\nca\ncert_signing_key\nexpiration_days = 2\n' >ca.tmpl
CT --generate-self-signed --load-privkey ca.key --template ca.tmpl --outfile ca.pem
for n in srv cli; do
	CT --generate-privkey --key-type=ecdsa --outfile $n.key
	if [ $n = srv ]; then
		printf 'cn = "localhost"\ndns_name = "localhost"\nip_address = "127.0.0.1"\ntls_www_server\nexpiration_days = 2\n'
	else
		printf 'cn = "bulk-client"\ntls_www_client\nexpiration_days = 2\n'
	fi >$n.tmpl
	CT --generate-certificate --load-privkey $n.key --load-ca-certificate ca.pem --load-ca-privkey ca.key \
		--template $n.tmpl --outfile $n.pem
done
cd "$SRC"
PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

# ---- the daemon ------------------------------------------------------------
SOCK=$WORK/pgpdecd.sock
log "starting pgpdecd: $WORKERS workers, unix:$SOCK and tcp:127.0.0.1:$PORT (TLS)"
"$PGPDECD" --listen "unix:$SOCK" --listen "tcp:127.0.0.1:$PORT" --key "$WORK/key.pgp" --workers "$WORKERS" \
	--tls-cert "$WORK/srv.pem" --tls-key "$WORK/srv.key" --tls-ca "$WORK/ca.pem" \
	--log-level warning 2>"$WORK/pgpdecd.log" &
DPID=$!
n=0
until "$CLIENT" --socket "$SOCK" --timeout 2 ping >/dev/null 2>&1; do
	n=$((n + 1))
	if [ $n -gt 100 ] || ! kill -0 "$DPID" 2>/dev/null; then
		echo "bulk.sh: pgpdecd did not come up:" >&2
		cat "$WORK/pgpdecd.log" >&2
		exit 1
	fi
	sleep 0.1
done
UNIX="--socket $SOCK"
TLS="--connect 127.0.0.1:$PORT --tls-ca $WORK/ca.pem --tls-cert $WORK/cli.pem --tls-key $WORK/cli.key"
# One check of each path: the plaintext is the file's.
for via in UNIX TLS; do
	eval "opts=\$$via"
	# shellcheck disable=SC2086
	"$CLIENT" $opts --timeout 60 -o "$WORK/out" "$WORK/msg.pgp"
	[ "$(sha256sum <"$WORK/out" | cut -d' ' -f1)" = "$PLAIN_SHA" ] || { echo "bulk.sh: wrong plaintext ($via)" >&2; exit 1; }
	rm -f "$WORK/out"
done

# CPU seconds (user + system) of the daemon so far.
daemon_cpu() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$DPID/stat"; }

# bench VIA CONCURRENCY REQUESTS [CLIENT-FLAG...]: prints the JSON line
bench() {
	eval "opts=\$$1"
	conc=$2
	nreq=$3
	shift 3
	# shellcheck disable=SC2086
	# the client's CPU seconds go to $WORK/client.cpu
	$PY -c 'import resource, subprocess, sys
p = subprocess.run(sys.argv[2:], stdout=subprocess.PIPE, text=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{r.ru_utime + r.ru_stime}\n")
sys.stdout.write(p.stdout)
sys.exit(p.returncode)' "$WORK/client.cpu" "$CLIENT" $opts --timeout 120 bench --concurrency "$conc" --requests "$nreq" \
		"$@" --json "$WORK/msg.pgp"
}
# CPU seconds (user + system) of the daemon's threads so far: "loop workers"
# (the loop is the main thread, the workers the pool's; the reload and key
# threads are not running during a round).
thread_cpu() {
	awk -v hz="$(getconf CLK_TCK)" -v main="$DPID" '
		FNR == 1 { split(FILENAME, f, "/"); t = ($14 + $15) / hz; if (f[5] == main) l += t; else w += t }
		END { print l, w }' /proc/"$DPID"/task/*/stat
}
field() { $PY -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# Requests per daemon round: about SECS seconds at the engine's rate.
ENG0=$("$PD" --key "$WORK/key.pgp" --bench --bench-seconds 1 "$WORK/msg.pgp" | awk '/^bench: [0-9.]+ MB\/s plaintext/{print $2}')
REQ=$($PY -c "import math; print(max(3, math.ceil($SECS * $ENG0 / ($SIZE * 1.048576))))")
log "engine warm-up: $ENG0 MB/s; $REQ requests per daemon round"

# ---- interleaved rounds ---------------------------------------------------
: >"$WORK/rounds"
: >"$WORK/split"
: >"$WORK/split-tls"
r=1
while [ $r -le "$ROUNDS" ]; do
	"$PD" --key "$WORK/key.pgp" --bench --bench-seconds "$SECS" "$WORK/msg.pgp" >"$WORK/eng.out"
	eng=$(awk '/^bench: [0-9.]+ MB\/s plaintext/{print $2}' "$WORK/eng.out")
	engcpu=$(awk '/^bench: CPU time/{print $4}' "$WORK/eng.out")
	sock=$($PY "$SRC/contrib/bench/sockpair.py" "$SIZE")
	c0=$(daemon_cpu)
	t0=$(thread_cpu)
	ju=$(bench UNIX 1 "$REQ" --no-digest)
	c1=$(daemon_cpu)
	t1=$(thread_cpu)
	echo "$t0 $t1 $(cat "$WORK/client.cpu") $REQ" >>"$WORK/split"
	jt=$(bench TLS 1 "$REQ" --no-digest)
	c2=$(daemon_cpu)
	t2=$(thread_cpu)
	echo "$t1 $t2 $(cat "$WORK/client.cpu") $REQ" >>"$WORK/split-tls"
	js=$(bench UNIX 1 "$REQ")
	for j in "$ju" "$jt" "$js"; do
		[ "$(field "$j" failed)" = 0 ] && [ "$(field "$j" mismatched)" = 0 ] ||
			{ echo "bulk.sh: a request failed or its plaintext differed: $j" >&2; exit 1; }
	done
	echo "$r $eng $(field "$ju" mb_per_s_out) $(field "$jt" mb_per_s_out) $engcpu $(field "$ju" elapsed_s) $(field "$jt" elapsed_s) $c0 $c1 $c2 $sock $(field "$js" mb_per_s_out)" >>"$WORK/rounds"
	log "round $r: engine $eng MB/s, socket pair $sock, unix $(field "$ju" mb_per_s_out), tls $(field "$jt" mb_per_s_out), unix with SHA-256 $(field "$js" mb_per_s_out)"
	r=$((r + 1))
done

# ---- several at once ------------------------------------------------------
NP=$((PARALLEL * 4))
c0=$(daemon_cpu)
jp=$(bench UNIX "$PARALLEL" "$NP" --no-digest)
c1=$(daemon_cpu)
cp=$(cat "$WORK/client.cpu")
[ "$(field "$jp" failed)" = 0 ] && [ "$(field "$jp" mismatched)" = 0 ] ||
	{ echo "bulk.sh: a parallel request failed: $jp" >&2; exit 1; }
ENG1=$("$PD" --key "$WORK/key.pgp" --bench --bench-seconds "$SECS" "$WORK/msg.pgp" | awk '/^bench: [0-9.]+ MB\/s plaintext/{print $2}')

$PY - "$WORK/rounds" "$SIZE" "$WORKERS" "$PARALLEL" "$NP" "$ENG1" "$jp" "$c0" "$c1" "$WORK/split" "$WORK/split-tls" "$(nproc)" "$cp" <<'EOF'
import json, statistics, sys
rounds = [l.split() for l in open(sys.argv[1]) if l.strip()]
size, workers, par, n_par, eng1 = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], float(sys.argv[6])
jp, c0, c1 = json.loads(sys.argv[7]), float(sys.argv[8]), float(sys.argv[9])
print(f"pgpdecd bulk: one {size} MiB SEIPD v1 message (AES-256, uncompressed), MB/s of plaintext (MB = 10^6 bytes)")
print(f"{'round':>5} {'engine':>9} {'socket':>9} {'unix':>9} {'sha':>9} {'tls':>9} {'unix/eng':>9} {'sha/eng':>8} "
      f"{'tls/eng':>8}   {'CPU: engine':>11} {'unix':>7} {'tls':>7} {'unix/eng':>9} {'tls/eng':>8}")
ru, rt, cu, ct, rs, rh = [], [], [], [], [], []
for r, e, u, t, ec, eu, et, k0, k1, k2, sk, h in rounds:
    sk, h = float(sk), float(h)
    rs.append(sk / float(e))
    rh.append(h / float(e))
    e, u, t, ec = float(e), float(u), float(t), float(ec)
    # plaintext MB per CPU second of the whole daemon (loop, TLS, workers)
    du = u * float(eu) / max(float(k1) - float(k0), 1e-9)
    dt = t * float(et) / max(float(k2) - float(k1), 1e-9)
    ru.append(u / e)
    rt.append(t / e)
    cu.append(du / ec)
    ct.append(dt / ec)
    print(f"{r:>5} {e:9.1f} {sk:9.1f} {u:9.1f} {h:9.1f} {t:9.1f} {u / e:9.2f} {h / e:8.2f} {t / e:8.2f}   "
          f"{ec:11.1f} {du:7.1f} {dt:7.1f} {du / ec:9.2f} {dt / ec:8.2f}")
print(f"median ratio: unix/engine {statistics.median(ru):.2f}, tls/engine {statistics.median(rt):.2f}, "
      f"unix with the client's SHA-256/engine {statistics.median(rh):.2f} (wall time); "
      f"per CPU second: unix/engine {statistics.median(cu):.2f}, tls/engine {statistics.median(ct):.2f}; "
      f"a lone socket pair carried {statistics.median(rs):.2f} x the engine's rate")
ncpu = int(sys.argv[12])
eng_ms = float(size) * 1.048576 / statistics.median(float(r[4]) for r in rounds) * 1000
for via, path in (("unix", sys.argv[10]), ("TLS", sys.argv[11])):
    split = [[float(x) for x in l.split()] for l in open(path) if l.strip()]
    lp = statistics.median((b - a) / n * 1000 for a, _, b, _, _, n in split)
    wk = statistics.median((b - a) / n * 1000 for _, a, _, b, _, n in split)
    cl = statistics.median(c / n * 1000 for *_, c, n in split)
    # the three share the machine's cores: their sum over the cores is the
    # shortest a message can take here, whatever the daemon does
    floor = (lp + wk + cl) / ncpu
    print(f"CPU per message over {via} (medians, ms): daemon loop {lp:.1f}, workers {wk:.1f}, client {cl:.1f}; "
          f"sum {lp + wk + cl:.1f}, over {ncpu} cores {floor:.1f}: at most {eng_ms / floor:.2f} x the engine "
          f"on this machine (the engine alone: {eng_ms:.1f})")
wall = jp["elapsed_s"]
cores = (c1 - c0) / wall if wall > 0 else 0
mb = jp["mb_per_s_out"]
ccores = float(sys.argv[13]) / wall if wall > 0 else 0
print(f"{par} messages at once ({n_par} in all, unix): {mb:.1f} MB/s, daemon busy {cores:.2f} cores "
      f"of {workers} workers, the client {ccores:.2f}: {cores + ccores:.2f} of the machine's {ncpu} cores; "
      f"engine one thread {eng1:.1f} MB/s x {workers} = {eng1 * workers:.1f} MB/s "
      f"(ratio {mb / (eng1 * workers):.2f})")
EOF
