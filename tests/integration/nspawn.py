# SPDX-License-Identifier: MIT
"""A Debian 12 tree booted by systemd-nspawn: a real PID-1 systemd for the
packaged units (test_systemd_real.py).

    debian_mirror()          the mirror apt is configured with for bookworm
                             main (PD_DEBIAN_MIRROR overrides it)
    package_deps(debs)       the Debian packages the .deb files depend on
                             (first alternative; versions dropped)
    debootstrap(root, pkgs)  debootstrap --variant=minbase bookworm with
                             systemd, systemd-sysv and pkgs; returns seconds
    Machine(root, log)       boot() it with systemd-nspawn -b, then run()
                             commands inside (nsenter into every namespace of
                             its PID 1, as root or as a user), systemctl(),
                             journal(); poweroff() stops it cleanly

How it boots where the host has no systemd (a container with a cgroup v1
hierarchy, as CI's machines are): --register=no and --keep-unit, so that
nspawn asks no systemd for a scope unit over D-Bus ("Failed to open system
bus" otherwise), and --private-network (loopback only).  With --keep-unit
nspawn puts itself and the container into "supervisor" and "payload"
cgroups below its own cgroup: each Machine first moves its nspawn into a
cgroup of its own (pgpdecd-nspawn-PID-N in the name=systemd and the cgroup2
hierarchy), so that two machines at once never share those, and removes it
afterwards.

Nothing is cached: the tree is debootstrapped from the mirror every time
(about a minute) into the test's own temporary directory.
"""
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

SUITE = "bookworm"
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
_seq = itertools.count()
# nspawn's own seccomp allow list follows the container's capabilities:
# without CAP_IPC_LOCK (not in its default set) it makes mlock() fail with
# EPERM for every service, which no host systemd does (there a service may
# lock up to its LimitMEMLOCK=).  Allow the @memlock calls, not the
# capability: the service still needs no privilege for them.
NSPAWN_EXTRA = ["--system-call-filter=@memlock"]


def have_tools():
    """None, or what is missing to boot a tree."""
    missing = [t for t in ("debootstrap", "systemd-nspawn", "nsenter") if not shutil.which(t)]
    if missing:
        return "missing " + ", ".join(missing) + " (apt-get install debootstrap systemd-container)"
    if os.geteuid() != 0:
        return "needs root"
    return None


def debian_mirror():
    """The URI apt fetches bookworm main from (apt-get indextargets)."""
    if os.environ.get("PD_DEBIAN_MIRROR"):
        return os.environ["PD_DEBIAN_MIRROR"]
    out = subprocess.run(["apt-get", "indextargets", "--format",
                          "$(REPO_URI) $(RELEASE) $(COMPONENT) $(IDENTIFIER)"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[1:] == [SUITE, "main", "Packages"]:
            return f[0]
    raise AssertionError(f"no {SUITE} main in apt's sources (run apt-get update, or set "
                         f"PD_DEBIAN_MIRROR):\n{out}")


def package_deps(debs):
    """Packages from the archive that debs (paths) depend on: the first of
    each set of alternatives, without the packages debs themselves are."""
    ours, deps = set(), set()
    for d in debs:
        f = subprocess.run(["dpkg-deb", "-f", str(d), "Package", "Depends"],
                           capture_output=True, text=True, check=True).stdout
        m = re.search(r"^Package: (\S+)", f, re.M)
        ours.add(m.group(1))
        m = re.search(r"^Depends: (.*)$", f, re.M)
        for dep in (m.group(1).split(",") if m else []):
            deps.add(re.sub(r"[\s(:].*", "", dep.split("|")[0].strip()))
    return sorted(deps - ours)


def debootstrap(root, packages, log):
    """debootstrap a minimal bookworm into root with systemd as init and
    packages; seconds taken.  The output goes to log (a path)."""
    include = ",".join(["systemd", "systemd-sysv", *packages])
    t = time.monotonic()
    with open(log, "wb") as f:
        r = subprocess.run(["debootstrap", "--variant=minbase", f"--include={include}",
                            SUITE, str(root), debian_mirror()],
                           stdout=f, stderr=subprocess.STDOUT, timeout=1200)
    if r.returncode != 0:
        raise AssertionError(f"debootstrap failed ({r.returncode}):\n"
                             + Path(log).read_text(errors="replace")[-4000:])
    return time.monotonic() - t


def _cgroup_dirs(name):
    """Directories for a cgroup `name` below our own, in the hierarchies a
    systemd in the container uses: name=systemd (v1) and cgroup2."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, ctrl, path = line.split(":", 2)
        own["name=systemd" if ctrl == "name=systemd" else ("" if hid == "0" else None)] = path
    dirs = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        dev, mnt, typ, opts = line.split()[:4]
        key = "" if typ == "cgroup2" else ("name=systemd" if typ == "cgroup" and
                                           "name=systemd" in opts.split(",") else None)
        if key is None or own.get(key) is None:
            continue
        dirs.append(Path(mnt) / own[key].lstrip("/") / name)
    return dirs


def _rmdir_tree(d):
    if not d.is_dir():
        return
    for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        try:
            sub.rmdir()
        except OSError:
            pass
    try:
        d.rmdir()
    except OSError:
        pass


class Machine:
    """The tree at root booted with systemd-nspawn; its console to log."""

    def __init__(self, root, log, name=None):
        self.root, self.log = Path(root), Path(log)
        self.name = name or f"pdtest{os.getpid()}{next(_seq)}"
        self.proc = None
        self.leader = None
        self.cgroups = []

    # -- lifetime

    def boot(self, timeout=120):
        """Boot and wait until systemd says the boot finished; seconds taken."""
        t = time.monotonic()
        cg = f"pgpdecd-nspawn-{os.getpid()}-{next(_seq)}"
        moves = []
        for d in _cgroup_dirs(cg):
            try:
                d.mkdir()
            except OSError:
                continue
            self.cgroups.append(d)
            moves.append(f'echo $$ > "{d}/cgroup.procs"')
        script = "; ".join(moves + ['exec "$@"'])
        self.logf = open(self.log, "wb")
        self.proc = subprocess.Popen(
            ["sh", "-c", script, "sh", "systemd-nspawn", "--quiet", "-D", str(self.root), "-b",
             f"--machine={self.name}", "--register=no", "--keep-unit", "--private-network",
             "--console=read-only", *NSPAWN_EXTRA],
            stdin=subprocess.DEVNULL, stdout=self.logf, stderr=subprocess.STDOUT)
        end = time.monotonic() + timeout
        while self.leader is None:
            if self.proc.poll() is not None:
                raise AssertionError(f"systemd-nspawn exited {self.proc.returncode}:\n{self.console()}")
            if time.monotonic() > end:
                raise AssertionError(f"no PID 1 in the container within {timeout}s:\n{self.console()}")
            self.leader = self._find_leader()
            time.sleep(0.05)
        # is-system-running needs PID 1 to answer on its private socket
        while True:
            r = self.run(["systemctl", "is-system-running", "--wait"], check=False,
                         timeout=max(1, end - time.monotonic()))
            state = r.stdout.strip()
            if state in ("running", "degraded"):
                break
            if time.monotonic() > end:
                raise AssertionError(f"boot did not finish: {state}\n{self.console()}")
            time.sleep(0.2)
        if state != "running":
            failed = self.run(["systemctl", "--failed", "--no-pager"], check=False).stdout
            raise AssertionError(f"the container booted {state}:\n{failed}\n{self.console()}")
        return time.monotonic() - t

    def _find_leader(self):
        """The container's PID 1: the descendant of nspawn that is pid 1 in
        its own pid namespace."""
        kids = {}
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                st = (p / "status").read_text()
            except OSError:
                continue
            ppid = int(re.search(r"^PPid:\s+(\d+)", st, re.M).group(1))
            nspid = re.search(r"^NSpid:\s+(.*)$", st, re.M).group(1).split()
            kids.setdefault(ppid, []).append((int(p.name), nspid))
        todo = [self.proc.pid]
        while todo:
            for pid, nspid in kids.get(todo.pop(), []):
                if len(nspid) > 1 and nspid[-1] == "1":
                    return pid
                todo.append(pid)
        return None

    def console(self):
        try:
            return self.log.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def poweroff(self, timeout=60):
        """Shut the container down (SIGTERM to nspawn: SIGRTMIN+3 to its
        systemd, an orderly shutdown), then remove our cgroups."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.logf.close()
        for d in self.cgroups:
            _rmdir_tree(d)
        self.cgroups = []
        return self.proc.returncode if self.proc else None

    # -- inside

    def argv(self, cmd, user=None):
        """cmd run inside with a clean environment, as root or as user (its
        groups from the container's /etc/group)."""
        pre = ["nsenter", "-t", str(self.leader), "-a", "--"]
        if user:
            pre += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"]
        pre += ["env", "-i", f"PATH={PATH}", "LC_ALL=C.UTF-8", "SYSTEMD_COLORS=0", "SYSTEMD_PAGER="]
        return pre + [str(c) for c in cmd]

    def run(self, cmd, user=None, check=True, timeout=120, text=True, **kw):
        kw.setdefault("capture_output", "stdout" not in kw)
        r = subprocess.run(self.argv(cmd, user), timeout=timeout, text=text, **kw)
        if check and r.returncode != 0:
            raise AssertionError(f"in the container: {' '.join(map(str, cmd))} exited "
                                 f"{r.returncode}\n{r.stdout or ''}{r.stderr or ''}")
        return r

    def popen(self, cmd, user=None, **kw):
        return subprocess.Popen(self.argv(cmd, user), **kw)

    def systemctl(self, *args, check=True, timeout=120):
        return self.run(["systemctl", "--no-pager", *args], check=check, timeout=timeout)

    def prop(self, unit, name):
        return self.systemctl("show", "-P", name, unit).stdout.strip()

    def journal(self, unit=None, *args):
        cmd = ["journalctl", "--no-pager", "-o", "short-monotonic", *args]
        if unit:
            cmd += ["-u", unit]
        return self.run(cmd, check=False).stdout

    def path(self, p):
        """The host path of the container's p (its root is our tree; not
        for what the container mounts over it: /run, /tmp, /proc...)."""
        return self.root / str(p).lstrip("/")
