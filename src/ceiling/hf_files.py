"""Find and read a Hugging Face `config.json`: a file, a folder holding one, or a hub id.

Never uses the network: a hub id (``org/name``) resolves only to a copy already in the local
Hugging Face cache, and only when `huggingface_hub` (installed with `transformers`) is.
"""

from __future__ import annotations

from pathlib import Path

from ceiling.errors import InvalidInput, MalformedFile
from ceiling.files import name_is_usable, read_json


def locate_config(ref: str) -> Path:
    """The config.json that `ref` (a path or a hub id) names."""
    text = ref.strip()
    if not text:
        raise InvalidInput("hf: needs a path to a config.json or its folder, e.g. hf:./llama")
    path = Path(text).expanduser()
    if not name_is_usable(path):
        read_json(path, "Hugging Face config.json")  # says what is wrong with the name
    if path.is_dir():
        path = path / "config.json"
        if not path.exists():
            raise InvalidInput(f"hf:{text}: the folder holds no config.json")
        return path
    if path.exists():  # a file, or something read_config will refuse by name
        return path
    if not _looks_like_hub_id(text):
        raise InvalidInput(
            f"hf:{text}: no such file or folder; pass the path to a config.json (or the "
            f"folder holding it)"
        )
    try:
        from huggingface_hub import try_to_load_from_cache  # noqa: F401
    except ImportError:
        raise InvalidInput(
            f"hf:{text}: no such file or folder; a hub id resolves only from the local Hugging "
            f"Face cache, which needs transformers (or huggingface_hub) installed; or pass "
            f"the path to a config.json"
        ) from None
    cached = _from_local_cache(text)
    if cached is None:
        raise InvalidInput(
            f"hf:{text}: not in the local Hugging Face cache (ceiling never downloads); "
            f"fetch it with `hf download {text} config.json` or pass the path "
            f"to a config.json"
        )
    return cached


def _looks_like_hub_id(text: str) -> bool:
    return text.count("/") == 1 and not text.startswith(("/", ".", "~")) and " " not in text


def _from_local_cache(repo_id: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an id the hub library rejects is simply not in the cache
        return None
    return Path(found) if isinstance(found, str) else None


def read_config(ref: str) -> tuple[dict, str, str]:
    """(parsed config.json, a short model name, where it was read) for `ref`."""
    path = locate_config(ref)
    raw = read_json(path, "Hugging Face config.json")
    if not isinstance(raw, dict):
        raise MalformedFile(f"{path} must hold a JSON object")
    folder = path.parent.name if path.name == "config.json" else path.stem
    if "snapshots" in path.parts:  # a cache copy: name it by its hub id
        folder = ref.strip()
    return raw, f"hf:{folder}", str(path)
