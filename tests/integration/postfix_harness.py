# SPDX-License-Identifier: MIT
"""A real Postfix (Debian's `postfix` package) on loopback, for the mail
gateway tests (issue 11).  One `Postfix` object is one private Postfix
instance: its own config_directory, queue_directory and data_directory, its
own SMTP ports on 127.0.0.1 chosen at run time, its own log file.  The
system's Postfix (/etc/postfix, /var/spool/postfix, port 25) is never read
for configuration, written or signalled; only the shared read-only files
of the package are used (meta_directory = /etc/postfix: postfix-files,
postfix-script, dynamicmaps.cf; the daemons in /usr/lib/postfix/sbin).

Requirements: root (master(8) starts as root, pipe(8) changes user), the
`postfix` and `swaks` packages.  `require_postfix()` skips the calling test
when not root; a missing package FAILS it (contrib/check.sh installs both,
so a skip there would hide them missing) unless PD_SKIP_POSTFIX=1 is set,
which skips instead.

Quick use::

    from postfix_harness import Postfix, require_postfix

    def test_x(tmp_path):
        require_postfix()
        with Postfix(artifacts=tmp_path) as pf:      # start() ... stop()
            r = pf.send(mail_bytes, "alice@test.example", ["bob@test.example"])
            assert r.code == 250, r
            got = pf.wait_delivered(1)               # {"bob@test.example": [bytes]}

or the fixture `postfix_factory` (import it into the test module):
`pf = postfix_factory(main={...}); pf.add_pipe(...); pf.start()`; every
instance it made is stopped at teardown.

Layout (`pf.root`, a fresh directory under /var/tmp, mode 0755; see
"Why /var/tmp" below; removed by stop() unless PD_KEEP_POSTFIX=1)::

    etc/        config_directory: main.cf, master.cf, transport (texthash)
    spool/      queue_directory (Postfix creates its subdirectories)
    data/       data_directory (owned by postfix, 0700)
    maillog     maillog_file, written by postlogd(8): no syslog needed
    capture/    delivered mail: capture/RECIPIENT/NNN-QUEUEID.eml
    capture.sh  the capture transport's command

Mail flow.  mydestination = `pf.domain` ("test.example"); every address
there is accepted (local_recipient_maps empty) and delivered by the
`capture` pipe(8) transport (local_transport, one recipient per delivery,
running as nobody:nogroup) into capture/RECIPIENT/, byte for byte as
Postfix holds the message: the sender's headers and body with the
`Received:` header smtpd prepends (strip it with `strip_received()`), line
ends LF (SMTP's CRLF is Postfix's record end), nothing else added (no
Delivered-To, no Return-Path; local_header_rewrite_clients is empty so
Postfix neither rewrites addresses nor adds missing headers).  Any other
domain goes to `default_transport = error`: no mail ever leaves the
machine, no DNS lookup is made (smtp_dns_support_level = disabled,
smtpd_peername_lookup = no, relayhost empty).  Bounces and DSNs go to the
envelope sender: use a sender in pf.domain and read the DSN with
wait_delivered() like any other mail (null sender shown as MAILER-DAEMON).

Services of master.cf (all chroot n):

    pf.smtpd     "127.0.0.1:pf.port  inet smtpd", the main entrance
    pf.reinject  "127.0.0.1:pf.reinject_port inet smtpd" with
                 -o content_filter= -o smtpd_milters= (the re-injection port
                 of the after-queue pattern: a content filter hands mail
                 back here; to run a milter there, set
                 pf.reinject.options["smtpd_milters"] or use add_smtpd())
    plus the standard internal services (cleanup, qmgr, bounce, ...,
    postlog) and capture.

`pf.smtpd.options` / `pf.reinject.options` are dicts of `-o` overrides;
change them before start() (or call reload() after).

Parameters and services, before start() (or followed by reload()):

    Postfix(main={...})            main.cf parameters overriding the defaults
    pf.set(name=value, ...)        same, later
    pf.add_service(name, command, args=(), type="unix", unpriv="-",
                   maxproc="-", options={}, private="-", wakeup="-")
                                   -> Service (chroot is always n)
    pf.add_pipe(name, argv, user, flags="q", maxproc=10, recipient_limit=1,
                **attrs)           pipe(8): user="u" or "u:g" (pipe(8) runs
                                   the command with that one group only),
                                   attrs e.g. null_sender=""; sets
                                   NAME_destination_recipient_limit; an argv
                                   word with spaces needs Postfix's {...}
    pf.add_smtpd(name, options={}) -> port    another smtpd on 127.0.0.1
    pf.add_transport(address_or_domain, "transport:nexthop")
                                   texthash:etc/transport as transport_maps
    pf.after_queue_filter(name="scan", port=None)
                                   the classic after-queue pattern: the main
                                   smtpd gets content_filter=NAME:[127.0.0.1]:PORT
                                   and NAME is an smtp(8) client; PORT is
                                   pf.reinject_port unless given (e.g. an
                                   add_smtpd() port that runs a milter with
                                   options={"smtpd_milters": "inet:127.0.0.1:N"})

Milters: `pf.set(smtpd_milters="inet:127.0.0.1:PORT",
milter_default_action="tempfail")` (every smtpd but pf.reinject, which
clears it) or per service `pf.smtpd.options["smtpd_milters"] =
"unix:/path"` (the path must be reachable by user postfix: smtpd runs as
postfix, not chrooted).  A milter that is down, with tempfail, makes smtpd
answer 451 4.7.1 (SmtpResult.code) before the queue; after the queue the
smtp client is refused and the mail is deferred
(test_postfix_real.py::test_after_queue_pattern_and_milter_down).

Defaults worth knowing: queue_run_delay = minimal_backoff_time = 1s,
maximal_backoff_time = 2s (pass main={...} with longer ones to keep mail
in the deferred queue until flush()); message_size_limit = 0 (no limit);
smtpd_authorized_xforward_hosts = 127.0.0.0/8; lines longer than
line_length_limit (2048) are split by Postfix as always.

Running:

    start()                   writes the files, `postfix -c DIR check`
                              (any warning or fatal fails), `postconf -n`
                              (warnings such as unused parameters fail),
                              `postfix -c DIR start`, waits for the SMTP ports
    stop()                    `postfix -c DIR stop`, then abort, then SIGKILL
                              of master; copies maillog to artifacts/
    reload()                  rewrites the files, `postfix reload`, waits for it
    flush()                   `postqueue -c DIR -f`: retry deferred mail now
    send(mail, sender, recipients, port=None, wire="crlf", timeout=120)
                              -> SmtpResult(code, text, queue_id, rc, rcpt,
                              transcript): swaks with --no-data-fixup; `mail`
                              (bytes) is sent unchanged but for the SMTP
                              framing: wire="crlf" makes every line end CRLF
                              (what a real client sends), wire="raw" sends the
                              line ends as given (bare LF tests); lines
                              starting with "." are dot-stuffed, a missing
                              final line end is added.  code/text is the
                              reply to the end of DATA, or to the first
                              command refused (4xx/5xx at the banner, MAIL,
                              DATA, or RCPT when all were refused); rcpt is
                              {address: (code, text)} per RCPT
    wait_delivered(n, timeout=30, recipient=None)
                              waits until n messages (for recipient, or in
                              all) were captured; returns {recipient: [bytes]}
    delivered()               the same now; messages() -> [Delivered(recipient,
                              sender, queue_id, data, path)] in delivery order
    queue()                   `postqueue -j` objects (queue_name, queue_id,
                              recipients[{address, delay_reason}], ...)
    deferred()                those in the deferred queue
    wait_queue(pred, timeout) polls queue() until pred(queue) is true
    log(since=0) / log_mark() / wait_log(regex, timeout, since=0)
                              the maillog text; wait_log returns the match

Helpers: `free_port()`, `ensure_group(name)`, `ensure_user(name,
groups=())` (useradd --system, for pipe(8) users; added to the groups with
adduser when missing), `strip_received(data)`, `require_postfix()`, and
the names TEST_USER ("pgpmail-test") and TEST_GROUP ("pgpdecd-test") the
recipe tests use.

Why /var/tmp: Postfix's daemons reach the queue by relative paths, but the
commands pipe(8) runs as an unprivileged user (the capture script, the
pgpdecd client, its socket, an archive directory) are given absolute paths,
so every directory above them must be searchable by that user.  pytest's
tmp_path lives under /tmp/pytest-of-root (mode 0700) or meson's
--basetemp (0700), and loosening those would weaken them for every test;
a dedicated 0755 directory under /var/tmp (PD_POSTFIX_TMP overrides it) is
also short enough for Unix socket paths (108 octets).  Set
PD_KEEP_POSTFIX=1 to keep it after stop().  A new instance first stops and
removes those whose test process died (root/owner.pid) with their
master(8) still running, so a killed run leaves no Postfix listening for
long.

Why re-injection by SMTP: a content filter running as a pipe(8) user that
calls `sendmail -C DIR` (or postdrop) with a non-default config directory
is refused unless DIR is listed in alternate_config_directories of the
*system's* /etc/postfix/main.cf (set-gid postdrop trusts only that file).
Re-injecting over SMTP to pf.reinject_port needs nothing outside the
instance, so the harness never touches /etc/postfix.  (As root, `sendmail
-C pf.config_dir` works: the pickup service is configured.)
"""

import collections
import grp
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

TEST_USER = "pgpmail-test"
TEST_GROUP = "pgpdecd-test"
CAPTURE_USER = "nobody"
CAPTURE_GROUP = "nogroup"

POSTFIX = "/usr/sbin/postfix"
POSTQUEUE = "/usr/sbin/postqueue"
POSTCONF = "/usr/sbin/postconf"


class PostfixError(RuntimeError):
    pass


def require_postfix():
    """pytest.skip unless root; pytest.fail unless postfix and swaks are
    there (pytest.skip with PD_SKIP_POSTFIX=1)."""
    if os.getenv("PD_SKIP_POSTFIX", "") not in ("", "0"):
        pytest.skip("PD_SKIP_POSTFIX is set")
    if os.geteuid() != 0:
        pytest.skip("the real-Postfix tests need root (master(8), pipe(8) users)")
    missing = [f"postfix ({prog} missing)" for prog in
               (POSTFIX, POSTQUEUE, POSTCONF, "/usr/lib/postfix/sbin/master")
               if not os.access(prog, os.X_OK)][:1]
    if not shutil.which("swaks"):
        missing.append("swaks")
    if missing:
        pytest.fail(f"Debian package {', '.join(missing)} not installed (contrib/check.sh "
                    "installs it; PD_SKIP_POSTFIX=1 skips the real-Postfix tests)", pytrace=False)


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd, check=True, timeout=60, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise PostfixError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): "
                           f"{p.stdout.decode(errors='replace')}{p.stderr.decode(errors='replace')}")
    return p


def ensure_group(name):
    """The system group `name` (created with groupadd --system if missing);
    returns its gid."""
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        _run(["groupadd", "--system", name], check=False)  # racing another run is fine
        return grp.getgrnam(name).gr_gid


def ensure_user(name, groups=()):
    """The system user `name` with its own primary group of the same name
    (useradd --system --user-group, no home, no shell), a supplementary
    member of each of `groups` (added with `adduser USER GROUP`, as an
    administrator following the README would).  Returns the passwd entry."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        # check=False: another test run may be creating it at the same time
        _run(["useradd", "--system", "--user-group", "--no-create-home",
              "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name], check=False)
    for g in groups:
        ensure_group(g)
        if name not in grp.getgrnam(g).gr_mem:
            if shutil.which("adduser"):
                _run(["adduser", "--quiet", name, g], check=False)
            else:
                _run(["usermod", "-a", "-G", g, name], check=False)
            if name not in grp.getgrnam(g).gr_mem:
                raise PostfixError(f"could not add {name} to group {g}")
    return pwd.getpwnam(name)


def strip_received(data):
    """`data` without the Received: header fields at its top (the ones
    Postfix prepends), continuation lines included."""
    lines = data.split(b"\n")
    i = 0
    while i < len(lines) and lines[i].lower().startswith(b"received:"):
        i += 1
        while i < len(lines) and lines[i][:1] in (b" ", b"\t"):
            i += 1
    return b"\n".join(lines[i:])


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def reap_stale(base):
    """Stop and remove the instances under base whose test process is gone
    (a killed or timed-out test run leaves its master running).  Instances
    of live processes, other test runs included, are left alone."""
    for d in Path(base).glob("pd-postfix-*"):
        try:
            owner = int((d / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if _pid_alive(owner):
            continue
        try:
            pid = int((d / "spool" / "pid" / "master.pid").read_text().split()[0])
            running = _pid_alive(pid) and b"master" in Path(f"/proc/{pid}/comm").read_bytes()
        except (OSError, ValueError, IndexError):
            running = False
        if not running:
            continue  # stopped, kept with PD_KEEP_POSTFIX=1: left for reading
        _run([POSTFIX, "-c", d / "etc", "abort"], check=False)
        time.sleep(0.2)
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(d, ignore_errors=True)


class Service:
    """One master.cf entry.  `options` are its -o overrides (a dict)."""

    def __init__(self, name, type, command, args=(), private="-", unpriv="-", chroot="n",
                 wakeup="-", maxproc="-", options=None):
        self.name, self.type, self.command = name, type, command
        self.args = list(args)
        self.private, self.unpriv, self.chroot = private, unpriv, chroot
        self.wakeup, self.maxproc = wakeup, maxproc
        self.options = dict(options or {})

    def render(self):
        head = f"{self.name} {self.type} {self.private} {self.unpriv} {self.chroot} " \
               f"{self.wakeup} {self.maxproc} {self.command}"
        out = [head]
        for k, v in self.options.items():
            # "-o name=" clears a parameter; a value with spaces is braced
            v = str(v)
            out.append(f"  -o {{ {k} = {v} }}" if " " in v else f"  -o {k}={v}")
        for a in self.args:
            out.append(f"  {a}")
        return "\n".join(out) + "\n"


# The internal services of Debian's master.cf, none chrooted.
_INTERNAL = [
    ("pickup", "unix", "n", "-", "1", "1", "pickup"),
    ("cleanup", "unix", "n", "-", "-", "0", "cleanup"),
    ("qmgr", "unix", "n", "-", "1", "1", "qmgr"),
    ("rewrite", "unix", "-", "-", "-", "-", "trivial-rewrite"),
    ("bounce", "unix", "-", "-", "-", "0", "bounce"),
    ("defer", "unix", "-", "-", "-", "0", "bounce"),
    ("trace", "unix", "-", "-", "-", "0", "bounce"),
    ("verify", "unix", "-", "-", "-", "1", "verify"),
    ("flush", "unix", "n", "-", "1000?", "0", "flush"),
    ("proxymap", "unix", "-", "-", "-", "-", "proxymap"),
    ("proxywrite", "unix", "-", "-", "-", "1", "proxymap"),
    ("smtp", "unix", "-", "-", "-", "-", "smtp"),
    ("relay", "unix", "-", "-", "-", "-", "smtp"),
    ("showq", "unix", "n", "-", "-", "-", "showq"),
    ("error", "unix", "-", "-", "-", "-", "error"),
    ("retry", "unix", "-", "-", "-", "-", "error"),
    ("discard", "unix", "-", "-", "-", "-", "discard"),
    ("anvil", "unix", "-", "-", "-", "1", "anvil"),
    ("scache", "unix", "-", "-", "-", "1", "scache"),
    ("postlog", "unix-dgram", "n", "-", "-", "1", "postlogd"),
]

CAPTURE_SH = r"""#!/bin/sh
# capture DIR SENDER RECIPIENT QUEUE_ID: the message on stdin into
# DIR/RECIPIENT/SEQ-QUEUE_ID.eml (renamed into place when complete), the
# envelope sender beside it in .sender
set -e
r=$(printf '%s' "$3" | tr '/' '_')
mkdir -p "$1/$r"
f="$1/$r/$(date +%s%N)-$4"
cat > "$f.tmp"
printf '%s\n' "$2" > "$f.sender"
mv "$f.tmp" "$f.eml"
"""

Delivered = collections.namedtuple("Delivered", "recipient sender queue_id data path")


class SmtpResult(collections.namedtuple("SmtpResult", "code text queue_id rc rcpt transcript")):
    """code: int SMTP reply code to the end of DATA, or, when the data was
    not sent, of the first refusal (banner, MAIL, DATA, or RCPT when every
    recipient was refused); 0 when no reply was read.  text: that reply's
    text (lines joined by newline, without the codes).  queue_id: from
    "250 2.0.0 Ok: queued as ID", or None.  rc: swaks's exit status.
    rcpt: {address: (code, text)} of each RCPT.  transcript: swaks's output
    (the data itself summarized)."""

    def __str__(self):
        return f"{self.code} {self.text} (swaks rc {self.rc})\n{self.transcript}"


class Postfix:
    """One private Postfix instance; see the module docstring."""

    def __init__(self, main=None, domain="test.example", artifacts=None, root=None):
        self.domain = domain
        self.artifacts = Path(artifacts) if artifacts else None
        base = os.environ.get("PD_POSTFIX_TMP", "/var/tmp")
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="pd-postfix-", dir=base))
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        reap_stale(self.root.parent)
        (self.root / "owner.pid").write_text(f"{os.getpid()}\n")
        for p in [self.root, *self.root.parents]:
            if not os.stat(p).st_mode & 0o001:
                raise PostfixError(f"{p} is not searchable by others: pipe(8) users cannot "
                                   "reach the instance (set PD_POSTFIX_TMP)")
        self.config_dir = self.root / "etc"
        self.queue_dir = self.root / "spool"
        self.data_dir = self.root / "data"
        self.capture_dir = self.root / "capture"
        self.maillog = self.root / "maillog"
        self.transport_file = self.config_dir / "transport"
        for d in (self.config_dir, self.queue_dir):
            d.mkdir(mode=0o755, exist_ok=True)
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        pf = pwd.getpwnam("postfix")
        os.chown(self.data_dir, pf.pw_uid, pf.pw_gid)
        self.capture_dir.mkdir(mode=0o755, exist_ok=True)
        cap = pwd.getpwnam(CAPTURE_USER)
        os.chown(self.capture_dir, cap.pw_uid, grp.getgrnam(CAPTURE_GROUP).gr_gid)
        self.capture_sh = self.root / "capture.sh"
        self.capture_sh.write_text(CAPTURE_SH)
        os.chmod(self.capture_sh, 0o755)

        self.port = free_port()
        self.reinject_port = free_port()
        self.transports = {}
        self.params = {
            "compatibility_level": "3.6",
            "config_directory": str(self.config_dir),
            "queue_directory": str(self.queue_dir),
            "data_directory": str(self.data_dir),
            "meta_directory": "/etc/postfix",
            "maillog_file": str(self.maillog),
            "syslog_name": "postfix-test",
            "inet_interfaces": "loopback-only",
            "inet_protocols": "ipv4",
            "smtp_bind_address": "127.0.0.1",
            "myhostname": f"mail.{domain}",
            "mydomain": domain,
            "myorigin": domain,
            "mydestination": f"{domain}, localhost",
            "mynetworks": "127.0.0.0/8",
            "relay_domains": "",
            "relayhost": "",
            "local_recipient_maps": "",
            "local_transport": "capture",
            "default_transport": "error:no mail leaves the test instance",
            "capture_destination_recipient_limit": "1",
            "alias_maps": "",
            "alias_database": "",
            "smtpd_relay_restrictions": "permit_mynetworks, reject_unauth_destination",
            "smtpd_peername_lookup": "no",
            "smtp_dns_support_level": "disabled",
            "smtp_host_lookup": "native",
            "lmtp_host_lookup": "native",
            "local_header_rewrite_clients": "",
            "biff": "no",
            "message_size_limit": "0",
            "queue_run_delay": "1s",
            "minimal_backoff_time": "1s",
            "maximal_backoff_time": "2s",
            "in_flow_delay": "0",
            "smtpd_error_sleep_time": "0",
            "smtp_connect_timeout": "5s",
            "smtpd_authorized_xforward_hosts": "127.0.0.0/8",
        }
        # pipe(8) commands of a sanitizer build need the sanitizer options:
        # postfix(1) imports only import_environment, pipe(8) passes only
        # export_environment
        san = [v for v in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS") if v in os.environ]
        if san:
            self.params["import_environment"] = " ".join(
                ["MAIL_CONFIG", "MAIL_DEBUG", "MAIL_LOGTAG", "TZ", "LANG=C", "POSTLOG_SERVICE",
                 "POSTLOG_HOSTNAME", *san])
            self.params["export_environment"] = " ".join(["TZ", "MAIL_CONFIG", "LANG", *san])
        self.params.update({k: str(v) for k, v in (main or {}).items()})
        self.services = collections.OrderedDict()
        self.smtpd = self.add_service(f"127.0.0.1:{self.port}", "smtpd", type="inet", private="n")
        self.reinject = self.add_service(f"127.0.0.1:{self.reinject_port}", "smtpd", type="inet",
                                         private="n",
                                         options={"syslog_name": "postfix-test/reinject",
                                                  "content_filter": "",
                                                  "smtpd_milters": "",
                                                  "receive_override_options":
                                                      "no_unknown_recipient_checks"})
        for name, type_, private, unpriv, wakeup, maxproc, cmd in _INTERNAL:
            self.add_service(name, cmd, type=type_, private=private, unpriv=unpriv,
                             wakeup=wakeup, maxproc=maxproc)
        self.add_pipe("capture", [str(self.capture_sh), str(self.capture_dir), "${sender}",
                                  "${recipient}", "${queue_id}"],
                      user=f"{CAPTURE_USER}:{CAPTURE_GROUP}", flags="", maxproc="-")
        self.running = False

    # -- configuration --------------------------------------------------

    def set(self, **params):
        """main.cf parameters (use reload() when running)."""
        self.params.update({k: str(v) for k, v in params.items()})

    def add_service(self, name, command, args=(), type="unix", private="-", unpriv="-",
                    wakeup="-", maxproc="-", options=None):
        s = Service(name, type, command, args, private=private, unpriv=unpriv, wakeup=wakeup,
                    maxproc=maxproc, options=options)
        self.services[name] = s
        return s

    def add_pipe(self, name, argv, user, flags="q", maxproc=10, recipient_limit=1, **attrs):
        """A pipe(8) transport NAME running argv (a list: no shell; Postfix
        expands ${sender}, ${recipient}, ${queue_id}, ...) as user ("u" or
        "u:g").  attrs: more pipe(8) attributes (null_sender="", size=...)."""
        a = [f"flags={flags}"] if flags else []
        a.append(f"user={user}")
        a += [f"{k}={v}" for k, v in attrs.items()]
        a.append("argv=" + " ".join(str(x) for x in argv))
        s = self.add_service(name, "pipe", [" ".join(a)], unpriv="n", maxproc=maxproc)
        if recipient_limit:
            self.params[f"{name}_destination_recipient_limit"] = str(recipient_limit)
        return s

    def add_smtpd(self, name, options=None):
        """Another smtpd on 127.0.0.1:PORT (a free port); returns PORT.
        The service is pf.services[f"127.0.0.1:{PORT}"]."""
        port = free_port()
        opts = {"syslog_name": f"postfix-test/{name}"}
        opts.update(options or {})
        self.add_service(f"127.0.0.1:{port}", "smtpd", type="inet", private="n", options=opts)
        return port

    def add_transport(self, key, value):
        """transport_maps entry (texthash: no postmap needed)."""
        self.transports[key] = value
        self.params["transport_maps"] = f"texthash:{self.transport_file}"

    def after_queue_filter(self, name="scan", port=None):
        """Main smtpd -> queue -> smtp client NAME -> 127.0.0.1:PORT
        (pf.reinject_port by default) -> queue -> delivery."""
        port = port or self.reinject_port
        self.add_service(name, "smtp", maxproc="10",
                         options={"smtp_send_xforward_command": "yes",
                                  "disable_mime_output_conversion": "yes",
                                  "syslog_name": f"postfix-test/{name}"})
        self.smtpd.options["content_filter"] = f"{name}:[127.0.0.1]:{port}"
        return port

    def write_config(self):
        main = "".join(f"{k} = {v}\n" for k, v in self.params.items())
        (self.config_dir / "main.cf").write_text(
            "# written by tests/integration/postfix_harness.py\n" + main)
        (self.config_dir / "master.cf").write_text(
            "# written by tests/integration/postfix_harness.py\n"
            + "".join(s.render() for s in self.services.values()))
        self.transport_file.write_text("".join(f"{k} {v}\n" for k, v in self.transports.items()))

    # -- running --------------------------------------------------------

    def _pf(self, *args, check=True, timeout=60):
        return _run([POSTFIX, "-c", self.config_dir, *args], check=check, timeout=timeout)

    def check(self):
        self.write_config()
        out = []
        for cmd in ([POSTFIX, "-c", self.config_dir, "check"],
                    [POSTCONF, "-c", self.config_dir, "-n"],
                    [POSTCONF, "-c", self.config_dir, "-M"]):
            p = _run(cmd, check=False)
            text = (p.stdout + p.stderr).decode(errors="replace")
            bad = [l for l in text.splitlines() if re.match(r"^[\w/.-]+(\[\d+\])?: (warning|fatal|error): ", l)]
            if p.returncode != 0 or bad:
                out.append(f"{' '.join(map(str, cmd))} ({p.returncode}):\n" + "\n".join(bad or [text]))
        # postfix check logs its warnings to the maillog too
        logged = [l for l in self.log().splitlines() if re.search(r"postfix-script.*(warning|fatal)", l)]
        if out or logged:
            raise PostfixError("configuration refused:\n" + "\n".join(out + logged))

    def start(self, timeout=30):
        self.check()
        mark = self.log_mark()
        p = self._pf("start", check=False)
        if p.returncode != 0:
            raise PostfixError(f"postfix start failed: {(p.stdout + p.stderr).decode()}\n"
                               f"{self.log(mark)}")
        self.running = True
        try:
            self.wait_log(r"postfix-test/master\[\d+\]: daemon started", timeout, since=mark)
            for port in self.smtp_ports():
                self._wait_port(port, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def smtp_ports(self):
        return [int(s.name.rsplit(":", 1)[1]) for s in self.services.values() if s.type == "inet"]

    def _wait_port(self, port, timeout):
        end = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.settimeout(timeout)
                    # any greeting (a milter that is down may make it 421)
                    if re.match(rb"^\d{3}", s.recv(4)):
                        s.sendall(b"QUIT\r\n")
                        return
            except OSError:
                pass
            if time.monotonic() > end:
                raise PostfixError(f"smtpd on port {port} not answering\n{self.log()}")
            time.sleep(0.05)

    def reload(self, timeout=30):
        mark = self.log_mark()
        self.check()
        self._pf("reload")
        self.wait_log(r"postfix-test/master\[\d+\]: reload", timeout, since=mark)
        for port in self.smtp_ports():
            self._wait_port(port, timeout)

    def master_pid(self):
        try:
            return int((self.queue_dir / "pid" / "master.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self):
        if self.running:
            pid = self.master_pid()
            self._pf("stop", check=False, timeout=60)
            end = time.monotonic() + 10
            while pid and _pid_alive(pid) and time.monotonic() < end:
                time.sleep(0.05)
            if pid and _pid_alive(pid):
                self._pf("abort", check=False)
                time.sleep(0.5)
            if pid and _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
            self.running = False
        if self.artifacts:
            self.artifacts.mkdir(parents=True, exist_ok=True)
            if self.maillog.exists():
                shutil.copy(self.maillog, self.artifacts / "maillog")
            for name in ("main.cf", "master.cf"):
                if (self.config_dir / name).exists():
                    shutil.copy(self.config_dir / name, self.artifacts / name)
        if os.environ.get("PD_KEEP_POSTFIX", "") in ("", "0"):
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def flush(self):
        """postqueue -f: every deferred message is tried again now."""
        _run([POSTQUEUE, "-c", self.config_dir, "-f"])

    # -- sending --------------------------------------------------------

    @staticmethod
    def smtp_data(mail, wire="crlf"):
        """The DATA payload for swaks --no-data-fixup: dot-stuffed, the
        final line end ensured, and the terminating "." (swaks adds its
        CRLF)."""
        if wire == "crlf":
            data = re.sub(rb"\r?\n", b"\r\n", mail)
            if not data.endswith(b"\r\n"):
                data += b"\r\n"
        elif wire == "raw":
            data = mail if mail.endswith(b"\n") else mail + b"\r\n"
        else:
            raise ValueError(wire)
        data = re.sub(rb"(^|\n)\.", rb"\1..", data)
        return data + b"."

    def send(self, mail, sender, recipients, port=None, wire="crlf", timeout=120, extra=()):
        """Send `mail` (bytes) with swaks; returns an SmtpResult.  sender ""
        is the null sender.  extra: more swaks options."""
        if isinstance(recipients, str):
            recipients = [recipients]
        cmd = ["swaks", "--server", f"127.0.0.1:{port or self.port}",
               "--from", sender or "<>", "--to", ",".join(recipients),
               "--helo", "client.test.example", "--timeout", str(timeout),
               "--no-data-fixup", "--suppress-data", "--data", "-", *extra]
        p = subprocess.run(cmd, input=self.smtp_data(mail, wire), capture_output=True,
                           timeout=timeout + 30)
        return self._parse_swaks(p.stdout.decode(errors="replace")
                                 + p.stderr.decode(errors="replace"), p.returncode)

    @staticmethod
    def _parse_swaks(out, rc):
        # swaks: " -> CMD" client lines, "<-  NNN text" / "<** NNN text" server
        # replies (** on an unexpected code); the data is summarized by
        # --suppress-data as " -> N lines sent"
        exchanges, cmd, reply = [], None, []
        for line in out.splitlines():
            m = re.match(r"^ ?(->|<-|<\*\*) ?(.*)$", line)
            if not m:
                continue
            kind, rest = m.group(1), m.group(2).strip()
            if kind == "->":
                if reply or cmd is not None:
                    exchanges.append((cmd, reply))
                reply, cmd = [], rest
            else:
                r = re.match(r"^(\d{3})[- ]?(.*)$", rest)
                if r:
                    reply.append((int(r.group(1)), r.group(2)))
        if reply or cmd is not None:
            exchanges.append((cmd, reply))
        rcpt, chosen = {}, None
        for c, r in exchanges:
            if not r:
                continue
            m = re.match(r"(?i)^RCPT TO:<(.*)>", c or "")
            if m:
                rcpt[m.group(1)] = (r[-1][0], "\n".join(t for _, t in r))
            if c is not None and re.match(r"^\d+ lines? sent$", c):
                chosen = r  # the reply to the end of DATA
        if chosen is None:
            # refused before the data: the first 4xx/5xx (banner, MAIL, DATA)
            fails = [r for c, r in exchanges if r and r[-1][0] >= 400
                     and not (c or "").upper().startswith("QUIT")
                     and not re.match(r"(?i)^RCPT", c or "")]
            fails = fails or [r for c, r in exchanges if r and r[-1][0] >= 400]
            chosen = fails[0] if fails else [(0, "no reply to the data")]
        text = "\n".join(t for _, t in chosen)
        q = re.search(r"queued as ([0-9A-Za-z]+)", text)
        return SmtpResult(chosen[-1][0], text, q.group(1) if q else None, rc, rcpt, out)

    # -- reading --------------------------------------------------------

    def messages(self):
        out = []
        if not self.capture_dir.exists():
            return out
        for d in sorted(self.capture_dir.iterdir()):
            for f in sorted(d.glob("*.eml")):
                seq_qid = f.stem.split("-", 1)
                snd = f.with_suffix(".sender")
                out.append((seq_qid[0], Delivered(d.name, snd.read_text().rstrip("\n")
                                                  if snd.exists() else None,
                                                  seq_qid[1] if len(seq_qid) > 1 else None,
                                                  f.read_bytes(), f)))
        return [m for _, m in sorted(out, key=lambda x: x[0])]

    def delivered(self, recipient=None):
        res = collections.OrderedDict()
        for m in self.messages():
            if recipient is None or m.recipient == recipient:
                res.setdefault(m.recipient, []).append(m.data)
        return dict(res)

    def wait_delivered(self, n, timeout=30, recipient=None):
        end = time.monotonic() + timeout
        while True:
            got = self.delivered(recipient)
            if sum(len(v) for v in got.values()) >= n:
                return got
            if time.monotonic() > end:
                raise PostfixError(f"{n} deliveries expected within {timeout}s, got "
                                   f"{ {k: len(v) for k, v in got.items()} }; queue: "
                                   f"{self.queue()}\nlog:\n{self.log()}")
            time.sleep(0.05)

    def queue(self):
        p = _run([POSTQUEUE, "-c", self.config_dir, "-j"], check=False)
        return [json.loads(l) for l in p.stdout.decode().splitlines() if l.strip()]

    def deferred(self):
        return [q for q in self.queue() if q.get("queue_name") == "deferred"]

    def wait_queue(self, pred, timeout=30):
        end = time.monotonic() + timeout
        while True:
            q = self.queue()
            if pred(q):
                return q
            if time.monotonic() > end:
                raise PostfixError(f"queue condition not met within {timeout}s: {q}\n"
                                   f"log:\n{self.log()}")
            time.sleep(0.1)

    def log_mark(self):
        try:
            return self.maillog.stat().st_size
        except FileNotFoundError:
            return 0

    def log(self, since=0):
        try:
            with open(self.maillog, "rb") as f:
                f.seek(since)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_log(self, pattern, timeout=30, since=0):
        rx = re.compile(pattern, re.M)
        end = time.monotonic() + timeout
        while True:
            m = rx.search(self.log(since))
            if m:
                return m
            if time.monotonic() > end:
                raise PostfixError(f"no log line /{pattern}/ within {timeout}s:\n{self.log(since)}")
            time.sleep(0.05)


@pytest.fixture
def postfix_factory(tmp_path):
    """make(**kwargs) -> a configured, not yet started Postfix (kwargs as
    for Postfix(); artifacts go to tmp_path/postfix-N); all are stopped at
    teardown."""
    made = []

    def make(**kw):
        kw.setdefault("artifacts", tmp_path / f"postfix-{len(made)}")
        pf = Postfix(**kw)
        made.append(pf)
        return pf

    require_postfix()
    yield make
    for pf in made:
        pf.stop()
