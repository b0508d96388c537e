"""Qwen3-MoE: Qwen3's attention (q/k RMSNorms per head), in place of the MLP a mixture of gated-SiLU experts on the
sparse layers, Qwen3's MLP on the dense ones.

Read from transformers 5.23 (``models/qwen3_moe``): ``Qwen3MoeDecoderLayer`` gives layer i the mixture where i is not
in ``mlp_only_layers``, ``num_experts`` > 0 and (i + 1) % ``decoder_sparse_step`` == 0, else ``Qwen3MoeMLP`` of
``intermediate_size``; the mixture's experts are ``moe_intermediate_size`` wide, without biases
(``Qwen3MoeExperts``: down(act(gate x) * up x)); ``Qwen3MoeTopKRouter`` takes the softmax of the router logits over
all experts in float32 and its ``num_experts_per_tok`` largest, renormalized over them with ``norm_topk_prob``
(default false): the routers ``topk_softmax`` (renormalized) and ``softmax_topk`` (as they are) of
``components.moe``. The checkpoint stores each expert apart (``mlp.experts.{e}.gate_proj.weight``), the router as
``mlp.gate.weight``. ``use_sliding_window`` (every layer sliding, in ``Qwen3MoeAttention``) is refused by name.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ropeexport.architectures.base import MOE_KEYS, number
from ropeexport.architectures.hooks import ConfigHook
from ropeexport.architectures.qwen3 import ARCHITECTURE as QWEN3
from ropeexport.errors import SpecError

_EXPERT = "model.layers.{i}.mlp.experts.{e}."


def sparse_layers(config: Mapping[str, Any], where: str, layers: int) -> tuple[list[bool], dict[str, str]]:
    """Per layer whether it holds the mixture (``Qwen3MoeDecoderLayer``), and the keys that said so."""
    step = config.get("decoder_sparse_step")
    step = 1 if step is None else int(number(where, "decoder_sparse_step", step))
    dense = config.get("mlp_only_layers") or []
    if not isinstance(dense, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in dense):
        raise SpecError(f"{where}: mlp_only_layers", f"must be a list of layer indices, got {dense!r}")
    outside = next((i for i in dense if not 0 <= i < layers), None)
    if outside is not None:
        raise SpecError(f"{where}: mlp_only_layers", f"names layer {outside}, outside the {layers} layers "
                        f"(0 to {layers - 1})")  # fmt: skip
    said = {"sparse layers": "(i + 1) % decoder_sparse_step == 0 and i not in mlp_only_layers "
            f"(decoder_sparse_step {step}{'' if 'decoder_sparse_step' in config else ', its default'}, "
            f"mlp_only_layers {sorted(dense)})"}  # fmt: skip
    return [i not in dense and (i + 1) % step == 0 for i in range(layers)], said


def _changes(config: Mapping[str, Any], where: str,
             layout: Mapping[str, Any]) -> tuple[list[dict[str, object]], dict[str, str]]:  # fmt: skip
    """The dense layers' MLP (``intermediate_size``), and every sparse layer's router where ``norm_topk_prob`` is
    false (the default layer's is ``topk_softmax``, the released models' true).
    """  # noqa: D205
    if config.get("use_sliding_window"):
        raise SpecError(f"{where}: use_sliding_window", "is not built for qwen3_moe (every layer sliding over "
                        "sliding_window); give false")  # fmt: skip
    sparse, said = sparse_layers(config, where, int(layout["num_layers"]))
    inner = config.get("intermediate_size")
    norm = config.get("norm_topk_prob", False)
    if not isinstance(norm, bool):
        raise SpecError(f"{where}: norm_topk_prob", f"must be true or false, got {norm!r}")
    router = "topk_softmax" if norm else "softmax_topk"
    said["router"] = f"{router} (norm_topk_prob {str(norm).lower()}{'' if 'norm_topk_prob' in config else ', default'})"
    out: list[dict[str, object]] = []
    for is_sparse in sparse:
        if is_sparse:
            out.append({} if norm else {"router": router})
            continue
        if inner is None:
            raise SpecError(f"{where}: intermediate_size", "missing: qwen3_moe's dense layers are that wide")
        out.append({"mlp": "gated", "intermediate_size": int(number(where, "intermediate_size", inner)),
                    "num_experts": 0, "experts_per_token": 0, "router": ""})  # fmt: skip
    if not all(sparse):
        said["dense layers"] = "intermediate_size"
    return out, said


ARCHITECTURE = replace(
    QWEN3,
    model_type="qwen3_moe",
    names={
        **QWEN3.names,
        "layers.{i}.router_proj": "model.layers.{i}.mlp.gate.weight",
        "layers.{i}.experts_gate_proj": _EXPERT + "gate_proj.weight",
        "layers.{i}.experts_up_proj": _EXPERT + "up_proj.weight",
        "layers.{i}.experts_down_proj": _EXPERT + "down_proj.weight",
    },
    keys=replace(QWEN3.keys, inner=("moe_intermediate_size",), reads=(*MOE_KEYS, "moe_intermediate_size")),
    layer_fields={"qk_norm": "rms", "mlp": "moe", "router": "topk_softmax", "expert": "gated"},
    hook=ConfigHook("qwen3_moe"),
    changes=_changes,
)
