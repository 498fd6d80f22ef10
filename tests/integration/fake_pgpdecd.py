# SPDX-License-Identifier: MIT
"""A scripted stand-in for pgpdecd, written from proto/PROTOCOL.md, to test
pgpdecd-client and libpdclient on the cases a real daemon rarely produces
(early failures, garbage, connections cut mid-stream, TLS variants).

"Decryption" is the identity: the plaintext is the ciphertext.  The first
octets of a message script the outcome:
  EARLY <status>\\n   RESULT <status> at once; the rest is read and discarded
  FAIL <status>\\n    plaintext streams, then RESULT <status>
  CLOSE\\n            the connection is cut after the first plaintext frame
  GARBAGE\\n          garbage instead of a reply, then close
  VARY<c>\\n          as anything else, but every second such request of
                     the server gets one octet more (its plaintext is
                     longer) and every third has <c> changed to '#' (the
                     same length, other octets)
  anything else      plaintext streams, RESULT OK with integrity MDC
Plaintext is echoed while ciphertext is still being read, so a client that
does not read while it writes deadlocks here, as it would with the daemon.
"""
import os
import select
import socket
import ssl
import struct
import threading
import time

HELLO, ERROR, DECRYPT, DATA, END, PING, STATS, KEYS = 0x01, 0x02, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15
METADATA, RESULT, PONG, KEY = 0x20, 0x21, 0x22, 0x23


def frame(ftype, fid, payload=b""):
    return struct.pack(">IBI", len(payload), ftype, fid) + payload


def tlv(tag, value):
    return struct.pack(">BH", tag, len(value)) + value


def result(fid, status, integrity, bin_, bout, sentence=""):
    p = struct.pack(">HBBQQ", status, integrity, 0, bin_, bout)
    if sentence:
        p += tlv(0x31, sentence.encode())
    p += tlv(0x15, b"\x09") + tlv(0x17, b"\x01") + tlv(0x18, bytes(range(0xA0, 0xB4)))
    return frame(RESULT, fid, p)


class FakeServer:
    def __init__(self, path=None, tcp=False, tls=None, max_frame=65536, max_inflight=16,
                 refuse=None, strict_inflight=False, server_frame_size=None, read_delay=0, rcvbuf=0):
        self.path = path
        self.max_frame = max_frame
        self.max_inflight = max_inflight
        self.refuse = refuse                # status to refuse every connection with
        self.strict_inflight = strict_inflight
        self.server_frame_size = server_frame_size or max_frame
        self.tls = tls                      # ssl.SSLContext or None
        self.read_delay = read_delay        # seconds it sleeps after each read (a slow reader)
        self.connections = 0
        self.requests = []                  # (type, flags, password) per request begun
        self.violations = []
        self.lock = threading.Lock()
        if tcp:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if rcvbuf:  # before listen: accepted sockets inherit it, with no autotuning
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.bind(("127.0.0.1", 0))
            self.port = self.sock.getsockname()[1]
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(path)
        self.sock.listen(64)
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def close(self):
        self.stopping = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _accept(self):
        while not self.stopping:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve_safe, args=(s,), daemon=True).start()

    def _serve_safe(self, s):
        try:
            if self.tls:
                s = self.tls.wrap_socket(s, server_side=True)
            self._serve(s)
        except (OSError, ssl.SSLError, EOFError, ConnectionError):
            pass
        finally:
            try:
                s.close()
            except OSError:
                pass

    # -- framing --------------------------------------------------------

    def _recv_exact(self, s, n, buf):
        while len(buf[0]) < n:
            chunk = s.recv(max(65536, n - len(buf[0])))
            if not chunk:
                raise EOFError
            if self.read_delay:
                time.sleep(self.read_delay)
            buf[0] += chunk
        out, buf[0] = buf[0][:n], buf[0][n:]
        return out

    def _frame(self, s, buf):
        n, t, fid = struct.unpack(">IBI", self._recv_exact(s, 9, buf))
        if n > self.max_frame:
            raise EOFError
        return t, fid, self._recv_exact(s, n, buf)

    def _pending(self, s, buf):
        if buf[0]:
            return True
        if isinstance(s, ssl.SSLSocket) and s.pending():
            return True
        return bool(select.select([s], [], [], 0)[0])

    # -- the session ----------------------------------------------------

    def _serve(self, s):
        buf = [b""]
        t, fid, p = self._frame(s, buf)
        if t != HELLO or p[:4] != b"PGPD":
            s.sendall(frame(ERROR, 0, struct.pack(">H", 50) + tlv(0x31, b"expected HELLO")))
            return
        if self.refuse is not None:
            s.sendall(frame(ERROR, 0, struct.pack(">H", self.refuse) + tlv(0x31, b"refused by the fake")))
            return
        s.sendall(frame(HELLO, 0, b"PGPD" + struct.pack(">HHIQI", 1, 0, self.max_frame, 0, self.max_inflight)
                        + tlv(0x01, b"fake-pgpdecd/1")))
        while True:
            t, fid, p = self._frame(s, buf)
            if t == PING:
                self._note(t, 0, None)
                self._strict(s, buf)
                s.sendall(frame(PONG, fid, p))
            elif t == STATS:
                self._note(t, 0, None)
                text = b"# TYPE pgpdecd_requests_total counter\npgpdecd_requests_total 42\n"
                s.sendall(frame(DATA, fid, text[:20]) + frame(DATA, fid, text[20:]) + result(fid, 0, 0, 0, len(text)))
            elif t == KEYS:
                self._note(t, 0, None)
                k1 = struct.pack(">BBHI", 4, 1, 3072, 1700000000) + tlv(0x18, b"\x11" * 20) + \
                    tlv(0x20, b"\x22" * 20) + tlv(0x21, b"\x11" * 8)
                k2 = struct.pack(">BBHI", 6, 25, 255, 1700000001) + tlv(0x18, b"\x33" * 32) + tlv(0x22, b"X25519")
                s.sendall(frame(KEY, fid, k1) + frame(KEY, fid, k2) + result(fid, 0, 0, 0, 2))
            elif t == DECRYPT:
                self._decrypt(s, buf, fid, p)
            else:
                s.sendall(frame(ERROR, 0, struct.pack(">H", 50) + tlv(0x31, b"unexpected frame")))
                return

    def _note(self, t, flags, pw):
        with self.lock:
            self.requests.append((t, flags, pw))

    def _strict(self, s, buf):
        """With max_inflight 1, nothing may arrive before our terminal frame."""
        if self.strict_inflight:
            time.sleep(0.05)
            if self._pending(s, buf):
                self.violations.append("request begun while max_inflight requests were outstanding")

    def _decrypt(self, s, buf, fid, p):
        flags = struct.unpack_from(">I", p)[0]
        pw = None
        off = 4
        while off < len(p):
            tag, n = struct.unpack_from(">BH", p, off)
            if tag == 0x02:
                pw = p[off + 3:off + 3 + n]
            off += 3 + n
        self._note(DECRYPT, flags, pw)
        mode, status = None, 0
        vary = None
        first = True
        held = []
        total_in = total_out = 0
        answered = False
        while True:
            t, rid, d = self._frame(s, buf)
            if rid != fid or t not in (DATA, END):
                s.sendall(frame(ERROR, 0, struct.pack(">H", 50) + tlv(0x31, b"frames out of order")))
                raise EOFError
            if t == END:
                break
            total_in += len(d)
            if first and d:
                first = False
                line = d.split(b"\n", 1)[0]
                if line.startswith(b"EARLY "):
                    s.sendall(result(fid, int(line[6:]), 0, total_in, 0, "early failure by script"))
                    answered = True
                elif line.startswith(b"FAIL "):
                    mode, status = "fail", int(line[5:])
                elif line == b"CLOSE":
                    s.sendall(frame(DATA, fid, d[:10]))
                    s.shutdown(socket.SHUT_RDWR)
                    raise EOFError
                elif line == b"GARBAGE":
                    s.sendall(b"\xff" * 64)
                    raise EOFError
                elif line.startswith(b"VARY") and len(line) == 5:
                    with self.lock:
                        self.varied = getattr(self, "varied", 0) + 1
                        vary = self.varied
                    if vary % 3 == 0:
                        d = d[:4] + b"#" + d[5:]
                if flags & 2 and not answered:
                    s.sendall(frame(METADATA, fid, tlv(0x10, b"name.txt") + tlv(0x11, struct.pack(">I", 1)) +
                                    tlv(0x12, b"b") + tlv(0x15, b"\x09")))
            if answered:
                continue
            if flags & 1:
                held.append(d)
            else:
                for o in range(0, len(d), self.server_frame_size):
                    s.sendall(frame(DATA, fid, d[o:o + self.server_frame_size]))
            total_out += len(d)
        if answered:
            return
        if vary and vary % 2 == 0 and not flags & 1:
            s.sendall(frame(DATA, fid, b"+"))
            total_out += 1
        self._strict(s, buf)
        if mode == "fail":
            s.sendall(result(fid, status, 0, total_in, total_out, "failure by script"))
            return
        if held:
            data = b"".join(held)
            for o in range(0, len(data), self.server_frame_size):
                s.sendall(frame(DATA, fid, data[o:o + self.server_frame_size]))
        s.sendall(result(fid, 0, 1, total_in, total_out))
