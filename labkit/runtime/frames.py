"""Reading a rank's messages without ever blocking.

multiprocessing's Connection.recv blocks until a whole message is in, with no deadline, so a
rank that sent half a message (or garbage: two threads writing at once) would hang the
notebook for good. `Inbox` reads only the bytes that have arrived, frames them as
multiprocessing frames them (a 4-byte big-endian length, or -1 and an 8-byte length) and
unpickles each whole message. A message that cannot be decoded sets `garbled`: that rank has
failed. A closed connection sets `eof`.
"""
import os
import pickle
import select
import struct

MAX_MESSAGE = 1 << 40          # a header announcing more than this is garbage, not a message


class Inbox:
    def __init__(self):
        self._buf = bytearray()
        self.eof = False
        self.garbled = None        # why a message could not be decoded, once one could not

    def read(self, fd: int, limit: int = 64 << 20) -> list:
        """Read what has arrived on `fd` (at most `limit` bytes), return the whole messages."""
        got = 0
        while got < limit and not self.eof:
            try:
                ready, _, _ = select.select([fd], [], [], 0)
                if not ready:
                    break
                data = os.read(fd, 1 << 20)
            except (OSError, ValueError):
                data = b""
            if not data:
                self.eof = True
                break
            self._buf += data
            got += len(data)
        return self._messages()

    def _messages(self) -> list:
        msgs, buf = [], self._buf
        while self.garbled is None and len(buf) >= 4:
            n, = struct.unpack("!i", buf[:4])
            head = 4
            if n == -1:
                if len(buf) < 12:
                    break
                n, = struct.unpack("!Q", buf[4:12])
                head = 12
            if n < 0 or n > MAX_MESSAGE:
                self.garbled = f"a message header announced {n} bytes"
                break
            if len(buf) < head + n:
                break
            try:
                msgs.append(pickle.loads(bytes(buf[head:head + n])))
            except Exception as exc:          # noqa: BLE001 - any decoding error
                self.garbled = f"{type(exc).__name__}: {exc}"
            del buf[:head + n]
        return msgs
