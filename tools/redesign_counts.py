"""Issue 38's before/after counts, read from git revisions (nothing is imported or run).

    python tools/redesign_counts.py bf48c56 main

Per revision: the fields of the model-side records (``DecoderSpec``; ``Architecture`` and its ``Keys``; ``LayerSpec``
and the per-layer ``AttentionLayer`` / ``FeedForward``), counted as the annotated names of each class body (private
ones, ``_x``, left out), and the branches on a graph form's name in ``ropeexport/``: every comparison (``==``, ``!=``,
``in``, ``not in``) with a form name (``fused``, ``decomposed``, ``tensorrt``, ``static-cache``, ``gqa``) on either
side, outside the two modules whose job is to name forms (``forms.py``, ``runtimes/capabilities.py``). ``-v`` lists
each branch's file:line.

    python tools/redesign_counts.py --touched 20bbb53 fbc6c78

``--touched COMMIT...``: the files in ``ropeexport/`` each commit changed, split into an architecture's own folder
(``ropeexport/architectures/NAME/``) and the rest (shared files), for "files touched to add a layer feature". A
commit is what its author put in it: read its subject (printed) before taking its count as one feature's.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess

FORMS = {"fused", "decomposed", "tensorrt", "static-cache", "gqa"}
NAMING = {"ropeexport/forms.py", "ropeexport/runtimes/capabilities.py"}
# (class, the files it has lived in, newest first): a class counts in the first file of a revision that has it.
RECORDS = [
    ("DecoderSpec", ["ropeexport/decoder/spec.py"]),
    ("Architecture", ["ropeexport/architectures/base.py", "ropeexport/decoder/architectures.py"]),
    ("Keys", ["ropeexport/architectures/base.py"]),
    ("LayerSpec", ["ropeexport/architectures/layers.py", "ropeexport/decoder/spec.py"]),
    ("AttentionLayer", ["ropeexport/architectures/layers.py"]),
    ("FeedForward", ["ropeexport/architectures/feedforward.py", "ropeexport/architectures/layers.py"]),
]


def _show(rev: str, path: str) -> str | None:
    done = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else None


def fields(source: str, name: str) -> int | None:
    """The annotated public names of class ``name``'s body in ``source``, or None where it has no such class."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return sum(isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                       and not s.target.id.startswith("_") for s in node.body)  # fmt: skip
    return None


def _names_form(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in FORMS
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_form(e) for e in node.elts)
    return False


def form_branches(rev: str) -> list[str]:
    """file:line of every comparison with a form name in ``ropeexport/`` at ``rev`` (module doc)."""
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "ropeexport"], capture_output=True,
                            text=True, check=True).stdout.split()  # fmt: skip
    hits = []
    for path in listed:
        if not path.endswith(".py") or path in NAMING:
            continue
        for node in ast.walk(ast.parse(_show(rev, path) or "")):
            if isinstance(node, ast.Compare) and any(_names_form(n) for n in [node.left, *node.comparators]):
                hits.append(f"{path}:{node.lineno}")
    return hits


def counts(rev: str) -> dict[str, object]:
    """{record: its field count (None where the revision has no such class), "form branches", "files"}."""
    out: dict[str, object] = {}
    for name, paths in RECORDS:
        found = next((n for p in paths if (s := _show(rev, p)) is not None and (n := fields(s, name)) is not None),
                     None)  # fmt: skip
        out[name] = found
    branches = form_branches(rev)
    out["form branches"] = len(branches)
    out["files branching on a form"] = len({b.split(":")[0] for b in branches})
    return out


def touched(commit: str) -> dict[str, object]:
    """{"subject", "shared": [files], "own folder": [files]}: the ``ropeexport/`` files ``commit`` changed."""
    shown = subprocess.run(["git", "show", "--name-only", "--format=%s", commit, "--", "ropeexport"],
                           capture_output=True, text=True, check=True).stdout.splitlines()  # fmt: skip
    files = [f for f in shown[1:] if f]
    own = [f for f in files if f.startswith("ropeexport/architectures/") and f.count("/") >= 3]
    return {"subject": shown[0], "shared": [f for f in files if f not in own], "own folder": own}


def main() -> None:
    """Print the counts of each revision given (JSON), and with ``-v`` each form branch."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revs", nargs="+")
    parser.add_argument("-v", action="store_true", help="list each form branch")
    parser.add_argument("--touched", action="store_true", help="the REVS are commits: list the files each changed")
    args = parser.parse_args()
    if args.touched:
        print(json.dumps({commit: touched(commit) for commit in args.revs}, indent=1))
        return
    print(json.dumps({rev: counts(rev) for rev in args.revs}, indent=1))
    if args.v:
        for rev in args.revs:
            print(rev, *form_branches(rev), sep="\n  ")


if __name__ == "__main__":
    main()
