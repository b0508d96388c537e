"""The docs' pages and their fenced blocks, read line by line (a fence opens or closes a block; never paired by regex).

What runs where (the rules ``tests/docs`` and ``tests/cli/test_cli_contract.py`` apply):

- ``RUN``: pages whose ``sh`` and ``python`` blocks all run, top to bottom, in one folder (the tutorials, the
  re-verify how-to). A group's pages share their folder: the audit tutorial continues where the decoder tutorial
  left its checkpoint (``NEEDS`` names the block that makes it, run first when the folder lacks it).
- Every other page's ``python`` blocks run, in order, in a folder of their own.
- Every ``ropeexport`` line of every shell block parses; outside ``RUN`` pages, build lines run as ``--dry-run``
  (``test_cli_contract.test_every_example_runs``).
- ``<!-- docs-test: skip (reason) -->`` on the line before a fence: that block is not run (installs, a GPU, the test
  command itself); its command lines are still checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL = ("sh", "bash", "console")
KNOWN_INFO = (*SHELL, "python", "text", "toml", "json", "js")  # js: run by tests/decoder/test_transformersjs.py
SKIP = re.compile(r"^<!-- docs-test: skip \((.+)\) -->$")

# page -> the folder group its blocks run in (pages of one group share a folder, in this order)
RUN = {
    "docs/tutorials/export-and-verify-rope.md": "rope",
    "docs/tutorials/build-and-serve-a-decoder.md": "llama",
    "docs/tutorials/audit-and-graft.md": "llama",
    "docs/tutorials/python-api.md": "api",
    "docs/how-to/reverify-and-diff.md": "reverify",
}
# page -> (the file it needs in its folder, the page and index of the python block that makes it)
NEEDS = {
    "docs/tutorials/audit-and-graft.md": ("my-llama/config.json", "docs/tutorials/build-and-serve-a-decoder.md", 0),
}


@dataclass(frozen=True)
class Block:
    """One fenced block: its page (relative to the checkout), the line its fence opens on, info string, text."""

    page: str
    line: int
    info: str
    text: str
    skip: str | None = None  # the reason it is not run, from a ``docs-test: skip`` marker

    def commands(self) -> list[str]:
        """A shell block's command lines: ``$ `` prompts dropped, ``\\`` continuations joined, comments cut."""
        text = re.sub(r"\\\n\s*", " ", self.text)
        lines = [line.strip().removeprefix("$ ") for line in text.splitlines()]
        return [line.split(" #")[0].strip() for line in lines if line and not line.startswith("#")]


def pages() -> list[str]:
    """README and every page of docs/, relative to the checkout."""
    return ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]


def blocks(page: str) -> list[Block]:
    """Every fenced block of ``page``, in order; a generated section's (between ``<!-- render: ... -->`` and
    ``<!-- end render -->``) are not the page's own: their generator is tested (tools/docs_site.py).
    """  # noqa: D205
    found: list[Block] = []
    info, start, body, skip, previous = None, 0, [], None, ""
    lines = (ROOT / page).read_text().splitlines()
    generated = set()  # the line numbers of committed generated sections (a new marker without its end has none)
    for i, raw in enumerate(lines):
        if raw.startswith("<!-- render: ") and "<!-- end render -->" in lines[i + 1 :]:
            end = lines.index("<!-- end render -->", i + 1)
            generated |= set(range(i + 1, end + 2))
    for number, raw in enumerate(lines, 1):
        if number in generated:
            continue
        if raw.lstrip().startswith("```"):
            if info is None:
                info, start, body = raw.strip()[3:].strip(), number, []
                marker = SKIP.match(previous.strip())
                skip = marker.group(1) if marker else None
            else:
                found.append(Block(page, start, info, "\n".join(body) + "\n", skip))
                info = None
            continue
        if info is not None:
            body.append(raw)
        elif raw.strip():
            previous = raw
    assert info is None, f"{page}: the fence opened on line {start} is never closed"
    return found


def all_blocks() -> list[Block]:
    """Every block of every page."""
    return [b for page in pages() for b in blocks(page)]
