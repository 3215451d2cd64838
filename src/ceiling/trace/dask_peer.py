"""Is the peer at a Dask address a scheduler? Asked before dask itself connects, because dask
trusts its peer: it allocates whatever length the first eight bytes announce (an HTTP server's
`HTTP/1.1` reads as 7 EB and ends in MemoryError) and waits for the handshake with no deadline
(a peer that accepts and stays silent holds the command forever).

A Dask server writes its handshake as soon as it accepts a connection, before reading
anything: eight bytes of length, then the frames (`distributed.comm.tcp`), which decode to a
dict of the peer's settings. Here it is read with a deadline on every step and a cap on its
size, and decoded by dask's own protocol code."""

from __future__ import annotations

import socket
import struct
import time

from ceiling.errors import InvalidInput
from ceiling.text import printable

# A scheduler's handshake is a few hundred bytes: anything announcing more is not one.
HANDSHAKE_MAX_BYTES = 64 * 1024
LENGTH = struct.Struct("<Q")


def check_scheduler(address: str, timeout_s: float) -> None:
    """Refuse, in one line, an address where no Dask scheduler answers within `timeout_s`.

    Only TCP is read here (the default, and `tcp://`); TLS, websockets and the rest are left
    to dask, which ends their connect with its own deadline."""
    from distributed.comm import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        if scheme != "tcp":
            return
        host, port = parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(
            f"dask: {printable(address)!r} is not a scheduler's address ({exc})"
        ) from None
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as peer:
            peer.sendall(_our_handshake())  # an HTTP server answers it with its status line
            handshake = _read_handshake(peer, deadline)
    except TimeoutError:
        raise _not_a_scheduler(address, f"nothing came back within {timeout_s:g} s") from None
    except _NotDask as exc:
        raise _not_a_scheduler(address, str(exc)) from None
    except OSError as exc:
        raise InvalidInput(
            f"dask: no Dask scheduler answers at {printable(address)!r} ({exc.strerror or exc}); "
            "start one (dask scheduler) or pass 'local'"
        ) from None
    if not isinstance(handshake, dict) or "compression" not in handshake:
        raise _not_a_scheduler(address, "its first message is not a Dask handshake")


def _our_handshake() -> bytes:
    """The handshake a Dask client sends, framed as `distributed.comm.tcp` frames it."""
    import pickle
    import sys

    from distributed.protocol.core import dumps
    from distributed.protocol.utils import pack_frames

    said = {
        "compression": None,
        "python": tuple(sys.version_info)[:3],
        "pickle-protocol": pickle.HIGHEST_PROTOCOL,
    }
    packed = pack_frames(dumps(said))
    return LENGTH.pack(len(packed)) + packed


def _read_handshake(peer: socket.socket, deadline: float) -> object:
    from distributed.protocol.core import loads
    from distributed.protocol.utils import unpack_frames

    head = _read_exactly(peer, LENGTH.size, deadline)
    (size,) = LENGTH.unpack(head)
    if not 0 < size <= HANDSHAKE_MAX_BYTES:
        raise _NotDask(f"it began with {head!r}")
    body = _read_exactly(peer, size, deadline)
    try:
        frames, missing = unpack_frames(body, partial=True)
    except Exception:  # garbage decodes to any error: it is not a handshake either way
        return None
    if sum(missing) > HANDSHAKE_MAX_BYTES:
        raise _NotDask(f"its first message announces {sum(missing):,} bytes more")
    frames += [_read_exactly(peer, n, deadline) for n in missing]
    try:
        return loads(frames, deserialize=False)
    except Exception:  # garbage decodes to any error: it is not a handshake either way
        return None


def _read_exactly(peer: socket.socket, size: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        peer.settimeout(left)
        chunk = peer.recv(min(size - got, 65536))
        if not chunk:
            raise ConnectionResetError(0, "the peer closed the connection before its handshake")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class _NotDask(Exception):
    """What the peer sent instead of a handshake."""


def _not_a_scheduler(address: str, why: str) -> InvalidInput:
    return InvalidInput(f"dask: the peer at {printable(address)!r} is not a Dask scheduler: {why}")
