"""Where the ranks of a job meet: a file for ranks on this machine, a checked TCP store under
torchrun.

Local runs meet through a torch FileStore in the run's own folder: no port is opened, so
none can be taken by another program or reached from the network, and no host name is
looked up (torch's TCP store does a reverse DNS lookup of every peer's address). Gloo's
links between local ranks are bound to the loopback interface (GLOO_SOCKET_IFNAME).

Under torchrun with every rank on this machine (one agent, LOCAL_WORLD_SIZE ==
WORLD_SIZE), the ranks meet the same way, through a store file in the folder torchrun made
for this attempt (each rank's TORCHELASTIC_ERROR_FILE lies in it; a fresh folder per run
and restart, so no stale file), and gloo is bound to loopback: torch's TCP store client
looks up the host name of the address it connects to (a reverse DNS query for 127.0.0.1,
which waits for a DNS server on a machine without one), and gloo's default device looks up
this machine's name; neither happens then.

Otherwise under torchrun (or any launcher setting RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT), the variables are checked first, so a bad value or a busy port is one line;
rank 0 opens the store's listening socket itself: on the loopback address alone when
MASTER_ADDR is one, on every interface only when other machines must reach it.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from ceiling.errors import InvalidInput

# The run's store file, set by the local launcher in each worker's environment.
STORE_VAR = "CEILING_DIST_STORE"
# The store file's name in torchrun's folder for the attempt, when every rank is local.
TORCHRUN_STORE = "ceiling-store"


def loopback_interface() -> str | None:
    """The name of the interface holding 127.0.0.1 ("lo" on Linux), if any."""
    try:
        import psutil

        for name, addrs in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
                return name
    except (ImportError, OSError):
        pass
    return None


def local_env(store_path: str) -> dict[str, str]:
    """Variables a locally spawned rank needs beside RANK/WORLD_SIZE: the store file, and
    gloo bound to loopback."""
    env = {STORE_VAR: store_path}
    lo = loopback_interface()
    if lo:
        env["GLOO_SOCKET_IFNAME"] = lo
    return env


@dataclass(frozen=True)
class LauncherEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int


def _whole(name: str, env: dict[str, str], low: int, high: int | None = None) -> int:
    text = env.get(name, "")
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(f"{name}={text!r} in the environment is not a whole number") from None
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f"at least {low}"
        raise InvalidInput(f"{name}={value} in the environment must be {bound}")
    return value


def launcher_env(env: dict[str, str] | None = None) -> LauncherEnv:
    """The env:// variables, checked: whole numbers in range and a non-empty address."""
    env = dict(os.environ if env is None else env)
    world = _whole("WORLD_SIZE", env, 1)
    rank = _whole("RANK", env, 0, world - 1)
    port = _whole("MASTER_PORT", env, 1, 65535)
    addr = env.get("MASTER_ADDR", "").strip()
    if not addr:
        raise InvalidInput("MASTER_ADDR in the environment is empty")
    local = _whole("LOCAL_RANK", env, 0) if "LOCAL_RANK" in env else rank
    return LauncherEnv(rank, world, local, addr, port)


def _listen(addr: str, port: int) -> socket.socket:
    """A listening socket on exactly (addr, port), or one line saying why not."""
    try:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise InvalidInput(f"MASTER_ADDR={addr!r} does not resolve: {exc.strerror}") from None
    family, _, _, _, sockaddr = infos[0]
    if not ipaddress.ip_address(sockaddr[0]).is_loopback:
        # other machines connect to it: every interface (the address they see may differ)
        sockaddr = ("::", port) if family == socket.AF_INET6 else ("0.0.0.0", port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InvalidInput(
                f"MASTER_PORT={port} on {addr} is in use by another program; choose a free "
                "port (or unset MASTER_PORT and the other variables to run locally)"
            ) from None
        raise InvalidInput(f"cannot listen on {addr}:{port} (MASTER_ADDR/PORT): {exc}") from None
    return sock


def store_file(env: dict[str, str] | None = None) -> str | None:
    """The store file the ranks meet through, or None when they need a TCP store: the local
    launcher's, or one in torchrun's folder for this attempt when every rank is local."""
    env = dict(os.environ if env is None else env)
    if env.get(STORE_VAR):
        return env[STORE_VAR]
    error_file = env.get("TORCHELASTIC_ERROR_FILE", "")
    world = env.get("WORLD_SIZE")
    one_agent = env.get("GROUP_WORLD_SIZE", "1") == "1"
    if not error_file or not one_agent or env.get("LOCAL_WORLD_SIZE") != world:
        return None
    attempt = Path(error_file).parent.parent  # <log dir>/<run>_xxxx/attempt_N/<rank>/
    return str(attempt / TORCHRUN_STORE) if attempt.is_dir() else None


def _wait_for_master(env, timeout_s: float) -> None:
    """Wait until rank 0's store listens, in Python: torch's own client, left to time out,
    prints tens of lines of C++ stack before the error can be told in one."""
    import socket
    import time

    deadline = time.monotonic() + max(timeout_s, 1.0)
    while True:
        try:
            socket.create_connection((env.master_addr, env.master_port), timeout=1.0).close()
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise InvalidInput(
                    f"rank {env.rank} could not reach the rendezvous at {env.master_addr}:"
                    f"{env.master_port} (MASTER_ADDR/PORT) within {timeout_s:g} s: nothing "
                    f"listens there ({exc.strerror or exc}); start rank 0 first, or check "
                    "MASTER_ADDR and MASTER_PORT"
                ) from None
            time.sleep(0.2)


def init_group(backend: str, timeout_s: float) -> None:
    """init_process_group for this rank: through a store file (see `store_file`), or
    through a TCP store on MASTER_ADDR:MASTER_PORT."""
    import torch.distributed as dist

    timeout = timedelta(seconds=max(timeout_s, 1.0))
    store_path = store_file()
    if store_path:
        lo = loopback_interface()
        if lo and "GLOO_SOCKET_IFNAME" not in os.environ:
            os.environ["GLOO_SOCKET_IFNAME"] = lo  # every rank is here: no name to look up
        world = int(os.environ["WORLD_SIZE"])
        store = dist.FileStore(store_path, world)
        dist.init_process_group(
            backend, store=store, rank=int(os.environ["RANK"]), world_size=world, timeout=timeout
        )
        return
    env = launcher_env()
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        dist.init_process_group(backend, timeout=timeout)  # torchrun's agent holds the store
        return
    # The store owns the listening socket from here on (it closes it when it is done).
    fd = _listen(env.master_addr, env.master_port).detach() if env.rank == 0 else None
    if env.rank != 0:
        _wait_for_master(env, timeout_s)
    try:
        store = dist.TCPStore(
            env.master_addr,
            env.master_port,
            env.world_size,
            is_master=env.rank == 0,
            timeout=timeout,
            master_listen_fd=fd,
        )
    except (RuntimeError, OSError) as exc:
        raise InvalidInput(
            f"rank {env.rank} could not reach the rendezvous at {env.master_addr}:"
            f"{env.master_port} (MASTER_ADDR/PORT) within {timeout_s:g} s: "
            f"{str(exc).splitlines()[0][:200]}"
        ) from None
    dist.init_process_group(
        backend, store=store, rank=env.rank, world_size=env.world_size, timeout=timeout
    )
