"""How wide index.html lays out: the sample index with every column at its longest (tests/report/sample_index.py),
rendered by ``tree.render_index`` and laid out by headless Chromium at a 1,400 px window.

    python tools/index_width.py --out tools/figures

Writes ``index-width.json`` and ``index-width.md`` under ``--out``: the table's and the document's width in CSS px,
and each column's. Needs Debian's ``chromium`` (``apt-get install -y chromium``).
"""  # noqa: D205

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
from html import unescape
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WINDOW = 1400
# Appended to the page: the widths as Chromium laid them out, written where --dump-dom shows them.
PROBE = """<script>
const t = document.querySelector("table.index");
const cols = [...t.querySelectorAll("thead th")].map(th => [th.textContent, th.getBoundingClientRect().width]);
document.body.setAttribute("data-widths", JSON.stringify({table: t.getBoundingClientRect().width,
  document: document.documentElement.scrollWidth, window: window.innerWidth, columns: cols}));
</script>"""


def chromium() -> str | None:
    """The Chromium binary on PATH, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def measure(html: str, window: int = WINDOW) -> dict[str, Any]:
    """{table, document, window: CSS px; columns: [[header, px], ..]} of ``html`` laid out at ``window`` px."""
    binary = chromium()
    if binary is None:
        raise RuntimeError("no chromium on PATH (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="index-width-") as folder:
        page = Path(folder) / "index.html"
        page.write_text(html.replace("</body>", PROBE + "</body>"))
        done = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={window},900",
                               f"--user-data-dir={folder}/profile", "--dump-dom", page.as_uri()],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    start = done.stdout.find('data-widths="')
    if start < 0:
        raise RuntimeError(f"chromium laid nothing out: {done.stderr.strip()[-500:]}")
    value = done.stdout[start + len('data-widths="') :].split('"', 1)[0]
    return json.loads(unescape(value))


def main(argv: list[str] | None = None) -> int:
    """Measure the sample index and write the figure."""
    from ropeexport.tree import render_index
    from tests.report.sample_index import sample_index

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tools" / "figures")
    args = parser.parse_args(argv)
    widths = measure(render_index(sample_index()))
    version = subprocess.run([chromium() or "chromium", "--version"], capture_output=True, text=True).stdout.strip()
    record = {"command": "python tools/index_width.py --out tools/figures", "chromium": version,
              "machine": f"{platform.machine()}, {platform.system()} {platform.release()}", "window": WINDOW,
              **widths}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "index-width.json").write_text(json.dumps(record, indent=2) + "\n")
    rows = "\n".join(f"| {(h or '(verdict)').replace('|', chr(92) + '|')} | {w:.0f} |" for h, w in widths["columns"])
    (args.out / "index-width.md").write_text(
        f"# index.html's width\n\n`{record['command']}` ({version}, {record['machine']}): the sample index of "
        "tests/report/sample_index.py (every column at its longest) laid out at a "
        f"{WINDOW} px window: table {widths['table']:.0f} px, document {widths['document']} px (the window less its "
        "vertical scroll bar: no horizontal scrolling).\n\n"
        f"| column | px |\n|---|---:|\n{rows}\n"
    )
    print(f"table {widths['table']:.0f} px, document {widths['document']} px at a {WINDOW} px window")
    return 0 if widths["document"] <= WINDOW else 1


if __name__ == "__main__":
    sys.exit(main())
