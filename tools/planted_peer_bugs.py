"""The peers' per-layer bugs of issue 27, planted into ropeexport's own decoders (the ``FAULTS`` rows of
``tests/audits/test_audit_layers.py`` that name a peer), and those of issue 39 on the 2026 families (Gemma 4, Cohere
2, EXAONE 4, Ministral 3, OLMo 3: ``tests/audits/families.py``'s ``BUGS``), audited, grafted and proven: the tables of
what the audit says.

    python tools/planted_peer_bugs.py --out tools/figures

Writes ``planted-peer-bugs.json`` and ``planted-peer-bugs.md``: per bug, the peer, the finding (name and words), its
effect on the logits as the audit measures it (max |logits - logits with the finding's sites repaired| / max |logit|,
the model run as its users run it: its own cache to the far end of its context, ``audits.effect``), for issue 39's rows
also the planted model against the right one run the same way (``effect.between``: a figure for the bugs whose repair
graft cannot make) and what the audit said before this change, and the graft: proven (the grafted model audits exact
and its logits match the float64 recompute of the whole decoder within 1e-4 of the logit scale), or graft's refusal.
Tiny random checkpoints (``tests/decoder/tiny.py``), nothing downloaded; the same rows the tests assert.
"""  # noqa: D205

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NOT_PLANTED = [
    ("vLLM #27414 (LongRoPE switch mid-generation: random tokens)",
     "not planted: a serving-time cache bug. The keys cached before the switch keep the short factors' rotation; a "
     "graph is a function of (tokens, cache, positions) and every call's own tables are right, so no exported graph "
     "carries it (the audit checks each call length's tables, the proof's calls start from caches rotated as float64 "
     "rotates them)"),
]  # fmt: skip


def _findings(result: Any) -> list[dict[str, Any]]:
    """An audit's findings as a row keeps them: name, text, effect."""
    return [{"name": f["name"], "text": f["text"], "effect": f.get("effect")} for f in result.findings]


def _graft(model: Path, config: Path, checkpoint: Path, out: Path) -> dict[str, Any]:
    """graft trusting the config, proven against the checkpoint's float64 decoder: the row's record, or its refusal."""
    import ropeexport as rx

    out.parent.mkdir(parents=True)
    try:
        grafted = rx.graft(model, config, out, trust="config", checkpoint=checkpoint)
    except rx.errors.SpecError as exc:
        return {"refused": exc.message}
    return {"proven": grafted.proven, "text": grafted.text, "after": grafted.after.verdict if grafted.after else None,
            "decoder_passed": (grafted.decoder or {}).get("passed")}


def run_one(fault: Any, work: Path) -> dict[str, Any]:
    """One row: the fault planted, audited, grafted (trusting the config) and proven."""
    import ropeexport as rx
    from tests.audits.test_audit_layers import _planted
    from tests.decoder.tiny import checkpoint

    made: dict[str, Path] = {}

    def tiny(name: str) -> Path:
        if name not in made:
            made[name] = checkpoint(work / "checkpoints" / name, name)
        return made[name]

    start = time.perf_counter()
    model, config, ckpt = _planted(fault, work / fault.case, tiny)
    result = rx.audit(model, config)
    found = next((f for f in result.findings if f["name"] == fault.finding), None)
    row: dict[str, Any] = {"case": fault.case, "peer": fault.peer, "model": fault.name, "verdict": result.verdict,
                           "findings": _findings(result), "named": found is not None}  # fmt: skip
    row["graft"] = _graft(model, config, ckpt, work / fault.case / "fixed" / "model.onnx")
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def run_family(bug: Any, work: Path) -> dict[str, Any]:
    """One issue-39 row: the bug planted into its family's tiny decoder, audited, measured against the right model,
    grafted (trusting the config) and proven.
    """  # noqa: D205
    import ropeexport as rx
    from ropeexport.audits.effect import between
    from ropeexport.audits.layers import encodings_for
    from ropeexport.audits.model import load_model
    from tests.audits.families import planted
    from tests.audits.test_audit_own_decoders import _decoder
    from tests.decoder.tiny import checkpoint

    start = time.perf_counter()
    ckpt = work / "checkpoints" / bug.family
    if not ckpt.exists():
        checkpoint(ckpt, bug.family)
    clean_folder = work / "clean" / bug.family
    if not clean_folder.exists():
        clean_folder.mkdir(parents=True)
        _decoder(clean_folder, ckpt, "fused")
    clean = clean_folder / "model.onnx"
    model, audited = planted(bug, work / bug.case, clean, ckpt, lambda f, c: _decoder(f, c, "fused"))
    if bug.audited:  # the right model is the one the audited config describes (EXAONE's theta 1e6)
        (work / bug.case / "right").mkdir()
        clean = _decoder(work / bug.case / "right", audited, "fused")
    result = rx.audit(model, audited / "config.json")
    found = next((f for f in result.findings if f["name"] == bug.finding), None)
    measured = between(clean, model, encodings_for(audited / "config.json", None, load_model(clean)))
    row: dict[str, Any] = {"case": bug.case, "peer": bug.peer, "model": bug.family, "verdict": result.verdict,
                           "findings": _findings(result), "named": found is not None and bug.words in found["text"],
                           "before": bug.before, "against_right_model": measured}  # fmt: skip
    row["graft"] = _graft(model, audited / "config.json", audited, work / bug.case / "fixed" / "model.onnx")
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def _effect(effect: dict[str, Any] | None) -> str:
    effect = effect or {}
    if "relative" in effect:
        return f"{effect['relative']:.2g} (position {effect['position']})"
    return f"not measured: {effect.get('not_measured', '')}"


def markdown(rows: list[dict[str, Any]], command: str, families: list[dict[str, Any]] | None = None,
             families_command: str = "") -> str:
    """The table (module doc)."""
    lines = ["# The peers' per-layer bugs, planted and named", "",
             f"`{command}`; each bug planted into ropeexport's own decoder of a tiny random checkpoint "
             "(`tests/decoder/tiny.py`), audited against the checkpoint's config (`ropeexport audit`), grafted "
             "trusting the config and proven against the float64 recompute of the whole decoder (`ropeexport graft "
             "--trust config --checkpoint`). Effect: max |logits - logits with the finding's sites repaired| / max "
             "|logit|, the model run as its users run it (its own cache to the far end of its context). The same "
             "rows are asserted by `pytest tests/audits/test_audit_layers.py -k planted_layer_fault` (graft and "
             "proof: `-m slow`).", "",
             "| peer's bug | planted (case) | finding (`name`) | effect on the logits | graft |",
             "|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        found = "<br>".join(f"{f['text']} (`{f['name']}`)" for f in r["findings"])
        effect = "<br>".join(_effect(f["effect"]) for f in r["findings"])
        g = r["graft"]
        if "refused" in g:
            graft = f"refused: {g['refused']}"
        else:
            passed = g["decoder_passed"] or {}
            judged = ", ".join(f"{k} {'passes' if v else 'FAILS'}" for k, v in passed.items())
            verdict = g.get("text") or ("proven" if g["proven"] else "NOT proven")  # partial: up to a position
            graft = f"{verdict} (audit after: {g['after']}; float64 decoder: {judged})"
        lines.append(f"| {r['peer']} | {r['model']} (`{r['case']}`) | {found} | {effect} | {graft} |")
    for peer, why in NOT_PLANTED:
        lines.append(f"| {peer} | | {why} | | |")
    if families:
        lines += ["", "## The 2026 families (issue 39)", "",
                  f"`{families_command or command}`; each bug planted into the family's tiny decoder (fused form) "
                  "as `tests/audits/families.py` writes "
                  "it, audited, grafted and proven as above; asserted by `pytest tests/audits/test_audit_families.py` "
                  "(graft and proof: `-m slow`). Effect as the audit measures it (the finding's sites repaired), and "
                  "the planted model against the right one, both run as users run the model (own cache to the end of "
                  "the context). Before: what the audit said of the row before the change that added it.", "",
                  "| peer's bug | planted (case) | finding (`name`) | audit's effect | against the right model | "
                  "before | graft |", "|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in families:
            found = "<br>".join(f"{f['text']} (`{f['name']}`)" for f in r["findings"])
            effect = "<br>".join(_effect(f["effect"]) for f in r["findings"])
            lines.append(f"| {r['peer']} | {r['model']} (`{r['case']}`) | {found} | {effect} | "
                         f"{_effect(r['against_right_model'])} | {r['before']} | {_graft(r['graft'])} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _graft(g: dict[str, Any]) -> str:
    if "refused" in g:
        return f"refused: {g['refused']}"
    passed = g["decoder_passed"] or {}
    judged = ", ".join(f"{k} {'passes' if v else 'FAILS'}" for k, v in passed.items())
    verdict = g.get("text") or ("proven" if g["proven"] else "NOT proven")
    return f"{verdict} (audit after: {g['after']}; float64 decoder: {judged})"


def main(argv: list[str] | None = None) -> int:
    """Plant, audit, graft every peer row; write the table. Exit 1 when a bug is not named as its row says."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for planted-peer-bugs.json and planted-peer-bugs.md")
    parser.add_argument("--families-only", action="store_true",
                        help="run issue 39's rows only, keeping the other rows of --out's planted-peer-bugs.json")
    args = parser.parse_args(argv)
    from tests.audits.families import BUGS
    from tests.audits.test_audit_layers import FAULTS

    rows, families = [], []
    first: str | None = None  # the command that made the other rows, when kept
    with tempfile.TemporaryDirectory(prefix="planted-peer-bugs-") as folder:
        if args.families_only:
            kept = json.loads((Path(args.out) / "planted-peer-bugs.json").read_text())
            rows, first = kept["rows"], kept["command"]
        for fault in (f for f in FAULTS if f.peer and not args.families_only):
            rows.append(run_one(fault, Path(folder)))
            print(f"{fault.case}: {rows[-1]['verdict']}, graft {rows[-1]['graft']}", flush=True)
        for bug in BUGS:
            families.append(run_family(bug, Path(folder)))
            print(f"{bug.case}: {families[-1]['verdict']}, graft {families[-1]['graft']}", flush=True)
    command = "python tools/planted_peer_bugs.py " + " ".join(sys.argv[1:] if argv is None else argv)
    families_command, command = command, first or command
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {"command": command, "rows": rows, "families_command": families_command, "families": families}
    (out / "planted-peer-bugs.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "planted-peer-bugs.md").write_text(markdown(rows, command, families, families_command))
    return 0 if all(r["named"] for r in rows + families) else 1


if __name__ == "__main__":
    raise SystemExit(main())
