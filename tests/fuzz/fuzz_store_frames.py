"""Fuzz target: the store server's frame parser and request handlers (csrc/distributed/store/
server.c + ops.c) through the test hook _C._store_feed, which runs one client's byte stream
over a socketpair through the server's own buffers, framing and handlers.

The input is read as a small program (structure-aware: libFuzzer's mutations become new op
sequences, field values and lengths, plus raw and mis-framed bytes), see build_stream(). The
property: the server never crashes (run it under tools/sanitize.sh for memory errors), answers
only with well-formed frames (the hook checks every reply) and closes a client that breaks
the protocol. Coverage feedback comes from this Python builder only: gcc has no libFuzzer
instrumentation, so the C side is explored by the structured generation, not guided by it.

    python tests/fuzz/fuzz_store_frames.py [libFuzzer flags] NEW_CORPUS tests/fuzz/corpus/store
"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

MAGIC, VERSION = 0x54534443, 1
HELLO, SET, GET, ADD, WAIT, CHECK, CAS, DELETE, NUM_KEYS, APPEND = range(1, 11)
TOKEN = b"fuzz-token"


class _Reader:
    """Consumes the fuzzer's bytes as small integers and strings (zeros once they run out)."""

    def __init__(self, data):
        self.d, self.i = data, 0

    def left(self):
        return self.i < len(self.d)

    def take(self, n):
        b = self.d[self.i:self.i + n]
        self.i += n
        return b

    def u8(self):
        return (self.take(1) or b"\0")[0]

    def u32(self):
        return struct.unpack("<I", self.take(4).ljust(4, b"\0"))[0]

    def blob(self, cap):
        return self.take(self.u8() % (cap + 1))


def _str(b):
    return struct.pack("<I", len(b)) + b


def _frame(op, payload):
    return struct.pack("<IB", 1 + len(payload), op) + payload


def _payload(op, r):
    """A plausible payload for op from the reader: keys from a small alphabet (so ops meet
    the same keys), waits of 0 ms or "forever", counters as decimal text."""
    key = lambda: b"k%d" % (r.u8() % 4)                     # noqa: E731
    if op in (SET, APPEND):
        return _str(key()) + r.blob(40)
    if op == GET:
        return struct.pack("<Q", (0, 1, 1 << 60)[r.u8() % 3]) + _str(key())
    if op == ADD:
        return struct.pack("<q", struct.unpack("<i", struct.pack("<I", r.u32()))[0]) + _str(key())
    if op in (WAIT, CHECK):
        keys = [key() for _ in range(r.u8() % 4)]
        head = struct.pack("<Q", (0, 5, 1 << 60)[r.u8() % 3]) if op == WAIT else b""
        return head + struct.pack("<I", len(keys)) + b"".join(_str(k) for k in keys)
    if op == CAS:
        return _str(key()) + _str(r.blob(8)) + r.blob(8)
    if op == DELETE:
        return _str(key())
    if op == HELLO:
        return struct.pack("<II", MAGIC, (VERSION, VERSION, 2)[r.u8() % 3]) + \
            (TOKEN, b"wrong", b"")[r.u8() % 3]
    return b""                                               # NUM_KEYS, unknown ops


def build_stream(data):
    """(stream, step, token) from the fuzzer's bytes."""
    r = _Reader(data)
    flags, step = r.u8(), r.u8() % 17
    token = TOKEN if flags & 1 else None
    out = bytearray()
    if flags & 2:                                            # start authenticated
        out += _frame(HELLO, struct.pack("<II", MAGIC, VERSION) + (token or b""))
    while r.left() and len(out) < 1 << 16:
        kind = r.u8() % 16
        if kind < 11:                                        # ops 0 (invalid) .. 10
            payload = _payload(kind, r)
            cut = r.u8()
            if cut >= 240:                                   # a short or overlong payload
                payload = payload[:len(payload) - (cut - 239)] if cut < 248 else \
                    payload + r.blob(8)
            out += _frame(kind, payload)
        elif kind < 13:                                      # raw bytes
            out += r.blob(64)
        elif kind == 13:                                     # a length field that lies
            out += struct.pack("<IB", (0, 1, 0xFFFFFFFF, 2 << 20, r.u32())[r.u8() % 5],
                               r.u8() % 12) + r.blob(16)
        else:                                                # a frame cut short (ends stream)
            f = _frame(SET, _str(b"k0") + r.blob(40))
            out += f[:r.u8() % len(f)]
            break
    return bytes(out), step, token


def one_input(data):
    from cddp import _C
    stream, step, token = build_stream(data)
    replies, sent, dropped = _C._store_feed(stream, step, token)
    assert 0 <= sent <= len(stream) and replies >= 0 and dropped in (0, 1), (replies, sent, dropped)


def main():
    import atheris
    atheris.instrument_func(build_stream)
    atheris.instrument_func(_payload)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
