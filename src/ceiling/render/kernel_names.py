"""A GPU kernel's name as a table has room for."""

from __future__ import annotations


def short_kernel_name(name: str, width: int = 26) -> str:
    """A kernel's function name without 'void', namespaces, parameters and long templates."""
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "").split("(", 1)[0]
    fn, bracket, rest = text.partition("<")
    text = fn.rsplit("::", 1)[-1] + bracket + rest
    return text if len(text) <= width else text[: width - 1] + "…"
