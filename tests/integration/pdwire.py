# SPDX-License-Identifier: MIT
"""A tiny, independent client of the pgpdecd wire protocol (proto/PROTOCOL.md),
written from the spec for the daemon's integration tests."""
import select
import socket
import ssl
import struct
import threading
import time

HELLO, ERROR, DECRYPT, DATA, END, PING, STATS, KEYS = 0x01, 0x02, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15
METADATA, RESULT, PONG, KEY = 0x20, 0x21, 0x22, 0x23
F_VERIFIED_ONLY, F_WANT_METADATA, F_WANT_SESSION_KEY = 0x1, 0x2, 0x4
T_PASSWORD, T_SESSION_KEY_IN, T_SESSION_KEY, T_SESSION_KEY_REFUSED = 0x02, 0x04, 0x32, 0x33
T_ERRNAME, T_SENTENCE = 0x30, 0x31
T_LITERAL_NAME, T_LITERAL_DATE, T_LITERAL_FORMAT, T_ARMORED, T_CONTAINER = 0x10, 0x11, 0x12, 0x13, 0x14
T_SYM_ALGO, T_AEAD, T_PK_ALGO, T_KEY_FPR, T_COMPRESSION = 0x15, 0x16, 0x17, 0x18, 0x19
T_RECIPIENT, T_N_RECIPIENTS, T_N_SKESK, T_ISSUER, T_N_SIGNATURES = 0x1a, 0x1b, 0x1c, 0x1d, 0x1e

ST = {0: "OK", 10: "MALFORMED", 11: "NOT_PGP", 12: "TRUNCATED", 13: "INTEGRITY", 14: "UNSUPPORTED",
      15: "SED_REFUSED", 16: "LIMIT", 17: "BOMB", 20: "NO_KEY", 21: "NO_PASSWORD", 30: "OVERLOADED",
      31: "TIMEOUT", 32: "SHUTTING_DOWN", 33: "INTERNAL", 40: "ACCESS_DENIED", 50: "PROTOCOL",
      51: "VERSION", 52: "BAD_REQUEST"}


class ConnectionEnded(Exception):
    """The server sent ERROR or closed the connection."""

    def __init__(self, status, sentence):
        super().__init__(f"{ST.get(status, status)}: {sentence}")
        self.status = status
        self.sentence = sentence


def frame(ftype, fid, payload=b""):
    return struct.pack(">IBI", len(payload), ftype, fid) + payload


def tlv(tag, value):
    return struct.pack(">BH", tag, len(value)) + value


def tlvs(p):
    out, off = [], 0
    while off < len(p):
        tag, n = struct.unpack_from(">BH", p, off)
        out.append((tag, p[off + 3:off + 3 + n]))
        off += 3 + n
    if off != len(p):
        raise ValueError("TLVs do not fill the payload")
    return out


def parse_result(p):
    status, integrity, _, bin_, bout = struct.unpack_from(">HBBQQ", p, 0)
    r = {"status": status, "name": ST.get(status, str(status)), "integrity": integrity,
         "bytes_in": bin_, "bytes_out": bout, "tlv": tlvs(p[20:])}
    for tag, v in r["tlv"]:
        if tag == T_SENTENCE:
            r["sentence"] = v.decode(errors="replace")
        if tag == T_ERRNAME:
            r["errname"] = v.decode(errors="replace")
    return r


class Client:
    def __init__(self, path=None, tcp=None, timeout=60, hello=True, sock=None):
        if sock is not None:
            self.s = sock
            self.s.settimeout(timeout)
        elif path:
            self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.s.settimeout(timeout)
            self.s.connect(path)
        else:
            self.s = socket.create_connection(tcp, timeout=timeout)
        self.buf = b""
        self.next_id = 1
        self.lock = threading.Lock()
        if hello:
            self.hello()

    def close(self):
        self.s.close()

    def send(self, data):
        with self.lock:
            self.s.sendall(data)

    def send_rest(self, rid, data, chunk=60000, end=True):
        """DATA frames (and END) for an open request, from a thread."""
        def run():
            try:
                self.send(b"".join(frame(DATA, rid, data[o:o + chunk]) for o in range(0, len(data), chunk))
                          + (frame(END, rid) if end else b""))
            except OSError:
                pass
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def recv_exact(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ConnectionEnded(-1, "connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_frame(self):
        n, ftype, fid = struct.unpack(">IBI", self.recv_exact(9))
        payload = self.recv_exact(n)
        if ftype == ERROR:
            status = struct.unpack_from(">H", payload)[0]
            sentence = ""
            for tag, v in tlvs(payload[2:]):
                if tag == T_SENTENCE:
                    sentence = v.decode(errors="replace")
            raise ConnectionEnded(status, sentence)
        return ftype, fid, payload

    def hello(self, vmin=1, vmax=1):
        try:
            self.send(frame(HELLO, 0, b"PGPD" + struct.pack(">HH", vmin, vmax)))
        except OSError:
            pass  # the server may refuse (ERROR) and close before reading our HELLO
        ftype, _, p = self.recv_frame()
        assert ftype == HELLO and p[:4] == b"PGPD"
        version, _, self.max_frame, self.max_message, self.max_inflight = struct.unpack_from(">HHIQI", p, 4)
        return {"version": version, "max_frame": self.max_frame, "max_message": self.max_message,
                "max_inflight": self.max_inflight}

    def new_id(self):
        i = self.next_id
        self.next_id += 1
        return i

    # -- requests -----------------------------------------------------

    def send_decrypt(self, data, flags=0, chunk=None, rid=None, opts=b""):
        rid = rid or self.new_id()
        chunk = chunk or self.max_frame
        self.send(frame(DECRYPT, rid, struct.pack(">I", flags) + opts))
        for off in range(0, len(data), chunk * 16):
            block = data[off:off + chunk * 16]
            self.send(b"".join(frame(DATA, rid, block[o:o + chunk]) for o in range(0, len(block), chunk)))
        self.send(frame(END, rid))
        return rid

    def read_reply(self, rid):
        """Frames of one DECRYPT reply: (plaintext, result, metadata payload or None)."""
        plain, meta = [], None
        while True:
            ftype, fid, p = self.recv_frame()
            assert fid == rid, f"reply for {fid} while waiting for {rid}"
            if ftype == DATA:
                plain.append(p)
            elif ftype == METADATA:
                meta = p
            elif ftype == RESULT:
                return b"".join(plain), parse_result(p), meta
            else:
                raise AssertionError(f"unexpected frame type {ftype:#x}")

    def _take_frame(self):
        """A whole frame from the buffer, or None."""
        if len(self.buf) < 9:
            return None
        n, ftype, fid = struct.unpack_from(">IBI", self.buf)
        if len(self.buf) < 9 + n:
            return None
        payload, self.buf = self.buf[9:9 + n], self.buf[9 + n:]
        if ftype == ERROR:
            status = struct.unpack_from(">H", payload)[0]
            raise ConnectionEnded(status, "")
        return ftype, fid, payload

    def _decrypt_select(self, data, flags, chunk, opts=b""):
        """One thread, non-blocking: an SSL socket must not be used by two threads."""
        rid = self.new_id()
        chunk = chunk or self.max_frame
        out = [frame(DECRYPT, rid, struct.pack(">I", flags) + opts)]
        out += [frame(DATA, rid, data[o:o + chunk]) for o in range(0, len(data), chunk)]
        out.append(frame(END, rid))
        pending = b"".join(out)
        plain, meta, res = [], None, None
        timeout = self.s.gettimeout()
        self.s.setblocking(False)
        try:
            while res is None:
                r, w, _ = select.select([self.s], [self.s] if pending else [], [], timeout)
                if not r and not w:
                    raise TimeoutError("no progress")
                if r or self.s.pending():
                    try:
                        got = self.s.recv(1 << 16)
                        if not got:
                            raise ConnectionEnded(-1, "connection closed")
                        self.buf += got
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                        pass
                while res is None and (f := self._take_frame()):
                    ftype, fid, p = f
                    assert fid == rid
                    if ftype == DATA:
                        plain.append(p)
                    elif ftype == METADATA:
                        meta = p
                    elif ftype == RESULT:
                        res = parse_result(p)
                if w and pending:
                    try:
                        n = self.s.send(pending[:1 << 16])
                        pending = pending[n:]
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                        pass
            # An early RESULT: the rest of the request still goes out (until END).
            self.s.setblocking(True)
            self.s.settimeout(timeout)
            if pending:
                self.s.sendall(pending)
        finally:
            self.s.settimeout(timeout)
        return b"".join(plain), res, meta

    def decrypt(self, data, flags=0, chunk=None, opts=b""):
        """Send from a thread while reading, as the protocol requires (section 10).
        opts: TLVs for the DECRYPT frame (tlv())."""
        if isinstance(self.s, ssl.SSLSocket):
            return self._decrypt_select(data, flags, chunk, opts)
        rid = self.new_id()

        def sender():
            try:
                self.send_decrypt(data, flags, chunk, rid, opts)
            except OSError:  # the server may answer early and close
                pass
        t = threading.Thread(target=sender, daemon=True)
        t.start()
        try:
            return self.read_reply(rid)
        finally:
            t.join(60)

    def ping(self, payload=b"hi"):
        rid = self.new_id()
        self.send(frame(PING, rid, payload))
        ftype, fid, p = self.recv_frame()
        assert (ftype, fid) == (PONG, rid)
        return p

    def stats(self):
        rid = self.new_id()
        self.send(frame(STATS, rid))
        text = []
        while True:
            ftype, fid, p = self.recv_frame()
            assert fid == rid
            if ftype == DATA:
                text.append(p)
            elif ftype == RESULT:
                assert parse_result(p)["status"] == 0
                return b"".join(text).decode()

    def keys(self):
        rid = self.new_id()
        self.send(frame(KEYS, rid))
        keys = []
        while True:
            ftype, fid, p = self.recv_frame()
            assert fid == rid
            if ftype == KEY:
                version, algo, bits, _created = struct.unpack_from(">BBHI", p)
                fpr = [v for t, v in tlvs(p[8:]) if t == 0x18][0]
                keys.append({"version": version, "algo": algo, "bits": bits, "fpr": fpr.hex().upper()})
            elif ftype == RESULT:
                assert parse_result(p)["status"] == 0
                return keys


def parse_prometheus(text):
    vals = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            vals[k] = float(v)
    return vals


def stats_once_unsent_settles(probe, period=0.2):
    """The daemon's stats (a Client's STATS, parsed) once
    pgpdecd_unsent_bytes is above 0 and the same twice, period seconds
    apart (at most 100 periods)."""
    last, st = -1, None
    for _ in range(100):
        time.sleep(period)
        st = parse_prometheus(probe.stats())
        if st["pgpdecd_unsent_bytes"] == last and last > 0:
            break
        last = st["pgpdecd_unsent_bytes"]
    return st
