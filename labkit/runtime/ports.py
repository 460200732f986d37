"""Free TCP ports for a server that another process will bind later (a bench's torchrun; the tests'
JupyterLab, JupyterHub, slurmctld and kernels).

The usual way, bind port 0, read the port and close the socket, has a race: the port comes from
the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default),
the same range every outgoing connection takes its source port from, so on a busy machine (gloo's
connections, TCPStores, Jupyter's ZMQ sockets) another process can take it before the server binds
it ("Address already in use"; CI lost a run to it; jupyter/jupyter_client#487). `free_ports`
picks ports below that range, which the kernel never hands out by itself, checking that each can
be bound now; only a process that asks for that very port can still take it. Where there is no
room below the range (a system that made it start low), it falls back to port 0.
"""
import random
import socket

LOWEST = 20000          # above the registered services that commonly listen (databases, proxies)


def ephemeral_range() -> tuple:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999                   # Linux's default (macOS: 49152-65535)


def _bindable(port: int, host: str) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(n: int, host: str = "127.0.0.1") -> list:
    """`n` distinct ports that can be bound on `host` now, outside the ephemeral range."""
    lo, _ = ephemeral_range()
    room = lo - LOWEST
    tries = random.sample(range(LOWEST, lo), min(room, 20 * n + 200)) if room >= 100 * n else []
    ports = []
    for port in tries:
        if len(ports) == n:
            break
        if _bindable(port, host):
            ports.append(port)
    while len(ports) < n:                    # (no room below the range: the kernel's choice)
        with socket.socket() as s:
            s.bind((host, 0))
            if s.getsockname()[1] not in ports:
                ports.append(s.getsockname()[1])
    return ports


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def jupyter_kernel_ports() -> None:
    """Make jupyter_client's LocalPortCache, which picks the five ports of every kernel a
    KernelManager of this process starts (nbval's, JupyterLab's), take them from `free_ports`
    instead of binding port 0, still never handing out one port twice. Called by the tests'
    conftest.py and the test JupyterLab's server config (tests/support/browser_helpers.py)."""
    try:
        from jupyter_client.connect import LocalPortCache
    except ImportError:                                  # (no Jupyter: nothing starts kernels)
        return

    def find_available_port(self, ip: str) -> int:
        while True:
            port = free_ports(1, ip or "127.0.0.1")[0]
            if port not in self.currently_used_ports:
                self.currently_used_ports.add(port)
                return port

    LocalPortCache.find_available_port = find_available_port
