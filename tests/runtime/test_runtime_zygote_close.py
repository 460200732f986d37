"""Closing a cluster never raises because its zygote is slow to die.

Found by `python -m labkit.bench many` on a loaded 2-core machine (4 clusters released together):
the zygote, killed after its 1 s grace, took more than another second to be reaped, and
`Cluster.close()` raised subprocess.TimeoutExpired out of `Zygote.close`.
"""
import socket
import subprocess
import threading

from labkit.runtime.local.zygote import Zygote


class _SlowToDie:
    """A process that outlives every wait, as a killed zygote did under load."""
    args = ["zygote"]

    def __init__(self):
        self.killed = False
        self.waits = []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        raise subprocess.TimeoutExpired(self.args, timeout)

    def kill(self):
        self.killed = True


def test_zygote_close_kills_and_returns_when_the_process_is_slow_to_go():
    z = Zygote.__new__(Zygote)                    # only what close() touches
    z.sock, other = socket.socketpair()
    z.proc = _SlowToDie()
    z._reader = threading.Thread(target=lambda: None)
    z._reader.start()
    z.close()                                      # must not raise
    assert z.proc.killed and z.proc.waits[0] == 1.0 and z.proc.waits[1] >= 5.0
    assert z.sock.fileno() == -1
    other.close()
