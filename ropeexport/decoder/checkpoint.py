"""A decoder's weights under canonical names (``ropeexport.architectures``): seeded, or read from a local checkpoint.

- ``expected(spec)``: {canonical name: shape} of every weight the spec's architecture holds.
- ``seeded_weights(spec)``: normal draws (projections std 1/sqrt(fan_in), embeddings std 1, norm weights 1 + 0.1 N,
  biases 0.1 N) from numpy's default_rng(0), rounded once to the dtype and held in float64.
- ``CheckpointWeights(spec, folder)``: ``model.safetensors`` or a sharded ``model.safetensors.index.json`` in a local
  folder (never downloaded), as a mapping that reads each tensor from its memory-mapped shard when asked for (a
  build at any size holds one at a time). Every tensor's name and shape is checked from the headers before anything
  is built (a missing, unexpected or mis-shaped tensor, a shard outside the folder, truncated or not a safetensors
  file), its values as it is read (non-floating, non-finite, past the fp16 range in an fp16 build): a one-line
  CheckpointError naming it. Values come as float32 (every bf16 / fp16 value is exact there) and are rounded once to
  the artifact dtype when the graph stores them. ``load_checkpoint(spec, folder)``: all of them read into a dict.
  ``vocab_part``: a slice of the embedding or head alone.
- ``checkpoint_file(folder, name)``: a file of the checkpoint, links followed only within its own tree
  (``own_tree``): the folder itself, or for a snapshot of the transformers cache the whole ``models--ORG--NAME``
  folder, whose ``blobs/`` the snapshot's files link into. A link leaving it (``/etc/passwd``, ``../../elsewhere``),
  a FIFO or a device is refused: the single file and the shards are read the same way.
- ``to_transformers(spec, weights)``: the same weights under the checkpoint names and layouts (fused projections
  joined again), for a transformers model built from the config (the eager reference of a seeded decoder).

A checkpoint that stores each expert of a mixture apart (Qwen3-MoE's ``mlp.experts.{e}.gate_proj.weight``: a name
with ``{e}``) is read as the canonical [E, in, out] tensor, its E tensors stacked when it is asked for (``EXPERT``
marks one expert's part, ``layers.3.experts_gate_proj@5``).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.weights import _layer_of, expected, geometry
from ropeexport.errors import CheckpointError, SpecError
from ropeexport.inputs import read_json

# Tables read by rows, stored [rows, width] as the checkpoint holds them: never transposed (Gemma 4's per-layer one too)
EMBEDDINGS = ("embed", "embed_per_layer")

SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"
EXPERT = "@"  # canonical@e: expert e's part of a mixture's canonical [E, ...] tensor, stored apart
# Buffers some checkpoints carry (rotary caches, causal-mask constants): not weights, read by nothing.
IGNORED = re.compile(r"(rotary_emb\.inv_freq|\.attn\.(masked_)?bias|\.attention\.(masked_)?bias)$")


# ---- checkpoint names ------------------------------------------------------------------------------------------------


def _sources(spec: DecoderSpec) -> dict[str, str]:
    """{checkpoint key: canonical name or fused group} the spec expects, layers expanded."""
    arch, wanted = spec.architecture, expected(spec)
    out = {}
    for i in range(spec.num_layers):
        for canonical, key in arch.names.items():
            if "{e}" in key:  # one tensor per expert (module doc)
                for e in range(spec.layers[i].ffn.experts):
                    out[key.format(i=i, e=e)] = f"{canonical.format(i=i)}{EXPERT}{e}"
            elif "{i}" in canonical:
                out[key.format(i=i)] = canonical.format(i=i)
    out |= {key: canonical for canonical, key in arch.names.items() if "{i}" not in canonical}
    fused = {"qkv_proj": ("q_proj",), "qkv_bias": ("q_bias",), "gate_up_proj": ("gate_proj",),
             "experts_gate_up_proj": ("experts_gate_proj",), "experts_gate_up_bias": ("experts_gate_bias",),
             "experts_gate_up_halves": ("experts_gate_proj",), "experts_gate_up_rows": ("experts_gate_proj",),
             "experts_down_rows": ("experts_down_proj",)}

    def needed(canonical: str) -> bool:
        canonical = canonical.partition(EXPERT)[0]
        base = canonical.rsplit(".", 1)[-1] if canonical.startswith("layers.") else canonical
        stem = canonical[: len(canonical) - len(base)]
        return any(f"{stem}{part}" in wanted for part in fused.get(base, (base,))) or canonical in wanted

    return {key: canonical for key, canonical in out.items() if needed(canonical)}


def _split(spec: DecoderSpec, canonical: str, value: np.ndarray) -> dict[str, np.ndarray]:
    """A checkpoint tensor ([out, in] or [out]) as canonical weights ([in, out] or [out])."""
    if EXPERT in canonical:  # one expert's [out, in] (or [out]): its part of [E, in, out], stacked when read
        return {canonical: value.T if value.ndim == 2 else value}
    H, KV, d = geometry(spec, _layer_of(canonical))
    stem, _, base = canonical.rpartition(".")
    stem = f"{stem}." if stem else ""
    if base in ("qkv_proj", "qkv_bias"):
        kind = "proj" if base == "qkv_proj" else "bias"
        if spec.architecture.fused_qkv == "per-head":  # rows [H, 3, d]: each head's q, k, v together
            grouped = value.reshape(H, 3, d, *value.shape[1:])
            parts = [grouped[:, j].reshape(H * d, *value.shape[1:]) for j in range(3)]
        else:  # rows [q (H d); k (KV d); v (KV d)]
            parts = np.split(value, [H * d, H * d + KV * d], axis=0)
        return {f"{stem}{n}_{kind}": (p.T if kind == "proj" else p) for n, p in zip("qkv", parts, strict=True)}
    if base == "gate_up_proj":
        gate, up = np.split(value, 2, axis=0)
        return {f"{stem}gate_proj": gate.T, f"{stem}up_proj": up.T}
    if base in ("experts_gate_up_proj", "experts_gate_up_bias"):  # gpt-oss: gate and up columns interleaved
        kind = base.rpartition("_")[2]
        return {f"{stem}experts_gate_{kind}": value[..., ::2], f"{stem}experts_up_{kind}": value[..., 1::2]}
    if base == "experts_gate_up_halves":  # Llama 4: [E, n, 2m], the gate's m columns, then the up's (gate_up.chunk(2))
        gate, up = np.split(value, 2, axis=-1)
        return {f"{stem}experts_gate_proj": gate, f"{stem}experts_up_proj": up}
    if base == "experts_gate_up_rows":  # Gemma 4: [E, 2m, n] ([out, in] per expert), the gate's m rows, then the up's
        gate, up = np.split(value.transpose(0, 2, 1), 2, axis=-1)
        return {f"{stem}experts_gate_proj": gate, f"{stem}experts_up_proj": up}
    if base == "experts_down_rows":  # Gemma 4: [E, n, m] ([out, in] per expert)
        return {f"{stem}experts_down_proj": value.transpose(0, 2, 1)}
    if base.startswith("experts_"):  # stored [E, in, out] (and [E, out]) as the graph reads them
        return {canonical: value}
    return {canonical: value.T if value.ndim == 2 and canonical not in EMBEDDINGS else value}


def _fused_shape(spec: DecoderSpec, canonical: str) -> tuple[int, ...]:
    """The checkpoint shape ([out, in] or [out]) of a canonical name or fused group."""
    if EXPERT in canonical:  # one expert's part of [E, in, out] (or [E, out])
        shape = expected(spec)[canonical.partition(EXPERT)[0]][1:]
        return tuple(reversed(shape))
    i = _layer_of(canonical)
    H, KV, d = geometry(spec, i)
    base = canonical.rpartition(".")[2]
    ffn = (spec.layers[i] if i is not None else spec.default).ffn
    hidden, inner = spec.hidden_size, ffn.inner
    qkv = 3 * H * d if spec.architecture.fused_qkv == "per-head" else (H + 2 * KV) * d
    if base == "qkv_proj":
        return (qkv, hidden)
    if base == "qkv_bias":
        return (qkv,)
    if base == "gate_up_proj":
        return (2 * inner, hidden)
    E = ffn.experts
    if base in ("experts_gate_up_proj", "experts_gate_up_halves"):
        return (E, hidden, 2 * inner)
    if base in ("experts_gate_up_rows", "experts_down_rows"):  # Gemma 4's, [out, in] per expert
        return (E, 2 * inner, hidden) if base == "experts_gate_up_rows" else (E, hidden, inner)
    if base == "experts_gate_up_bias":
        return (E, 2 * inner)
    shape = expected(spec)[canonical]
    if base.startswith("experts_"):
        return shape
    return tuple(reversed(shape)) if len(shape) == 2 and base not in EMBEDDINGS else shape


def own_tree(folder: Path) -> Path:
    """The folder a checkpoint's files may link into: the folder itself (resolved), or for a snapshot of the
    transformers cache (``.../models--ORG--NAME/snapshots/REV/``, whose files are links to ``../../blobs/HASH``) the
    whole ``models--ORG--NAME`` folder.
    """  # noqa: D205
    root = folder.resolve()
    if root.parent.name == "snapshots" and root.parent.parent.name.startswith("models--"):
        return root.parent.parent
    return root


def checkpoint_file(folder: Path, name: str, what: str | None = None) -> Path | None:
    """``folder / name`` resolved, or None when absent: a regular file inside ``own_tree(folder)``, links followed;
    else a CheckpointError naming ``what`` (the name by default).
    """  # noqa: D205
    what = what or name
    # A NUL makes every path call raise ValueError; an absolute name would ignore the folder altogether.
    why = ("is not a string" if not isinstance(name, str) else "is empty" if not name else
           "holds a NUL byte" if "\0" in name else "is an absolute path" if os.path.isabs(name) else None)  # fmt: skip
    if why is not None:
        raise CheckpointError(f"{what} {why}: give a file name inside the checkpoint folder")
    tree = own_tree(folder)
    path = (folder / name).resolve()
    if not path.is_relative_to(tree):
        raise CheckpointError(f"{what} points outside the checkpoint folder (to {str(path)!r}; links are followed "
                              f"only within {str(tree)!r})")  # fmt: skip
    try:
        info = path.stat()
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):  # a FIFO would hang the reader, a device read until memory runs out
        raise CheckpointError(f"{what} is not a regular file (a folder, FIFO, device or socket)")
    return path


def _open(path: Path, what: str) -> Any:
    """``safe_open`` on a shard, its failure (truncated, not safetensors) a CheckpointError naming ``what``."""
    from safetensors import safe_open

    try:
        return safe_open(str(path), framework="pt")
    except Exception as error:  # noqa: BLE001 (safetensors raises its own types)
        first = (str(error).splitlines() or [type(error).__name__])[0]
        raise CheckpointError(f"{what} is not a safetensors file ({first})") from None


def _tensor_files(folder: Path) -> dict[str, Path]:
    """{tensor key: safetensors file} of a checkpoint folder, its index checked and every file's header read."""
    if not folder.is_dir():
        raise CheckpointError(f"{str(folder)!r} is not a folder (a checkpoint is a folder with config.json and "
                              f"{SINGLE} or {INDEX})")  # fmt: skip
    index_path = checkpoint_file(folder, INDEX)
    if index_path is not None:
        try:  # bounded and strict: a deeply nested index would make Python's parser raise RecursionError
            index = read_json(index_path, INDEX)
        except SpecError as error:
            raise CheckpointError(str(error)) from None
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{INDEX} is not a safetensors index (no weight_map table)")
        files: dict[str, Path] = {}
        for key, name in weight_map.items():
            what = f"{INDEX}: weight_map[{key!r}] = {name!r}"
            path = checkpoint_file(folder, name, what)
            if path is None:
                raise CheckpointError(f"{what}: no such file in the folder")
            files[key] = path
        shards: dict[Path, list[str]] = {}
        for key, path in files.items():
            shards.setdefault(path, []).append(key)
        for path, keys in shards.items():  # every shard's header read now: nothing is built from a broken one
            with _open(path, path.name) as f:
                present = set(f.keys())  # noqa: SIM118 (safe_open has no __iter__)
            absent = next((key for key in keys if key not in present), None)
            if absent is not None:
                raise CheckpointError(f"tensor {absent!r} is listed in {INDEX} but not stored in {path.name}")
        return files
    single = checkpoint_file(folder, SINGLE)
    if single is None:
        raise CheckpointError(f"{str(folder)!r} holds neither {SINGLE} nor {INDEX} (.bin checkpoints are not read)")
    with _open(single, SINGLE) as f:
        return {key: single for key in f.keys()}  # noqa: SIM118


def _fits(spec: DecoderSpec, key: str, value: np.ndarray) -> None:
    """CheckpointError when a value of ``key`` would round to infinity in the spec's dtype (fp16 ends at 65504)."""
    if spec.dtype != "fp16" or value.size == 0:
        return
    at = np.unravel_index(int(np.argmax(np.abs(value))), value.shape)
    largest = float(value[at])
    with np.errstate(over="ignore"):  # the overflow is this one line, not a numpy warning beside it
        overflows = bool(np.isinf(np.float16(largest)))
    if overflows:
        raise CheckpointError(f"tensor {key!r} holds {largest:.6g} at {list(map(int, at))}, past fp16's largest value "
                              "65504: give `dtype` fp32")  # fmt: skip


# A multimodal checkpoint's text model: its keys as transformers saves them (``language_model.model.layers...``, the
# released Gemma 3 form) or as its 5.x modules name them (``model.language_model.layers...``); the other towers'
# tensors (vision, projector) are not the text model's and are passed over.
_TEXT_PREFIXES = (("language_model.model.", "model."), ("model.language_model.", "model."),
                  ("language_model.lm_head.", "lm_head."))  # fmt: skip
OTHER_TOWERS = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.",
                "visual.", "model.visual.",  # Qwen-VL: its vision tower and merger
                "model.embed_vision.", "model.audio_tower.", "model.embed_audio.",
                "vision_model.", "model.vision_model.",  # Gemma 4's towers and projections, Llama 4's vision tower
                # Mistral's own format (Mistral Large 4): its vision tower and projector at the root
                "vision_encoder.", "patch_merger.", "pre_mm_projector_norm.", "vision_language_adapter.")


def _text_key(key: str) -> str:
    """A multimodal checkpoint's key of the text model as the text model's own checkpoint names it."""
    for prefix, plain in _TEXT_PREFIXES:
        if key.startswith(prefix):
            return plain + key[len(prefix) :]
    return key


class CheckpointWeights(Mapping[str, np.ndarray]):
    """Every canonical weight of ``spec`` in a checkpoint folder, read from its shard (memory-mapped) when asked for:
    float32 [in, out] or [out] arrays, as ``load_checkpoint`` gives them. Nothing is held between reads but the last
    fused tensor (q, k and v of one qkv tensor are read once for the three), so a whole model never is.

    Checked on construction, from the headers alone: every expected tensor present, nothing unexpected, every shape
    the config's (module doc). Checked on each read: floating point, finite, within fp16 in an fp16 build. A failure
    is a one-line CheckpointError naming the tensor.
    """  # noqa: D205

    def __init__(self, spec: DecoderSpec, folder: str | Path) -> None:
        folder = Path(folder)
        files = _tensor_files(folder)
        arch = spec.architecture
        wanted = _sources(spec)  # checkpoint key -> canonical (or fused group)
        aliases = {old: new for new, old in arch.aliases.items()}

        def canonical_key(key: str) -> str:
            key = aliases.get(key, key)
            if spec.text_of:  # the text model inside a multimodal checkpoint: its keys under the wrapper's prefix
                key = _text_key(key)
            if key in wanted or key.startswith(arch.base) or key.startswith("lm_head"):
                return key
            return arch.base + key  # checkpoints saved from the body alone (BLOOM's) drop the prefix

        found: dict[str, str] = {}
        for key in files:
            name = canonical_key(key)
            if name in wanted:
                if name in found:
                    raise CheckpointError(f"tensors {found[name]!r} and {key!r} are both {name!r}")
                found[name] = key
            elif IGNORED.search(key) or (spec.tie_embeddings and name == "lm_head.weight") or (
                spec.text_of and name.startswith(OTHER_TOWERS)
            ) or (arch.passed_over and re.match(arch.passed_over, name)):  # fmt: skip
                continue  # a buffer, the tied head stored anyway (transformers ties it to the embedding), or what
                # transformers ignores when unexpected (``Architecture.passed_over``)
            else:
                raise CheckpointError(f"tensor {key!r} is not a weight of this {arch.model_type} config (unexpected; "
                                      f"is the config the checkpoint's own?)")  # fmt: skip
        missing = [k for k in wanted if k not in found]
        if missing:
            raise CheckpointError(f"tensor {missing[0]!r} is missing ({len(missing)} of {len(wanted)} expected "
                                  "tensors absent)")  # fmt: skip
        self.spec, self.folder, self._files = spec, folder, files
        # canonical name -> (checkpoint key, its canonical name or fused group), in the order load_checkpoint reads
        # them (grouped by shard): a model's initializers follow this order, so its bytes do.
        self._source: dict[str, tuple[str, str]] = {}
        for key, shape in _shapes(files, [found[k] for k in wanted]):
            group = wanted[canonical_key(key)]
            implied = _fused_shape(spec, group)
            if shape != implied:
                raise CheckpointError(f"tensor {key!r} has shape {list(shape)}, the config implies {list(implied)}")
            for name in _split_names(spec, group):
                self._source[name] = (key, group)
        # a mixture's experts stored apart (module doc): canonical -> its E parts in expert order, placed where its
        # first part is read
        self._parts: dict[str, tuple[str, str]] = {}
        self._stacked: dict[str, list[str]] = {}
        source: dict[str, tuple[str, str]] = {}
        for name, where in self._source.items():
            if EXPERT not in name:
                source[name] = where
                continue
            canonical = name.partition(EXPERT)[0]
            self._parts[name] = where
            self._stacked.setdefault(canonical, []).append(name)
            source.setdefault(canonical, where)
        for parts in self._stacked.values():
            parts.sort(key=lambda part: int(part.partition(EXPERT)[2]))
        self._source = source
        self._last: tuple[str, dict[str, np.ndarray]] | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._stacked:  # [E, in, out]: each expert's tensor read in turn
            return np.stack([self._read(part, self._parts[part]) for part in self._stacked[name]])
        return self._read(name, self._source[name])

    def expert(self, name: str, e: int) -> np.ndarray:
        """Expert e's part of the [E, ...] tensor ``name`` (``self[name][e]``), read alone when the experts are
        stored apart (module doc), else sliced from the whole.
        """  # noqa: D205
        if name in self._stacked:
            part = self._stacked[name][e]
            return self._read(part, self._parts[part])
        return self[name][e]

    def _read(self, name: str, where: tuple[str, str]) -> np.ndarray:
        key, group = where
        if self._last is not None and self._last[0] == key:
            return self._last[1][name]
        value = _checked(self.spec, key, _read_one(self._files[key], key))
        parts = _split(self.spec, group, value)
        self._last = (key, parts) if len(parts) > 1 else None  # a fused tensor: its other parts come next
        return parts[name]

    def __contains__(self, name: object) -> bool:
        return name in self._source  # Mapping's own reads the tensor

    def __iter__(self) -> Iterator[str]:
        return iter(self._source)

    def __len__(self) -> int:
        return len(self._source)

    def vocab_part(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of ``embed`` ([n, hidden]) or columns of ``lm_head`` ([hidden, n]), float32, read
        alone: the float64 truth multiplies by a 128256-word head in slices.
        """  # noqa: D205
        if name not in ("embed", "lm_head"):
            raise KeyError(name)
        key, _ = self._source[name]
        value = _checked(self.spec, key, _read_one(self._files[key], key, (start, stop)))
        return value if name == "embed" else value.T


def _split_names(spec: DecoderSpec, group: str) -> tuple[str, ...]:
    """The canonical names ``_split`` makes of a checkpoint tensor of ``group``, in its order."""
    stem, _, base = group.rpartition(".")
    stem = f"{stem}." if stem else ""
    if base in ("qkv_proj", "qkv_bias"):
        kind = "proj" if base == "qkv_proj" else "bias"
        return tuple(f"{stem}{n}_{kind}" for n in "qkv")
    if base == "gate_up_proj":
        return (f"{stem}gate_proj", f"{stem}up_proj")
    if base in ("experts_gate_up_proj", "experts_gate_up_bias"):  # gpt-oss's interleaved gate and up
        kind = base.rpartition("_")[2]
        return (f"{stem}experts_gate_{kind}", f"{stem}experts_up_{kind}")
    if base in ("experts_gate_up_halves", "experts_gate_up_rows"):  # Llama 4's gate columns, then up; Gemma 4's rows
        return (f"{stem}experts_gate_proj", f"{stem}experts_up_proj")
    if base == "experts_down_rows":
        return (f"{stem}experts_down_proj",)
    return (group,)


def _shapes(files: Mapping[str, Path], keys: list[str]) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(key, shape) from the headers, grouped by file as the tensors are read (each shard opened once)."""
    by_file: dict[Path, list[str]] = {}
    for key in keys:
        by_file.setdefault(files[key], []).append(key)
    for path, group in by_file.items():
        with _open(path, path.name) as f:
            for key in group:
                yield key, tuple(int(n) for n in f.get_slice(key).get_shape())


def _read_one(path: Path, key: str, rows: tuple[int, int] | None = None) -> np.ndarray:
    """float32 array of tensor ``key`` in ``path`` (``rows``: only rows [start, stop) of its first axis)."""
    import torch

    with _open(path, path.name) as f:
        try:
            tensor = f.get_tensor(key) if rows is None else f.get_slice(key)[rows[0] : rows[1]]
        except Exception as error:  # noqa: BLE001 (a header that promises more bytes than the file has)
            first = (str(error).splitlines() or [type(error).__name__])[0]
            raise CheckpointError(f"tensor {key!r} cannot be read from {path.name} ({first})") from None
    if not tensor.is_floating_point():
        raise CheckpointError(f"tensor {key!r} is {tensor.dtype}, not a floating-point weight")
    return tensor.to(torch.float32).numpy()


def _checked(spec: DecoderSpec, key: str, value: np.ndarray) -> np.ndarray:
    """``value`` once it is finite and fits the spec's dtype; else a CheckpointError naming ``key``."""
    bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
    if bad:
        raise CheckpointError(f"tensor {key!r} holds {bad} non-finite value(s) (NaN or inf)")
    _fits(spec, key, value)
    return value


def load_checkpoint(spec: DecoderSpec, folder: str | Path) -> dict[str, np.ndarray]:
    """Every canonical weight of ``spec`` from the checkpoint folder, checked (module doc); float32 arrays, all held.

    ``CheckpointWeights`` reads the same weights one at a time (a build at any size).
    """
    return dict(CheckpointWeights(spec, folder).items())


def to_transformers(spec: DecoderSpec, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """{checkpoint key: [out, in] or [out] array} for a transformers model of the same config."""
    out = {}
    for key, canonical in _sources(spec).items():
        if EXPERT in canonical:  # one expert's [out, in] of the stacked [E, in, out]
            stacked, _, e = canonical.partition(EXPERT)
            part = weights[stacked][int(e)]
            out[key] = part.T if part.ndim == 2 else part
            continue
        stem, _, base = canonical.rpartition(".")
        stem = f"{stem}." if stem else ""
        H, KV, d = geometry(spec, _layer_of(canonical))
        if base in ("qkv_proj", "qkv_bias"):
            kind = "proj" if base == "qkv_proj" else "bias"
            parts = [weights[f"{stem}{n}_{kind}"] for n in "qkv"]
            parts = [p.T for p in parts] if kind == "proj" else parts
            if spec.architecture.fused_qkv == "per-head":
                tail = parts[0].shape[1:]
                value = np.stack([p.reshape(H, d, *tail) for p in parts], axis=1).reshape(3 * H * d, *tail)
            else:
                value = np.concatenate(parts, axis=0)
        elif base == "gate_up_proj":
            value = np.concatenate([weights[f"{stem}gate_proj"].T, weights[f"{stem}up_proj"].T], axis=0)
        elif base in ("experts_gate_up_proj", "experts_gate_up_bias"):  # columns interleaved again: gate, up, ...
            kind = base.rpartition("_")[2]
            gate, up = weights[f"{stem}experts_gate_{kind}"], weights[f"{stem}experts_up_{kind}"]
            value = np.stack([gate, up], axis=-1).reshape(*gate.shape[:-1], 2 * gate.shape[-1])
        elif base == "experts_gate_up_halves":  # Llama 4: gate columns, then up
            value = np.concatenate([weights[f"{stem}experts_gate_proj"], weights[f"{stem}experts_up_proj"]], axis=-1)
        elif base == "experts_gate_up_rows":  # Gemma 4: [E, 2m, n], gate rows, then up
            both = [weights[f"{stem}experts_{p}_proj"].transpose(0, 2, 1) for p in ("gate", "up")]
            value = np.concatenate(both, axis=1)
        elif base == "experts_down_rows":
            value = weights[f"{stem}experts_down_proj"].transpose(0, 2, 1)
        elif base.startswith("experts_"):
            value = weights[canonical]
        else:
            value = weights[canonical]
            value = value.T if value.ndim == 2 and base not in EMBEDDINGS else value
        out[key] = value
    if spec.tie_embeddings:
        out["lm_head.weight"] = weights["embed"]
    return out


