"""Latent attention (DeepSeek V3) and Llama 4 exports audited, grafted and proven; their planted bugs named (issue 40
item 5): the table of what the audit says.

    python tools/planted_latent_bugs.py --work /tmp/latent-bugs --out tools/figures [--mobius PATH]

Writes ``planted-latent-bugs.json`` and ``planted-latent-bugs.md``:
- **planted**: the rows of ``tests/audits/test_audit_latent.py`` (``PLANTED``), each bug planted into ropeexport's own
  fused decoder of a tiny random checkpoint (``tests/decoder/tiny.py``), audited against its config, its effect
  measured against the correct build as users run the model (``effect.between``: each its own cache filled by its
  own prefill to the far end of the context, several draws there) and grafted trusting the config with the proof
  against the float64 recompute of the whole decoder (``--checkpoint``);
- **exports**: ropeexport's own decoders in every form they build (the latent cache form too), the float32 tables a
  peer writes planted into them and grafted; torch.onnx's dynamo export of the same checkpoints (no cache) and
  mobius-onnx 0.1.0's (``mobius build --config CKPT OUT``; ``--mobius``: its executable, else ``python -m mobius``
  of this interpreter), audited, their logits against ropeexport's own build of the same checkpoint measured the
  same way, and grafted where the audit's findings are values graft writes. Where a tool does not build a model its
  reason is the row. mobius cannot load the tiny checkpoints' mixtures of experts (DeepSeek's routed experts,
  Llama 4's MoE layers): its rows use all-dense variants of the same configs (``DENSE``), said in each row.

Nothing is downloaded. Dynamo exports run in their own process (minutes each on 2 CPUs).
"""  # noqa: D205

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# All-dense variants of the tiny configs for mobius-onnx 0.1.0, which does not load their experts (its DeepSeek V3
# looks for model.layers.N.mlp.moe.experts.*, its Llama 4 builds every layer as a dense MLP intermediate_size wide
# with learned q/k norms): DeepSeek with every layer dense (first_k_dense_replace 2), Llama 4 with no MoE layer
# (interleave_moe_layer_step past the last layer), its dense width in both keys and no L2 q/k norm.
DENSE = {"deepseek_v3-dense": ("deepseek_v3", {"first_k_dense_replace": 2}),
         "llama4-dense": ("llama4", {"interleave_moe_layer_step": 5, "intermediate_size": 48, "use_qk_norm": False})}


def _checkpoint(work: Path, name: str) -> Path:
    from tests.decoder import tiny

    folder = work / "checkpoints" / name
    if not (folder / "config.json").is_file():
        if name in DENSE:
            base, change = DENSE[name]
            model_type, fields = tiny.CONFIGS[base]
            tiny.VARIANTS[name] = (model_type, {**fields, **change})
        tiny.checkpoint(folder, name)
    return folder


def _effect(effect: dict[str, Any]) -> str:
    if "relative" in effect:
        return f"{effect['relative']:.2g} (position {effect['position']})"
    return f"not measured: {effect.get('not_measured', '')}"


def _audit_row(model: Path, config: Path, against: Path | None) -> dict[str, Any]:
    """The audit of ``model`` (findings, what it read) and, given ``against``, its logits against that model."""
    import ropeexport as rx
    from ropeexport.audits.effect import between
    from ropeexport.audits.layers import encodings_for
    from ropeexport.audits.model import load_model

    result = rx.audit(model, config)
    read = {k: result.layers.get(k) for k in ("unrotated", "rope_slices", "query_scales", "chunks", "attention_scales")
            if result.layers.get(k) is not None}  # fmt: skip
    row: dict[str, Any] = {"verdict": result.verdict, "sites": [(s["kind"], s["layers"], s.get("interleaved"))
                                                                for s in result.sites],
                           "findings": [{"name": f["name"], "text": f["text"], "effect": f.get("effect")}
                                        for f in result.findings], "read": read}  # fmt: skip
    if against is not None:
        row["against_own"] = between(against, model, encodings_for(config, None, load_model(model)))
    return row


def _graft(model: Path, ckpt: Path, out: Path) -> dict[str, Any]:
    import ropeexport as rx

    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        grafted = rx.graft(model, ckpt / "config.json", out, trust="config", checkpoint=ckpt)
    except rx.errors.SpecError as exc:
        return {"refused": exc.message}
    calls = (grafted.decoder or {}).get("calls", [])
    worst = {label: max((c["models"][label].get("rel", 0.0) for c in calls if label in c["models"]), default=None)
             for label in ("original", "grafted")}  # the worst call's error against float64, per model
    return {"proven": grafted.proven, "text": grafted.text, "after": grafted.after.verdict if grafted.after else None,
            "decoder_passed": (grafted.decoder or {}).get("passed"), "worst": worst}  # fmt: skip


def planted_rows(work: Path) -> list[dict[str, Any]]:
    """The test's planted rows (module doc)."""
    import ropeexport as rx
    from ropeexport.audits.effect import between
    from ropeexport.audits.layers import encodings_for
    from ropeexport.audits.model import load_model
    from tests.audits.test_audit_latent import PLANTED, built, planted

    clean: dict[tuple[str, str, bool], Path] = {}

    def own(name: str, graph: str = "fused", latent_cache: bool = False) -> Path:
        key = (name, graph, latent_cache)
        if key not in clean:
            folder = work / "clean" / f"{name}-{graph}{'-latent' if latent_cache else ''}"
            clean[key] = built(_checkpoint(work, name), folder, graph, latent_cache=latent_cache)
        return clean[key]

    rows = []
    for bug in PLANTED:
        start = time.perf_counter()
        ckpt = _checkpoint(work, bug.name)
        model = planted(bug, work / "planted" / bug.case, ckpt, own)
        result = rx.audit(model, ckpt / "config.json", effects=False)
        encodings = encodings_for(ckpt / "config.json", None, load_model(model))
        effect = between(own(bug.name, bug.graph, bug.latent_cache), model, encodings)
        rows.append({"case": bug.case, "model": bug.name, "verdict": result.verdict,
                     "findings": [{"name": f["name"], "text": f["text"]} for f in result.findings],
                     "named": sorted(f["name"] for f in result.findings) == sorted(bug.findings),
                     "effect": effect, "graft": _graft(model, ckpt, work / "fixed" / bug.case / "model.onnx"),
                     "seconds": round(time.perf_counter() - start, 1)})  # fmt: skip
        print(f"{bug.case}: {rows[-1]['verdict']} {[f['name'] for f in rows[-1]['findings']]}", flush=True)
    return rows


def _float32_tables(model: Path, ckpt: Path) -> None:
    """Every cos/sin table recomputed with float32 angles, as the peers compute theirs."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    import ropeexport as rx
    from ropeexport.families.rope.regimes import frequencies

    spec = rx.from_hf_config(ckpt / "config.json")[0]
    inv, factor = frequencies(spec, spec.max_positions)
    proto = onnx.load(str(model))
    for t in proto.graph.initializer:
        if t.name.endswith(("cos_table", "sin_table")):
            angles = np.outer(np.arange(t.dims[0], dtype=np.float32), inv.astype(np.float32))
            table = factor * (np.cos(angles) if "cos" in t.name else np.sin(angles))
            t.CopyFrom(numpy_helper.from_array(table.astype(np.float32), t.name))
    onnx.save(proto, str(model))


# Llama 4's rotation multiplies complex numbers, which neither torch.onnx exporter writes (dynamo: no decomposition for
# complex-valued inputs; TorchScript: aten::polar). The same values in real arithmetic (pairs (2i, 2i + 1) turned by
# cos and sin, both from one float32 angle table) let dynamo export the rest of the model as it is, its chunked mask
# (transformers' mask functions) among it.
REAL_ROTATION = r"""
import torch
import transformers.models.llama4.modeling_llama4 as m

def forward(self, x, position_ids):
    freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
    return torch.cat([torch.cos(freqs), torch.sin(freqs)], dim=-1) * self.attention_scaling  # [b, s, d]: cos, sin

def apply_rotary_emb(xq, xk, freqs):
    half = freqs.shape[-1] // 2
    c, s = freqs[:, :, None, :half], freqs[:, :, None, half:]
    def turn(x):
        p = x.float().reshape(*x.shape[:-1], -1, 2)
        a, b = p[..., 0], p[..., 1]
        return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(3).type_as(x)
    return turn(xq), turn(xk)

m.Llama4TextRotaryEmbedding.forward = forward
m.apply_rotary_emb = apply_rotary_emb
"""


def _chunk_mask_plants(model: Path, chunk: int, work: Path) -> list[tuple[str, Path]]:
    """(what, model) of two faults planted into a dynamo export's chunked mask: the int64 divisor ``chunk`` its Div
    and Mod take (floor division) made ``chunk`` - 1, and the indices it divides taken one later (a boundary early).
    """  # noqa: D205
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    out = []
    for what in ("chunk - 1 in its mask", "its chunk boundaries one position early"):
        folder = work / what.replace(" ", "-")
        shutil.copytree(model.parent, folder)
        proto = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        sizes = {t.name for t in proto.graph.initializer if not t.dims and t.data_type == onnx.TensorProto.INT64
                 and int(numpy_helper.to_array(t)) == chunk}  # fmt: skip
        divided = sorted({n.input[0] for n in proto.graph.node if n.op_type == "Div" and n.input[1] in sizes})
        if what.startswith("chunk"):
            for t in proto.graph.initializer:
                if t.name in sizes:
                    t.CopyFrom(numpy_helper.from_array(np.array(chunk - 1, np.int64), t.name))
        else:
            proto.graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "planted_one"))
            nodes = []
            for node in proto.graph.node:
                nodes.append(node)
                for name in [o for o in node.output if o in divided]:
                    node.output[list(node.output).index(name)] = f"{name}_unplanted"
                    nodes.append(helper.make_node("Add", [f"{name}_unplanted", "planted_one"], [name]))
            del proto.graph.node[:]
            proto.graph.node.extend(nodes)
        onnx.save(proto, str(folder / "model.onnx"))
        out.append((what, folder / "model.onnx"))
    return out


def export_rows(work: Path, mobius: str | None) -> list[dict[str, Any]]:
    """Own forms, dynamo and mobius (module doc)."""
    from tests.audits.hybrids import export, reason
    from tests.audits.test_audit_latent import built

    sys.path.insert(0, str(ROOT / "tools"))
    from peer_exports import mobius_command

    rows: list[dict[str, Any]] = []
    for name in ("deepseek_v3", "llama4"):
        ckpt = _checkpoint(work, name)
        own = built(ckpt, work / "own" / name / "fused")
        forms = [("fused", False), ("decomposed", False), ("gqa", False)]
        forms += [("decomposed", True)] if name == "deepseek_v3" else [("tensorrt", False)]
        for graph, latent in forms:
            label = f"ropeexport {graph}" + (" (latent cache)" if latent else "")
            model = built(ckpt, work / "own" / name / label.replace(" ", "-"), graph, latent_cache=latent)
            rows.append({"model": name, "source": label, **_audit_row(model, ckpt / "config.json", None)})
        f32 = work / "own" / name / "float32"
        shutil.copytree(own.parent, f32)
        _float32_tables(f32 / "model.onnx", ckpt)
        rows.append({"model": name, "source": "ropeexport fused, float32 tables planted",
                     **_audit_row(f32 / "model.onnx", ckpt / "config.json", own),
                     "graft": _graft(f32 / "model.onnx", ckpt, work / "fixed" / name / "f32" / "model.onnx")})
        # the experts through batched_mm on both (Llama 4's composite config names them in its text config)
        out = export(ckpt, work / "dynamo" / name, batched_mm=True, timeout=1800)
        row: dict[str, Any] = {"model": name, "source": "torch.onnx dynamo (no cache)"}
        if isinstance(out, Path):  # no cache: run beside one with a cache it cannot be (the float64 proof of its
            # graft judges its logits instead)
            row |= _audit_row(out, ckpt / "config.json", None)
            row["graft"] = _graft(out, ckpt, work / "fixed" / name / "dynamo" / "model.onnx")
        else:
            row["refused"] = out
        rows.append(row)
        print(f"{name}: dynamo {row.get('verdict', row.get('refused'))}", flush=True)
        if name == "llama4":  # its rotation in real arithmetic: the chunked mask as dynamo writes it, and planted
            out = export(ckpt, work / "dynamo" / "llama4-real", batched_mm=True, timeout=1800, prelude=REAL_ROTATION)
            source = "torch.onnx dynamo, rotation in real arithmetic (no cache)"
            if not isinstance(out, Path):
                rows.append({"model": name, "source": source, "refused": out})
                continue
            rows.append({"model": name, "source": source, **_audit_row(out, ckpt / "config.json", None)})
            chunk = json.loads((ckpt / "config.json").read_text())["attention_chunk_size"]
            for what, planted in _chunk_mask_plants(out, chunk, work / "dynamo" / "llama4-planted"):
                rows.append({"model": name, "source": f"{source}, {what}",
                             **_audit_row(planted, ckpt / "config.json", None)})  # fmt: skip
            print(f"{name}: dynamo in real arithmetic {rows[-3].get('verdict')}", flush=True)
    for name, dense in (("deepseek_v3", "deepseek_v3-dense"), ("llama4", "llama4-dense")):
        for variant in (name, dense):
            ckpt = _checkpoint(work, variant)
            out = work / "mobius" / variant
            command = mobius_command(ckpt, out, mobius)
            row = {"model": variant, "source": "mobius-onnx 0.1.0"}
            if isinstance(command, str):
                row["refused"] = command
            else:
                done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
                model = out / "model.onnx"
                if done.returncode != 0 or not model.is_file():
                    row["refused"] = reason(done.stdout + done.stderr, done.returncode)
                else:
                    own = built(ckpt, work / "own" / variant / "fused")
                    row |= _audit_row(model, ckpt / "config.json", own)
                    row["graft"] = _graft(model, ckpt, work / "fixed" / variant / "mobius" / "model.onnx")
            rows.append(row)
            print(f"{variant}: mobius {row.get('verdict', row.get('refused'))}", flush=True)
    return rows


def _graft_words(g: dict[str, Any] | None) -> str:
    if not g:
        return ""
    if "refused" in g:
        return f"refused: {g['refused']}"
    worst = g.get("worst") or {}
    passed = ", ".join(f"{k} {'passes' if v else 'FAILS'}" + (f" ({worst[k]:.2g})" if worst.get(k) is not None else "")
                       for k, v in (g.get("decoder_passed") or {}).items())  # fmt: skip
    verdict = g.get("text") or ("proven" if g["proven"] else "NOT proven")
    return f"{verdict} (audit after: {g['after']}; float64: {passed})"


def markdown(planted: list[dict[str, Any]], exports: list[dict[str, Any]], command: str) -> str:
    """The two tables (module doc)."""
    lines = ["# Latent attention and Llama 4: planted bugs and exports audited", "",
             f"`{command}`. Tiny random checkpoints (`tests/decoder/tiny.py`: DeepSeek V3 with latent attention, 8 "
             "nope + 8 rope channels a head, interleaved pairs, YaRN x4 with mscale 0.707; Llama 4 with layer 3 NoPE "
             "and the temperature, layers 0-2 chunked over 8 slots), nothing downloaded. Effect: max |logits - "
             "logits of the correct build| / max |logit| as users run the model (its own cache from its own prefill "
             "to the far end of the context, several draws there: `audits.runs`), the worst window.", "",
             "Graft: proven when the grafted model audits exact and its logits are within 1e-4 of the logit scale of "
             "the float64 recompute of the whole decoder (in brackets: each model's worst call against it); refused "
             "naming the finding where no value graft writes repairs it. Per layer (`read`): the rope slice of each "
             "query (q) and key (k) rotation (channels / the width they are cut from), the attention operators' "
             "or decomposed attention's scale, the query temperature at the last position, the chunk size read from "
             "each layer's evaluated mask (0: none); `none read`: the graph has none the audit reads.", "",
             "## Planted bugs", "",
             "Each planted into ropeexport's own decoder (fused; the decomposed form or the latent cache where the "
             "case names it); the same rows are asserted by `pytest "
             "tests/audits/test_audit_latent.py`.", "",
             "| planted (case) | finding (`name`) | effect on the logits | graft |", "|---|---|---|---|"]  # fmt: skip
    for r in planted:
        found = "<br>".join(f"{f['text']} (`{f['name']}`)" for f in r["findings"]) or r["verdict"]
        effect, graft = _effect(r["effect"]), _graft_words(r["graft"])
        lines.append(f"| {r['model']} (`{r['case']}`) | {found} | {effect} | {graft} |")
    lines += ["", "## Exports", "",
              "Against ropeexport's own build of the same checkpoint where measured (`against own`).", "",
              "| model | exported by | verdict and findings | read per layer | against own | graft |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for r in exports:
        if "refused" in r:
            lines.append(f"| {r['model']} | {r['source']} | does not build: {r['refused']} | | | |")
            continue
        found = "<br>".join(f"{f['text']} (`{f['name']}`)" for f in r["findings"]) or "no finding"
        read = "; ".join(f"{k}: {_short(v)}" for k, v in r["read"].items())
        proof = ": see graft's proof" if r.get("graft") else ""
        against = _effect(r["against_own"]) if "against_own" in r else f"not run (no cache{proof})" if (
            "dynamo" in r["source"]) else ""  # fmt: skip
        lines.append(f"| {r['model']} | {r['source']} | {r['verdict']}: {found} | {read} | {against} | "
                     f"{_graft_words(r.get('graft'))} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _short(value: Any) -> str:
    if isinstance(value, list) and value and isinstance(value[0], dict):  # rope slices
        return ", ".join(f"{s['layer']}{s['role']} {_span(s['channels'])}/{s['head']}" if "channels" in s
                         else f"{s['layer']}{s['role']} unread" for s in value)  # fmt: skip
    if isinstance(value, dict):
        said = (f"{k}: {_number(v['last'] if isinstance(v, dict) else v)}" for k, v in value.items())
        return ", ".join(said) or "none read"
    return str(value)


def _number(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _span(channels: list[int]) -> str:
    return f"{channels[0]}-{channels[-1]}" if channels else "none"


def main(argv: list[str] | None = None) -> int:
    """Plant, audit, graft; export and audit; write the tables. Exit 1 when a planted bug is not named."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="a folder for checkpoints and models (emptied first)")
    parser.add_argument("--out", required=True, help="folder for planted-latent-bugs.json and .md")
    parser.add_argument("--mobius", help="mobius executable of another environment (default: python -m mobius here)")
    args = parser.parse_args(argv)
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    planted = planted_rows(work)
    exports = export_rows(work, args.mobius)
    command = "python tools/planted_latent_bugs.py " + " ".join(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"command": command, "planted": planted, "exports": exports}
    (out / "planted-latent-bugs.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    (out / "planted-latent-bugs.md").write_text(markdown(planted, exports, command))
    return 0 if all(r["named"] for r in planted) else 1


if __name__ == "__main__":
    raise SystemExit(main())
