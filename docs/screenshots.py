"""Rebuild the README images from a report page: the page top and a strip of its figures.

    .venv/bin/ceiling report && .venv/bin/python docs/screenshots.py ceiling-report.html docs

Needs Debian's chromium (headless) and Pillow (installed with matplotlib).
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

WIDTH, HEIGHT = 1100, 16000
# (section, figure index) for the strip, two per row
PICKS = [("roofline", 0), ("mfu", 0), ("decode", 1), ("planner", 1), ("scaling", 0), ("planner", 2)]
SCALE = 0.62

# Runs before the page's Content-Security-Policy applies; writes where things are drawn.
GEOMETRY = """<script>addEventListener("load", function () {
 function box(e) { var c = e.getBoundingClientRect();
   return [c.left, c.top + scrollY, c.right, c.bottom + scrollY]; }
 var r = {};
 document.querySelectorAll("main > section").forEach(function (s) {
   r[s.id] = {
     figures: Array.prototype.map.call(s.querySelectorAll("figure"), box),
     tables: Array.prototype.map.call(s.querySelectorAll("p.table-title"), function (t) {
       return [box(t)[1], t.textContent]; })};
 });
 var pre = document.createElement("pre"); pre.id = "geom"; pre.textContent = JSON.stringify(r);
 document.body.appendChild(pre);
});</script>"""


def main(page: Path, outdir: Path) -> None:
    tmp = Path(tempfile.mkdtemp())
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={tmp / 'profile'}",
        f"--window-size={WIDTH},{HEIGHT}",
    ]
    probe = tmp / "probe.html"
    probe.write_text(page.read_text().replace("<head>", "<head>" + GEOMETRY, 1))
    dom = subprocess.run(
        ["chromium", *flags, "--dump-dom", probe.as_uri()], capture_output=True, text=True
    ).stdout
    found = re.search(r'<pre id="geom">(.*?)</pre>', dom, re.S)
    if not found:
        sys.exit("chromium did not render the page")
    sections = json.loads(html.unescape(found.group(1)))
    shot = tmp / "full.png"
    subprocess.run(["chromium", *flags, f"--screenshot={shot}", page.resolve().as_uri()],
                   capture_output=True)  # fmt: skip
    full = Image.open(shot).convert("RGB")

    # the top of the page, down to the CPU details under the machine card's tables
    cpu_top = next(top for top, title in sections["machine"]["tables"] if title == "CPU")
    full.crop((0, 0, WIDTH, int(cpu_top) - 10)).save(outdir / "report.png", optimize=True)

    tiles = []
    for key, index in PICKS:
        left, top, right, bottom = (int(v) for v in sections[key]["figures"][index])
        tile = full.crop((left, top, right, bottom))
        tiles.append(
            tile.resize((int(tile.width * SCALE), int(tile.height * SCALE)), Image.LANCZOS)
        )
    cell = max(t.width for t in tiles)
    rows = [tiles[k : k + 2] for k in range(0, len(tiles), 2)]
    heights = [max(t.height for t in row) for row in rows]
    strip = Image.new("RGB", (2 * cell + 30, sum(heights) + 20 * (len(rows) + 1)), "white")
    y = 20
    for row, height in zip(rows, heights, strict=True):
        for i, tile in enumerate(row):
            strip.paste(tile, (10 + i * (cell + 10), y))
        y += height + 20
    strip.save(outdir / "report-figures.png", optimize=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
