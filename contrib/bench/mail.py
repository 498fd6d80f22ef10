#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""contrib/bench/mail.py (run by contrib/bench-mail.sh): mail throughput of
the gateway side, every figure from one run on this machine, as one
Markdown table.

Two mails, encrypted by gpg (-z 0) to tests/data/keys/rsa2048.gpg:
  small   about 4 KiB: inline PGP in a text/plain mail
  1MB     about 1 MB: PGP/MIME whose entity is a multipart/mixed with a
          text part and a base64 attachment of random octets

For each mail and concurrency C, one after the other:
  daemon       `pgpdecd-client bench --concurrency C` on the bare armored
               ciphertext of the mail (what the daemon alone costs)
  client-mime  `pgpdecd-client --mime < mail > /dev/null`, C processes at a
               time (a pipe(8) transport's cost: process, MIME, daemon)
  postfix      the mail through a real Postfix smtpd (harness:
               tests/integration/postfix_harness.py) without a milter: C SMTP
               clients, a connection per mail, latency from connect to the
               reply to the end of DATA (the encrypted mail is queued as is)
  milter       the same through the smtpd running pgpdecd-milter (its
               default configuration) before the queue: the reply comes
               after the milter replaced the mail with its decryption
Queued mail goes to Postfix's discard(8); the queue is drained before each
row.  "cost x" is the per-mail cost against the daemon's at the same mail
and concurrency (daemon mails/s divided by the row's), so that the
overhead of the MIME layer, Postfix and the milter reads as a ratio.

Needs root, Debian's postfix, gpg, and the build (--build DIR)."""
import argparse
import json
import os
import platform
import re
import shutil
import smtplib
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SRC = Path(__file__).resolve().parents[2]


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return 0.0
    k = min(len(xs) - 1, max(0, int(round(p * (len(xs) - 1)))))
    return xs[k]


class Gpg:
    def __init__(self, home):
        self.home = Path(home)
        self.home.mkdir(mode=0o700)
        self.base = ["gpg", "--homedir", str(self.home), "--batch", "--yes", "--quiet",
                     "--trust-model", "always"]
        subprocess.run(self.base + ["--import", str(SRC / "tests/data/keys/rsa2048-public.gpg")],
                       check=True, capture_output=True)
        out = subprocess.run(self.base + ["--with-colons", "--list-keys"], check=True,
                             capture_output=True, text=True).stdout
        self.fpr = [l.split(":")[9] for l in out.splitlines() if l.startswith("fpr:")][-1]

    def encrypt(self, data):
        return subprocess.run(self.base + ["-z", "0", "--armor", "--encrypt", "-r", self.fpr + "!"],
                              input=data, check=True, capture_output=True).stdout

    def close(self):
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "all"],
                       capture_output=True)


HDR = ("From: Alice <alice@test.example>\r\nTo: bob@test.example\r\nSubject: bench\r\n"
       "Message-ID: <bench@test.example>\r\nDate: Tue, 01 Dec 2026 12:00:00 +0000\r\n"
       "MIME-Version: 1.0\r\n")


def crlf(b):
    return re.sub(rb"\r?\n", b"\r\n", b)


def make_mails(gpg, rnd):
    # small: 2400 octets of text -> about 4 KiB of mail
    words = [f"{rnd.getrandbits(24):06x}" for _ in range(400)]
    text = ""
    while len(text) < 2400:
        text += " ".join(rnd.choice(words) for _ in range(10)) + "\n"
    arm_s = gpg.encrypt(text.encode())
    small = crlf(HDR.encode() + b"Content-Type: text/plain; charset=us-ascii\r\n\r\n" + arm_s)
    # 1 MB: PGP/MIME, attachment of 540,000 random octets
    import base64
    att = base64.encodebytes(rnd.randbytes(540_000))
    inner = (b'Content-Type: multipart/mixed; boundary="inner"\r\n\r\n--inner\r\n'
             b"Content-Type: text/plain; charset=us-ascii\r\n\r\nThe figures are attached.\r\n"
             b"--inner\r\nContent-Type: application/octet-stream; name=\"figures.bin\"\r\n"
             b'Content-Disposition: attachment; filename="figures.bin"\r\n'
             b"Content-Transfer-Encoding: base64\r\n\r\n" + crlf(att) + b"--inner--\r\n")
    arm_l = gpg.encrypt(inner)
    large = crlf(HDR.encode() + b'Content-Type: multipart/encrypted; protocol="application/pgp-encrypted";'
                 b' boundary="outer"\r\n\r\n--outer\r\nContent-Type: application/pgp-encrypted\r\n\r\n'
                 b"Version: 1\r\n\r\n--outer\r\nContent-Type: application/octet-stream\r\n\r\n"
                 + arm_l + b"\r\n--outer--\r\n")
    return {"small": (small, arm_s), "1MB": (large, arm_l)}


def run_pool(n, conc, fn):
    """fn(i) -> latency seconds, n times, conc at once: (elapsed, [latency])."""
    lat = []
    lock = threading.Lock()

    def one(i):
        d = fn(i)
        with lock:
            lat.append(d)
    t0 = time.monotonic()
    with ThreadPoolExecutor(conc) as ex:
        for f in [ex.submit(one, i) for i in range(n)]:
            f.result()
    return time.monotonic() - t0, lat


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("PD_BUILD_DIR", str(SRC / "build")))
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                    help="daemon workers (default: the CPUs)")
    ap.add_argument("--small", default="1,4,16", help="concurrencies for the small mail")
    ap.add_argument("--large", default="1,4", help="concurrencies for the 1 MB mail")
    ap.add_argument("--requests", type=int, default=500,
                    help="small mails per row (1 MB: a fifth; concurrency 1: a third)")
    args = ap.parse_args()
    os.environ["PD_BUILD_DIR"] = str(Path(args.build).resolve())
    sys.path.insert(0, str(SRC / "tests" / "integration"))
    import mailgw
    from postfix_harness import Postfix
    if os.geteuid() != 0:
        sys.exit("bench-mail: needs root (a private Postfix: master(8) starts as root)")
    for p in (mailgw.DAEMON, mailgw.CLIENT, mailgw.MILTER):
        if not p.exists():
            sys.exit(f"bench-mail: {p} missing: build first (meson setup build && ninja -C build)")
    if not shutil.which("gpg") or not os.access("/usr/sbin/postfix", os.X_OK):
        sys.exit("bench-mail: needs gpg and Debian's postfix")

    import random
    root = mailgw.workdir("pd-bench-mail-")
    gpg = Gpg(root / "gnupg")
    daemon = milter = pf = None
    rows = []
    try:
        mails = make_mails(gpg, random.Random(11))
        for k, (m, c) in mails.items():
            (root / f"{k}.eml").write_bytes(m)
            (root / f"{k}.asc").write_bytes(c)
        daemon = mailgw.Daemon(root, root / "daemon.log", workers=args.workers).start()
        milter = mailgw.Milter(root, daemon.sock).start()
        pf = Postfix(main={"milter_default_action": "tempfail", "milter_protocol": "6",
                           "local_transport": "discard", "default_transport": "discard"})
        pf.smtpd.options["smtpd_milters"] = milter.spec
        plain_port = pf.add_smtpd("nomilter", options={"smtpd_milters": ""})
        pf.start()
        client = [str(mailgw.CLIENT), "--socket", str(daemon.sock)]

        def daemon_row(kind, conc, n):
            r = subprocess.run(client + ["bench", "--concurrency", str(conc), "--requests", str(n),
                                         "--json", str(root / f"{kind}.asc")],
                               check=True, capture_output=True, text=True)
            j = json.loads(r.stdout)
            assert j["ok"] == n, j
            return j["msgs_per_s"], j["latency_ms"]["p50"], j["latency_ms"]["p95"]

        def mime_one(kind):
            def fn(i):
                with open(root / f"{kind}.eml", "rb") as f:
                    t = time.monotonic()
                    r = subprocess.run(client + ["--mime"], stdin=f, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE)
                    d = time.monotonic() - t
                # exit 0 alone would also be a mail passed through undecrypted
                assert r.returncode == 0, r.stderr
                head = re.split(rb"\r?\n\r?\n", r.stdout, maxsplit=1)[0]
                assert re.search(rb"(?m)^X-Pgpdecd-Status: decrypted;", head), head[:2000]
                return d
            return fn

        def smtp_one(kind, port):
            data = mails[kind][0]

            def fn(i):
                t = time.monotonic()
                with smtplib.SMTP("127.0.0.1", port, "client.test.example", timeout=300) as s:
                    s.mail("alice@test.example")
                    s.rcpt("bob@test.example")
                    code, resp = s.data(data)
                    d = time.monotonic() - t
                assert code == 250, (code, resp)
                return d
            return fn

        def decrypted_count():
            return len(re.findall(r": written decrypted ", milter.text()))

        def drain():
            pf.wait_queue(lambda q: q == [], timeout=300)

        for kind, concs in (("small", args.small), ("1MB", args.large)):
            n_base = args.requests if kind == "small" else max(10, args.requests // 5)
            size = len(mails[kind][0])
            for conc in [int(c) for c in concs.split(",") if c]:
                n = max(n_base // (3 if conc == 1 else 1), conc * 4)
                dm = daemon_row(kind, conc, max(10, conc))  # warm-up
                dm = daemon_row(kind, conc, n)
                rows.append(("daemon", kind, size, conc, n, *dm, dm[0]))
                for path, fn in (("client --mime", mime_one(kind)),
                                 ("postfix", smtp_one(kind, plain_port)),
                                 ("postfix+milter", smtp_one(kind, pf.port))):
                    drain()
                    run_pool(conc, conc, fn)  # warm-up
                    drain()
                    before = decrypted_count()
                    el, lat = run_pool(n, conc, fn)
                    if path == "postfix+milter":
                        mailgw.wait_for(lambda: decrypted_count() - before >= n,
                                        "the milter's log lines", timeout=60)
                        assert decrypted_count() - before == n
                    rows.append((path, kind, size, conc, n, n / el, pct(lat, .5) * 1e3,
                                 pct(lat, .95) * 1e3, dm[0]))
        drain()
    finally:
        if pf:
            pf.stop()
        if milter:
            milter.stop()
        if daemon:
            daemon.stop()
        gpg.close()
        shutil.rmtree(root, ignore_errors=True)

    cpu = "?"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                   if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"# pgpdecd mail throughput: {os.cpu_count()} CPUs ({cpu}), Linux "
          f"{platform.release()}, daemon --workers {args.workers}, RSA-2048, "
          f"milter concurrency 8 (default)\n")
    print("| path | mail | octets | conc | mails | mails/s | p50 ms | p95 ms | cost x daemon |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for path, kind, size, conc, n, mps, p50, p95, dmps in rows:
        print(f"| {path} | {kind} | {size} | {conc} | {n} | {mps:.1f} | {p50:.1f} | {p95:.1f} | "
              f"{dmps / mps:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
