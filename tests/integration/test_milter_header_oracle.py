# SPDX-License-Identifier: MIT
"""The milter's bound on the written header section is no oracle on a
plaintext: a sender padding the header section to just under 4 MiB around a
wrapped captured ciphertext (the budget case of test_mail_review) got 250 for
a short plaintext and 550 LIMIT for a longer one; now 250 both, the mail kept
as received with status LIMIT."""
from test_mail_review import _captured, milter_postfix, pgp_mime
from test_mime import pytestmark  # noqa: F401


def test_milter_header_bound_is_no_length_oracle(tmp_path_factory):
    with milter_postfix(tmp_path_factory, "oracle",
                        **{"max-message-size": "16M", "max-plaintext-size": "1M"}) as (e, mp, p):
        env = {"encrypt": e["encrypt"]}
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
