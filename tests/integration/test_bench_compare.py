# SPDX-License-Identifier: MIT
"""Smoke run of contrib/bench/compare.sh (the side-by-side benchmark) on
tiny settings: the real daemon, gpg, sq, sqop, rnp, gosop, go-crypto built
offline from Debian's packages, pd-rsa-limit and `openssl speed`.  The table
must have every column, a row per decryptor, key and size, and a sane
number in every cell (and the JSON it writes must agree with it)."""

import json
import os
import re
import subprocess

import pytest

from conftest import BUILD

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPARE = os.path.join(SRC, "contrib", "bench", "compare.sh")
COLUMNS = ["key", "size", "decryptor", "msgs", "msgs/s", "MB/s", "P50 ms", "P99 ms", "peak RSS MiB",
           "of raw limit"]
LEVELS = [1, 50]
DECRYPTORS = ([f"pgpdecd, concurrency {c}" for c in LEVELS] +
              [f"{t}, one process per message" for t in ("gpg", "sq", "sqop", "rnp", "gosop")] +
              ["go-crypto in-process, 2 goroutines"])
SIZE = 4096


def test_compare_quick_table(tmp_path):
    js = tmp_path / "compare.json"
    p = subprocess.run(["sh", COMPARE, "--quick", "--keys", "rsa2048 cv25519", "--sizes", "4k",
                        "--levels", " ".join(map(str, LEVELS)), "--runs", "3", "--seconds", "0.3",
                        "--messages", "2", "--workers", "2", "--json", str(js)],
                       env=dict(os.environ, BUILD=str(BUILD)), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    raw = next(l for l in lines if l.startswith("Raw limits"))
    assert re.search(r"RSA-2048 pd-rsa-limit openssl \d+/\d+", raw), raw
    assert re.search(r"cv25519 openssl speed ecdhx25519 \d+/\d+", raw), raw
    # the sizing table (contrib/haproxy/README.md) follows the main one
    cut = lines.index(next(l for l in lines if l.startswith("Sizing: ")))
    sizing = [[c.strip() for c in l.strip("|").split("|")] for l in lines[cut:] if l.startswith("| ")]
    table = [l for l in lines[:cut] if l.startswith("|")]
    head = [c.strip() for c in table[0].strip("|").split("|")]
    assert head == COLUMNS
    assert set(table[1]) <= set("|-:")
    rows = [[c.strip() for c in l.strip("|").split("|")] for l in table[2:]]
    seen = set()
    for r in rows:
        assert len(r) == len(COLUMNS), r
        key, size, who = r[0], r[1], r[2]
        n, rate, mb, p50, p99, rss, ratio = (float(x) for x in r[3:])
        seen.add((key, size, who))
        assert size == "4k"
        assert n >= 2 and rate > 0 and p50 > 0, r
        assert p50 <= p99, r
        # MB/s is messages/s times the plaintext size (printed to 2 places)
        assert abs(mb - rate * SIZE / 1e6) <= 0.01 + 0.01 * mb, r
        # a process or daemon that decrypts an RSA or X25519 message needs
        # more than 1 MiB and (here) far less than 2 GiB
        assert 1 < rss < 2048, r
        # a share of the raw private-key rate; no decryptor is 5 x faster
        # than the raw operation it needs once per message
        assert 0 < ratio < 5, r
    # the daemon at concurrency 50 beats every process-per-message tool on
    # the same key (by 10-100 times when the machine is quiet)
    for key in ("RSA-2048", "cv25519"):
        mine = [float(r[4]) for r in rows if r[0] == key and r[2] == "pgpdecd, concurrency 50"]
        cli = [float(r[4]) for r in rows if r[0] == key and "one process per message" in r[2]]
        assert mine and len(cli) == 5 and mine[0] > max(cli), (key, mine, cli)
    want = {(k, "4k", d) for k in ("RSA-2048", "cv25519") for d in DECRYPTORS}
    assert seen == want, (seen ^ want)
    assert len(rows) == len(want)
    # per core: the concurrency-50 row's messages/s over the 2 workers
    assert sizing[0] == ["key", "size", "msgs/s per core", "MB/s per core"]
    assert len(sizing) == 3, sizing
    for key, size, per_core, mb_core in sizing[1:]:
        r = next(r for r in rows if (r[0], r[1], r[2]) == (key, size, "pgpdecd, concurrency 50"))
        assert abs(float(per_core) - float(r[4]) / 2) <= 0.1, (r, per_core)
        assert float(mb_core) > 0
    j = json.loads(js.read_text())
    assert len(j["rows"]) == len(rows)
    for jr in j["rows"]:
        assert jr["rss_kb"] > 1024 and jr["msgs_per_s"] > 0


def test_compare_refuses_unknown_options():
    p = subprocess.run(["sh", COMPARE, "--no-such-option"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 64 and "unknown option --no-such-option" in p.stderr
    p = subprocess.run(["sh", COMPARE, "--keys", "rsa1024"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "unknown key rsa1024" in p.stderr


def test_compare_baseline_alternates_daemons(tmp_path):
    """--baseline DIR --rounds 2 with --tools "": the daemon of DIR and this
    build's, alternating, and no other tool; the before/after line gives
    each round's two ratios, which are the table's.  The baseline here is a
    copy of this build's daemon under another directory (the rows must come
    from it: its path is in the line), so both columns are real runs."""
    base = tmp_path / "base"
    (base / "daemon").mkdir(parents=True)
    exe = base / "daemon" / "pgpdecd"
    exe.write_bytes((BUILD / "daemon" / "pgpdecd").read_bytes())
    exe.chmod(0o755)
    p = subprocess.run(["sh", COMPARE, "--keys", "cv25519", "--sizes", "4k", "--levels", "1", "--tools", "",
                        "--seconds", "0.3", "--messages", "2", "--baseline", str(base), "--rounds", "2"],
                       env=dict(os.environ, BUILD=str(BUILD)), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    rows = [[c.strip() for c in l.strip("|").split("|")] for l in lines
            if l.startswith("| cv25519 | 4k | ")]
    who = [r[2] for r in rows]
    assert who == ["pgpdecd (baseline), concurrency 1", "pgpdecd, concurrency 1",
                   "pgpdecd (baseline) #2, concurrency 1", "pgpdecd #2, concurrency 1"], who
    ratio = {r[2]: float(r[9]) for r in rows}
    i = lines.index(next(l for l in lines if l.startswith("Before/after")))
    assert str(base) in lines[i] and "2 round(s)" in lines[i], lines[i]
    m = re.fullmatch(r"  cv25519 4k concurrency 1: ([\d.]+) -> ([\d.]+), ([\d.]+) -> ([\d.]+); "
                     r"medians ([\d.]+) -> ([\d.]+)", lines[i + 1])
    assert m, lines[i + 1]
    got = [float(x) for x in m.groups()[:4]]
    want = [ratio[w] for w in who]
    assert all(abs(g - w) <= 0.0015 + 0.005 * w for g, w in zip(got, want)), (got, want)
    # the sizing table counts this build's first round only
    sizing = [l for l in lines if l.startswith("Sizing: ")]
    assert not sizing  # no concurrency 50 among the levels
    p = subprocess.run(["sh", COMPARE, "--rounds", "2"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "--rounds goes with --baseline" in p.stderr, p.stderr
    p = subprocess.run(["sh", COMPARE, "--baseline", str(tmp_path / "nothing")], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 1 and "--baseline: no " in p.stderr, p.stderr
