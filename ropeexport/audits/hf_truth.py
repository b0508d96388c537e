"""transformers' own model as the proof's truth (``audits.truth``), for a model type ropeexport does not build.

The checkpoint is loaded by transformers (``AutoModelForCausalLM``) in float64 with ``attn_implementation="eager"``
and run with ``use_cache=False``: every call is what transformers computes from the call's tokens and position_ids
alone, no state carried (a hybrid's convolution or recurrent state starts empty, as on a first call). Calls are
placed by position_ids, or fed whole where the ONNX model takes none (``truth`` module doc).

Two things transformers computes below float64 even in a float64 model are put right while the truth runs:
- angles: each rotary module computes ``position_ids.float() * inv_freq`` in float32 (an angle error of about
  6e-8 x position rad). Every text rotary module (a ``*RotaryEmbedding`` that is not a vision one) gets a forward
  whose cos/sin are the cos/sin of float64 positions times float64 inverse frequencies, per layer type where the
  module takes one (Gemma 3n's sliding / full), times the schedule's attention factor, in the regime of
  L = max(position_ids) + 1. Qwen3.5's three M-RoPE axes (position_ids [3, b, s]: equal for text, differing for a
  picture's positions) each get their float64 angles, recomposed per frequency by the module's own
  ``recomposition_frequencies`` (which picks values and computes none); a module given differing axes without one is
  refused by name. The inverse frequencies come from ropeexport's own schedule code
  (``families.rope.regimes.frequencies``) for the encoding ropeexport reads from the config for that layer type
  (``hf.import_layers``): the proof runs after the audit has read the config, so this always applies; transformers'
  rope init is not recomputed. Before a module is patched its own output on positions 0..63 is compared with the
  patch's: a module laying out cos/sin otherwise (interleaved copies, another shape) is refused, never replaced.
- downcasts: code written for half-precision models upcasts to float32 (RMSNorm's ``.to(torch.float32)``, attention's
  ``softmax(..., dtype=torch.float32)``, ``.float()`` in gated delta rules and Mamba scans), in a float64 model a
  downcast of about 1e-7 of the logits. While the truth runs (``float64_throughout``), ``Tensor.float``,
  ``Tensor.to`` and ``softmax`` keep a float64 tensor in float64.

The whole model is held in float64 (8 bytes a parameter, where the oracle truth reads layer by layer): loaded for the
calls and dropped after them, before any ONNX Runtime session of the model exists. Before anything is loaded its
size is estimated from the config (``float64_bytes``: the model built on the meta device, which allocates nothing,
its parameters at 8 bytes each, its buffers in their dtype; activations not counted) and compared with the memory the
truth may take (``memory_gib``: by default what the system says is available, MemAvailable of /proc/meminfo): over
it, one line naming the size, the limit and the flag (``--truth-gib``) that raises it, before any weight is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.audits.truth import TOKENS, WHOLE, Call
from ropeexport.errors import SpecError

CHECK_ROWS = 64  # positions a rotary module's own cos/sin are compared at before it is patched
CHECK_TOLERANCE = 1e-4  # float32 angles there are within 4e-6 rad; a layout that differs is off by O(1)


@dataclass(frozen=True)
class LayerShape:
    """One layer's attention geometry: (heads, KV heads, head_dim)."""

    geometry: tuple[int, int, int]

    def cache_shapes(self, graph: str = "", cache: str = "expanded") -> tuple[tuple[int, int], tuple[int, int]]:
        """((KV heads, head_dim) of the cached key, of the value): ``LayerSpec.cache_shapes`` of a standard layer
        (whatever ``cache``: no latent layer).
        """  # noqa: D205
        _, kv, d = self.geometry
        return (kv, d), (kv, d)


@dataclass(frozen=True)
class ModelShape:
    """What the proof reads of the model (``truth.Truth.spec``): the config's sizes and the encoding whose far calls
    are run (the layer type whose encoding reaches furthest).
    """  # noqa: D205

    vocab_size: int
    num_layers: int
    tie_embeddings: bool
    layers: tuple[LayerShape, ...]
    position: Any
    graph: str = ""  # the form the cache is shaped for (``LayerSpec.cache_shapes``): "" as computed

    def position_spec(self) -> Any:
        """The encoding whose far calls are run (``prove.far_calls``)."""
        return self.position


class TransformersTruth:
    """transformers' model of the checkpoint in float64 (module doc)."""

    kind = "transformers"
    traced = "transformers' float64 model"

    def __init__(self, hf_config: Path, checkpoint: Path, dtype: str, memory_gib: float | None = None) -> None:
        import transformers
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        from ropeexport.audits.layers import from_config
        from ropeexport.decoder.verify import TOLERANCE
        from ropeexport.hf import import_layers, read_config

        self.checkpoint = Path(checkpoint)
        try:
            config = transformers.AutoConfig.from_pretrained(str(checkpoint))
        except (ValueError, KeyError, OSError) as exc:
            raise SpecError("checkpoint", f"{str(checkpoint)!r}: transformers {transformers.__version__} cannot read "
                            f"its config ({str(exc).splitlines()[0]}), and ropeexport builds no decoder of its model "
                            "type: there is no truth to prove it against") from None  # fmt: skip
        causal_lms: Any = MODEL_FOR_CAUSAL_LM_MAPPING  # a lazy mapping: config class -> model class
        model_class = causal_lms.get(type(config), None)
        if model_class is None:
            raise SpecError("checkpoint", f"{str(checkpoint)!r}: transformers {transformers.__version__} has no "
                            f"causal language model for model type {config.model_type!r}")  # fmt: skip
        self.model_class = model_class.__name__
        # a multimodal wrapper's checkpoint (qwen3_5, gemma3n): its sizes are its text model's, and the class
        # transformers maps it to reads the text model's weights (Qwen3.5's causal LM) or is the wrapper itself
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        own = getattr(model_class, "config_class", None)
        built = config if own is None or isinstance(config, own) else text
        self.bytes = check_size(model_class, built, memory_gib)
        self.layers = import_layers(read_config(hf_config), str(hf_config))  # per layer type, as the audit reads it
        encodings = from_config(Path(hf_config))
        self.specs: dict[str, Any] = {}  # layer type -> its RoPE spec (ropeexport's reading of the config)
        for i, kind in enumerate(self.layers.types):
            group = encodings.of(i)
            if group is not None and kind not in self.specs:
                self.specs[kind] = group.spec
        if not self.specs or any(s.encoding != "rope" for s in self.specs.values()):
            raise SpecError("hf_config", f"{str(hf_config)!r}: the transformers truth patches RoPE angles; this "
                            "config's layers have no RoPE")  # fmt: skip
        heads = text.num_attention_heads
        kv = getattr(text, "num_key_value_heads", None) or heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        furthest = max(self.specs.values(), key=lambda s: s.max_positions)
        count = int(text.num_hidden_layers)
        tied = getattr(text, "tie_word_embeddings", None)
        tied = getattr(config, "tie_word_embeddings", False) if tied is None else tied
        self.spec = ModelShape(int(text.vocab_size), count, bool(tied),
                               (LayerShape((heads, kv, head_dim)),) * count, furthest)  # fmt: skip
        self.tolerance = TOLERANCE[dtype]
        self.source = "the checkpoint"
        self.words = f"transformers' {self.model_class} in float64, eager, exact float64 angles per layer type"
        self.reference = (f"{self.words} (transformers {transformers.__version__}, no cache; inverse frequencies from "
                          "ropeexport's schedule of each layer type's encoding, the regime of L = max(position_ids) "
                          "+ 1; float32 downcasts kept in float64)")  # fmt: skip

    def placement(self, cached: bool, positions: bool, past: int) -> str:
        """``positions`` where the model takes position_ids (or the call starts at 0), else ``whole`` up to
        ``WHOLE`` tokens; never ``cache``: transformers runs without one, so random entries are never fed.
        """  # noqa: D205
        if positions or not past:
            return "positions"
        if past + TOKENS <= WHOLE:
            return "whole"
        return (f"the model takes no position_ids, and the whole sequence ({past + TOKENS} tokens) is longer than the "
                f"{WHOLE} the transformers truth feeds whole")  # fmt: skip

    def load(self) -> Any:
        """The model in float64, eager, its rotary modules patched (module doc)."""
        import torch
        import transformers

        # experts (a mixture's) through transformers' eager loop: its default grouped_mm takes no float64
        with torch.device("cpu"):
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(self.checkpoint), dtype=torch.float64, attn_implementation="eager",
                experts_implementation="eager").eval()  # fmt: skip
        patched = [patch_rotary(module, self.specs, name) for name, module in model.named_modules()
                   if _is_text_rotary(name, module)]  # fmt: skip
        if not patched:
            raise SpecError("checkpoint", f"transformers' {self.model_class} has no rotary embedding module to give "
                            "exact angles: the truth would keep its float32 angles")  # fmt: skip
        return model

    def bound(self, level: int | None) -> float:
        """The dtype's bound (``decoder verify``'s): the model's own weights are what transformers is given."""
        return self.tolerance

    def logits(self, calls: list[Call]) -> list[np.ndarray]:
        """Every call through the model (module doc): float64 logits [n, vocab] of its last n tokens."""
        import torch

        model = self.load()
        out = [_run(model, call)[0, -TOKENS:].to(torch.float64).numpy().copy() for call in calls]
        del model  # the whole model in float64: gone before the ONNX model's session is made
        return out

    def stages(self, call: Call) -> list[tuple[Any, np.ndarray]]:
        """The model's residual stream of ``call`` in float64 (``audits.locate``), read by hooks as it runs: after the
        embedding module, before each layer's pre-MLP norm (``PRE_MLP``: the residual after its token mixer, its
        attention or, in a hybrid's layer without one, its ``MIXERS``' module) and after the layer (after its MLP);
        a layer with none of those norms is one stage, its whole block. Each h [1, n, hidden]; none where the model
        names no decoder layers (``model.layers`` or ``model.language_model.layers``).
        """  # noqa: D205
        import torch

        from ropeexport.decoder.oracle import Stage

        model = self.load()
        inner = getattr(model, "model", None)
        layers = getattr(inner, "layers", None) or getattr(getattr(inner, "language_model", None), "layers", None)
        if layers is None:
            return []
        found: list[tuple[Any, np.ndarray]] = []

        def keep(stage: Stage, before: bool) -> Any:
            def hook(module: Any, args: Any, output: Any = None) -> None:
                value = args[0] if before else output[0] if isinstance(output, tuple) else output
                found.append((stage, value.detach().to(torch.float64).numpy().copy()))

            return hook

        hooks = [model.get_input_embeddings().register_forward_hook(keep(Stage(-1, "embedding"), False))]
        for i, layer in enumerate(layers):
            norm = next((getattr(layer, n) for n in PRE_MLP if getattr(layer, n, None) is not None), None)
            if norm is not None:
                mixer = "mixer" if any(getattr(layer, n, None) is not None for n in MIXERS) else "attention"
                hooks.append(norm.register_forward_pre_hook(keep(Stage(i, mixer), True)))
            hooks.append(layer.register_forward_hook(keep(Stage(i, "block" if norm is None else "mlp"), False)))
        try:
            _run(model, call)
        finally:
            for handle in hooks:
                handle.remove()
        del model
        return found


# The norm a decoder layer applies to its residual stream before its MLP, by transformers' names, first found first:
# Gemma's ``post_attention_layernorm`` normalizes the attention's output, so its ``pre_feedforward_layernorm`` leads.
PRE_MLP = ("pre_feedforward_layernorm", "post_attention_layernorm", "ffn_norm")
# A hybrid layer's token mixer other than attention (Qwen3.5's gated delta rule, Granite 4's Mamba2, LFM2's
# convolution): its stage is said as the layer's token mixer.
MIXERS = ("linear_attn", "mamba", "conv")


def _run(model: Any, call: Call) -> Any:
    """``model``'s logits [1, n, vocab] of ``call`` (module doc: placed by position_ids, or whole), in float64."""
    import torch

    if call.how == "cache":
        raise ValueError("the transformers truth runs without a cache: no call is placed after entries")
    ids = torch.from_numpy(call.ids)
    n = ids.shape[1]
    start = 0 if call.how == "whole" else call.past
    positions = torch.arange(start, start + n, dtype=torch.int64).reshape(1, n)
    with torch.no_grad(), float64_throughout():
        return model(input_ids=ids, position_ids=positions, attention_mask=torch.ones(1, n, dtype=torch.int64),
                     use_cache=False).logits  # fmt: skip


GIB = 2**30


def float64_bytes(model_class: Any, config: Any) -> int:
    """Bytes of ``model_class`` built from ``config`` in float64: its parameters (8 bytes each) and buffers (in their
    own dtype: a rotary module's float32 inverse frequencies), tied ones once, counted on the meta device (nothing
    allocated, no weight read).
    """  # noqa: D205
    import torch

    with torch.device("meta"):
        model = model_class._from_config(config, dtype=torch.float64)
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}.values()
    return sum(int(t.numel()) * t.element_size() for t in tensors)


def available_bytes() -> int | None:
    """The memory the system says is available (MemAvailable of /proc/meminfo), or None where it does not say."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return None
    found = next((line.split()[1] for line in lines if line.startswith("MemAvailable:")), None)
    return None if found is None else int(found) * 1024


def check_size(model_class: Any, config: Any, memory_gib: float | None) -> int:
    """The float64 model's bytes (``float64_bytes``); a SpecError when they exceed ``memory_gib`` GiB (None: the
    memory available now; no limit where the system does not say it).
    """  # noqa: D205
    if memory_gib is not None and not memory_gib > 0:
        raise SpecError("truth_gib", f"must be a positive number of GiB, got {memory_gib}")
    size = float64_bytes(model_class, config)
    limit = available_bytes() if memory_gib is None else int(memory_gib * GIB)
    if limit is not None and size > limit:
        said = f"--truth-gib {memory_gib:g}" if memory_gib is not None else "the memory available now"
        raise SpecError("truth_gib", f"the transformers truth holds {model_class.__name__} in float64: about "
                        f"{size / GIB:.2f} GiB of weights, over {said} ({limit / GIB:.2f} GiB); give --truth-gib "
                        f"above {size / GIB:.2f} to load it anyway, or --truth oracle where ropeexport builds the "
                        "model type")  # fmt: skip
    return size


def _is_text_rotary(name: str, module: Any) -> bool:
    """A rotary embedding module of the text model (a vision tower's is not patched: its positions are a grid's)."""
    kind = type(module).__name__
    return kind.endswith("RotaryEmbedding") and "vision" not in kind.lower() and "visual" not in name


def patch_rotary(module: Any, specs: dict[str, Any], name: str) -> str:
    """Give ``module`` a forward of exact float64 angles (module doc), after checking its own output agrees with it;
    ``name`` is its place in the model. Returns the name.
    """  # noqa: D205
    import inspect

    import torch

    takes_type = "layer_type" in inspect.signature(module.forward).parameters
    if not takes_type and len(specs) > 1:
        raise SpecError("checkpoint", f"{name} ({type(module).__name__}) computes one table, but the config's layer "
                        f"types have {len(specs)} encodings: which one it serves cannot be told")  # fmt: skip
    kinds = list(specs) if takes_type else [None]

    def spec_of(layer_type: str | None) -> Any:
        if layer_type is None:
            return next(iter(specs.values()))
        if layer_type not in specs:
            raise SpecError("checkpoint", f"{name} is asked for layer type {layer_type!r}, which the config gives no "
                            f"RoPE (its encodings: {', '.join(specs)})")  # fmt: skip
        return specs[layer_type]

    recompose = getattr(module, "recomposition_frequencies", None)  # Qwen3.5's: [3, b, s, r/2] -> [b, s, r]

    def exact(x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None) -> tuple[Any, Any]:
        from ropeexport.families.rope.regimes import frequencies

        positions = position_ids  # [b, s], or [3, b, s]: M-RoPE's temporal, height and width axes
        inv, factor = frequencies(spec_of(layer_type), int(positions.max()) + 1)  # float64 [r/2], float
        angles = positions.to(torch.float64)[..., None] * torch.from_numpy(inv)  # [(3,) b, s, r/2], float64
        if positions.ndim == 3 and bool((positions == positions[:1]).all()):
            angles = angles[0]  # text positions: every axis the same, so any recomposition gives axis 0's angles
        if angles.ndim == 4:  # axes that differ (vision positions): each frequency takes the axis the module's own
            # recomposition gives it, applied to the float64 cos and sin (it picks values, computes none)
            if recompose is None:
                raise SpecError("checkpoint", f"{name} ({type(module).__name__}) is given position axes that differ, "
                                "and has no recomposition_frequencies that says which axis each frequency takes: "
                                "the transformers truth patches text positions only there")  # fmt: skip
            return (recompose(angles.cos() * factor).to(x.dtype), recompose(angles.sin() * factor).to(x.dtype))
        both = torch.cat((angles, angles), dim=-1)  # rotate_half's layout: the same angle on i and i + r/2
        return (both.cos() * factor).to(x.dtype), (both.sin() * factor).to(x.dtype)

    probe = torch.zeros(1, dtype=torch.float64)
    rows = torch.arange(CHECK_ROWS, dtype=torch.int64).reshape(1, CHECK_ROWS)
    checked = [rows]
    if recompose is not None:  # its axes made to differ (as a picture's height and width do): the layout checked too
        checked.append(torch.stack((rows, rows.flip(-1), (rows * 7) % CHECK_ROWS)))  # [3, 1, CHECK_ROWS]
    for kind, rows in ((k, r) for k in kinds for r in checked):
        args = (probe, rows) if kind is None else (probe, rows, kind)
        with torch.no_grad():
            own = module(*args)
            ours = exact(*args)
        for label, a, b in zip(("cos", "sin"), own, ours, strict=True):
            if tuple(a.shape[-2:]) != tuple(b.shape[-2:]) or float((a.double() - b).abs().max()) > CHECK_TOLERANCE:
                raise SpecError("checkpoint", f"{name} ({type(module).__name__}{f', {kind}' if kind else ''}) gives "
                                f"a {label} table other than the config's encoding in rotate_half's layout (shape "
                                f"{list(a.shape)}, the patch's {list(b.shape)}): the transformers truth does not "
                                "replace it with a wrong one")  # fmt: skip
    module.forward = exact
    return name


@contextmanager
def float64_throughout() -> Iterator[None]:
    """``Tensor.float``, ``Tensor.to`` and ``softmax`` keep a float64 tensor in float64 (module doc), while inside."""
    import torch

    f32, f64 = torch.float32, torch.float64
    float_, to, softmax = torch.Tensor.float, torch.Tensor.to, torch.nn.functional.softmax

    def keep_float(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self if self.dtype == f64 else float_(self, *args, **kwargs)

    def keep_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.dtype == f64:
            args = tuple(f64 if a is f32 else a for a in args)
            if kwargs.get("dtype") is f32:
                kwargs["dtype"] = f64
        return to(self, *args, **kwargs)

    def keep_softmax(input: torch.Tensor, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> torch.Tensor:
        if dtype is f32 and input.dtype == f64:
            dtype = None
        return softmax(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    functional = torch.nn.functional
    torch.Tensor.float, torch.Tensor.to = keep_float, keep_to  # type: ignore[method-assign,assignment]
    functional.softmax = keep_softmax
    try:
        yield
    finally:
        torch.Tensor.float, torch.Tensor.to = float_, to  # type: ignore[method-assign]
        functional.softmax = softmax
