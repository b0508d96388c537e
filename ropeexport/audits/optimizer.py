"""What ONNX Runtime's graph optimizer does to a model's rotations: the graph it runs, saved, and each rotary site of
it set beside the exported graph's, layer by layer.

What runs is not what was exported: an ``InferenceSession`` rewrites the graph before it runs it (constant folding,
common subexpressions merged, fusions into ONNX Runtime's own operators), at the level its options ask for (``basic``,
``extended``, ``all``: ``all`` is ONNX Runtime's default and what onnxruntime-genai serves with). ``optimize`` saves
that graph as the CPU provider builds it (``optimized_model_filepath``); a GPU provider registers fusions of its own
(GroupQueryAttentionFusion, which folds RotaryEmbedding into GroupQueryAttention's do_rotary, is registered for the
CUDA provider only in the source read, and fuses nothing on the CPU provider of ONNX Runtime 1.31.1 or 1.32.0:
tested), which this machine does not see: a model saved by such a session elsewhere can be handed to ``audit
--optimized-model``.

``rotations`` reads a graph's rotary sites (``audits.sites``, no values evaluated): per site its kind, its layers, how
its reader pairs the channels (``interleaved`` / ``rotary_interleaved``; None for a graph's own slicing, which is not
read), how many channels it rotates (a reader's ``rotary_embedding_dim``, else twice the table's width), and its
tables when they are constants. ``changes`` sets the optimized graph's beside the exported graph's per layer and says
what the optimizer did: nothing; a new form for the same rotation (``fused``: a RotaryEmbedding folded into
GroupQueryAttention's do_rotary, a pattern fused into RotaryEmbedding; ``folded``: tables computed in the graph made
constants); or another rotation (``pairing``, ``width``, ``values``: constant tables that differ; ``gone``: a layer
rotated before and not after). ``check`` is the cheap line every ``verify`` of ropeexport's own artifacts prints.
"""  # noqa: D205

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.patterns import Site, SiteKind
from ropeexport.audits.patterns.base import constant_of
from ropeexport.errors import SpecError

LEVELS = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
DEFAULT_LEVEL = "all"  # ONNX Runtime's default level: what a session a user opens runs
PROVIDER = "CPUExecutionProvider"
DATA = "model.onnx.data"  # the optimized model's tensors of EXTERNAL_BYTES or more (a 2 GiB protobuf holds no 8B model)
EXTERNAL_BYTES = 1024
CHECK_BYTES = 1 << 30  # ``check`` (verify's line) leaves a model whose files are larger to ``audit --optimized``
ROTATION_CHANGES = ("pairing", "width", "values", "gone")  # what makes another rotation; the rest: another form
# A reader's attribute for the channels it rotates (0 or absent: twice its table's width)
WIDTH_ATTRIBUTE = {SiteKind.ROTARY_ONNX: "rotary_embedding_dim", SiteKind.ROTARY_MICROSOFT: "rotary_embedding_dim",
                   SiteKind.MROTARY_MICROSOFT: "rotary_embedding_dim"}  # fmt: skip


def check_level(level: str) -> str:
    """``level`` when it is one of ``LEVELS``, else a SpecError naming the field and the levels."""
    if level not in LEVELS:
        raise SpecError("optimized", f"must be one of {', '.join(LEVELS)}, got {level!r}")
    return level


def optimize(model: Path, level: str, folder: Path, threads: int = 2) -> Path:
    """ONNX Runtime's optimized graph of ``model`` at ``level``, as an InferenceSession on the CPU provider builds it,
    saved as ``folder``/model.onnx (tensors of ``EXTERNAL_BYTES`` or more in model.onnx.data beside it); a SpecError
    with ONNX Runtime's words when it will not build the session.
    """  # noqa: D205
    import onnxruntime as ort

    from ropeexport.audits.model import ort_reason, quiet

    out = folder / "model.onnx"
    options = quiet(threads)[0]
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[check_level(level)])
    options.optimized_model_filepath = str(out)
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", DATA)
    options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                     str(EXTERNAL_BYTES))  # fmt: skip
    try:
        ort.InferenceSession(str(model), options, providers=[PROVIDER])
    except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
        raise SpecError("model", f"ONNX Runtime {ort.__version__} will not optimize {str(model)!r}: "
                        f"{ort_reason(exc)}") from None  # fmt: skip
    return out


def runtime() -> dict[str, str]:
    """The optimizer that ran: ONNX Runtime's version and provider."""
    import onnxruntime as ort

    return {"onnxruntime": ort.__version__, "provider": PROVIDER}


@dataclass(frozen=True)
class Rotation:
    """One rotary site as a graph writes it (module doc); ``cos`` / ``sin``: its tables [rows, width] in float64 when
    they are constants, else None.
    """  # noqa: D205

    kind: str
    layers: tuple[int, ...] | None
    pairing: tuple[bool, ...] | None  # how its readers pair the channels, each distinct way once (interleaved: True)
    width: int | None
    constant: bool
    cos: np.ndarray | None = field(default=None, repr=False, compare=False)
    sin: np.ndarray | None = field(default=None, repr=False, compare=False)
    indexer: bool = False  # DeepSeek Sparse Attention's indexer's (``Site.indexer``): matched to the indexer's after

    def words(self) -> str:
        """``RotaryEmbedding (opset 23), interleaved pairs, 4 channels, constant tables``."""
        said = {True: "interleaved pairs", False: "halves"}
        pairing = "" if self.pairing is None else ", " + " and ".join(said[p] for p in self.pairing)
        pairing += " (its readers disagree)" if self.pairing is not None and len(self.pairing) > 1 else ""
        width = "" if self.width is None else f", {self.width} channels"
        whose = " (the indexer's)" if self.indexer else ""
        return f"{self.kind}{whose}{pairing}{width}, {'constant' if self.constant else 'computed'} tables"


def _pairing(site: Site) -> tuple[bool, ...] | None:
    """How ``site``'s readers pair the channels (``checks.PAIRING``'s attribute of each), None where none says."""
    from ropeexport.audits.checks import PAIRING
    from ropeexport.audits.patterns.base import attr

    attribute = PAIRING.get(site.kind)
    if attribute is None or site.interleaved is None:
        return None
    return tuple(sorted({bool(attr(r, attribute)) for r in site.readers} or {site.interleaved}))


def _constant(value: ir.Value | None) -> np.ndarray | None:
    """``value``'s tensor in float64 when the graph holds it as a constant (``constant_of``)."""
    found = constant_of(value)
    return None if found is None else found.astype(np.float64)


def _width(site: Site, table: np.ndarray | None) -> int | None:
    """The channels ``site`` rotates (module doc), None when the graph does not say."""
    attribute = WIDTH_ATTRIBUTE.get(site.kind, "")
    for reader in site.readers if attribute else []:
        found = reader.attributes.get(attribute)
        if found is not None and int(found.value):
            return int(found.value)
    if site.kind in (SiteKind.COMPUTED, SiteKind.SPLIT, SiteKind.UNIDENTIFIED):
        return None  # per-token values, their halves or pairs duplicated or not: the width does not say
    if table is not None:
        return 2 * int(table.shape[-1])
    value = site.values[0] if site.values else None
    dims = list(value.shape) if value is not None and value.shape is not None else []
    return 2 * dims[-1] if dims and isinstance(dims[-1], int) else None


def rotations(model: ir.Model) -> list[Rotation]:
    """Every rotary site of ``model`` (``audits.sites``), as written (module doc)."""
    from ropeexport.audits.sites import find_sites

    out = []
    for site in find_sites(model, "rope"):
        cos, sin = (_constant(v) for v in (site.values[:2] if len(site.values) >= 2 else (None, None)))
        constant = cos is not None and sin is not None
        out.append(Rotation(site.kind.value, site.layers, _pairing(site), _width(site, cos), constant,
                            cos if constant else None, sin if constant else None, indexer=site.indexer))  # fmt: skip
    return out


def _by_layer(found: Iterable[Rotation]) -> dict[int | None, list[Rotation]]:
    """Each layer's rotations (None: sites whose readers name no layer)."""
    out: dict[int | None, list[Rotation]] = {}
    for rotation in found:
        for layer in rotation.layers if rotation.layers is not None else (None,):
            out.setdefault(layer, []).append(rotation)
    return out


def _matched(before: list[Rotation], after: list[Rotation]) -> list[tuple[Rotation | None, Rotation | None]]:
    """Each rotation of a layer before with the one after that does its work: the indexer's with the indexer's, the
    attention's with the attention's (a layer of DeepSeek V3.2's fused build has one of each, paired apart), of the
    same kind where the layer has one (a form the optimizer left), else the first (what it became: two rotations may
    become one); None when the layer has none after. A rotation after that none before became is alone.
    """  # noqa: D205
    pairs: list[tuple[Rotation | None, Rotation | None]] = []
    used: set[int] = set()
    for old in before:  # one not yet taken first, the same part's, of the same kind, with the same tables, in order
        ranked = sorted(after, key=lambda new: (id(new) in used, new.indexer != old.indexer, new.kind != old.kind,
                                                not _same_tables(old, new)))  # fmt: skip
        chosen = ranked[0] if ranked else None
        used |= {id(chosen)} if chosen is not None else set()
        pairs.append((old, chosen))
    return pairs + [(None, new) for new in after if id(new) not in used]


def _same_tables(old: Rotation, new: Rotation) -> bool:
    """Both rotations' tables are constants of the same values."""
    if old.cos is None or new.cos is None or old.sin is None or new.sin is None:
        return False
    same = old.cos.shape == new.cos.shape and old.sin.shape == new.sin.shape
    return same and bool(np.array_equal(old.cos, new.cos) and np.array_equal(old.sin, new.sin))


def _table_change(old: Rotation, new: Rotation) -> str | None:
    """How two constant tables differ, in words, or None when they hold the same values."""
    assert old.cos is not None and old.sin is not None and new.cos is not None and new.sin is not None
    if old.cos.shape != new.cos.shape or old.sin.shape != new.sin.shape:
        return f"tables of shape {list(old.cos.shape)} became {list(new.cos.shape)}"
    worst = max(float(np.max(np.abs(old.cos - new.cos), initial=0.0)),
                float(np.max(np.abs(old.sin - new.sin), initial=0.0)))  # fmt: skip
    return None if worst == 0.0 else f"table values changed by up to {worst:.2e}"


def differences(old: Rotation | None, new: Rotation | None) -> dict[str, str]:
    """What the optimizer did to one rotation of a layer: ``{change: words}`` (module doc), {} when nothing."""
    if old is None or new is None:
        if new is None:
            assert old is not None
            return {"gone": "no rotary site reads this layer in the optimized graph"}
        return {"appeared": "a rotary site reads this layer only in the optimized graph"}
    out: dict[str, str] = {}
    if old.kind != new.kind:
        out["fused"] = f"{old.kind} became {new.kind}"
    if not old.constant and new.constant:
        out["folded"] = "tables computed in the graph became constants"
    elif old.constant and not new.constant:
        out["unfolded"] = "constant tables became computed in the graph"
    elif old.constant and new.constant:
        changed = _table_change(old, new)
        if changed is not None:
            out["values"] = changed
    if old.pairing is not None and new.pairing is not None and old.pairing != new.pairing:
        said = {True: "interleaved pairs (2i, 2i + 1)", False: "halves (i, i + r/2)"}
        words = [" and ".join(said[p] for p in pairing) for pairing in (old.pairing, new.pairing)]
        out["pairing"] = f"channels paired as {words[0]} became {words[1]}" + (
            " (its readers disagree)" if len(new.pairing) > 1 else "")  # fmt: skip
    if old.width is not None and new.width is not None and old.width != new.width:
        out["width"] = f"{old.width} channels rotated became {new.width}"
    return out


def changes(before: list[Rotation], after: list[Rotation]) -> list[dict[str, Any]]:
    """Per group of layers with the same change, what the optimizer did (``differences``), the layers rotated alike
    before and after; a record: ``layers`` (None: sites whose readers name no layer), ``before`` / ``after`` (in
    words, or None), ``changes`` ({change: words}), ``rotation_changed`` (any of ``ROTATION_CHANGES``).
    """  # noqa: D205
    old, new = _by_layer(before), _by_layer(after)
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    keys = sorted({*old, *new}, key=lambda k: -1 if k is None else k)
    for layer in keys:
        for was, now in _matched(old.get(layer, []), new.get(layer, [])):
            found = differences(was, now)
            words = (None if was is None else was.words(), None if now is None else now.words())
            key = (*words, tuple(sorted(found.items())))
            record = merged.setdefault(key, {"layers": [], "before": words[0], "after": words[1], "changes": found,
                                             "rotation_changed": any(c in found for c in ROTATION_CHANGES)})
            if layer is not None:
                record["layers"].append(layer)
            else:
                record["layers"] = None
    return list(merged.values())


def sentence(records: list[dict[str, Any]], before: int, after: int) -> str:
    """The optimizer's effect on the rotations in one sentence: ``before`` / ``after`` are the site counts."""
    from ropeexport.hf import spans

    if not before and not after:
        return "no rotary site in the model"
    sites = f"{before} rotary site{'s' if before != 1 else ''} -> {after}"
    if after < before:
        sites += ": identical ones merged"
    changed = [r for r in records if r["rotation_changed"]]
    formed = [r for r in records if r["changes"] and not r["rotation_changed"]]

    def where(record: dict[str, Any]) -> str:
        layers = record["layers"]
        return "sites naming no layer" if layers is None else f"layer{'s' if len(layers) > 1 else ''} {spans(layers)}"

    if changed:
        told = "; ".join(f"{where(r)}: {', '.join(r['changes'].values())}" for r in changed)
        return f"CHANGED a rotation: {told} ({sites})"
    if formed:
        told = "; ".join(f"{where(r)}: {', '.join(r['changes'].values())}" for r in formed)
        return f"no rotation changed, {told} (the same pairing, width and table values; {sites})"
    return f"no rotation changed ({sites})"


def compare(model: Path, optimized: Path) -> dict[str, Any]:
    """The structural comparison of ``model`` and its ``optimized`` graph: ``changes``, site counts, ``changed`` (a
    rotation changed) and the ``text`` (``sentence``).
    """  # noqa: D205
    from ropeexport.audits.model import load_model

    before, after = rotations(load_model(model)), rotations(load_model(optimized))
    records = changes(before, after)
    return {"sites_before": len(before), "sites_after": len(after), "changes": records,
            "changed": any(r["rotation_changed"] for r in records),
            "text": sentence(records, len(before), len(after))}  # fmt: skip


def _files_bytes(model: Path) -> int:
    """Bytes of ``model`` and every file beside it (its external data)."""
    return sum(p.stat().st_size for p in model.parent.iterdir() if p.is_file())


def check(model: Path, level: str = DEFAULT_LEVEL) -> dict[str, Any]:
    """The line ``verify`` prints about the optimizer (module doc): ``compare`` of ``model`` and its optimized graph
    at ``level`` with the optimizer that ran and ``text`` in words; ``checked`` False (and why) where it did not run:
    a model larger than ``CHECK_BYTES`` (``audit --optimized`` checks it), one ONNX Runtime will not load, or one the
    audit's reading refuses.
    """  # noqa: D205
    ran = {"level": level, **runtime()}
    head = f"ONNX Runtime {ran['onnxruntime']}'s optimizer (level {level}, CPU provider)"
    size = _files_bytes(model)
    if size > CHECK_BYTES:
        return {"checked": False, **ran, "text": f"{head}: not checked here (the model's folder holds "
                f"{size / 2**30:.1f} GiB; `ropeexport audit MODEL --hf-config CONFIG --optimized {level}` checks it)"}
    try:
        with tempfile.TemporaryDirectory(prefix="ropeexport-optimized-") as folder:
            found = compare(model, optimize(model, level, Path(folder)))
    except SpecError as exc:
        return {"checked": False, **ran, "text": f"{head}: not checked ({exc.message})"}
    return {"checked": True, **ran, **found, "text": f"{head}: {found['text']}"}
