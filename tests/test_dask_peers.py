"""`trace --dask ADDRESS` refuses, in one line and within its deadline, a peer that is not a
Dask scheduler: one that answers HTTP, one that accepts and stays silent, one that closes,
one that announces a message of exabytes. `--dask local` listens on 127.0.0.1 only."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ceiling.errors import CeilingError
from patience import HANG_S

pytest.importorskip("dask.distributed")

FOLDER = Path(__file__).parent / "data" / "traces-real" / "sampled_2rank"


@contextmanager
def peer(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A server on 127.0.0.1 that treats each connection with `answer`; yields its address."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:  # closed at the end of the test
                return
            held.append(connection)
            answer(connection)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        for connection in held:
            connection.close()


def http(connection: socket.socket) -> None:
    connection.recv(65536)
    connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


def http_at_once(connection: socket.socket) -> None:
    connection.sendall(b"HTTP/1.0 200 OK\r\n\r\n<html></html>")


def silent(connection: socket.socket) -> None:
    """Accepts and says nothing: the connection stays open until the test ends."""


def closes(connection: socket.socket) -> None:
    connection.close()


def exabytes(connection: socket.socket) -> None:
    connection.sendall(b"\xff" * 8)


def garbage_frames(connection: socket.socket) -> None:
    """A plausible length, then bytes that are no frames of Dask's protocol."""
    connection.sendall((24).to_bytes(8, "little") + b"\x01" + b"\x00" * 23)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (http, "is not a Dask scheduler: it began with b'HTTP/1.1'"),
        (http_at_once, "is not a Dask scheduler: it began with b'HTTP/1.0"),
        (exabytes, "is not a Dask scheduler: it began with b'\\xff"),
        (garbage_frames, "is not a Dask scheduler"),
        (closes, "no Dask scheduler answers"),
    ],
)
def test_a_peer_that_is_not_a_scheduler_is_refused_in_one_line(cli, answer, said):
    with peer(answer) as address:
        code, out, err = cli("trace", FOLDER, "--dask", address)
    assert code == 2 and out == ""
    assert err.startswith("error: dask: ") and said in err
    assert err.count("\n") == 1 and address in err


def test_a_silent_peer_is_refused_when_its_deadline_passes():
    from ceiling.trace.dask_peer import check_scheduler

    with peer(silent) as address, pytest.raises(CeilingError) as refused:
        check_scheduler(address, timeout_s=0.5)
    assert str(refused.value) == (
        f"dask: the peer at '{address}' is not a Dask scheduler: nothing came back within 0.5 s"
    )


def test_a_port_nobody_listens_on_is_refused():
    from ceiling.trace.dask_peer import check_scheduler

    with peer(silent) as address:
        pass  # closed: the port is free again
    with pytest.raises(CeilingError, match="no Dask scheduler answers at"):
        check_scheduler(address, timeout_s=5)


def test_an_address_without_a_port_is_refused():
    from ceiling.trace.dask_peer import check_scheduler

    with pytest.raises(CeilingError, match="is not a scheduler's address"):
        check_scheduler("tcp://127.0.0.1", timeout_s=5)


def test_a_real_scheduler_passes_the_check():
    from distributed import Scheduler

    from ceiling.trace.dask_peer import check_scheduler

    async def serve():
        async with Scheduler(host="127.0.0.1", port=0, dashboard=False) as scheduler:
            await _in_thread(check_scheduler, scheduler.address, HANG_S)

    import asyncio

    asyncio.run(serve())


async def _in_thread(function, *args):
    import asyncio

    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


def test_the_local_cluster_listens_on_loopback_without_a_dashboard():
    import psutil

    from ceiling.trace.engines import _dask_client

    def listening() -> set:
        return {
            c.laddr
            for c in psutil.Process().net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        }

    before = listening()
    client, cluster = _dask_client("local", HANG_S)
    try:
        opened = listening() - before
        assert opened and all(address.ip == "127.0.0.1" for address in opened)
        workers = list(cluster.scheduler_info["workers"])
        assert workers and all(w.startswith("tcp://127.0.0.1:") for w in workers)
        assert cluster.scheduler_spec["options"]["dashboard"] is False
        assert all(not w["options"]["dashboard"] for w in cluster.worker_spec.values())
    finally:
        client.close()
        cluster.close()


def test_dask_keeps_its_log_lines_and_warnings_off_stderr_unless_verbose():
    import io
    import logging
    import warnings

    from ceiling.cli.quiet import quiet_libraries

    shown = io.StringIO()
    handler = logging.StreamHandler(shown)  # as dask's own handler writes to stderr
    logger = logging.getLogger("distributed")
    logger.addHandler(handler)
    try:
        for verbose in (False, True):
            with warnings.catch_warnings(record=True) as warned:
                warnings.simplefilter("always")
                with quiet_libraries("distributed", verbose=verbose):
                    logging.getLogger("distributed.scheduler").warning("lost a worker %s", verbose)
                    warnings.warn_explicit("port taken", UserWarning, "x.py", 1, "distributed.node")
            assert ("lost a worker True" in shown.getvalue()) is verbose
            assert len(warned) == verbose
        assert "lost a worker False" not in shown.getvalue()
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize("answer", [silent, http])
def test_a_websocket_peer_that_never_finishes_the_handshake_is_refused(answer):
    """Only TCP peers are asked before dask connects; any other is given a deadline in all."""
    from ceiling.trace.engines import _dask_client

    with peer(answer) as address, pytest.raises(CeilingError) as refused:
        _dask_client(f"ws://{address}", 0.5)
    assert str(refused.value).startswith("dask: ")
    assert address in str(refused.value) and "\n" not in str(refused.value)


def test_a_connection_that_ends_in_time_is_handed_back_and_its_error_raised():
    from ceiling.trace.engines import _within

    assert _within(30, lambda: "client", "x") == "client"

    def refused():
        raise ConnectionRefusedError("refused")

    with pytest.raises(ConnectionRefusedError):
        _within(30, refused, "x")
