# SPDX-License-Identifier: MIT
"""Debian packages: contrib/build-deb.sh builds them from a copy of the tree,
each holds what it should (dpkg-deb -c), the maintainer scripts create the
user and directories, lintian reports no error, and purging them (dpkg
--purge, run for real in an overlay of /: test_purge) removes what they made
and names what it leaves.

Slow (a full package build, several minutes on a busy machine): skipped when
PD_SKIP_DEB=1, and in sanitizer builds (check.sh's second pass).  Package
contents and lintian's warnings are written to build/deb-report.txt.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import sanitized_build

SRC = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PD_BUILD_DIR", SRC / "build")).resolve()


pytestmark = [
    pytest.mark.skipif(os.environ.get("PD_SKIP_DEB") == "1", reason="PD_SKIP_DEB=1"),
    pytest.mark.skipif(sanitized_build(), reason="packages are built once, not in the sanitizer pass"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("dpkg-buildpackage", "dh", "lintian")),
                       reason="dpkg-dev, debhelper or lintian missing"),
]

# Paths each package must ship (multiarch directory matched loosely).
WANT = {
    "pgpdecd": [
        r"\./usr/sbin/pgpdecd$",
        r"\./lib/systemd/system/pgpdecd\.service$",
        r"\./lib/systemd/system/pgpdecd\.socket$",
        r"\./usr/lib/sysusers\.d/pgpdecd\.conf$",
        r"\./usr/lib/tmpfiles\.d/pgpdecd\.conf$",
        r"\./etc/pgpdecd/pgpdecd\.conf$",
        r"\./usr/share/man/man8/pgpdecd\.8\.gz$",
        r"\./usr/share/man/man5/pgpdecd\.conf\.5\.gz$",
        r"\./usr/share/doc/pgpdecd/copyright$",
    ],
    "pgpdecd-client": [
        r"\./usr/bin/pgpdecd-client$",
        r"\./usr/share/man/man1/pgpdecd-client\.1\.gz$",
        r"\./usr/bin/pgpdecd-gpg$",
        r"\./usr/share/man/man1/pgpdecd-gpg\.1\.gz$",
        r"\./usr/lib/pgpdecd-gpg/gpg -> \.\./\.\./bin/pgpdecd-gpg$",
        r"\./usr/lib/pgpdecd-gpg/gpg2 -> \.\./\.\./bin/pgpdecd-gpg$",
        r"\./usr/share/doc/pgpdecd-client/examples/postfix/README\.md$",
        r"\./usr/share/doc/pgpdecd-client/examples/haproxy/haproxy\.cfg$",
    ],
    "pgpdecd-milter": [
        r"\./usr/sbin/pgpdecd-milter$",
        r"\./lib/systemd/system/pgpdecd-milter\.service$",
        r"\./usr/lib/sysusers\.d/pgpdecd-milter\.conf$",
        r"\./etc/pgpdecd/milter\.conf$",
        r"\./usr/share/man/man8/pgpdecd-milter\.8\.gz$",
        r"\./usr/share/doc/pgpdecd-milter/postfix/README\.md(\.gz)?$",
        r"\./usr/share/doc/pgpdecd-milter/copyright$",
    ],
    "pgpdecd-sop": [
        r"\./usr/bin/pgpdecd-sop$",
        r"\./usr/share/man/man1/pgpdecd-sop\.1\.gz$",
        r"\./usr/share/doc/pgpdecd-sop/copyright$",
    ],
    "libpdclient0": [
        r"\./usr/lib/[^/]+/libpdclient\.so\.0\.\d+\.\d+$",
        r"\./usr/lib/[^/]+/libpdclient\.so\.0 -> ",
    ],
    "libpdclient-dev": [
        r"\./usr/include/pdclient\.h$",
        r"\./usr/lib/[^/]+/libpdclient\.so -> ",
        r"\./usr/lib/[^/]+/pkgconfig/pdclient\.pc$",
    ],
}
# Nothing of one package may sneak into another.
NOT = {
    "pgpdecd": [r"pgpdecd-client", r"libpdclient", r"\.h$", r"milter", r"pgpdecd-sop", r"pgpdecd-gpg"],
    "pgpdecd-milter": [r"/bin/", r"/sbin/pgpdecd$", r"pgpdecd\.service$", r"pgpdecd\.socket$",
                       r"libpdclient\.so", r"\.h$", r"/pgpdecd\.conf$"],
    "pgpdecd-client": [r"/sbin/", r"\.service$", r"libpdclient\.so", r"pgpdecd-sop"],
    "pgpdecd-sop": [r"/sbin/", r"\.service$", r"libpdclient", r"\.h$", r"pgpdecd-client", r"/etc/", r"pgpdecd-gpg"],
    "libpdclient0": [r"/bin/", r"\.h$", r"\.pc$", r"libpdclient\.so -> "],
    "libpdclient-dev": [r"/bin/", r"\.so\.0"],
}


def contents(deb):
    r = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True)
    # "perm owner size date time path [-> target]"
    return [" ".join(l.split()[5:]) for l in r.stdout.splitlines()], r.stdout


def test_contents(debs):
    assert sorted(debs) == sorted(WANT), sorted(debs)
    report = []
    for pkg, deb in sorted(debs.items()):
        paths, raw = contents(deb)
        report.append(f"== {deb.name}\n{raw}")
        for pat in WANT[pkg]:
            assert any(re.match(pat, p) for p in paths), f"{pkg}: nothing matches {pat}\n{raw}"
        for pat in NOT[pkg]:
            bad = [p for p in paths if re.search(pat, p.split(" -> ")[0] + (" -> " if " -> " in p else ""))]
            assert not bad, f"{pkg} ships {bad}"
        # root-owned, and nothing setuid or world-writable
        for line in raw.splitlines():
            perm, owner = line.split()[:2]
            assert owner == "root/root", line
            assert "s" not in perm and not (perm[8] == "w" and perm[0] != "l"), line
    (BUILD / "deb-report.txt").write_text("".join(report))


def test_control(debs):
    info = subprocess.run(["dpkg-deb", "-f", str(debs["pgpdecd"]), "Depends"],
                          capture_output=True, text=True, check=True).stdout
    assert "systemd-sysusers" in info or "systemd" in info, info
    # the unit's ExecReload=/bin/kill (test_systemd_real.py reloads it in a
    # minimal tree, which has only what the packages depend on)
    assert re.search(r"(^|, )procps(,|$| )", info.strip()), info
    ctl = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(debs["pgpdecd"])],
                         capture_output=True, check=True).stdout
    import io
    import tarfile
    t = tarfile.open(fileobj=io.BytesIO(ctl))
    conffiles = t.extractfile("./conffiles").read().decode()
    assert "/etc/pgpdecd/pgpdecd.conf" in conffiles.split()
    postinst = t.extractfile("./postinst").read().decode()
    assert "systemd-sysusers" in postinst and "pgpdecd.conf" in postinst
    assert "systemd-tmpfiles" in postinst
    assert "deb-systemd-helper" in postinst
    # installing must not start a service that has no keys yet
    assert "deb-systemd-invoke" not in postinst or "start" not in re.findall(
        r"deb-systemd-invoke (\w+)", postinst)
    # the milter: its user (in group pgpdecd) from sysusers, its conffile,
    # its unit known to systemd but neither enabled nor started
    t = tarfile.open(fileobj=io.BytesIO(subprocess.run(
        ["dpkg-deb", "--ctrl-tarfile", str(debs["pgpdecd-milter"])], capture_output=True,
        check=True).stdout))
    assert "/etc/pgpdecd/milter.conf" in t.extractfile("./conffiles").read().decode().split()
    postinst = t.extractfile("./postinst").read().decode()
    assert "systemd-sysusers" in postinst and "pgpdecd-milter.conf" in postinst
    assert "deb-systemd-helper" in postinst and "pgpdecd-milter.service" in postinst
    assert "start" not in re.findall(r"deb-systemd-invoke (\w+)", postinst)
    deps = subprocess.run(["dpkg-deb", "-f", str(debs["pgpdecd-milter"]), "Depends"],
                          capture_output=True, text=True, check=True).stdout
    assert "libmilter" in deps and "libgmime-3.0" in deps, deps
    dev = subprocess.run(["dpkg-deb", "-f", str(debs["libpdclient-dev"]), "Depends"],
                         capture_output=True, text=True, check=True).stdout
    assert "libpdclient0 (= " in dev


def test_lintian(debs):
    r = subprocess.run(["lintian", "--tag-display-limit", "0", "--no-override",
                        *map(str, sorted(debs.values()))],
                       capture_output=True, text=True, timeout=1800,
                       env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8",
                            "HOME": os.environ.get("HOME", "/")})
    lines = [l for l in r.stdout.splitlines() if re.match(r"^[EWIPNX]: ", l)]
    with open(BUILD / "deb-report.txt", "a") as f:
        f.write("== lintian\n" + "".join(l + "\n" for l in lines))
    errors = [l for l in lines if l.startswith("E: ")]
    assert not errors, "\n".join(lines)
    for l in lines:
        if l.startswith("W: "):
            print(l)


# The purge test installs the real package with the real dpkg, not into
# this machine but into an overlay of its root file system, in a mount
# namespace of its own (unshare): the maintainer scripts run against a
# private copy of /etc, /var/lib/dpkg and /run, and nothing outside the
# overlay's upper directory changes.  dpkg --purge is what apt-get purge
# runs; apt-get itself would also configure whatever other package the
# machine's own dpkg database has half-installed at that moment.
PURGE_SCRIPT = r"""
set -e
deb=$1; key=$2
step() { echo "== $*"; }
step install
dpkg -i "$deb" 2>&1
test -d /run/pgpdecd && test -f /etc/pgpdecd/passphrase && test ! -s /etc/pgpdecd/passphrase
getent passwd pgpdecd >/dev/null
step purge-clean
dpkg --purge pgpdecd 2>&1
if [ -e /etc/pgpdecd ]; then echo "LEFT: /etc/pgpdecd"; ls -la /etc/pgpdecd; fi
if [ -e /run/pgpdecd ]; then echo "LEFT: /run/pgpdecd"; fi
step install-again
dpkg -i "$deb" 2>&1
# what the administrator does: the keys, and the passphrase that unlocks them
cp "$key" /etc/pgpdecd/keys.pgp
echo 'a secret passphrase' > /etc/pgpdecd/passphrase
chmod 600 /etc/pgpdecd/keys.pgp /etc/pgpdecd/passphrase
step purge-with-keys
dpkg --purge pgpdecd 2>&1
step after
ls -A /etc/pgpdecd
cmp "$key" /etc/pgpdecd/keys.pgp && echo "keys kept"
test -e /run/pgpdecd || echo "run removed"
test -e /etc/pgpdecd/pgpdecd.conf || echo "conffile removed"
dpkg-query -W -f='${db:Status-Status}\n' pgpdecd 2>&1 || true
step milter
dpkg -i "$3" "$4" 2>&1
# what systemd makes when the service runs (RuntimeDirectory=, CacheDirectory=)
mkdir -p /run/pgpdecd-milter /var/cache/pgpdecd-milter
dpkg --purge pgpdecd-milter 2>&1
for d in /run/pgpdecd-milter /var/cache/pgpdecd-milter /etc/pgpdecd/milter.conf; do
	if [ -e $d ]; then echo "LEFT: $d"; fi
done
"""


def _in_overlay(tmp_path, script, *args):
    upper, work, root = tmp_path / "upper", tmp_path / "work", tmp_path / "root"
    for d in (upper, work, root):
        d.mkdir()
    (tmp_path / "script.sh").write_text(script)
    outer = (f"mount -t overlay overlay -o lowerdir=/,upperdir={upper},workdir={work} {root} && "
             f"mount --rbind /dev {root}/dev && mount -t proc proc {root}/proc && "
             f"mount -t tmpfs tmpfs {root}/run && "
             f"exec chroot {root} /bin/sh {tmp_path}/script.sh \"$@\"")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", outer, "sh", *args],
                          capture_output=True, text=True, timeout=600,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8",
                               "DEBIAN_FRONTEND": "noninteractive", "HOME": "/root"})


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="installs the package into an overlay of / in a mount namespace: needs root")
def test_purge(debs, tmp_path):
    """Purge (dpkg --purge, as apt-get purge runs it) removes what the
    package made (/run/pgpdecd, the empty passphrase file tmpfiles.d made,
    /etc/pgpdecd once empty) and says what it leaves and why: the
    administrator's keys and passphrase, the user."""
    key = SRC / "tests" / "data" / "keys" / "rsa2048.gpg"
    r = _in_overlay(tmp_path, PURGE_SCRIPT, str(debs["pgpdecd"]), str(key), str(debs["libpdclient0"]),
                    str(debs["pgpdecd-milter"]))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    (BUILD / "deb-purge.txt").write_text(out)
    clean = out.split("== purge-clean", 1)[1].split("== install-again", 1)[0]
    assert "LEFT:" not in clean, clean
    # nothing the package made is left, so dpkg has nothing to warn about
    assert "not empty so not removed" not in clean, clean
    assert "the system user pgpdecd stays" in clean, clean
    keys = out.split("== purge-with-keys", 1)[1].split("== after", 1)[0]
    assert "purge left these in /etc/pgpdecd, as the package did not make them:" in keys, keys
    assert "/etc/pgpdecd/keys.pgp" in keys and "/etc/pgpdecd/passphrase" in keys, keys
    assert "remove them yourself" in keys, keys
    after = out.split("== after", 1)[1].split("== milter", 1)[0]
    assert sorted(after.split("keys kept")[0].split()) == ["keys.pgp", "passphrase"], after
    assert "run removed" in after and "conffile removed" in after, after
    assert "no packages found matching pgpdecd" in after, after  # purged: not even config-files
    milter = out.split("== milter", 1)[1]
    assert "Purging configuration files for pgpdecd-milter" in milter and "LEFT:" not in milter, milter
