"""The report as one self-contained HTML page: inline CSS, figures as data URIs, no scripts.

Nothing on the page is fetched: the page opens offline, prints cleanly and reads the same
without JavaScript.
"""

from __future__ import annotations

import base64
import re
from html import escape as html_escape
from importlib import resources

from ceiling.report.compose import Figure, Report, SectionResult, Table
from ceiling.text import printable

_NUMERIC = re.compile(r"^[−+-]?[\d.,]+(e[+-]?\d+)?\s*(×|%|[kMGTPE]?(FLOP/s|B/s|B|s|ms|µs|ns)?)?$")


def escape(text: str) -> str:
    """HTML-escaped, with control characters shown as escapes (file names may carry them)."""
    return html_escape(printable(text))


def render(report: Report, json_name: str | None = None) -> str:
    css = resources.files("ceiling.report").joinpath("report.css").read_text(encoding="utf-8")
    counts = {s: sum(r.status == s for r in report.sections) for s in ("ok", "skipped", "failed")}
    summary = f"{counts['ok']} of {len(report.sections)} sections ran"
    if counts["skipped"]:
        summary += f", {counts['skipped']} skipped"
    if counts["failed"]:
        summary += f", {counts['failed']} failed"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # forbid every fetch: the page must be complete on its own
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">",
        f"<title>ceiling report — {escape(report.host)}</title>",
        f"<style>\n{css}</style>",
        "</head>",
        "<body>",
        "<header>",
        f"<h1>ceiling report <small>{escape(report.host)}</small></h1>",
        f'<p class="meta">{escape(report.created)} · {escape(report.mode)} mode · '
        f"{escape(summary)} in {report.elapsed_s:.0f} s</p>",
        "</header>",
        _verdict(report),
        "<main>",
    ]
    for r in report.sections:
        parts.append(_section(r))
    parts += ["</main>", _footer(report, json_name), "</body>", "</html>", ""]
    return "\n".join(parts)


def _section(r: SectionResult) -> str:
    o = r.output
    out = [
        f'<section id="{escape(r.key)}" class="{escape(r.status)}" '
        f'data-status="{escape(r.status)}" data-figures="{len(o.figures)}">',
        f"<h2>{escape(r.title)} "
        f'<span class="badge {escape(r.status)}">{escape(r.status)}</span>{_busy_badge(r)}</h2>',
    ]
    if r.status != "ok":
        out.append(f'<p class="reason">{escape(r.reason or "")}</p>')
    if o.subject:
        cls = "subject demo" if o.demo else "subject"
        out.append(f'<p class="{cls}">{escape(o.subject)}</p>')
    if o.highlights:
        out.append('<dl class="highlights">')
        for h in o.highlights:
            err = f' <span class="err">{escape(h.error)}</span>' if h.error else ""
            out.append(
                f'<div class="{escape(h.kind)}"><dt>{escape(h.label)}</dt>'
                f"<dd>{escape(h.display)}{err}</dd></div>"
            )
        out.append("</dl>")
    for kind, block in o.blocks:
        if kind == "text":
            out.append(f"<p>{escape(block)}</p>")
        elif kind == "figure":
            out.append(_figure(block))
        else:
            out.append(_table(block))
    if o.notes:  # one footnote per section: the caveats and the method, once
        out.append(f'<p class="notes">{escape(" ".join(_sentence(n) for n in o.notes))}</p>')
    out.append("</section>")
    return "\n".join(out)


def _busy_badge(r: SectionResult) -> str:
    """A section measured while other work shared the machine: marked, the reasons on hover
    (the verdict says it once, with what to run again)."""
    if r.status != "ok" or not r.busy_reasons:
        return ""
    why = "; ".join(r.busy_reasons)
    return f' <span class="badge busy" title="{escape(why)}">busy machine</span>'


def _sentence(note: str) -> str:
    note = note.strip()
    note = note[:1].upper() + note[1:]
    return note if note.endswith((".", "!", "?")) else note + "."


def _verdict(report: Report) -> str:
    """The findings that matter most, first on the page, each tied to its JSON key."""
    if not report.verdict:
        return ""
    items = "".join(
        f'<li data-key="{escape(f["json_key"])}">{escape(f["text"])}</li>' for f in report.verdict
    )
    return (
        '<section id="verdict" class="verdict" aria-label="verdict">'
        f"<h2>Verdict</h2><ol>{items}</ol>"
        '<p class="legend"><span class="measured">measured here</span> '
        '<span class="modelled">modelled or datasheet, ± its validated error</span></p>'
        "</section>"
    )


def data_uri(f: Figure) -> str:
    return f"data:{f.mime};base64,{base64.b64encode(f.data).decode('ascii')}"


def _figure(f: Figure) -> str:
    return (
        f'<figure><div class="plot"><img src="{data_uri(f)}" alt="{escape(f.alt)}"></div>'
        f"<figcaption>{escape(f.caption)}</figcaption></figure>"
    )


def _table(t: Table) -> str:
    out = [f'<p class="table-title">{escape(t.title)}</p>', '<div class="table-wrap"><table>']
    headed = any(c for c in t.columns)
    if headed:
        modelled = ' class="modelled"'
        heads = "".join(
            f"<th{modelled if i in t.modelled else ''}>{escape(c)}</th>"
            for i, c in enumerate(t.columns)
        )
        out.append(f"<thead><tr>{heads}</tr></thead>")
    out.append("<tbody>")
    for row in t.rows:
        cells = []
        for i, v in enumerate(row):
            # label/value tables (no header) read best left-aligned throughout
            kinds = ["num"] if headed and _NUMERIC.match(v.strip()) else []
            kinds += ["modelled"] if i in t.modelled else []
            cls = f' class="{" ".join(kinds)}"' if kinds else ""
            cells.append(f"<td{cls}>{escape(v)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    if t.note:
        out.append(f'<p class="table-note">{escape(t.note)}</p>')
    out.append("</div>")
    return "\n".join(out)


def _footer(report: Report, json_name: str | None) -> str:
    rows = [("measurements", report.profile_source or "none taken")]
    env = report.environment
    rows.append(("software", ", ".join(f"{k} {v}" for k, v in env.items() if k in _VERSIONS and v)))
    rows.append(("platform", f"{env.get('platform', '')} · {env.get('cpu_count')} logical CPUs"))
    if json_name:
        rows.append(("same content as JSON", json_name))
    rows.append(
        (
            "conventions",
            "FLOPs count a multiply-add as 2; peaks are dense (never 2:4 sparse); "
            "GB = 10⁹ bytes, GiB = 2³⁰ bytes.",
        )
    )
    body = "".join(f"<dt>{escape(k)}</dt><dd>{escape(str(v))}</dd>" for k, v in rows)
    return f"<footer><dl>{body}</dl></footer>"


_VERSIONS = ("ceiling", "python", "torch", "numpy", "scipy", "matplotlib")
