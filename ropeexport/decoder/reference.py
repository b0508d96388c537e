"""transformers' eager model on the same weights: the reference users know, recomputed without a cache.

Built from the checkpoint folder by transformers itself (``from_pretrained``, local files only: our own weight
mapping is then checked, not assumed), or, for seeded weights, from the config with our weights loaded under its
names (``weights.to_transformers``, strict). Attention is transformers' eager implementation, in the decoder's dtype.

Every call is a full forward pass over the sequence so far with no cache: transformers 5.x is no cache oracle for
LongRoPE (Phi-3's ``generate()`` drops its cache at original_max + 1, then decodes one token without one). Each
scenario starts from fresh rotary modules, because the dynamic-NTK module keeps the largest length it has seen (the
weights are loaded once and never copied: a real model's are gigabytes). Where the schedule's tables depend on the
length (LongRoPE, dynamic NTK) each batch row is its own forward pass from fresh rotary modules, as that request
alone would run: transformers takes one length for the whole batch (the longest row's), and its dynamic-NTK module
keeps the largest length any row reached, where the decoder and the truth give each row its own
(``families.rope.regimes``).
No torch export ever runs in this process on these modules (a dynamo export leaves a fake tensor inside
transformers' LongRoPE module).
"""

from __future__ import annotations

import copy
import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.decoder.checkpoint import to_transformers
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.errors import RuntimeUnavailable, SpecError
from ropeexport.families.rope.regimes import regime_kind
from ropeexport.hf import text_config


def unexpressed(spec: DecoderSpec, config: Mapping[str, Any]) -> str | None:
    """Why transformers' model of ``config`` cannot stand for the spec (None when it can): its layers are what the
    config says per layer (``layer_types``, ``no_rope_layers``, the encoding per layer type), so a spec whose layers
    differ from those (set through the API) has no config there.
    """  # noqa: D205
    from ropeexport.decoder.config import from_config

    try:
        said = from_config(config, spec.name, dtype=spec.dtype, graph=spec.graph,
                           max_positions=spec.position_spec().max_positions)  # fmt: skip
    except SpecError:
        said = None
    if said is not None and said.layers == spec.layers:
        return None
    default = spec.default_layer().to_dict()
    differ = [i for i, layer in enumerate(spec.layers) if layer.to_dict() != default]
    fields = sorted({k for i in differ for k, v in spec.layers[i].to_dict().items() if v != default[k]})
    return (f"transformers' {spec.model_type} config cannot express per-layer {' and '.join(fields)} (layers "
            f"{', '.join(map(str, differ))} differ from the model's default layer)")  # fmt: skip


class TransformersReference:
    """A transformers causal LM of the decoder's config and weights; ``logits`` recomputes a sequence.

    RuntimeUnavailable (the report records the reference as skipped, with the reason) when transformers is absent or
    its model of the spec's model type cannot express the spec (``unexpressed``).
    """

    def __init__(
        self,
        spec: DecoderSpec,
        config: Mapping[str, Any],
        weights: Mapping[str, np.ndarray],
        checkpoint: str | Path | None = None,
    ) -> None:
        why = unexpressed(spec, config)
        if why is not None:
            raise RuntimeUnavailable(why)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever fetched
        try:
            import torch
            import transformers
        except ImportError:
            raise RuntimeUnavailable("transformers is not installed (pip install 'ropeexport[test]')") from None
        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()  # its weight-loading bar would land in our output
        self.torch = torch
        # one forward pass per row where a row's regime depends on its own length (module doc)
        self.per_row = regime_kind(spec.position_spec()) != "static"
        dtype = {"fp32": torch.float32, "fp16": torch.float16}[spec.dtype]
        whole = not spec.positions.one_axis  # Qwen-VL: transformers' causal LM of it is the whole image-text model
        auto: Any = transformers.AutoModelForImageTextToText if whole else transformers.AutoModelForCausalLM
        if checkpoint is not None and spec.text_of and spec.text_of not in _causal_types(transformers):
            auto = transformers.AutoModelForImageTextToText  # Mistral 3: its model is a ForConditionalGeneration only
        elif not whole and not spec.text_of and spec.model_type not in _causal_types(transformers):
            auto = _Direct.of(transformers, spec.model_type) or auto  # 5.23's mistral4 (``_Direct``)
        if checkpoint is not None:
            model = auto.from_pretrained(str(checkpoint), attn_implementation="eager", dtype=dtype,
                                         local_files_only=True)  # fmt: skip
        else:
            text, _ = text_config(config, "config.json")  # seeded weights are the text model's alone
            if whole and not spec.text_of:
                raise RuntimeUnavailable(f"transformers has no causal LM of {spec.model_type} alone: the reference "
                                         "of a Qwen-VL text decoder needs its whole model's config")  # fmt: skip
            if not whole and text.get("model_type") not in _causal_types(transformers):
                # Mistral Large 4: its causal LM is the wrapper's alone (MistralLarge4ForConditionalGeneration), whose
                # names these weights (int4's dequantized, or seeded) are not written under
                raise RuntimeUnavailable(f"transformers has no causal LM of {text.get('model_type')!r} alone (only "
                                         "its multimodal wrapper's, loaded from a checkpoint folder as saved)")
            kept = config if whole else text  # Qwen-VL: the whole model (its vision tower left at random: unused)
            fields = {k: v for k, v in kept.items() if k != "model_type"}
            hf_config = transformers.AutoConfig.for_model(str(kept["model_type"]), **fields)
            model = auto.from_config(hf_config, attn_implementation="eager", dtype=dtype)
            state = {_in_whole(k) if whole else k: torch.from_numpy(np.ascontiguousarray(v, np.float32)).to(dtype)
                     for k, v in to_transformers(spec, weights).items()}  # fmt: skip
            missing, unexpected = model.load_state_dict(state, strict=False)
            if missing and unexpected:  # checkpoint names its modules convert on load (Qwen3-MoE's experts apart)
                model, missing, unexpected = _converted(auto, hf_config, state, dtype)
            missing = [k for k in missing if not k.endswith("lm_head.weight") or not spec.tie_embeddings]
            missing = [k for k in missing if not (whole and k.startswith(VISION_MODULES))]
            if missing or unexpected:
                raise RuntimeError(
                    f"weights do not fit transformers' model: missing {missing}, unexpected {unexpected}"
                )
        self.pristine = model.eval()
        self.model = self.pristine
        # The state a forward pass leaves is the rotary modules' (dynamic NTK's and LongRoPE's cached length and
        # frequencies): a pristine copy of each, under every parent that holds it, is all ``fresh`` restores, so a
        # scenario never needs a second copy of the weights.
        parents = [parent for _, parent in model.named_modules(remove_duplicate=False)]
        self._rotary = [(parent, attr, copy.deepcopy(child)) for parent in parents
                        for attr, child in parent.named_children() if "Rotary" in type(child).__name__]  # fmt: skip
        self.takes_positions = "position_ids" in inspect.signature(model.forward).parameters
        self.keeps_last = "logits_to_keep" in inspect.signature(model.forward).parameters
        # transformers 5.23's Gemma 4 slices per_layer_inputs at its first shared key/value layer under an int
        # logits_to_keep (its default 0 too) and raises TypeError when the model has none (hidden_size_per_layer_input
        # 0, ``Gemma4TextModel._maybe_slice_kv_shared_inputs``); a slice is passed as it is
        text = model.config.get_text_config()
        self.keep_slice = bool(getattr(text, "num_kv_shared_layers", 0)) and not getattr(
            text, "hidden_size_per_layer_input", 1)  # fmt: skip
        self.version = transformers.__version__

    def describe(self) -> str:
        """For example ``transformers 5.23.0 eager (LlamaForCausalLM), no cache``."""
        return f"transformers {self.version} eager ({type(self.pristine).__name__}), no cache"

    def fresh(self) -> None:
        """The model as loaded, for the next scenario: every rotary module replaced by a copy of its pristine state
        (dynamic-NTK and LongRoPE state reset; the weights are never copied).
        """  # noqa: D205
        for parent, attr, pristine in self._rotary:
            setattr(parent, attr, copy.deepcopy(pristine))

    def logits(
        self, input_ids: np.ndarray, position_ids: np.ndarray, attention_mask: np.ndarray, last: int | None = None
    ) -> np.ndarray:
        """float64 logits [b, t, vocab] of the whole sequence, no cache; ``last``: of its last ``last`` slots only
        (the head, 128256 words wide in Llama 3, then multiplies only those: ``logits_to_keep``).
        """  # noqa: D205
        if self.per_row and input_ids.shape[0] > 1:  # each row as its own request: fresh rotary state each
            out = []
            for i, p, m in zip(input_ids, position_ids, attention_mask, strict=True):
                self.fresh()  # dynamic NTK keeps the largest L it saw: another row's must not linger
                out.append(self.logits(i[None], p[None], m[None], last))
            return np.concatenate(out)
        torch = self.torch
        kwargs = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention_mask),
                  "use_cache": False}  # fmt: skip
        if self.takes_positions:
            kwargs["position_ids"] = torch.from_numpy(position_ids)
        if last is not None and self.keeps_last:
            kwargs["logits_to_keep"] = slice(-last, None) if self.keep_slice else last
        elif self.keep_slice:
            kwargs["logits_to_keep"] = slice(None)
        with torch.no_grad():
            logits = self.model(**kwargs).logits
        return (logits if last is None else logits[:, -last:]).double().numpy()


def _converted(auto: Any, hf_config: Any, state: Mapping[str, Any], dtype: Any) -> tuple[Any, list[str], list[str]]:
    """(model, missing, unexpected) of ``state`` under its checkpoint names, loaded as transformers loads a checkpoint
    (``from_pretrained`` of a temporary folder: its own conversion of names and layouts, e.g. Qwen3-MoE's experts
    stored apart into one fused tensor).
    """  # noqa: D205
    import tempfile

    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory(prefix="ropeexport-reference-") as folder:
        hf_config.save_pretrained(folder)
        save_file({k: v.contiguous() for k, v in state.items()}, str(Path(folder) / "model.safetensors"),
                  metadata={"format": "pt"})  # fmt: skip
        model, info = auto.from_pretrained(folder, attn_implementation="eager", dtype=dtype, local_files_only=True,
                                           output_loading_info=True)  # fmt: skip
    return model, sorted(info.get("missing_keys", ())), sorted(info.get("unexpected_keys", ()))


class _Direct:
    """A causal LM class AutoModelForCausalLM does not list, loaded as the Auto class loads (``from_pretrained``,
    ``from_config``): transformers 5.23 lists ``Mistral4ForCausalLM`` for pretraining only, and its
    AutoModelForCausalLM refuses a mistral4 config ("Unrecognized configuration class").
    """  # noqa: D205

    def __init__(self, cls: Any) -> None:
        self.cls = cls

    @classmethod
    def of(cls, transformers: Any, model_type: str) -> _Direct | None:
        """The causal LM class the pretraining mapping names for ``model_type``, or None."""
        from transformers.models.auto.modeling_auto import MODEL_FOR_PRETRAINING_MAPPING_NAMES

        name = MODEL_FOR_PRETRAINING_MAPPING_NAMES.get(model_type, "")
        return cls(getattr(transformers, name)) if name.endswith("ForCausalLM") else None

    def from_pretrained(self, *args: Any, **kwargs: Any) -> Any:
        return self.cls.from_pretrained(*args, **kwargs)

    def from_config(self, config: Any, **kwargs: Any) -> Any:
        return self.cls._from_config(config, **kwargs)


def _causal_types(transformers: Any) -> set[str]:
    """The model types transformers' AutoModelForCausalLM loads (a multimodal wrapper may be one: Gemma 3's gemma3)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


# Qwen-VL's whole model in transformers 5.23 (Qwen2_5_VLModel / Qwen3VLModel): the text model under
# model.language_model, the vision tower under model.visual (random weights in a reference: no image is fed).
VISION_MODULES = ("model.visual.",)


def _in_whole(key: str) -> str:
    """A text model's checkpoint key (``model.layers.0...``) as the whole Qwen-VL model's module names it."""
    return "model.language_model." + key.removeprefix("model.") if key.startswith("model.") else key
