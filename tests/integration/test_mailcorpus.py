# SPDX-License-Identifier: MIT
"""Self-test of mailcorpus.py, with gpg only (no pgpdecd): every mail parses,
every encrypted piece decrypts with the test key to the plaintext the
expectation is built from (or fails the way the case says), and the checker
accepts a correct output and rejects wrong ones."""
import copy
import re
import shutil
import subprocess

import pytest

import mailcorpus as mc

pytestmark = pytest.mark.skipif(not shutil.which("gpg"), reason="needs gpg")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    c = mc.Corpus(tmp_path_factory.mktemp("mailcorpus"))
    c.cases()
    # Alice's certificate, so that gpg also checks the signatures it meets
    c.daemon("--import", input=c.sender("--export", c.alice_fpr).stdout)
    yield c
    c.close()


def names():
    # the case names, without building (kept in step with Corpus.cases())
    return [
        "thunderbird", "thunderbird-attachment", "enigmail-legacy-display", "mutt",
        "mutt-attachment", "evolution", "k9", "deltachat", "rfc9788", "pgp-mime-7bit-explicit",
        "pgp-mime-base64", "pgp-mime-quoted-printable", "pgp-mime-sign-encrypt",
        "pgp-mime-inner-signed", "inline-7bit-us-ascii", "inline-8bit-us-ascii",
        "inline-8bit-utf-8", "inline-8bit-iso-8859-1", "inline-quoted-printable-us-ascii",
        "inline-quoted-printable-utf-8", "inline-quoted-printable-iso-8859-1",
        "inline-base64-us-ascii", "inline-base64-utf-8", "inline-base64-iso-8859-1",
        "inline-quoted-printable-utf-8-2blocks", "inline-base64-iso-8859-1-2blocks",
        "inline-crlf", "inline-lf", "thunderbird-lf", "attachments", "inline-and-attachment",
        "nested-rfc822", "nested-subpart", "inline-sign-encrypt", "foreign-key",
        "foreign-key-pgp-mime", "partly", "partly-mixed", "efail-pgp-mime", "efail-inline",
        "password-inline", "tampered", "tampered-pgp-mime",
        "garbage-armor", "plain", "forged-headers", "forged-headers-plain"]


def test_names(corpus):
    assert [c.name for c in corpus.cases()] == names()


def test_fingerprints():
    assert re.fullmatch(r"[0-9A-F]{40}", mc.KEY_FPR) and mc.KEY_FPR != mc.PRIMARY_FPR


@pytest.mark.parametrize("name", names())
def test_parses(corpus, name):
    c = corpus.case(name)
    msg = mc.parse(c.raw)
    for p in msg.walk():
        assert not p.defects, f"{name}: {p.get_content_type()}: {p.defects}"
    assert msg["From"] and msg["Subject"] is not None
    if name.endswith("crlf") or name in ("thunderbird", "k9"):
        assert b"\r\n" in c.raw and b"\n" not in c.raw.replace(b"\r\n", b"")
    if name.endswith("-lf"):
        assert b"\r" not in c.raw


def _decrypt(corpus, ct):
    return corpus.daemon("--status-fd", "2", "--decrypt", input=ct, check=False)


@pytest.mark.parametrize("name", names())
def test_pieces_decrypt(corpus, name):
    c = corpus.case(name)
    found = mc.find_pieces(c.raw)
    assert [k for k, _ in found] == [p.kind for p in c.pieces]
    for (kind, ct), piece in zip(found, c.pieces):
        assert ct == piece.ciphertext
        r = _decrypt(corpus, ct)
        err = r.stderr.decode(errors="replace")
        if piece.plaintext is not None:
            assert r.returncode == 0, err
            assert r.stdout == piece.plaintext
            # gpg 2.2 writes SEIPD v1 with MDC: the integrity is "mdc"
            assert "[GNUPG:] DECRYPTION_OKAY" in err and "[GNUPG:] GOODMDC" in err
        elif piece.error == "no-key":
            assert r.returncode != 0 and "[GNUPG:] NO_SECKEY" in err, err
        elif piece.error == "password":
            assert r.returncode != 0 and "[GNUPG:] NEED_PASSPHRASE_SYM" in err, err
        elif piece.error == "integrity":
            assert r.returncode != 0 and "manipulated" in err and "[GNUPG:] BADMDC" in err, err
        elif piece.error == "malformed":
            assert r.returncode != 0 and "invalid packet" in err, err
        else:
            raise AssertionError(piece.error)


def test_tampered_is_seipd_v1(corpus):
    arm = corpus.case("tampered").pieces[0].ciphertext
    out = corpus.daemon("--list-packets", input=arm, check=False).stdout.decode()
    assert ":encrypted data packet:" in out and "mdc_method: 2" in out, out


def test_inner_signature_verifies(corpus):
    c = corpus.case("pgp-mime-inner-signed")
    node = c.expected.body
    assert node.ctype == "multipart/signed" and node.signed_entity
    d = corpus.dir / "sig"
    d.mkdir(exist_ok=True)
    (d / "sig.asc").write_bytes(c.signature)
    (d / "data").write_bytes(mc.crlf(node.signed_entity))
    r = corpus.sender("--verify", str(d / "sig.asc"), str(d / "data"), check=False)
    assert r.returncode == 0 and b"Good signature" in r.stderr, r.stderr


# --------------------------------------------------------------------------
# The checker

@pytest.mark.parametrize("name", names())
def test_checker_accepts_ideal(corpus, name):
    c = corpus.case(name)
    mc.check_delivered(c, mc.render_ideal(c))


# (deltachat's protected fields beyond Subject equal its outer ones, and its
# Chat-Version is not a field protected headers replace: "all" and the
# default give the same mail there)
@pytest.mark.parametrize("name", ["rfc9788", "thunderbird"])
def test_checker_policy_all(corpus, name):
    c = corpus.case(name)
    ideal = mc.render_ideal(c, header_policy="all")
    mc.check_delivered(c, ideal, header_policy="all")
    with pytest.raises(AssertionError):
        mc.check_delivered(c, mc.render_ideal(c, header_policy="default"), header_policy="all") \
            if name != "thunderbird" else mc.check_delivered(c, ideal.replace(
                b"Subject: Quarterly audit", b"Subject: ..."), header_policy="all")


def test_checker_tolerates_mta(corpus):
    c = corpus.case("attachments")
    ideal = mc.render_ideal(c)
    mta = (b"Return-Path: <alice@example.org>\nDelivered-To: bob@example.net\n"
           b"X-Original-To: bob@example.net\nReceived: from mx.example.org (mx [192.0.2.1])\n"
           b"\tby gw.example.net (Postfix) with ESMTP id 4Y2; Tue, 3 Dec 2024 10:15:01 +0100\n")
    folded = ideal.replace(b"From: Alice Sender <alice@example.org>",
                           b"From: Alice Sender\n <alice@example.org>")
    assert folded != ideal
    mc.check_delivered(c, mc.crlf(mta + folded))


def _rejects(c, delivered, match, **kw):
    with pytest.raises(AssertionError, match=match):
        mc.check_delivered(c, delivered, **kw)


def test_checker_rejects_missing_attachment(corpus):
    c = corpus.case("attachments")
    bad = copy.deepcopy(c)
    del bad.expected.body.children[1]
    _rejects(c, mc.render_ideal(bad), r"3 parts")


def test_checker_rejects_wrong_filename(corpus):
    c = corpus.case("attachments")
    ideal = mc.render_ideal(c)
    _rejects(c, ideal.replace(b'filename="report.pdf"', b'filename="report.pdf.pgp"'),
             r"filename 'report.pdf.pgp'")


def test_checker_rejects_wrong_payload(corpus):
    c = corpus.case("attachments")
    bad = copy.deepcopy(c)
    bad.expected.body.children[1].data = bad.expected.body.children[1].data[:-1]
    _rejects(c, mc.render_ideal(bad), r"payload differs")


def test_checker_rejects_forged_header_kept(corpus):
    c = corpus.case("forged-headers")
    ideal = mc.render_ideal(c)
    _rejects(c, b"X-Pgpdecd-Key: 0000000000000000000000000000000000000000\n" + ideal,
             r"x-pgpdecd-key")
    _rejects(c, b"X-PGPDECD-Integrity: aead\n" + ideal.replace(b"X-Pgpdecd-Integrity: mdc\n", b""),
             r"x-pgpdecd-integrity")
    # the mail as it came in (forged headers and all) is wrong too
    _rejects(c, c.raw, r"x-pgpdecd")
    p = corpus.case("forged-headers-plain")
    _rejects(p, p.raw, r"x-pgpdecd")
    mc.check_delivered(p, mc.render_ideal(p))


def test_checker_rejects_outer_subject(corpus):
    c = corpus.case("thunderbird")
    ideal = mc.render_ideal(c)
    assert b"Subject: Quarterly audit\n" in ideal
    _rejects(c, ideal.replace(b"Subject: Quarterly audit\n", b"Subject: ...\n"), r"subject")


def test_checker_rejects_armor_left(corpus):
    c = corpus.case("inline-quoted-printable-utf-8-2blocks")
    hdr = "".join(f"{k}: {v}\n" for k, v in c.expected.result_headers()).encode()
    _rejects(c, hdr + c.raw, r"text differs")


def test_checker_rejects_legacy_display_kept(corpus):
    c = corpus.case("rfc9788")
    bad = copy.deepcopy(c)
    ent = mc.parse(c.pieces[0].plaintext)
    bad.expected.body = mc.tree_of(ent, decrypted=True)
    assert len(bad.expected.body.children) == 2
    _rejects(c, mc.render_ideal(bad), r"2 parts")


def test_checker_rejects_changed_signed_entity(corpus):
    c = corpus.case("pgp-mime-inner-signed")
    ideal = mc.render_ideal(c)
    bad = ideal.replace(b"Content-Transfer-Encoding: quoted-printable", b"Content-Transfer-Encoding:  quoted-printable")
    assert bad != ideal
    _rejects(c, bad, r"signed entity")


def test_checker_rejects_wrong_charset(corpus):
    c = corpus.case("inline-8bit-iso-8859-1")
    bad = copy.deepcopy(c)
    bad.expected.body.charset = "utf-8"
    _rejects(c, mc.render_ideal(bad), r"charset")


def test_checker_failure_policies(corpus):
    c = corpus.case("tampered")
    mc.check_delivered(c, mc.render_ideal(c), failure_policy="pass")
    mc.check_delivered(c, None, failure_policy="reject")
    assert c.expected.exit_code("reject") == 65 and c.expected.exit_code("pass") == 0
    _rejects(c, mc.render_ideal(c), r"delivered although", failure_policy="reject")
    # pass: the body must be the original one
    _rejects(c, mc.render_ideal(c).replace(b"Before.", b"Before!"), r"body changed")


def test_checker_rejects_wrong_status(corpus):
    c = corpus.case("partly")
    ideal = mc.render_ideal(c)
    assert b"X-Pgpdecd-Status: partly-decrypted; pieces=2; decrypted=1; no-key=1; failed=0;" \
        b" status=NO_KEY\n" in ideal
    _rejects(c, ideal.replace(b"partly-decrypted;", b"decrypted;"), r"x-pgpdecd-status")
    _rejects(c, ideal.replace(b"X-Pgpdecd-Signatures: not-verified\n", b""), r"x-pgpdecd-signatures")
    _rejects(c, ideal.replace(mc.KEY_FPR.encode(), mc.PRIMARY_FPR.encode()), r"x-pgpdecd-key")


def test_large_mail(corpus, tmp_path):
    path = tmp_path / "large.eml"
    c = corpus.large_mail(path, total_size=3_000_000, attachment_size=1_500_000)
    size = path.stat().st_size
    assert 2_990_000 <= size <= 3_010_000, size
    found = mc.find_pieces(path.read_bytes())
    assert [k for k, _ in found] == ["attachment"]
    r = _decrypt(corpus, found[0][1])
    assert r.returncode == 0
    leaf = c.expected.body.children[1]
    import hashlib
    assert len(r.stdout) == leaf.size and hashlib.sha256(r.stdout).hexdigest() == leaf.sha256
    # an ideal output, with the decrypted data put in
    filler = mc.parse(path.read_bytes()).get_payload()[2].get_payload(decode=True)
    ideal = copy.deepcopy(c)
    ideal.expected.body.children[1].data = r.stdout
    ideal.expected.body.children[2].data = filler
    out = tmp_path / "delivered.eml"
    out.write_bytes(mc.render_ideal(ideal))
    mc.check_delivered(c, out)
    bad = copy.deepcopy(ideal)
    bad.expected.body.children[1].data = r.stdout[:-1] + b"x"
    out.write_bytes(mc.render_ideal(bad))
    _rejects(c, out, r"sha256")


def test_checker_accepts_hand_written(corpus):
    """Outputs written out by hand (not by render_ideal), as a decryptor
    could write them: the Mutt mail with the entity's headers moved up, and
    the latin-1 inline mail re-encoded as quoted-printable."""
    r = "".join(f"{k}: {v}\n" for k, v in [
        ("X-Pgpdecd-Status", "decrypted; pieces=1; decrypted=1; no-key=0; failed=0"),
        ("X-Pgpdecd-Key", mc.KEY_FPR), ("X-Pgpdecd-Integrity", "mdc"),
        ("X-Pgpdecd-Signatures", "not-verified")])
    mutt = (r + "From: Alice Sender <alice@example.org>\nTo: Bob Gateway <bob@example.net>\n"
            "Date: Tue, 03 Dec 2024 10:15:00 +0100\nSubject: Mutt protected subject\n"
            "Message-ID: <corpus.1@example.org>\nUser-Agent: Mutt/2.2.12\nMIME-Version: 1.0\n"
            'Content-Type: text/plain; charset=us-ascii; protected-headers="v1"\n'
            "Content-Disposition: inline\n\n" + mc.BODY_EN).encode()
    c = corpus.case("mutt")
    mc.check_delivered(c, mutt)
    _rejects(c, mutt.replace(b"Subject: Mutt protected subject", b"Subject: ..."), r"subject")
    _rejects(c, mutt.replace(b"the audit", b"an audit"), r"text differs")
    _rejects(c, mutt.replace(b"User-Agent: Mutt/2.2.12\n", b""), r"header fields")
    latin = (r.replace("pieces=1; decrypted=1", "pieces=1; decrypted=1") +
             "From: Alice Sender <alice@example.org>\nTo: Bob Gateway <bob@example.net>\n"
             "Date: Tue, 03 Dec 2024 10:15:00 +0100\nSubject: Inline iso-8859-1\n"
             "Message-ID: <corpus.1@example.org>\nMIME-Version: 1.0\n"
             "Content-Type: text/plain; charset=iso-8859-1\n"
             "Content-Transfer-Encoding: quoted-printable\n\n"
             "Hallo B=F6b,\n\nGr=FC=DFe aus K=F6ln, caf=E9 =BD =A3 5\nzweite Zeile\n\n"
             "Regards,\nAlice\n").encode()
    c = corpus.case("inline-8bit-iso-8859-1")
    mc.check_delivered(c, latin)
    _rejects(c, latin.replace(b"=F6b", b"=C3=B6b"), r"text differs")


def test_checker_rejects_armor_left_in_a_file(corpus, tmp_path):
    """A fully decrypted mail with an armored message left outside the
    compared parts (here in a Received: field, which the checker tolerates)
    is refused whether it is given as bytes or as a file."""
    c = corpus.case("thunderbird")
    assert c.expected.outcome == "decrypted"
    bad = b"Received: " + mc.ARMOR_BEGIN.encode() + b"\n" + mc.render_ideal(c)
    _rejects(c, bad, r"armored PGP message remains")
    out = tmp_path / "delivered.eml"
    out.write_bytes(bad)
    _rejects(c, out, r"armored PGP message remains")
    out.write_bytes(mc.render_ideal(c))
    mc.check_delivered(c, out)


def test_file_contains_across_chunks(tmp_path):
    p = tmp_path / "f"
    needle = mc.ARMOR_BEGIN.encode()
    for cut in range(len(needle) + 1):
        p.write_bytes(b"x" * (16 - cut) + needle + b"y")
        assert mc._file_contains(p, needle, chunk=16), cut
    p.write_bytes(b"x" * 40 + needle[:-1] + b"y" * 40)
    assert not mc._file_contains(p, needle, chunk=16)


def _leaves(node):
    if isinstance(node, mc.Multi):
        for c in node.children:
            yield from _leaves(c)
    elif isinstance(node, mc.Rfc822):
        yield from _leaves(node.body)
    else:
        yield node


@pytest.mark.parametrize("name", names())
def test_every_expected_leaf_has_content_to_compare(corpus, name):
    """The checker compares a leaf's text, data or digest: a leaf with none
    of them would accept any payload."""
    c = corpus.case(name)
    leaves = list(_leaves(c.expected.body))
    assert leaves
    for leaf in leaves:
        assert leaf.text is not None or leaf.data is not None or leaf.sha256 is not None, (name, leaf)
