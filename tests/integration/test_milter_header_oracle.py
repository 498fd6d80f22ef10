# SPDX-License-Identifier: MIT
"""The milter's bound on the written header section is no oracle on a
plaintext: a sender padding the header section to just under 4 MiB around a
wrapped captured ciphertext (the budget case of test_mail_review) got 250 for
a short plaintext and 550 LIMIT for a longer one; now 250 both, the mail kept
as received with status LIMIT."""
import pytest
from test_mail_review import pgp_mime, _captured
from test_mime import pytestmark  # noqa: F401


def test_milter_header_bound_is_no_length_oracle(tmp_path_factory):
    import test_milter
    from postfix_harness import Postfix, require_postfix
    require_postfix()
    gen = test_milter.env.__wrapped__(tmp_path_factory)
    e = next(gen)
    env = {"encrypt": e["encrypt"]}
    mp = test_milter.milter(e["dir"], "milter-oracle", e["daemon"].sock,
                            **{"max-message-size": "16M", "max-plaintext-size": "1M"})
    mp.start()
    p = Postfix(artifacts=e["artifacts"] / "oracle",
                main={"milter_default_action": "tempfail", "milter_protocol": "6",
                      "message_size_limit": "30000000"})
    p.smtpd.options["smtpd_milters"] = mp.spec
    try:
        p.start()
        mails = {}
        for secret in (b"s" * 100, b"s" * 200):
            captured = _captured(env, secret)
            head = b"Content-Type: text/plain\n\n"
            room = (1 << 20) - (len(head) + 150)
            pad = b"X-Pad: " + b"X" * (room - len(captured) - 8) + b"\n"
            mails[secret] = pgp_mime(env, pad + captured, b"")

        def send(secret, total):
            # outer header fields summing to about `total` octets (name + value)
            n_full, rest = divmod(total, 1000)
            hdr = b"From: alice@test.example\nTo: bob@test.example\nSubject: s\n"
            hdr += b"".join(b"X-P%04d: " % i + b"x" * 993 + b"\n" for i in range(n_full))
            hdr += b"X-Q: " + b"y" * max(rest, 1) + b"\n"
            r = p.send(hdr + mails[secret], "alice@test.example", ["bob@test.example"])
            return r.code

        lo, hi = (4 << 20) - 20000, (4 << 20)
        assert send(b"s" * 100, lo) == 250
        assert send(b"s" * 100, hi) == 552   # incoming over the bound
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if send(b"s" * 100, mid) == 250:
                lo = mid
            else:
                hi = mid
        a, b = send(b"s" * 100, lo), send(b"s" * 200, lo)
        print("threshold", lo, "C of 100 octets:", a, "C of 200 octets:", b, mp.text()[-600:])
        assert a == b == 250, (a, b)
    finally:
        p.stop()
        mp.stop()
        try:
            next(gen)
        except StopIteration:
            pass
