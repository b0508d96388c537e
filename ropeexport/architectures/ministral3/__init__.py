"""Ministral 3 (Ministral-3-3B/8B/14B; the text model of a ``mistral3`` checkpoint, Mistral 3's ``text_config``):
Mistral's body with YaRN (factor 16 over 16384 positions in the released configs) and, after the rotation, the query
times 1 + beta * log(1 + floor(position / original_max_position_embeddings)) (``llama_4_scaling_beta``: the layer's
``query_scale`` of kind ``log_floor``, ``components.query_scale``).

Read from transformers 5.23's ``modeling_ministral3.py`` and ``configuration_ministral3.py``:
``Ministral3Attention.forward`` multiplies the rotated query by ``get_llama_4_attn_scale(position_ids,
rope_parameters.get("llama_4_scaling_beta"), rope_parameters.get("original_max_position_embeddings"))`` cast to the
query's dtype (both values read from ``rope_parameters`` alone, not the top level); ``self.scaling`` head_dim ** -0.5;
no biases; ``sliding_window`` on every layer when set (its attention passes it to every layer, as Mistral's);
``Ministral3Config.__post_init__`` fills in a whole YaRN setting (theta 1e6, beta 0.1) when ``rope_parameters`` is
absent, and ``ignore_keys_at_rope_validation`` lets ``llama_4_scaling_beta`` and ``max_position_embeddings`` sit in
``rope_parameters`` unread by the rotary embedding.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ropeexport.architectures.base import Architecture, Keys, number, read_layout
from ropeexport.architectures.hooks import ConfigHook
from ropeexport.architectures.llama import BODY
from ropeexport.errors import SpecError

BETA = "llama_4_scaling_beta"
ORIGINAL = "original_max_position_embeddings"


def read(arch: Architecture, config: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Mistral's model-wide fields, and the query scale of every layer from the scaling dict (module doc).

    beta 0 scales by 1 everywhere: no query scale. The dict's ``max_position_embeddings`` (which transformers does not
    read) must agree with the top-level one where both are given.
    """
    fields, sources = read_layout(arch, config, where)
    scale, source = query_scale(config, where, "ministral3")
    if source:
        fields["query_scale"], sources["query_scale"] = scale, source
    return fields, sources


def query_scale(config: Mapping[str, Any], where: str, model_type: str) -> tuple[dict[str, Any] | None, str]:
    """(every layer's query scale from the scaling dict (module doc), its source); (None, "") where the config has no
    scaling dict (the encoding's import refuses it); SpecError naming the key at fault. Mistral 4 reads it alike
    (``architectures.mistral4``).
    """  # noqa: D205
    key = next((k for k in ("rope_parameters", "rope_scaling") if isinstance(config.get(k), Mapping)), None)
    params: Mapping[str, Any] = config[key] if key is not None else {}
    stated, top = params.get("max_position_embeddings"), config.get("max_position_embeddings")
    if stated is not None and top is not None and stated != top:
        raise SpecError(f"{where}: {key}.max_position_embeddings", f"({stated!r}) contradicts max_position_embeddings "
                        f"({top!r}); transformers reads the top-level one")  # fmt: skip
    if key is None:
        return None, ""  # the encoding's import refuses it (its config class fills in a whole YaRN setting)
    beta = params.get(BETA)
    if beta is None:
        raise SpecError(f"{where}: {key}.{BETA}", f"missing: transformers' {model_type} attention multiplies the query "
                        f"by 1 + {BETA} * log(1 + floor(position / {ORIGINAL})) and has no default for it")  # fmt: skip
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta < float("inf"):
        raise SpecError(f"{where}: {key}.{BETA}", f"must be a finite number >= 0 (0: no query scale), got {beta!r}")
    if not beta:
        return None, f"{key}.{BETA} 0 (the query times 1: none)"
    if params.get(ORIGINAL) is None:
        raise SpecError(f"{where}: {key}.{ORIGINAL}", f"missing: {key}.{BETA} ({beta!r}) scales the query by the "
                        f"position over {key}.{ORIGINAL}, which transformers reads from the dict alone")  # fmt: skip
    original = number(where, f"{key}.{ORIGINAL}", params[ORIGINAL])
    return {"kind": "log_floor", "beta": float(beta), ORIGINAL: original}, (
        f"log_floor: beta <- {key}.{BETA}; {ORIGINAL} <- {key}.{ORIGINAL} (transformers' get_llama_4_attn_scale)")


ARCHITECTURE = replace(
    BODY,
    model_type="ministral3",
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-5, windowed=True),
    read=read,
    hook=ConfigHook("ministral3", default_theta=1_000_000.0, rope_extra_keys=(BETA, "max_position_embeddings"),
                    theta_required="missing: transformers' ministral3 config fills in YaRN x16 over 16384 positions at "
                    f"theta 1e6 with {BETA} 0.1 when rope_parameters is absent; give rope_parameters"),
    wrappers=("mistral3",),  # Mistral 3 (Ministral 3 with its vision tower) ships as mistral3: text_config
)
