#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Seeds for fuzz-mail: the small mails of tests/integration/mailcorpus.py
(every layout), each once with pieces answered in-process (selector octet
0x20: loopback) and once with the default policy and no daemon (0x00).
Usage: make-mail-corpus.py OUTDIR"""
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import mailcorpus  # noqa: E402

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
c = mailcorpus.Corpus()
try:
    for case in c.cases():
        if len(case.raw) > 60000:
            continue
        for sel, tag in ((0x20, "loopback"), (0x00, "nodaemon"), (0x35, "loopback-all-keep")):
            data = bytes([sel]) + case.raw
            (out / f"{case.name}-{tag}").write_bytes(data)
finally:
    c.close()
