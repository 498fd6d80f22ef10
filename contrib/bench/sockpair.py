#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""contrib/bench/sockpair.py MIB: MB/s of MIB MiB through a Unix socket pair.

One process writes in 1 MiB writes, a second reads in 256 KiB reads; what
the kernel alone costs to carry bytes between two processes on this machine
(bulk.sh prints it beside the daemon's rate: the daemon carries the
ciphertext in and the plaintext out over such sockets)."""
import os
import socket
import sys
import time

total = int(sys.argv[1]) << 20
a, b = socket.socketpair()
pid = os.fork()
if pid == 0:
    a.close()
    buf, n = bytearray(256 << 10), 0
    while n < total:
        k = b.recv_into(buf)
        if not k:
            break
        n += k
    os._exit(0 if n == total else 1)
b.close()
chunk, n, t = b"x" * (1 << 20), 0, time.monotonic()
while n < total:
    a.sendall(chunk)
    n += len(chunk)
a.close()
_, st = os.waitpid(pid, 0)
dt = time.monotonic() - t
if st:
    sys.exit("sockpair.py: the reader got fewer bytes than were written")
print(f"{total / dt / 1e6:.1f}")
