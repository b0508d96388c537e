"""Every dotted ``ropeexport.*`` name the docs put in backquotes is one a reader can import: a module, or an
attribute of one (issue 43, item 11: hf-import.md named ``ropeexport.import_config``, which is
``ropeexport.hf.import_config``). A name that imports nothing must be a key ropeexport writes into a model's
metadata (``ropeexport.max_positions``), found as a string in the package's source.
"""

from __future__ import annotations

import functools
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"`(ropeexport(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?`")
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


def _resolves(name: str) -> bool:
    """True when ``name`` is a module, or an attribute chain under the longest module that imports."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@functools.cache
def _metadata_keys() -> set[str]:
    source = "\n".join(p.read_text() for p in (ROOT / "ropeexport").rglob("*.py"))
    return set(re.findall(r"[\"'](ropeexport\.[a-z_]+)[\"']", source))


NAMES = sorted({(m.group(1), p.relative_to(ROOT).as_posix()) for p in PAGES for m in NAME.finditer(p.read_text())})


@pytest.mark.fast
@pytest.mark.parametrize(("name", "page"), NAMES, ids=[f"{p}:{n}" for n, p in NAMES])
def test_a_dotted_name_in_the_docs_imports_or_is_a_metadata_key(name: str, page: str) -> None:
    assert _resolves(name) or name in _metadata_keys(), (
        f"{page} names `{name}`: neither an importable name nor a metadata key ropeexport writes"
    )
