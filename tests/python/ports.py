"""Loopback ports for child processes, picked below the kernel's ephemeral range.

A port taken from ``bind(("127.0.0.1", 0))`` and released lies in the ephemeral range, where
any outgoing connection (a client, the browser driver) may take it before the child binds it.
Ports below that range are never handed out that way; a counter keeps this process's picks
apart and a start derived from the pid keeps concurrent processes apart. Mirrors
tests/common/ports.rs.
"""

import itertools
import os
import socket

FLOOR = 10_000


def _ephemeral_floor() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _kernel_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_COUNTER = itertools.count()


def free_port() -> int:
    """A loopback port nothing listened on a moment ago, outside the ephemeral range."""
    ceiling = _ephemeral_floor()
    if ceiling <= FLOOR + 1_000:
        return _kernel_port()
    span = ceiling - FLOOR
    start = (os.getpid() * 7_919) % span
    for _ in range(span):
        port = FLOOR + (start + next(_COUNTER)) % span
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return _kernel_port()
