# SPDX-License-Identifier: MIT
"""The real daemon and pgpdecd-milter laid out as the packaged units lay
them out, for the Postfix mail tests (test_postfix_mail.py,
test_postfix_load.py) and contrib/bench/mail.py:

    Daemon(root, log)   pgpdecd on root/pgpdecd/pgpdecd.sock, mode 0660,
                        group TEST_GROUP, in a directory only that group
                        may enter (/run/pgpdecd); start() / stop() / restart
    Milter(root, daemon_sock, name="milter", **conf)
                        pgpdecd-milter with the default configuration but
                        for the paths: listen unix:root/NAME/milter.sock
                        (group postfix, mode 0660: smtpd runs as postfix),
                        socket = the daemon's, spool-dir; conf overrides
                        (keys as in the file: **{"on-failure": "pass"})
    LocalDaemon(sock, log)
                        pgpdecd on the path sock, default mode and group
    all: start() waits for the socket (failing if the process exits), stop()
    asserts a clean exit, text() is the log
    workdir(prefix)     a fresh 0755 directory under /var/tmp (the users
                        pipe(8) and smtpd run as must reach the sockets)

Every wait polls with a deadline; nothing sleeps a fixed time."""
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from postfix_harness import TEST_GROUP, ensure_group

SRC = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PD_BUILD_DIR", SRC / "build")).resolve()
DAEMON = BUILD / "daemon" / "pgpdecd"
CLIENT = BUILD / "client" / "pgpdecd-client"
MILTER = BUILD / "mail" / "pgpdecd-milter"
KEYS = SRC / "tests" / "data" / "keys"
SECRET_KEY = KEYS / "rsa2048.gpg"


def workdir(prefix="pd-mail-"):
    d = Path(tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("PD_POSTFIX_TMP", "/var/tmp")))
    d.chmod(0o755)
    return d


def gpg_home(d):
    """A fresh gpg home d/gnupg (mode 0700) and the gpg command line for
    it (batch, quiet, every key trusted): (home, argv)."""
    home = Path(d) / "gnupg"
    home.mkdir(mode=0o700)
    return home, ["gpg", "--homedir", str(home), "--batch", "--yes", "--quiet", "--trust-model", "always"]


def wait_for(pred, what, timeout=60, proc=None, log=None):
    end = time.monotonic() + timeout
    while not pred():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited {proc.returncode}\n"
                                 f"{Path(log).read_text(errors='replace') if log else ''}")
        if time.monotonic() > end:
            raise AssertionError(f"{what} within {timeout}s")
        time.sleep(0.02)


def _stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return "killed: no exit within 60s of SIGTERM"


def _check_exit(what, rc, log):
    text = Path(log).read_text(errors="replace")
    bad = [l for l in text.splitlines() if "Sanitizer" in l or "runtime error:" in l]
    assert rc == 0 and not bad, f"{what} exited {rc}:\n" + "\n".join(bad or text.splitlines()[-20:])


class _Proc:
    """A child logging to self.logpath; stop() sends SIGTERM and asserts a
    clean exit (0: a sanitizer report fails it)."""
    name = "?"
    proc = None

    def _spawn(self, argv, sock):
        if sock.exists():
            sock.unlink()
        self.log = open(self.logpath, "ab")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(sock.exists, f"the {self.name} socket", proc=self.proc, log=self.logpath)

    def stop(self):
        if self.proc:
            rc = _stop(self.proc)
            self.log.close()
            self.proc = None
            _check_exit(self.name, rc, self.logpath)

    def text(self):
        return self.logpath.read_text(errors="replace")


class Daemon(_Proc):
    name = "pgpdecd"

    def __init__(self, root, log, workers=2, extra=()):
        self.dir = Path(root) / "pgpdecd"
        self.dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        os.chown(self.dir, 0, ensure_group(TEST_GROUP))
        self.sock = self.dir / "pgpdecd.sock"
        self.logpath = Path(log)
        self.workers, self.extra = workers, list(extra)

    def start(self):
        self._spawn([str(DAEMON), "--listen", f"unix:{self.sock}", "--key", str(SECRET_KEY),
                     "--workers", str(self.workers), "--socket-group", TEST_GROUP,
                     "--socket-mode", "0660", *self.extra], self.sock)
        return self


class LocalDaemon(_Proc):
    """pgpdecd on the socket path sock, default mode and group (no root
    needed): the tests of pgpdecd-client --mime."""
    name = "pgpdecd"

    def __init__(self, sock, log, workers=2, extra=()):
        self.sock, self.logpath = Path(sock), Path(log)
        self.workers, self.extra = workers, list(extra)

    def start(self):
        self._spawn([str(DAEMON), "--listen", f"unix:{self.sock}", "--key", str(SECRET_KEY),
                     "--workers", str(self.workers), *self.extra], self.sock)
        return self


class Milter(_Proc):
    name = "pgpdecd-milter"

    def __init__(self, root, daemon_sock, name="milter", **conf):
        self.dir = Path(root) / name
        self.dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        self.sock = self.dir / "milter.sock"
        self.logpath = self.dir / "milter.log"
        lines = {"listen": f"unix:{self.sock}", "socket-group": "postfix", "socket-mode": "0660",
                 "socket": str(daemon_sock), "spool-dir": str(self.dir)}
        lines.update(conf)
        self.mode = int(lines["socket-mode"], 8)
        self.conf = self.dir / "milter.conf"
        self.conf.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))

    @property
    def spec(self):
        return f"unix:{self.sock}"

    def start(self):
        """--check-config must accept the file; the socket appears with the
        configured mode."""
        r = subprocess.run([str(MILTER), "-c", str(self.conf), "--check-config"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        self._spawn([str(MILTER), "-c", str(self.conf), "--foreground"], self.sock)
        mode = self.sock.stat().st_mode & 0o777
        assert mode == self.mode, f"{self.sock}: mode {mode:o}, configured {self.mode:o}"
        return self


def after_queue(pf, milter_spec, name="pgpdecrypt"):
    """contrib/postfix/README.md, "After the queue": an smtpd ("aq", the
    public one of the recipe) with content_filter=NAME:[127.0.0.1]:PORT, the
    smtp(8) client NAME, and the smtpd on PORT that runs the milter, with
    the recipe's -o lines.  Returns (public port, milter smtpd port)."""
    mport = pf.add_smtpd("pgpmilter", options={
        "content_filter": "",
        "smtpd_milters": milter_spec,
        "receive_override_options":
            "no_unknown_recipient_checks,no_header_body_checks,no_address_mappings",
        "smtpd_client_restrictions": "",
        "smtpd_helo_restrictions": "",
        "smtpd_sender_restrictions": "",
        "smtpd_relay_restrictions": "",
        "smtpd_recipient_restrictions": "permit_mynetworks,reject",
        "mynetworks": "127.0.0.0/8",
        "smtpd_authorized_xforward_hosts": "127.0.0.0/8"})
    pf.add_service(name, "smtp", maxproc="10",
                   options={"smtp_send_xforward_command": "yes",
                            "disable_mime_output_conversion": "yes",
                            "syslog_name": f"postfix-test/{name}"})
    aport = pf.add_smtpd("aq", options={"content_filter": f"{name}:[127.0.0.1]:{mport}",
                                        "smtpd_milters": ""})
    return aport, mport


def stop_all(pf, milter, daemon, root, artifacts):
    """Stop all three whatever fails, keep the milter's and daemon's logs in
    artifacts, remove root (unless PD_KEEP_POSTFIX=1); then raise the first
    failure (an unclean exit)."""
    errors = []
    for stop in (pf.stop, milter.stop, daemon.stop):
        try:
            stop()
        except Exception as e:  # noqa: BLE001 - collected, raised below
            errors.append(e)
    for p in (milter.logpath, daemon.logpath):
        if p.exists() and Path(artifacts) not in p.parents:
            shutil.copy(p, Path(artifacts) / p.name)
    if os.environ.get("PD_KEEP_POSTFIX", "") in ("", "0"):
        shutil.rmtree(root, ignore_errors=True)
    if errors:
        raise errors[0]
