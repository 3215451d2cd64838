"""The terminal renderers every command and report table prints with: a console that
shows a user's strings as text, and a table whose figures are never cut."""

from __future__ import annotations

from typing import Any

from ceiling.text import printable


def console():
    """The terminal: no markup (a user's "[red]" is text) and no control characters (a
    user's escape sequence is shown, not obeyed) in anything printed as a string."""
    from rich.console import Console

    class SafeConsole(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            super().print(*(printable(o) if isinstance(o, str) else o for o in objects), **kwargs)

    return SafeConsole(highlight=False, markup=False)


def _is_number(value: Any) -> bool:
    if isinstance(value, (int, float)):
        return True
    try:
        float(str(value).replace(",", ""))
    except ValueError:
        return False
    return True


NAME_WIDTH = 28  # longest row name kept on one line; longer names fold
# A cell this short (a figure with its unit, "does not fit") is never broken across lines;
# a longer one breaks between words only, unless one word is longer than WORD_WIDTH.
WHOLE_CELL = 12
WORD_WIDTH = 32


def _width() -> int:
    """Columns of the terminal tables print to (80 on a pipe, as rich decides)."""
    from rich.console import Console

    return Console().width


def unbreakable_width(text: str) -> int:
    """Width of the longest piece of `text` that a line break must not split."""
    if len(text) <= WHOLE_CELL:
        return len(text)
    return min(WORD_WIDTH, max((len(w) for w in text.split()), default=0))


def table(
    title: str | None,
    columns: list[str],
    rows: list[list[Any]],
    caption: str | None = None,
    compact: bool = False,
):
    """A rich Table; numeric columns are right-aligned. `compact`: no vertical rules, for
    tables of many narrow columns that must fit 80 characters."""
    from rich import box
    from rich.table import Table

    rules = {}
    if compact:
        # one space between columns (the box's blank rule), none at the edges
        rules = {"box": box.SIMPLE_HEAD, "padding": (0, 0), "show_edge": False}
    title = printable(title) if title is not None else None
    caption = printable(caption) if caption is not None else None
    columns = [printable(c) for c in columns]
    t = Table(
        title=title,
        caption=caption,
        title_justify="left",
        caption_justify="left",
        min_width=len(title or "") + 4,
        **rules,
    )
    cells = [[printable(v if isinstance(v, str) else f"{v}") for v in r] for r in rows]
    least = [
        max([unbreakable_width(w) for w in col.split()] + [unbreakable_width(r[i]) for r in cells])
        for i, col in enumerate(columns)
    ]
    # words (an op's name, a figure and its unit) move to the next line whole when the
    # terminal has room for every column's longest; else the name column's words at least
    edges = (1 if compact else 3) * len(columns) + 1
    if sum(least) + edges > _width():
        least = least[:1] + [None] * (len(least) - 1)
    for i, col in enumerate(columns):
        numeric = bool(rows) and all(_is_number(r[i]) for r in rows if r[i] not in ("", "—"))
        # fold, never "…": a narrow terminal or a pipe (80 columns) must not cut a figure;
        # the first column names the row and stays whole (other columns wrap to make room)
        # unless a name is longer than NAME_WIDTH
        whole = (
            i == 0
            and not numeric
            and max([len(col)] + [len(f"{r[0]}") for r in rows]) <= NAME_WIDTH
        )
        t.add_column(
            col,
            justify="right" if numeric else "left",
            overflow="fold",
            no_wrap=whole,
            min_width=least[i],
        )
    for r in cells:
        t.add_row(*r)
    return t
