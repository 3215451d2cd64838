"""The `ceiling ...` commands a Markdown page shows, and how a test checks each one.

A page shows commands in fenced shell blocks (``` sh / bash / console) and in the first cell
of a table (`ceiling decode MODEL [--batch 1,8] ...`). A table's optional parts in brackets
give two forms: the least (brackets dropped) and the most (brackets opened, the first of
`a|b`). Each form is either run in this process (exit 0 and its key figure checked) or, when
it measures this machine for long, needs a GPU or a file the page does not give, parsed by
the command line only (every option and argument must exist and convert), with the reason.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass

# Subcommands that measure this machine for seconds to minutes, with why they are parsed only.
MEASURES = {
    "report": "measures this machine and runs every analysis (a minute or more)",
    "bench": "runs the benchmarks on this machine (minutes; `bench matmul --sizes 256` runs)",
    "scale": "spawns torch.distributed workers and times them",
    "step": "times DataLoader workers over many steps",
    "repeat": "runs a model ten times per thread count",
    "trace": "reads a profiler trace the page names by a placeholder",
}
# Forms that run although their subcommand measures: small enough for a test.
RUN_ANYWAY = ("bench matmul --dtype fp32 --sizes 256",)
FLAGS_THAT_MEASURE = {
    "--measure": "times real work on this machine",
    "profile gpt:tiny --train --spec": "trains the model on this machine (tens of seconds)",
    "profile gpt:tiny --train --device cpu": "trains the model on this machine",
    "--device cuda": "needs a CUDA GPU",
    "--dask": "needs a Dask scheduler",
    "--plot": "draws a figure (each command's own tests check its figure; the form without runs)",
}
# Commands that price work on a device take an explicit datasheet when the page gives none,
# so the figure does not depend on this machine's saved profile.
NEEDS_DEVICE = ("roofline", "decode", "plan", "profile")
SPEC = ["--spec", "h100-sxm"]
# A page's placeholders, each replaced by a value of its kind (a whole word only).
PLACEHOLDERS = {
    "NAME": "h100-sxm",
    "MODEL": "llama-3-8b",
    "MODEL...": "llama-3-8b",
    "M": "gpt:tiny",
    "N": "2",
    "S": "512",
    "B": "8",
    "KEYS": "machine",
    "PATH": "trace.json",
    "FILE": "profile.json",
    "ADDRESS": "tcp://127.0.0.1:8786",
    "MxNxK": "256x256x256",
}


@dataclass(frozen=True)
class Form:
    args: list[str]  # after `ceiling`
    source: str  # the line on the page

    @property
    def text(self) -> str:
        return " ".join(self.args)

    def parse_only(self) -> str | None:
        """Why this form is parsed and not run, or None when it runs."""
        if any(self.text.startswith(r) for r in RUN_ANYWAY):
            return None
        for flag, why in FLAGS_THAT_MEASURE.items():
            if flag in self.text:
                return why
        return MEASURES.get(self.args[0]) if self.args else "empty"


def _forms_of_table_cell(cell: str) -> list[str]:
    cell = cell.replace("\\|", "|")
    least = re.sub(r"\s*\[[^\]]*\]", "", cell)

    def opened(m: re.Match) -> str:
        return " " + m.group(1).split("|")[0]

    most = re.sub(r"\s*\[([^\]]*)\]", opened, cell)
    return [least] if most == least else [least, most]


def commands(markdown: str) -> list[tuple[str, str]]:
    """(command after `ceiling`, the page's line) for every command the page shows."""
    out: list[tuple[str, str]] = []
    for block in re.findall(r"```(?:sh|bash|console|shell)\n(.*?)```", markdown, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("ceiling "):
                code = line.split(" #", 1)[0].strip()
                out.append((code.removeprefix("ceiling "), line))
    for cell in re.findall(r"^\| `(ceiling [^`]*)`", markdown, re.M):
        for part in cell.split("` / `"):
            for form in _forms_of_table_cell(part):
                out.append((form.removeprefix("ceiling "), cell))
    for cell in re.findall(r"^\| `ceiling [^`]*` / `([^`]*)`", markdown, re.M):
        for form in _forms_of_table_cell(cell):  # `simulate pipeline ...` / `simulate straggler`
            out.append((form.removeprefix("ceiling "), cell))
    return out


def forms(markdown: str) -> list[Form]:
    seen, out = set(), []
    for text, source in commands(markdown):
        args = [PLACEHOLDERS.get(a, a) for a in shlex.split(text)]
        device_given = {"--spec", "--profile", "--measure"} & set(args)
        if args and args[0] in NEEDS_DEVICE and not device_given:
            args += SPEC
        if " ".join(args) not in seen:
            seen.add(" ".join(args))
            out.append(Form(args, source))
    return out


def run(args: list[str]) -> tuple[int, str, str]:
    """Run `ceiling ARGS` in this process: (exit code, stdout, stderr)."""
    from ceiling.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code or 0
    return code, out.getvalue(), err.getvalue()


def parse(args: list[str]) -> None:
    """Parse `ceiling ARGS` as the command line would, without running it: a missing
    subcommand, an unknown option or a value that does not convert raises click's error."""
    import click
    import typer

    from ceiling.cli.app import app
    from ceiling.cli.params import check_numbers_everywhere

    command: click.Command = check_numbers_everywhere(typer.main.get_command(app))
    ctx, name, rest = click.Context(command, info_name="ceiling"), "ceiling", list(args)
    while isinstance(command, click.Group):
        if not rest:
            raise click.UsageError(f"`{name}` needs a subcommand")
        name, rest = rest[0], rest[1:]
        sub = command.get_command(ctx, name)
        if sub is None:
            raise click.UsageError(f"no such command {name!r}")
        command = sub
        if isinstance(sub, click.Group):
            ctx = click.Context(sub, info_name=name, parent=ctx)
    command.make_context(name, rest, parent=ctx)


def check(form: Form, key_figures: list[tuple[str, str]]) -> str:
    """Run or parse `form`; for a run, the first key figure whose command pattern matches must
    appear in the output. Returns what was done ("ran" or "parsed: why")."""
    why = form.parse_only()
    if why:
        parse(form.args)
        return f"parsed: {why}"
    code, out, err = run(form.args)
    assert code == 0, f"`ceiling {form.text}` exit {code}: {err.strip()[-500:]}"
    flat = " ".join(out.split())
    figures = [fig for pattern, fig in key_figures if re.search(pattern, form.text)]
    assert figures, f"`ceiling {form.text}`: give it a key figure in the test"
    assert re.search(figures[0], flat), f"`ceiling {form.text}`: no {figures[0]!r} in\n{out}"
    return "ran"
