"""Records on disk and on stdout: plain JSON values and atomic writes.

JSON has no Infinity or NaN, so non-finite floats become null. Files are written to a
temporary file in the same folder and renamed over the target, so a reader never sees half
a file and an interrupted run never leaves one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from ceiling.errors import InvalidInput
from ceiling.text import encodable


def jsonable(obj: Any) -> Any:
    """Plain JSON types: dataclasses, numpy scalars and paths converted; inf and nan -> None;
    lone surrogates in text written as their escapes (no JSON reader is obliged to take them)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: jsonable(v) for k, v in dataclasses.asdict(obj).items()}
    if isinstance(obj, dict):
        return {encodable(str(k)): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, str):
        return encodable(obj)
    if isinstance(obj, Path):
        return encodable(str(obj))
    if hasattr(obj, "item") and callable(obj.item):  # numpy and torch scalars
        return jsonable(obj.item())
    return obj


def _cannot_write(p: Path, exc: OSError) -> InvalidInput:
    return InvalidInput(f"cannot write {p}: {exc.strerror or exc}")


def _existing_ancestor(p: Path) -> Path:
    """The nearest folder above `p` that exists (the one a write would create folders in)."""
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent


def check_writable(
    path: str | Path, suffixes: tuple[str, ...] = (), create_folders: bool = True
) -> Path:
    """Fail now, with one line, if a file could not be written at `path` later.

    Commands call this before any work, so a bad output path costs nothing: a wrong file
    suffix, a folder given as the file, a file standing where a folder should be, a missing
    folder (unless `create_folders`), or a folder the system refuses to write to (/proc,
    a read-only mount). A temporary probe file is created beside the target and removed.
    """
    p = Path(path)
    if suffixes and p.suffix.lower() not in suffixes:
        raise InvalidInput(f"{p}: the file name must end in {' or '.join(suffixes)}")
    if p.is_dir():
        raise InvalidInput(f"cannot write {p}: it is a folder; give a file name")
    if p.exists() and not p.is_file():
        raise InvalidInput(f"cannot write {p}: it is a device or special file, not a file")
    above = _existing_ancestor(p)
    if not above.is_dir():
        raise InvalidInput(f"cannot write {p}: {above} is a file, not a folder")
    if above != p.parent and not create_folders:
        raise InvalidInput(f"cannot write {p}: folder {p.parent} does not exist")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".probe", dir=p.parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise InvalidInput(
            f"cannot write {p}: folder {p.parent} refuses new files ({exc.strerror or exc})"
        ) from None
    return p


def write_text_atomic(text: str, path: str | Path) -> Path:
    """Write `text` to a temp file beside `path`, then rename it over `path`.

    An operating-system refusal (no such folder, no permission, disk full) is raised as
    InvalidInput naming the path, so the CLI prints one line instead of a traceback.
    """
    return write_bytes_atomic(encodable(text).encode("utf-8"), path)


def write_bytes_atomic(data: bytes, path: str | Path) -> Path:
    """`data` written as write_text_atomic writes text: whole, or not at all."""
    try:
        return replace_whole(data, path)
    except OSError as exc:
        raise _cannot_write(Path(path), exc) from None


def cache_folder() -> Path:
    """ceiling's folder in the user's cache: $XDG_CACHE_HOME (else ~/.cache)/ceiling. Raises
    RuntimeError where there is no home folder to find it in."""
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "ceiling"


def replace_whole(data: bytes, path: str | Path) -> Path:
    """`data` in a temp file beside `path`, renamed over it; the system's refusal (disk
    full) is raised as it came, with nothing left behind."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # mkstemp creates the file private (0600); a record is as readable as any new file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def write_json_atomic(data: Any, path: str | Path) -> Path:
    """`data` as indented JSON (see jsonable), written atomically."""
    return write_text_atomic(json.dumps(jsonable(data), indent=2) + "\n", path)
