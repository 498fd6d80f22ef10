#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""contrib/bench/compare.sh: pgpdecd side by side with gpg, sq, sqop, rnp,
gosop and go-crypto, and against the raw private-key limits, in one run.

For each key (RSA-2048/3072/4096 and cv25519 by default: an ed25519 primary
with an encryption subkey, made by gpg) and each plaintext size (4 KiB,
1 MiB, 64 MiB), gpg encrypts --messages distinct messages of ASCII text
(base64 lines of random bytes, LF: gosop only reproduces such text) with its
defaults (SEIPD v1, AES-256) but without compression (--compress zlib for
gpg's default ZLIB, whose inflate then dominates every tool's cost on large
messages).  Every tool decrypts the same messages
with its own key format, and its first output of each is compared with the
plaintext (a tool that decrypts wrongly stops the run).  Measured, one after
the other on this machine:

  raw limit   RSA: contrib/bench pd-rsa-limit (the OpenSSL backend, with as
              many threads as pgpdecd has workers); cv25519: `openssl speed
              -seconds S -multi W ecdhx25519` (X25519 derives/s, W = workers).
              Measured just before and just after the key's pgpdecd rows,
              and again just before each 4 KiB pgpdecd row: a 4 KiB row's
              ratio is to that neighbour (on a shared machine the limit
              drifts from minute to minute), every other row's to the mean
              of the before and after figures.
  pgpdecd     the daemon (started here on a Unix socket, --workers W, its
              default backends, a fresh daemon with the one key for each key
              and size) driven by `pgpdecd-client bench` at each concurrency
              level; peak RSS is the daemon's VmHWM, reset (clear_refs 5) to
              its current RSS before each row.
  baseline    with --baseline DIR: the daemon of another build (DIR/daemon/
              pgpdecd: an older commit, say) in the same rows, started and
              measured the same way, before this build's daemon for each key
              and size; --rounds R alternates the two R times.  The client,
              pd-rsa-limit and the messages are this build's, so the rows
              differ only in the daemon; each 4 KiB row has its own raw
              neighbour, and a line after the table gives both daemons'
              ratios round by round (before and after, from one run).
  gpg, sq, sqop, rnp, gosop
              one process per message, one after another (how they are used
              from scripts): gpg --decrypt with the agent running and the key
              imported; `sq decrypt --recipient-key KEY`; `sqop decrypt KEY`;
              `gosop decrypt KEY`; `rnp --keyfile KEY -d`.  Latency is each
              process's wall time; peak RSS is the largest max RSS of the
              processes (/usr/bin/time -f %M; for gpg, of gpg itself and not
              of gpg-agent).
  go-crypto   ProtonMail go-crypto in-process (contrib/bench/gocrypto, built
              here offline from Debian's golang-go and
              golang-github-protonmail-go-crypto-dev in GOPATH mode), with W
              goroutines; its peak RSS is its own getrusage.

Prints one Markdown table: messages/s, MB/s of plaintext (10^6 bytes), P50
and P99 latency (ms), peak RSS (MiB) and the ratio of messages/s to the raw
limit; with concurrency 50 among the levels, then the sizing table of
contrib/haproxy/README.md (pgpdecd's messages/s per core).  64 MiB messages: --big-runs processes per CLI tool and go-crypto,
and max(c, --big-runs) requests per pgpdecd row.

Usage: contrib/bench/compare.sh [--quick] [--keys "rsa2048 rsa3072 rsa4096 cv25519"]
         [--sizes "4k 1m 64m"] [--levels "1 50 200"] [--tools "gpg sq sqop rnp gosop gocrypto"]
         [--workers N] [--seconds S] [--runs N] [--big-runs N] [--messages N]
         [--compress none|zlib] [--json FILE] [--keep] [--baseline DIR [--rounds R]]
       contrib/bench/compare.sh --sizing-from FILE   (the sizing table again, from --json's FILE)
  --quick   rsa2048 and cv25519, 4k and 1m, levels 1 and 50, 10 runs per
            CLI tool, 1 s per measurement (about 1-3 minutes; 47 s on the
            2-core VM under load)
  full (no --quick): every key, size and level, 20 runs per CLI tool on 4k
            and 1m, 3 on 64m, 3 s per measurement
  --tools ""  no other tool: pgpdecd against the raw limits only
  --baseline DIR  also the daemon of the build in DIR, alternating with
            this build's (--rounds R times, default 1): before/after figures
            from one run, e.g. --keys "rsa2048 cv25519" --sizes 4k --levels 50
            --tools "" --baseline /tmp/old/build --rounds 3
Needs a build in $BUILD (default build/), gpg, sq, sqop, rnp, gosop, openssl,
/usr/bin/time (package time), golang-go and golang-github-protonmail-go-crypto-dev.
"""
import base64
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD", os.path.join(SRC, "build"))
if not os.path.isabs(BUILD):
    BUILD = os.path.join(SRC, BUILD)

SIZES = {"4k": 4096, "1m": 1 << 20, "64m": 64 << 20}
KEYS = {"rsa2048": "RSA-2048", "rsa3072": "RSA-3072", "rsa4096": "RSA-4096", "cv25519": "cv25519"}
CLI_TOOLS = ["gpg", "sq", "sqop", "rnp", "gosop"]
ALL_TOOLS = CLI_TOOLS + ["gocrypto"]


def die(msg):
    print(f"compare.sh: {msg}", file=sys.stderr)
    sys.exit(1)


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


def parse_args(argv):
    o = {"quick": False, "keys": None, "sizes": None, "levels": None, "tools": None,
         "workers": 2, "seconds": None, "runs": None, "big_runs": 3, "messages": None,
         "json": None, "keep": False, "compress": "none", "baseline": None, "rounds": 1}
    i = 0
    while i < len(argv):
        a = argv[i]
        val = lambda: argv[i + 1] if i + 1 < len(argv) else die(f"{a} needs a value")
        if a == "--quick":
            o["quick"] = True
        elif a == "--keep":
            o["keep"] = True
        elif a in ("--keys", "--sizes", "--levels", "--tools"):
            o[a[2:]] = val().split()
            i += 1
        elif a == "--baseline":
            o["baseline"] = os.path.abspath(val())
            i += 1
        elif a in ("--workers", "--runs", "--big-runs", "--messages", "--rounds"):
            try:
                o[a[2:].replace("-", "_")] = int(val())
            except ValueError:
                die(f"{a} takes a number")
            i += 1
        elif a == "--seconds":
            o["seconds"] = float(val())
            i += 1
        elif a == "--compress":
            o["compress"] = val()
            o["compress"] in ("none", "zlib") or die("--compress none|zlib")
            i += 1
        elif a == "--json":
            o["json"] = val()
            i += 1
        elif a in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        else:
            print(f"compare.sh: unknown option {a} (--help)", file=sys.stderr)
            sys.exit(64)
        i += 1
    q = o["quick"]
    o["keys"] = o["keys"] or (["rsa2048", "cv25519"] if q else list(KEYS))
    o["sizes"] = o["sizes"] or (["4k", "1m"] if q else list(SIZES))
    o["levels"] = [int(x) for x in (o["levels"] or (["1", "50"] if q else ["1", "50", "200"]))]
    o["tools"] = list(ALL_TOOLS) if o["tools"] is None else o["tools"]  # "": none
    o["seconds"] = o["seconds"] if o["seconds"] is not None else (1.0 if q else 3.0)
    o["runs"] = o["runs"] or (10 if q else 20)
    o["messages"] = o["messages"] or 8
    for k in o["keys"]:
        k in KEYS or die(f"unknown key {k} (one of {' '.join(KEYS)})")
    for s in o["sizes"]:
        s in SIZES or die(f"unknown size {s} (one of {' '.join(SIZES)})")
    for t in o["tools"]:
        t in ALL_TOOLS or die(f"unknown tool {t} (one of {' '.join(ALL_TOOLS)})")
    if o["workers"] < 1 or o["runs"] < 1 or o["big_runs"] < 1 or o["messages"] < 1 or o["seconds"] <= 0 \
            or o["rounds"] < 1:
        die("--workers, --runs, --big-runs, --messages, --rounds and --seconds must be positive")
    if o["baseline"]:
        exe = os.path.join(o["baseline"], "daemon", "pgpdecd")
        os.access(exe, os.X_OK) or die(f"--baseline: no {exe}")
    elif o["rounds"] != 1:
        die("--rounds goes with --baseline")
    return o


def pct(xs, p):
    xs = sorted(xs)
    i = max(0, min(len(xs) - 1, int(p * len(xs) + 0.5) - 1))
    return xs[i]


class Bench:
    def __init__(self, o, work):
        self.o = o
        self.work = work
        self.gnupg = os.path.join(work, "gnupg")
        os.mkdir(self.gnupg, 0o700)
        self.env = dict(os.environ, GNUPGHOME=self.gnupg, LC_ALL="C")
        self.pgpdecd = os.path.join(BUILD, "daemon", "pgpdecd")
        self.client = os.path.join(BUILD, "client", "pgpdecd-client")
        self.limit = os.path.join(BUILD, "contrib", "bench", "pd-rsa-limit")
        self.rows = []
        self.daemon = None

    def run(self, cmd, **kw):
        kw.setdefault("env", self.env)
        kw.setdefault("check", True)
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        try:
            return subprocess.run(cmd, **kw)
        except subprocess.CalledProcessError as e:
            die(f"{' '.join(map(str, cmd))} exited {e.returncode}: {(e.stderr or b'').decode(errors='replace')[-2000:]}")

    def gpg(self, *args, **kw):
        return self.run(["gpg", "--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", "",
                         *args], **kw)

    # ---- keys and messages ---------------------------------------------
    def make_keys(self):
        self.fpr, self.keyfile = {}, {}
        for k in self.o["keys"]:
            uid = f"<bench-{k}@pgpdecd.example>"
            log(f"generating a {KEYS[k]} encryption key (ed25519 primary) with gpg")
            self.gpg("-q", "--quick-gen-key", uid, "ed25519", "cert", "never")
            out = self.run(["gpg", "--with-colons", "-k", uid]).stdout.decode()
            fpr = next(l.split(":")[9] for l in out.splitlines() if l.startswith("fpr:"))
            self.gpg("-q", "--quick-add-key", fpr, k, "encr", "never")
            path = os.path.join(self.work, f"{k}.key")
            with open(path, "wb") as f:
                f.write(self.gpg("--export-secret-keys", fpr).stdout)
            self.fpr[k], self.keyfile[k] = fpr, path

    def make_messages(self):
        self.msgs, self.plain = {}, {}
        for s in self.o["sizes"]:
            n = SIZES[s]
            count = 1 if n >= SIZES["64m"] else min(self.o["messages"], 2) if n >= SIZES["1m"] else self.o["messages"]
            plains = []
            for i in range(count):
                # ASCII lines, LF: base64 of random bytes, 76 columns
                raw = base64.encodebytes(os.urandom(n * 3 // 4 + 64))[:n]
                p = os.path.join(self.work, f"plain-{s}-{i}")
                with open(p, "wb") as f:
                    f.write(raw)
                plains.append(p)
            self.plain[s] = plains
            for k in self.o["keys"]:
                d = os.path.join(self.work, f"msg-{k}-{s}")
                os.mkdir(d)
                self.msgs[k, s] = []
                for i, p in enumerate(plains):
                    m = os.path.join(d, f"m{i}.pgp")
                    self.gpg("--trust-model", "always", "--compress-algo", self.o["compress"], "-r", self.fpr[k],
                             "-o", m, "-e", p)
                    self.msgs[k, s].append(m)
        log("messages: " + ", ".join(f"{s} x{len(self.plain[s])}" for s in self.o["sizes"]) + " per key")

    # ---- raw limits ------------------------------------------------------
    def raw_limit(self, k):
        w, secs = self.o["workers"], self.o["seconds"]
        if k.startswith("rsa"):
            r = self.run([self.limit, "-t", str(w), "-s", str(secs), "-b", "openssl", "--json", self.keyfile[k]])
            return json.loads(r.stdout)["backends"]["openssl"]["ops_per_s"]
        r = self.run(["openssl", "speed", "-seconds", str(max(1, round(secs))), "-multi", str(w), "ecdhx25519"])
        for line in r.stdout.decode().splitlines():
            if "ecdh (X25519)" in line:
                return float(line.split()[-1])
        die("openssl speed printed no X25519 line")

    # ---- pgpdecd ---------------------------------------------------------
    def start_daemon(self, k, exe=None):
        self.sock = os.path.join(self.work, "pgpdecd.sock")
        args = [exe or self.pgpdecd, "--listen", f"unix:{self.sock}", "--workers", str(self.o["workers"]),
                "--log-level", "warning", "--max-connections", "4096", "--queue-length", "4096"]
        args += ["--key", self.keyfile[k]]
        self.dlog = open(os.path.join(self.work, "pgpdecd.log"), "wb")
        self.daemon = subprocess.Popen(args, stdout=self.dlog, stderr=self.dlog, env=self.env)
        for _ in range(200):
            if self.daemon.poll() is not None:
                break
            if subprocess.run([self.client, "--socket", self.sock, "--timeout", "2", "ping"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
                return
            time.sleep(0.05)
        die("pgpdecd did not come up: " + open(self.dlog.name).read()[-2000:])

    def stop_daemon(self, check=False):
        d, self.daemon = self.daemon, None
        if d and d.poll() is None:
            d.terminate()
            try:
                d.wait(30)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()
        if check and d and d.returncode != 0:
            # a crash, or a sanitizer's report at exit
            die(f"pgpdecd exited {d.returncode}: " + open(self.dlog.name, errors="replace").read()[-3000:])

    def daemon_hwm_reset(self):
        try:
            with open(f"/proc/{self.daemon.pid}/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def daemon_hwm_kb(self):
        for line in open(f"/proc/{self.daemon.pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return None

    def bench_pgpdecd(self, k, s, raw, label=""):
        msgs = self.msgs[k, s]
        big = SIZES[s] >= SIZES["64m"]
        # sanity: byte-exact through the daemon
        for m, p in zip(msgs, self.plain[s]):
            out = m + ".out"
            self.run([self.client, "--socket", self.sock, "--timeout", "600", "-o", out, m])
            if open(out, "rb").read() != open(p, "rb").read():
                die(f"pgpdecd: wrong plaintext for {m}")
            os.unlink(out)
        for c in self.o["levels"]:
            if big:
                req = max(c, self.o["big_runs"])
            else:
                # a short calibration run gives the rate, then about
                # --seconds of requests (at least 5 per connection)
                cal = self.client_bench(c, max(2 * c, 20), msgs)
                req = max(int(cal["msgs_per_s"] * self.o["seconds"]), 5 * c, 20)
            near = self.raw_limit(k) if s == "4k" else None
            reset = self.daemon_hwm_reset()
            log(f"pgpdecd, {KEYS[k]}, {s}: pgpdecd-client bench --concurrency {c} --requests {req}")
            j = self.client_bench(c, req, msgs)
            if j["failed"]:
                die(f"pgpdecd: {j['failed']} requests failed")
            self.rows.append({"key": k, "size": s, "tool": f"pgpdecd{label}, concurrency {c}", "level": c,
                              "label": label,
                              "n": j["requests"], "msgs_per_s": j["msgs_per_s"],
                              "mb_per_s": j["msgs_per_s"] * SIZES[s] / 1e6,
                              "p50": j["latency_ms"]["p50"], "p99": j["latency_ms"]["p99"],
                              "rss_kb": self.daemon_hwm_kb(), "rss_reset": reset, "raw": raw,
                              "raw_near": near})

    def daemons(self):
        """(daemon, row label) in the order they run for one key and size:
        without --baseline this build's alone; with it, the baseline's then
        this build's, --rounds times (the label of round 2 on ends in #R)."""
        if not self.o["baseline"]:
            return [(None, "")]
        base = os.path.join(self.o["baseline"], "daemon", "pgpdecd")
        out = []
        for i in range(1, self.o["rounds"] + 1):
            n = f" #{i}" if i > 1 else ""
            out += [(base, f" (baseline){n}"), (None, n)]
        return out

    def client_bench(self, c, req, msgs):
        r = self.run([self.client, "--socket", self.sock, "--timeout", "600", "bench", "--concurrency", str(c),
                      "--requests", str(req), "--json", *msgs])
        return json.loads(r.stdout)

    # ---- per-message tools ----------------------------------------------
    def tool_cmd(self, tool, k, m):
        key = self.keyfile[k]
        if tool == "gpg":
            return ["gpg", "--batch", "--no-tty", "-q", "-d", m], None
        if tool == "sq":
            return ["sq", "decrypt", "--recipient-key", key, m], None
        if tool in ("sqop", "gosop"):
            return [tool, "decrypt", key], m
        if tool == "rnp":
            return ["rnp", "--homedir", self.rnphome, "--keyfile", key, "--password", "", "-d", m,
                    "--output", "-"], None
        raise ValueError(tool)

    def bench_tool(self, tool, k, s, raw):
        msgs, plains = self.msgs[k, s], self.plain[s]
        for m, p in zip(msgs, plains):
            cmd, stdin = self.tool_cmd(tool, k, m)
            r = self.run(cmd, stdin=open(stdin, "rb") if stdin else subprocess.DEVNULL)
            if r.stdout != open(p, "rb").read():
                die(f"{tool}: wrong plaintext for {m} ({len(r.stdout)} bytes)")
        runs = self.o["big_runs"] if SIZES[s] >= SIZES["64m"] else self.o["runs"]
        log(f"{tool}, {KEYS[k]}, {s}: {runs} processes one after another")
        lat, rss = [], []
        tf = os.path.join(self.work, "time.out")
        t0 = time.perf_counter()
        for i in range(runs):
            cmd, stdin = self.tool_cmd(tool, k, msgs[i % len(msgs)])
            t = time.perf_counter()
            p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tf, *cmd], env=self.env,
                               stdin=open(stdin, "rb") if stdin else subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            lat.append((time.perf_counter() - t) * 1000)
            if p.returncode != 0:
                die(f"{tool} exited {p.returncode} on {msgs[i % len(msgs)]}")
            rss.append(int(open(tf).read().split()[-1]))
        el = time.perf_counter() - t0
        self.rows.append({"key": k, "size": s, "tool": f"{tool}, one process per message", "n": runs,
                          "msgs_per_s": runs / el, "mb_per_s": runs * SIZES[s] / 1e6 / el,
                          "p50": pct(lat, 0.5), "p99": pct(lat, 0.99), "rss_kb": max(rss), "raw": raw})

    # ---- go-crypto -------------------------------------------------------
    def build_gocrypto(self):
        out = os.path.join(BUILD, "contrib", "bench", "pd-bench-gocrypto")
        src = os.path.join(SRC, "contrib", "bench", "gocrypto", "main.go")
        if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(src):
            return out
        if not shutil.which("go"):
            die("go missing: apt-get install golang-go golang-github-protonmail-go-crypto-dev")
        log("building contrib/bench/gocrypto offline (GOPATH mode, Debian's go-crypto)")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        # GOPATH mode: imports come from /usr/share/gocode (Debian's -dev
        # packages), nothing is fetched (GOPROXY=off, GOFLAGS cleared).
        env = dict(os.environ, GOPATH="/usr/share/gocode", GO111MODULE="off", GOPROXY="off",
                   GOFLAGS="", GOTOOLCHAIN="local", GOCACHE=os.path.join(BUILD, "contrib", "bench", "gocache"))
        self.run(["go", "build", "-o", out, "."], cwd=os.path.dirname(src), env=env)
        return out

    def bench_gocrypto(self, k, s, raw):
        big = SIZES[s] >= SIZES["64m"]
        n = self.o["big_runs"] if big else self.o["runs"]
        w = self.o["workers"]
        log(f"go-crypto, {KEYS[k]}, {s}: {w} goroutines in-process")
        r = self.run([self.gocrypto, "-key", self.keyfile[k], "-n", str(n), "-seconds",
                      "0" if big else str(self.o["seconds"]), "-threads", str(w), "-size", str(SIZES[s]),
                      *self.msgs[k, s]])
        j = json.loads(r.stdout)
        self.rows.append({"key": k, "size": s, "tool": f"go-crypto in-process, {w} goroutines", "n": j["messages"],
                          "msgs_per_s": j["msgs_per_s"], "mb_per_s": j["mb_per_s"],
                          "p50": j["latency_ms"]["p50"], "p99": j["latency_ms"]["p99"],
                          "rss_kb": j["max_rss_kb"], "raw": raw})

    # ---- the run -------------------------------------------------------
    def main(self):
        o = self.o
        for t in (self.pgpdecd, self.client, self.limit):
            os.access(t, os.X_OK) or die(f"{t} missing: meson setup build && ninja -C build (or set BUILD)")
        for t in o["tools"]:
            if t != "gocrypto" and not shutil.which(t):
                die(f"{t} missing (contrib/check.sh installs it)")
        os.access("/usr/bin/time", os.X_OK) or die("/usr/bin/time missing: apt-get install time")
        self.rnphome = os.path.join(self.work, "rnp")
        os.mkdir(self.rnphome, 0o700)
        if "gocrypto" in o["tools"]:
            self.gocrypto = self.build_gocrypto()
        t_start = time.time()
        self.make_keys()
        self.make_messages()
        if "gpg" in o["tools"]:
            # the agent running and the key loaded, outside the timing
            self.gpg("-q", "-d", "-o", "/dev/null", self.msgs[o["keys"][0], o["sizes"][0]][0])
        self.raws = {}
        for k in o["keys"]:
            log(f"raw limit, {KEYS[k]}, {o['workers']} threads")
            before = self.raw_limit(k)
            for s in o["sizes"]:
                # a fresh daemon per key and size: its peak RSS is this
                # row's, not what an earlier row left in malloc's arenas
                for exe, label in self.daemons():
                    self.start_daemon(k, exe)
                    try:
                        self.bench_pgpdecd(k, s, None, label)
                        self.stop_daemon(check=True)
                    finally:
                        self.stop_daemon()
            after = self.raw_limit(k)
            self.raws[k] = (before, after)
            raw = (before + after) / 2
            for r in self.rows:
                if r["key"] == k:
                    r["raw"] = r.get("raw_near") or raw
        for k in o["keys"]:
            raw = sum(self.raws[k]) / 2
            for s in o["sizes"]:
                for t in o["tools"]:
                    if t == "gocrypto":
                        self.bench_gocrypto(k, s, raw)
                    else:
                        self.bench_tool(t, k, s, raw)
        self.elapsed = time.time() - t_start
        self.table()
        if o["baseline"]:
            self.before_after()
        if o["json"]:
            with open(o["json"], "w") as f:
                json.dump({"workers": o["workers"], "raw": self.raws, "rows": self.rows,
                           "baseline": o["baseline"]}, f, indent=1)
        if 50 in o["levels"]:
            print()
            sizing(self.rows, o["workers"])

    def before_after(self):
        """One line per key, size and level: the ratio to the raw limit of
        the baseline's daemon and of this build's, round by round, and their
        medians."""
        print()
        print(f"Before/after (ratio to the raw limit; baseline {self.o['baseline']}, then this build, "
              f"{self.o['rounds']} round(s) alternating):")
        for k in self.o["keys"]:
            for s in self.o["sizes"]:
                for c in self.o["levels"]:
                    rs = [r for r in self.rows if (r["key"], r["size"], r["level"]) == (k, s, c)]
                    base = [r["msgs_per_s"] / r["raw"] for r in rs if r["label"].startswith(" (baseline)")]
                    head = [r["msgs_per_s"] / r["raw"] for r in rs if not r["label"].startswith(" (baseline)")]
                    pairs = ", ".join(f"{b:.3f} -> {h:.3f}" for b, h in zip(base, head))
                    print(f"  {KEYS[k]} {s} concurrency {c}: {pairs}; medians {statistics.median(base):.3f} -> "
                          f"{statistics.median(head):.3f}")

    def table(self):
        o = self.o
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        ver = lambda cmd: (subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines() or ["?"])[0]
        print(f"CPU: {cpu}, {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at the end; "
              f"{self.elapsed:.0f} s in all")
        print(f"pgpdecd: {o['workers']} workers on a Unix socket, default backends; messages by gpg "
              f"({ver(['gpg', '--version'])}), SEIPD v1 AES-256, compression {o['compress']}, ASCII text plaintext; MB = 10^6 bytes of plaintext")
        print("Raw limits (ops/s, {} threads, before/after the pgpdecd rows): ".format(o["workers"]) +
              "; ".join(f"{KEYS[k]} {'pd-rsa-limit openssl' if k.startswith('rsa') else 'openssl speed ecdhx25519'} "
                        f"{b:.0f}/{a:.0f}" for k, (b, a) in self.raws.items()))
        lab = lambda r: (r.get("label", "").strip() + " ").lstrip()
        near = [f"{KEYS[r['key']]} {lab(r)}{r['level']}: {r['raw_near']:.0f}" for r in self.rows if r.get("raw_near")]
        if near:
            print("Raw limit just before each 4k pgpdecd row (its ratio is to that figure; every other row's is "
                  "to the mean of before/after): " + "; ".join(near))
        print()
        print("| key | size | decryptor | msgs | msgs/s | MB/s | P50 ms | P99 ms | peak RSS MiB | of raw limit |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
        order = lambda r: (o["keys"].index(r["key"]), o["sizes"].index(r["size"]))
        for r in sorted(self.rows, key=order):
            rss = "" if r["rss_kb"] is None else f"{r['rss_kb'] / 1024:.1f}"
            print(f"| {KEYS[r['key']]} | {r['size']} | {r['tool']} | {r['n']} | {r['msgs_per_s']:.1f} | "
                  f"{r['mb_per_s']:.2f} | {r['p50']:.2f} | {r['p99']:.2f} | {rss} | "
                  f"{r['msgs_per_s'] / r['raw']:.3g} |")


def sizing(rows, workers):
    """The capacity table of contrib/haproxy/README.md: pgpdecd's messages/s
    at concurrency 50 divided by its workers (one per core here)."""
    print(f"Sizing: pgpdecd messages/s per core = messages/s at concurrency 50 / {workers} workers")
    print()
    print("| key | size | msgs/s per core | MB/s per core |")
    print("|---|---|---:|---:|")
    for r in rows:
        if r["tool"] == "pgpdecd, concurrency 50":
            print(f"| {KEYS[r['key']]} | {r['size']} | {r['msgs_per_s'] / workers:.1f} | "
                  f"{r['mb_per_s'] / workers:.1f} |")


def main():
    if sys.argv[1:2] == ["--sizing-from"] and len(sys.argv) == 3:
        j = json.load(open(sys.argv[2]))
        sizing(j["rows"], j["workers"])
        return
    o = parse_args(sys.argv[1:])
    work = tempfile.mkdtemp(prefix="pgpdecd-compare.")
    b = Bench(o, work)
    try:
        b.main()
    finally:
        b.stop_daemon()
        subprocess.run(["gpgconf", "--kill", "all"], env=b.env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if o["keep"]:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
