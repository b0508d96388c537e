"""The peers' bugs of issue 39 on the RoPE of the 2026 families (Gemma 4, Cohere 2, EXAONE 4, GLM-4, Ministral 3,
OLMo 3), planted into ropeexport's own decoders of the tiny checkpoints (``tests/decoder/tiny.py``): one row each.

A row is a decoder of ``family`` built from its checkpoint (its config changed by ``built``), planted (``plant``:
the graph rewritten as the peer's export computes it), and audited against the checkpoint's config (changed by
``audited``). Each plant is written from the model's own definition in numpy (transformers' formulas), not from the
audit's schedule code, except where a schedule is only carried across layers (YaRN on OLMo 3's sliding layers:
``families.rope.regimes.frequencies``, the schedule the audit compares with, moved to the other layers' theta).
``before``: what the audit of dev said of the row before this change (read by running it), kept for the figures page.
``tests/audits/test_audit_families.py`` asserts the rows; ``tools/planted_peer_bugs.py`` renders them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _initializer(proto: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in proto.graph.initializer if t.name == name)


def _set_tables(proto: onnx.ModelProto, prefix: str, inv: np.ndarray, factor: float = 1.0) -> None:
    """``prefix``/cos_table and sin_table set to factor x cos/sin(p x inv) [rows, inv.size], float32."""
    rows = _initializer(proto, f"{prefix}/cos_table").dims[0]
    angles = np.outer(np.arange(rows, dtype=np.float64), inv)  # [rows, w]
    for which, fn in (("cos", np.cos), ("sin", np.sin)):
        name = f"{prefix}/{which}_table"
        _initializer(proto, name).CopyFrom(numpy_helper.from_array((factor * fn(angles)).astype(np.float32), name))


def _config(model: Path) -> dict[str, Any]:
    """The config.json of the checkpoint the decoder was built from (saved beside the model by ``planted``)."""
    return json.loads((model.parent / "built-config.json").read_text())


def _proportional(theta: float, head_dim: int, share: float, width: int) -> np.ndarray:
    """transformers' proportional inverse frequencies at ``head_dim`` (``int(share * head_dim // 2)`` real pairs
    theta^(-2i/head_dim), zeros after), zero-padded to ``width``.
    """  # noqa: D205
    inv = np.zeros(width)
    real = int(share * head_dim // 2)
    inv[:real] = theta ** (-np.arange(0, 2 * real, 2, dtype=np.float64) / head_dim)
    return inv


def one_head_dim(model: Path) -> None:
    """Gemma 4's global layers' proportional table made at the sliding layers' head_dim (optimum #2436: one head_dim
    for every layer): fewer real pairs, each at theta^(-2i/h_sliding), zero-padded to the global table's width.
    """  # noqa: D205
    proto = onnx.load(str(model))
    full = _config(model)["rope_parameters"]["full_attention"]
    sliding = _initializer(proto, "layers.0/rope/cos_table").dims[1] * 2
    width = _initializer(proto, "layers.1/rope/cos_table").dims[1]
    inv = _proportional(full["rope_theta"], sliding, full["partial_rotary_factor"], width)
    _set_tables(proto, "layers.1/rope", inv)
    onnx.save(proto, str(model))


def pairs_without_zero_tail(model: Path) -> None:
    """Gemma 4's proportional share read as a partial rotary width (Megatron-Bridge #4195): p x d channels rotated in
    pairs (i, i + p*d/2) at theta^(-2i/(p*d)) (``rotary_embedding_dim`` p x d), no zero-frequency tail.
    """  # noqa: D205
    proto = onnx.load(str(model))
    full = _config(model)["rope_parameters"]["full_attention"]
    head = _initializer(proto, "layers.1/rope/cos_table").dims[1] * 2
    rotated = int(head * full["partial_rotary_factor"])
    inv = full["rope_theta"] ** (-np.arange(0, rotated, 2, dtype=np.float64) / rotated)
    angles = np.outer(np.arange(_initializer(proto, "layers.1/rope/cos_table").dims[0], dtype=np.float64), inv)
    for which, fn in (("cos", np.cos), ("sin", np.sin)):
        name = f"layers.1/rope/{which}_table"
        _initializer(proto, name).CopyFrom(numpy_helper.from_array(fn(angles).astype(np.float32), name))
    for node in proto.graph.node:
        if node.op_type == "RotaryEmbedding" and node.input[1] == "layers.1/rope/cos_table":
            next(a for a in node.attribute if a.name == "rotary_embedding_dim").i = rotated
    onnx.save(proto, str(model))


def _unrotate(proto: onnx.ModelProto, layer: int) -> None:
    """Layer ``layer``'s RotaryEmbedding nodes removed, their readers reading what they rotated."""
    prefix = f"layers.{layer}/"
    rotations = [n for n in proto.graph.node if n.op_type == "RotaryEmbedding" and n.name.startswith(prefix)]
    for node in rotations:
        source, out = node.input[0], node.output[0]
        proto.graph.node.remove(node)
        for other in proto.graph.node:
            other.input[:] = [source if i == out else i for i in other.input]


def _rotate(proto: onnx.ModelProto, layer: int, like: int) -> None:
    """Layer ``layer``'s query and key rotated as layer ``like``'s are (its tables, positions and attributes): a
    RotaryEmbedding after each projection's transpose, its readers rewired.
    """  # noqa: D205
    source = {n.name.rsplit("/", 1)[-1]: n for n in proto.graph.node
              if n.op_type == "RotaryEmbedding" and n.name.startswith(f"layers.{like}/")}  # fmt: skip
    for which in ("query_out_node", "key_out_node"):
        old = source[which]
        before = next(n for n in proto.graph.node if old.input[0] in n.output)  # layer ``like``'s transpose
        x = before.output[0].replace(f"layers.{like}/", f"layers.{layer}/")
        out = f"layers.{layer}/rope/{which.removesuffix('_node')}"
        for other in proto.graph.node:
            other.input[:] = [out if i == x else i for i in other.input]
        new = helper.make_node("RotaryEmbedding", [x, *old.input[1:]], [out], name=f"layers.{layer}/rope/{which}")
        new.attribute.extend(old.attribute)
        at = next(i for i, n in enumerate(proto.graph.node) if x in n.output)
        proto.graph.node.insert(at + 1, new)


def condition_inverted(model: Path) -> None:
    """Cohere 2's RoPE condition inverted (vLLM PR #11203 in review): the global layer (3) rotated as the sliding
    ones are, the sliding layers (0-2) left unrotated.
    """  # noqa: D205
    proto = onnx.load(str(model))
    _rotate(proto, 3, 0)
    for layer in range(3):
        _unrotate(proto, layer)
    onnx.save(proto, str(model))


def nope_rotated(model: Path) -> None:
    """The no-RoPE global layer (3) rotated as the local ones are (onnxruntime-genai 0.18 rotates every layer)."""
    proto = onnx.load(str(model))
    _rotate(proto, 3, 0)
    onnx.save(proto, str(model))


def query_scale_ahead(model: Path) -> None:
    """Ministral 3's query factor one step ahead: 1 + beta * log(2 + floor(pos / original)), 1 + beta * log 2 at the
    first positions where transformers' ``get_llama_4_attn_scale`` gives 1 (vLLM #48621's 1.2773 where 1.0 is
    1 + 0.4 * log 2: our reading of its figure).
    """  # noqa: D205
    proto = onnx.load(str(model))
    beta = _config(model)["rope_parameters"]["llama_4_scaling_beta"]
    table = _initializer(proto, "layers.0/block/query_scale_table")
    steps = np.arange(table.dims[0], dtype=np.float64)
    table.CopyFrom(numpy_helper.from_array((1 + beta * np.log1p(steps + 1)).astype(np.float32), table.name))
    onnx.save(proto, str(model))


def yarn_on_sliding(model: Path) -> None:
    """OLMo 3's full layers' YaRN put on its sliding layers too (their own theta kept)."""
    from ropeexport.families.rope.regimes import frequencies
    from ropeexport.families.rope.spec import RopeSpec

    proto = onnx.load(str(model))
    config = _config(model)["rope_parameters"]
    full, sliding = config["full_attention"], config["sliding_attention"]
    table = _initializer(proto, "layers.0/rope/cos_table")
    params = {k: v for k, v in full.items() if k not in ("rope_type", "rope_theta")}
    spec = RopeSpec(head_dim=2 * table.dims[1], num_heads=1, num_kv_heads=1, max_positions=table.dims[0],
                    theta=sliding["rope_theta"], scaling=full["rope_type"], scaling_params=params)  # fmt: skip
    inv, factor = frequencies(spec, spec.max_positions)
    _set_tables(proto, "layers.0/rope", inv, factor)
    onnx.save(proto, str(model))


@dataclass(frozen=True)
class FamilyBug:
    """One peer's bug (module doc): the findings ``finding`` (with ``words``) and ``also`` beside it; its logit effect
    as the audit measures it between ``effect`` (None: not measured by the audit, whose graft cannot make the
    repair; the planted model is then measured against the correct one, ``between`` at least); ``graft``: proven,
    or the words of its refusal.
    """  # noqa: D205

    case: str
    family: str
    peer: str
    finding: str
    words: str
    effect: tuple[float, float] | None
    graft: str
    before: str
    plant: Callable[[Path], None] | None = None
    built: dict[str, Any] | None = None
    audited: dict[str, Any] | None = None
    also: tuple[str, ...] = ()
    between: float = 0.0


BUGS = [
    FamilyBug("gemma4-one-head-dim", "gemma4", "optimum #2436 (one head_dim for every Gemma 4 layer)",
              "one-head-dim", "global layers (1, 3) use a table made at the sliding layers' head_dim 8 (1 real "
              "frequency pair where the config has 2, zero-padded to 8): one head_dim for every layer", (0.05, 10.0),
              "proven", "ValueError: operands could not be broadcast together (the audit crashed)", one_head_dim),
    FamilyBug("gemma4-pairs-without-zero-tail", "gemma4", "Megatron-Bridge #4195 (proportional pairs without the "
              "zero tail)", "proportional-without-zero-tail", "global layers (1, 3) read proportional RoPE as "
              "partial rotary 0.25: 4 of 16 channels rotated in pairs (i, i + 2) at theta^(-2i/4), where the config "
              "rotates all 16 in pairs (i, i + 8): 2 real frequencies theta^(-2i/16), then 6 zero-frequency pairs",
              None, "it does not change how many channels a node rotates", "exit 2: 'the config does not describe "
              "this model (head_dim, partial_rotary_factor)'", pairs_without_zero_tail, between=0.05),
    FamilyBug("cohere2-rope-condition-inverted", "cohere2", "vLLM PR #11203 (Cohere 2's RoPE condition inverted)",
              "rope-condition-inverted", "RoPE on the layers the config leaves without it (layer 3) and none on the "
              "ones it rotates (layers 0-2): the per-layer condition inverted", None, "it adds no rotation",
              "two unrelated-looking findings (layer 3 rotated; layers 0-2 not rotated), the inversion unnamed",
              condition_inverted, also=("nope-rotated", "not-rotated"), between=0.05),
    FamilyBug("exaone4-theta-fallback-100x", "exaone4", "DeepSpeed PR #8345 (EXAONE's theta fallback 100x off)",
              "theta", "theta 10000 where the config says 1000000 (100x too small)", (0.05, 10.0), "proven",
              "'theta 10000 where the config says 1000000' (the factor unsaid)",
              audited={"rope_theta": 1e6, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}),
    FamilyBug("ministral3-query-scale-one-step-ahead", "ministral3", "vLLM #48621 (Ministral 3's query-scale "
              "multiplier 1.2773 where 1.0)", "query-scale", "layers 0-1 scale the query by its position wrongly: "
              "the factor is 1.06931 at positions 0-63 where the config's 1 + 0.1 * log(1 + floor(pos / 64)) gives 1 "
              "(the step count one ahead", (0.05, 10.0), "proven", "exact, exit 0 (the factor never read)",
              query_scale_ahead),
    FamilyBug("olmo3-yarn-on-sliding-layers", "olmo3", "(issue 39: YaRN on OLMo 3's sliding layers)",
              "other-layers-scaling", "sliding layers (0-2) take the global layers' scaling: theta 500000 with yarn "
              "x4; config: theta 500000, unscaled", (0.05, 10.0), "proven", "named as now", yarn_on_sliding,
              also=("attention-factor",)),
    FamilyBug("ministral3-yarn-untruncated", "ministral3", "onnxruntime-genai 0.18 (YaRN never truncated, read in "
              "its source)", "yarn-truncation", "YaRN correction range not truncated (the config says truncate: "
              "true)", (0.01, 10.0), "proven", "named as now", built={"rope_parameters": {"truncate": False}}),
    FamilyBug("exaone4-nope-layer-rotated", "exaone4", "onnxruntime-genai 0.18 (no-RoPE layers rotated, read in its "
              "source)", "nope-rotated", "layer 3 has no RoPE in the config but is rotated", (0.05, 10.0), "proven",
              "named as now", nope_rotated),
]  # fmt: skip


def change_config(ckpt: Path, folder: Path, change: dict[str, Any]) -> Path:
    """A copy of the checkpoint whose config.json has ``change`` (``rope_parameters`` entries merged)."""
    import shutil

    shutil.copytree(ckpt, folder)
    config = json.loads((folder / "config.json").read_text())
    for key, value in change.items():
        config[key] = config[key] | value if key == "rope_parameters" else value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def planted(bug: FamilyBug, folder: Path, clean: Path, ckpt: Path, build: Callable[[Path, Path], Path]) -> tuple[
        Path, Path]:  # fmt: skip
    """(the planted model, the checkpoint audited against) of ``bug`` in ``folder``: ``clean`` (the family's decoder,
    built once) copied, or built anew from a changed config (``build(folder, checkpoint)``), then planted.
    """  # noqa: D205
    import shutil

    (folder / "model").mkdir(parents=True)
    if bug.built:
        model = build(folder / "model", change_config(ckpt, folder / "built", bug.built))
    else:
        for item in clean.parent.iterdir():
            shutil.copy(item, folder / "model" / item.name)
        model = folder / "model" / clean.name
    (model.parent / "built-config.json").write_text((ckpt / "config.json").read_text())
    if bug.plant is not None:
        bug.plant(model)
    audited = change_config(ckpt, folder / "audited", bug.audited) if bug.audited else ckpt
    return model, audited

