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
    "validate": "predicts every published run of the validation corpus (a minute or two)",
}
# Forms that run although their subcommand measures: small enough for a test.
RUN_ANYWAY = ("bench matmul --dtype fp32 --sizes 256", "validate --kinds decode --rows")
FLAGS_THAT_MEASURE = {
    "--measure": "times real work on this machine",
    "--calibrate": "reads a measured run the page's previous command wrote from a server",
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


def _opened(text: str, most: bool) -> str:
    """`text` with its optional parts (brackets, nested too) dropped, or opened taking the
    first of each group's `a | b` alternatives."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "[":
            out.append(text[i])
            i += 1
            continue
        depth, j = 1, i + 1
        while j < len(text) and depth:
            depth += {"[": 1, "]": -1}.get(text[j], 0)
            j += 1
        if most:
            inner = _opened(text[i + 1 : j - 1], most)
            out.append(" " + _first_alternative(inner).strip())
        i = j
    return " ".join("".join(out).split())


def _first_alternative(text: str) -> str:
    return text.split(" | ")[0] if " | " in text else text.split("|")[0]


def _forms_of_table_cell(cell: str) -> list[str]:
    cell = cell.replace("\\|", "|")
    least, most = _opened(cell, False), _opened(cell, True)
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


def python_blocks(markdown: str) -> list[str]:
    """The fenced Python examples of a page, each as written."""
    return re.findall(r"```python\n(.*?)```", markdown, re.S)


def workdir(tmp_path, monkeypatch) -> None:
    """Run a page's commands in `tmp_path` (anything they write stays out of the tree),
    beside the file the pages name as their own measurements."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "measurements.csv").write_text(MEASUREMENTS)


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


# (command pattern, figure its output must show); the first matching pattern counts.
KEY_FIGURES = [
    # Llama-3-8B bf16 on an H100 SXM (80 GiB = 85.9 GB): weights 16.06 GB, KV 128 KiB per
    # token; 130 sequences of 4,097 tokens fit, batch 256 needs 153.5 GB
    (r"^decode llama-3-8b .*--batch 1,8,64,256 --context 4096$", r"256 .* does not fit.*130"),
    (r"^decode llama-3-8b .*--weights int8 --tp 2", r"tensor parallel over 2 devices"),
    (r"^decode llama-3-70b .*--tp 8", r"tensor parallel over 8 devices"),
    (r"^decode llama-3-8b", r"Decode ceiling at context 4,096 \(the default"),
    (r"^info", r"fp32"),
    # 1/(1 − 0.95) = 20; S(256) = 1/(0.05 + 0.95/256) = 18.61; S(64) = 15.42
    (r"^amdahl 0\.95 -n 256", r"18\.6"),
    (r"^amdahl 0\.95 -n (8,)?64", r"15\.4"),
    # Gustafson: N − α(N − 1) = 8 − 0.1·7 = 7.3
    (r"^gustafson --serial 0\.1 -n 8", r"7\.3"),
    (r"^specs h100-sxm", r"H100"),
    (r"^specs", r"mi300x"),
    (r"^plan llama-3-8b", r"MFU"),
    # DeepSeek-V3 entered with its main axes: the search switches on what the run used.
    (r"^plan deepseek-v3", r"features switched on: expert all-to-all overlapped .*DeepEP"),
    (r"^plan gpt3-175b", r"MFU"),
    # NeMo's recipe named with its 16 bytes of state; the straggler at 1 % over 256 devices:
    # 0.01 · √(2 ln 256) = 3.3 % of the pipeline time
    (
        r"^plan llama-3-70b .*--framework nemo --step-jitter 0\.01",
        r"nemo recipe: state 16 bytes a parameter.*0\.01·√\(2 ln 256\) = 3\.3%",
    ),
    # attention 1×32 heads×4096²×128: the same 275 GFLOP naive or fused; fused is compute-bound
    (r"^roofline .*--op attention:1,32,4096,128$", r"\(fused\) 275 G .* compute"),
    # matmul 4096³: 2·4096³ = 137.4 GFLOP
    (r"^roofline .*matmul:4096x4096x4096", r"137 G"),
    # gpt:tiny's counted forward FLOPs (checked exactly in tests/test_meta_counts.py)
    (r"^profile gpt:tiny --device meta", r"GFLOP"),
    (r"^bench matmul --dtype fp32 --sizes 256", r"fp32"),
    (r"^fit measurements\.csv", r"Amdahl"),
    (r"^models llama-3-8b", r"8\.03"),
    (r"^models", r"llama-3-8b"),
    # 1F1B, p = 4, m = 8: the bubble against the busiest stage's compute, (p − 1)/m = 3/8
    (r"^simulate pipeline -p 4 -m 8", r"bubble 37\.50%"),
    (r"^simulate straggler -n 256", r"256"),
    # Llama-3-8B fits one 80 GB H100: one GPU, one replica, and the simulated throughput
    (r"^serve llama-3-8b --spec h100-sxm$", r"TP 1 × PP 1 × 1 replicas.*output tokens/s"),
    # the load as given, and the simulated latencies it gives
    (
        r"^serve llama-3-8b --spec h100-sxm --rate 10 ",
        r"200 requests, 1000 in / 200 out.*Poisson, 10 requests/s.*TTFT .*TPOT",
    ),
    # the decode corpus scored by regime, held out: its base regime's row
    (r"^validate --kinds decode", r"decode expected .* held-out"),
    # a Blackwell decode: no published decode run on that generation was checked
    (r"^decode llama-2-7b --spec b200$", r"no published run like this was checked"),
    (r"^plan llama-3-70b --spec h100-sxm --gpus 64$", r"accuracy of the best plan's step: ±"),
]

# (N, seconds) of a strong-scaling run for `ceiling fit measurements.csv`: Amdahl p = 0.95
MEASUREMENTS = "n,time\n1,100\n2,52.5\n4,28.75\n8,16.875\n16,10.9375\n"
