"""FLOPs and bytes of a recorded op call, from the shapes and dtypes the trace kept.

The ops real traces are made of are counted in plain Python (`trace.op_rules`: the same
answer as the replay, from torch's shape rules and the same counting rules); any other call
is replayed on torch's meta device through the one formula registry (`trace.op_replay`).
Loading torch costs seconds and about 200 MB, more than reading a small trace, so every
replayed call's cost is also kept in a memo file in the user's cache folder
($XDG_CACHE_HOME, else ~/.cache, then ceiling/): a trace whose calls were all seen before
(the next step, rank or run of the same model: same ops, same shapes) is costed without
torch. The memo's name carries a fingerprint of the installed torch and of the counting
rules' source, so a change to either starts a new memo instead of reading stale counts.

`cost(...)` answers None for an op it has no rule for (`aten::linear`, an autograd node,
a user annotation): the caller then looks at the ops nested inside it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import astuple
from importlib import metadata
from pathlib import Path

from ceiling.trace import op_rules
from ceiling.trace.traced_op_cost import TracedOpCost

# A memo past this many calls is started afresh: read whole on a trace's first unseen call,
# it must stay small beside the trace (a model's distinct calls: 50-1,000 in real traces).
MEMO_MAX_ENTRIES = 20_000
MEMO_MAX_KEY_CHARS = 4_000  # a call recorded with more text than this is not kept

# Bytes per element of the C++ scalar types the profiler writes ("Input type")
_ELEMENT_BYTES = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "int64_t": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
}


def element_size(type_name: str) -> int | None:
    return _ELEMENT_BYTES.get(type_name)


def cost(name: str, args: dict) -> TracedOpCost | None:
    """The cost of one recorded call; None when the op has no rule of its own."""
    if not name.startswith("aten::"):
        return None
    dims = args.get("Input Dims")
    types = args.get("Input type")
    shaped = isinstance(dims, list) and isinstance(types, list) and len(dims) == len(types)
    concrete, strides = args.get("Concrete Inputs"), args.get("Input Strides")
    if shaped:
        # repr: the cheapest exact text of the nested lists (it never writes a NUL itself)
        key = "\0".join((name, repr(dims), repr(types), repr(concrete), repr(strides)))
    else:
        key = name  # no shapes: the op's kind alone is known
    hit = _RULED.get(key, _MISSING)
    if hit is not _MISSING:
        return hit
    ruled = op_rules.rule_cost(name, dims if shaped else None, types, concrete, strides)
    if ruled is not op_rules.UNSURE:
        hit = _RULED[key] = None if ruled is None else TracedOpCost(*ruled)
        return hit
    hit = _MEMO.get(key, _MISSING)
    if hit is _MISSING:
        _load_memo()
        hit = _MEMO.get(key, _MISSING)
    if hit is _MISSING:
        from ceiling.trace import op_replay

        if shaped:
            hit = op_replay.replayed(name, dims, types, concrete, strides)
        else:
            hit = op_replay.kind_only(name)
        _MEMO[key] = hit
        if len(key) <= MEMO_MAX_KEY_CHARS:
            _NEW.add(key)
    return hit


_MEMO: dict[str, TracedOpCost | None] = {}
_RULED: dict[str, TracedOpCost | None] = {}  # calls costed by `op_rules`: never in the memo file
_NEW: set[str] = set()  # keys counted in this process and not yet in the memo file
_LOADED: set[Path] = set()
_MISSING = object()


def memo_path() -> Path | None:
    """The memo file of this torch and these counting rules; None where there is no cache
    folder to keep it in (no home directory)."""
    try:
        from ceiling.records import cache_folder

        return cache_folder() / f"trace-op-costs-{_fingerprint()}.json"
    except (OSError, RuntimeError):
        return None


def save_memo() -> None:
    """Add the costs counted in this process to the memo file (merged with what other
    processes wrote meanwhile, replaced whole). A cache folder that cannot be written only
    means the next run replays again."""
    if not _NEW:
        return
    from ceiling.records import replace_whole

    path = memo_path()
    if path is None:
        return
    _load_memo(path, again=True)
    kept = _MEMO if len(_MEMO) <= MEMO_MAX_ENTRIES else {k: _MEMO[k] for k in _NEW}
    text = json.dumps(
        {
            k: None if v is None else astuple(v)
            for k, v in kept.items()
            if len(k) <= MEMO_MAX_KEY_CHARS
        }
    )
    try:
        replace_whole(text.encode(), path)
    except OSError:
        return
    _NEW.clear()


def _load_memo(path: Path | None = None, again: bool = False) -> None:
    path = path or memo_path()
    if path is None or (path in _LOADED and not again):
        return
    _LOADED.add(path)
    try:
        stored = json.loads(path.read_text())
        found = {k: None if v is None else TracedOpCost(*v) for k, v in stored.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return  # none yet, or unreadable: it is rewritten whole on the next save
    for k, v in found.items():
        _MEMO.setdefault(k, v)


_FINGERPRINT: list[str] = []


def _fingerprint() -> str:
    """torch's version and the source of every module the count runs through."""
    if not _FINGERPRINT:
        digest = hashlib.sha256()
        try:
            digest.update(metadata.version("torch").encode())
        except metadata.PackageNotFoundError:
            digest.update(b"no torch distribution")
        root = Path(__file__).resolve().parents[1]
        sources = sorted((root / "profile").glob("*.py"))
        sources += [root / "trace" / f for f in ("op_replay.py", "op_cost.py", "traced_op_cost.py")]
        sources += sorted((root / "trace" / "op_rules").glob("*.py"))
        sources += [root / "vocabulary.py"]
        sources += [root / "model" / "attention.py", root / "model" / "mfu.py"]
        for f in sources:
            digest.update(f.name.encode())
            digest.update(f.read_bytes())
        _FINGERPRINT.append(digest.hexdigest()[:16])
    return _FINGERPRINT[0]
