"""Kernel receive timestamps: when bytes reached a socket, on the monotonic clock.

Linux stamps every received packet (`SO_TIMESTAMPNS`); `recvmsg` hands the stamp of the newest
packet it read as ancillary data, also on TCP sockets. The runner's transport uses it for when
an answer's bytes reached the client, the simulator for when a request's bytes reached the
server: a busy event loop that reads late then does not move either time.

Input: a socket (`enable`), `recvmsg` ancillary data and a monotonic clock (`arrival`).
Output: the arrival time on that clock. Elsewhere than Linux `SO_TIMESTAMPNS` is None and
`arrival` is the clock's now (the time of the read).

One read can hold several packets (those that came while nobody read the socket: the kernel
merges them and keeps the newest stamp). `data_segments` counts the data packets a TCP socket
has received so far (`tcpi_data_segs_in`), so a reader can tell a read of one packet, whose
stamp is exact for all its bytes, from a read of several, whose first bytes came earlier.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from collections.abc import Callable

SO_TIMESTAMPNS = 35 if sys.platform.startswith("linux") else None  # SO_TIMESTAMPNS_OLD
CMSG_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0


# struct tcp_info (linux/tcp.h): __u32 tcpi_data_segs_in at byte 152 (Linux 4.6 and later)
_TCP_INFO = getattr(socket, "TCP_INFO", None) if sys.platform.startswith("linux") else None
_DATA_SEGS_IN = 152
_TCP_INFO_SIZE = 160


def data_segments(sock: socket.socket) -> int | None:
    """Output: how many packets with data `sock` (TCP) has received so far, or None where the
    kernel does not say (not Linux, or a kernel before 4.6)."""
    if _TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_SIZE)
    except OSError:
        return None
    if len(info) < _DATA_SEGS_IN + 4:
        return None
    return struct.unpack_from("@I", info, _DATA_SEGS_IN)[0]


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp what `sock` receives. Output: True when it will."""
    if SO_TIMESTAMPNS is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def arrival(ancillary: list[tuple[int, int, bytes]], clock: Callable[[], float]) -> float:
    """Input: recvmsg ancillary data. Output: when the bytes reached the socket, on `clock`:
    now minus the age of the kernel's receive timestamp (realtime clock; only the age is used,
    clamped to [0, 1 s] so a wall-clock step cannot move it far)."""
    now = clock()
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack_from("@qq", data)
            age = (time.time_ns() - (sec * 1_000_000_000 + nsec)) / 1e9
            return now - min(max(age, 0.0), 1.0)
    return now
