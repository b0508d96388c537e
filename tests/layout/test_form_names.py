"""A graph form is named in one place (issue 38, item 3): no comparison with a form's name in ``ropeexport/`` outside
the two modules whose job is to name forms (``forms.py``, ``runtimes/capabilities.py``).

Code that needs to know what a form does reads its record (``forms.FORMS[name].static``, ``.fused_ops``,
``.one_head_size``, ``.latent_caches``, ...) or the runtime's capability, so that adding a form is one record there.
Reads the source (``ast``), imports nothing it checks; the same rule as ``tools/redesign_counts.py``'s count.
"""  # noqa: D205

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ropeexport.forms import FORMS

ROOT = Path(__file__).resolve().parents[2]
NAMING = {"ropeexport/forms.py", "ropeexport/runtimes/capabilities.py"}
# (file, enclosing function, form named): the comparisons older than this test, each an encoding artifact's choice
# between its two forms (``forms.GRAPHS``: one opset-23 node or primitives). Not rewritten here: these functions are
# also reached from the block forms' pieces (rope/positions.py hands them in as fused), so reading ``fused_ops`` off
# the record would have to be checked against every caller first (issue 38's count: 4 before latent attention).
ALLOWED = {
    ("ropeexport/families/rope/export.py", "cos_sin_rows", "fused"): "RotaryEmbedding's tables and rows",
    ("ropeexport/families/rope/export.py", "_rotate", "fused"): "RotaryEmbedding or primitives",
    ("ropeexport/families/bias/export.py", "build_attention_graph", "fused"): "the Attention op or primitives",
    ("ropeexport/families/shaw/export.py", "build_shaw_attention_graph", "fused"): "the Attention op or primitives",
}


def _named(node: ast.AST) -> set[str]:
    """The form names a comparison's operand spells: a string, or strings in a tuple, list or set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in FORMS:
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(_named(e) for e in node.elts)) if node.elts else set()
    return set()


def form_comparisons(source: str, path: str) -> list[tuple[str, str, str, int]]:
    """(path, enclosing function or "", form, line) of every ``==``, ``!=``, ``in``, ``not in`` naming a form."""
    hits: list[tuple[str, str, str, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Compare):
            for name in sorted(set().union(*(_named(n) for n in [node.left, *node.comparators]))):
                hits.append((path, function, name, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "")
    return hits


# (source, comparisons found): the rule itself, on snippets (what it must catch, what it must let pass).
CASES = [
    ('if spec.graph == "gqa":\n    pass', 1),
    ('x = graph != "decomposed"', 1),
    ('ok = g in ("fused", "tensorrt")', 2),
    ('ok = "static-cache" not in forms', 1),
    ("ok = FORMS[g].one_head_size", 0),
    ('attrs = {"graph": "gqa"}', 0),  # naming a form as a value is not branching on it
    ('ok = kind == "latent"', 0),
]


@pytest.mark.fast
@pytest.mark.parametrize(("source", "found"), CASES, ids=[c[0].split("\n")[0] for c in CASES])
def test_the_rule_catches_a_comparison_with_a_form_name(source: str, found: int) -> None:
    assert len(form_comparisons(source, "x.py")) == found


@pytest.mark.fast
def test_no_form_name_is_compared_outside_the_naming_modules() -> None:
    hits = []
    for file in sorted((ROOT / "ropeexport").rglob("*.py")):
        path = file.relative_to(ROOT).as_posix()
        source = file.read_text()
        # parse only a module that spells a form's name quoted (most do not: the parse is this test's cost)
        if path not in NAMING and any(f"{q}{name}{q}" in source for name in FORMS for q in "\"'"):
            hits += form_comparisons(source, path)
    found = {hit[:3] for hit in hits}
    unexplained = [f"{p}:{line} ({function}: {name!r})" for p, function, name, line in hits if (p, function, name)
                   not in ALLOWED]  # fmt: skip
    assert not unexplained, ("a form's name compared outside forms.py and runtimes/capabilities.py; read what the "
                             f"form means from its record (forms.Form) instead: {unexplained}")  # fmt: skip
    assert found == set(ALLOWED), f"allowed comparisons no longer there (drop them): {sorted(set(ALLOWED) - found)}"


def opset_tables(source: str) -> list[int]:
    """Lines of every dict literal that maps a form's name to a whole number (its own opset per form)."""
    def numbered(node: ast.Dict) -> bool:
        pairs = zip(node.keys, node.values, strict=True)
        whole = lambda v: isinstance(v, ast.Constant) and type(v.value) is int  # noqa: E731
        return any(k is not None and _named(k) and whole(v) for k, v in pairs)

    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Dict) and numbered(node)]


# (source, tables found): a form's opset is its record's (``forms.FORMS[name].opset``), never a table of its own
OPSET_CASES = [('OPSETS = {"fused": 23, "decomposed": 17}', 1),
               ("OPSETS = {name: form.opset for name, form in FORMS.items()}", 0),
               ('attrs = {"graph": "fused", "dtype": "fp32"}', 0)]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("source", "found"), OPSET_CASES, ids=[c[0] for c in OPSET_CASES])
def test_the_rule_catches_an_opset_table_of_its_own(source: str, found: int) -> None:
    assert len(opset_tables(source)) == found


@pytest.mark.fast
def test_no_module_keeps_its_own_opset_per_form() -> None:
    found = [f"{file.relative_to(ROOT).as_posix()}:{line}" for file in sorted((ROOT / "ropeexport").rglob("*.py"))
             if file.relative_to(ROOT).as_posix() not in NAMING and "opset" in file.read_text().lower()
             for line in opset_tables(file.read_text())]  # fmt: skip
    assert not found, f"a form's opset written again outside forms.py: read forms.FORMS[name].opset: {found}"
