"""``graft``: a foreign model's rotary tables replaced by exact ones, the node types kept, then proven.

What is grafted: table sites whose cos/sin are constants (``audit.tables``): initializers (onnxruntime-genai's
cos_cache / sin_cache read by GroupQueryAttention, caches of RotaryEmbedding), Constant nodes, or the Constant nodes
of an ``If`` picking between two tables (the builder's LongRoPE: each branch gets the exact table of the regime its
values are nearest to), in the main graph or inside any subgraph. Where the config's LongRoPE switches and the model
has one table, the switch is added. The graph is otherwise untouched: same nodes, same runtime and execution
providers. A site computed in the main graph (cos/sin of positions x frequencies, as torch.onnx.export writes it) is
replaced by the rope family's own rows (``audit.rows``). An ALiBi site's stored slopes are replaced by the config's
(``audit.alibi.graft_slopes``).

Refused, with one line and nothing written: a model the audit could not check whole (a site it could not evaluate, a
call the model refuses, a reader ONNX Runtime will not run: the proof would prove nothing), a computed site inside a
subgraph, dynamic NTK computed in the graph, a model ONNX Runtime cannot run on the short call or, with a
checkpoint, on the proof's calls (both are run on the original before anything is written). When the audit says the
model's constants imply another schedule than the config's (scaling ignored, another factor, a switch never taken,
...), which one is right cannot be told from the model: the graft refuses unless ``trust="config"``. Precision
findings (float32 angles or frequencies, float32 frequencies seen through fp16 rounding) are what it repairs.

Proof, written into the result: the grafted model audited again (every site exact), and the grafted and original
models run on the same short call (8 tokens at positions 0 .. 7, an empty cache), every output compared: equal to
the dtype's noise where the tables agree there. Given the checkpoint the model was exported from, both models' logits
are also judged against the float64 recompute of the whole decoder at the first and last positions and on both sides
of original_max_position_embeddings (``audit.prove``); the grafted model must pass every call. When both models miss
by the same amount, the record says the difference lies outside the positional encoding, and where the grafted
model's hidden states first depart from the float64 recompute (``first_difference``: "layer 1's MLP"). The proof
also runs both models as their users run them (``effect.between``: each its own cache from its own prefill, to the
far end of the context, every switch and window edge scored, several draws at the end) and reports the original's
difference from the grafted model on those same runs (``decoder.use``): the far calls' random cached entries
understate what float32 angles cost there (Qwen3 YaRN: 2.4e-05 of the logit scale on them, 3.6e-04 so).

Written: ``out``, an .onnx file (its external data beside it) moved in after the proof; or, when the model is an
onnxruntime-genai folder's (genai_config.json beside it) and ``out`` is a folder (no .onnx suffix), that whole folder,
config and tokenizer files included (``audits.package``), so that onnxruntime-genai loads the grafted model as
written.

At any size: the model is read without its weights (``audit.model.load_model``: tensors stay in its data file), the
grafted model's weights are copied from that file block by block (``audit.model.write_model``), the proof's recompute
runs layer by layer, and ONNX Runtime holds one session of one model at a time: what a graft costs is about one
session of the model (tools/figures/audit-sizes.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.causes import PRECISION
from ropeexport.audits.checks import STRUCTURAL
from ropeexport.audits.community import CommunityFolder, chosen, community_folder, config_of, is_folder
from ropeexport.audits.core import AuditResult, audit
from ropeexport.audits.effect import between
from ropeexport.audits.fix import UNREPAIRABLE, repair
from ropeexport.audits.functions import FROM, original_scope, words
from ropeexport.audits.layers import encodings_for
from ropeexport.audits.model import load_model, ort_reason, quiet, write_model
from ropeexport.audits.observe import feed, session_feeds
from ropeexport.audits.package import GenaiFolder, genai_folder
from ropeexport.audits.patterns import Site, SiteKind
from ropeexport.audits.prove import CACHE_GIB, DecoderProof
from ropeexport.audits.states import state_shape
from ropeexport.errors import SpecError
from ropeexport.results import JsonObject
from ropeexport.store import Store, check_name
from ropeexport.version import __version__

TRUSTS = ("model", "config")


@dataclass
class GraftResult:
    """The grafted model's path, what was replaced, and the proof (module doc)."""

    path: Path
    replaced: list[JsonObject] = field(default_factory=list)
    before: AuditResult | None = None
    after: AuditResult | None = None
    short_call: JsonObject = field(default_factory=dict)
    changed_schedule: list[str] = field(default_factory=list)  # the findings trust="config" overrode
    decoder: JsonObject | None = None  # audit.prove's record of both models, with a checkpoint (its ``truth`` named)
    genai: JsonObject | None = None  # the onnxruntime-genai folder written (``audits.package``): folder, files
    transformersjs: JsonObject | None = None  # the transformers.js folder written (``audits.community``)
    functions: JsonObject | None = None  # the model's local functions: ``kept`` as they were, or ``inlined`` (why)

    @property
    def verdict(self) -> str:
        """``proven``: every site exact after the graft, (when only precision was repaired) the short call equal to
        the dtype's noise (a graft that changed the schedule on purpose is not expected to agree with the original),
        and with a checkpoint every far call run and passed; ``partial``: all that, but a far call not run (its cache
        over ``proof_cache_gib``, or a model that cannot be placed there: ``audit.prove``), so the model is proven up
        to a position only; else ``not proven``.
        """  # noqa: D205
        exact = self.after is not None and self.after.verdict == "exact"
        if not (exact and (bool(self.changed_schedule) or bool(self.short_call.get("equal")))):
            return "not proven"
        if self.decoder is None:
            return "proven"
        return str(self.decoder["verdict"]["grafted"]["verdict"])

    @property
    def proven(self) -> bool:
        """``verdict`` is proven: never said of a model some far call did not run on."""
        return self.verdict == "proven"

    @property
    def text(self) -> str:
        """The verdict in words: ``proven``, ``NOT proven``, or ``proven up to position P; K far calls not run
        (cache would need N GiB, over --proof-cache-gib G)``.
        """  # noqa: D205
        if self.verdict == "partial" and self.decoder is not None:
            return str(self.decoder["verdict"]["grafted"]["text"])
        return "proven" if self.proven else "NOT proven"

    @property
    def truth(self) -> str | None:
        """The truth the proof judged against: ``oracle`` (ropeexport's float64 decoder) or ``transformers``
        (transformers' model in float64: ``audits.truth``); None without a checkpoint.
        """  # noqa: D205
        return None if self.decoder is None else str(self.decoder["truth"]["kind"])

    def to_dict(self) -> dict[str, object]:
        """The result as plain data."""
        return {"path": str(self.path), "proven": self.proven, "verdict": self.verdict, "text": self.text,
                "truth": self.truth,
                "replaced": self.replaced,
                "before": self.before.verdict if self.before else None,
                "after": self.after.to_dict() if self.after else None, "short_call": self.short_call,
                "changed_schedule": self.changed_schedule, "decoder": self.decoder, "genai": self.genai,
                "transformersjs": self.transformersjs,
                "functions": self.functions}  # fmt: skip


def graft(
    model: str | Path,
    hf_config: str | Path | None,
    out: str | Path,
    trust: str = "model",
    checkpoint: str | Path | None = None,
    spec_file: str | Path | None = None,
    proof_cache_gib: float = CACHE_GIB,
    truth: str = "auto",
    truth_gib: float | None = None,
    variant: str | None = None,
) -> GraftResult:
    """Replace every wrong site of ``model`` with the exact values of its layers' encoding (``hf_config``'s, or
    ``spec_file``'s: ``audits.layers``), write ``out``, prove it (with ``checkpoint``, the folder the model was
    exported from, against the whole decoder's float64 recompute too: its own config.json where ``spec_file`` is
    given; a far call whose cache would take more than ``proof_cache_gib`` GiB is not run, and said). ``truth``: what
    the proof judges against (``audits.truth``: ``auto``, ropeexport's float64 decoder where it builds the model type,
    else transformers' model in float64; ``oracle`` or ``transformers`` forces one); ``truth_gib``: the most memory
    transformers' float64 model may take (None: what is available; ``hf_truth.check_size``). ``model`` may be an
    onnx-community folder (``audits.community``): ``variant`` names its model to graft (needed when it has several),
    its config.json is the config unless ``hf_config`` or ``spec_file`` is given, and a folder ``out`` is written as
    transformers.js loads it.
    """  # noqa: D205
    if trust not in TRUSTS:
        raise SpecError("trust", f"must be one of {', '.join(TRUSTS)}, got {trust!r}")
    source, target = Path(model), Path(out)
    community = source if is_folder(source) else None
    if community is not None:  # an onnx-community folder: one of its variants, its config.json
        found = chosen(community, variant)
        if len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise SpecError("variant", f"{str(community)!r} holds {len(found)} models ({names}): give `variant`, the "
                            "one to graft")  # fmt: skip
        source = found[0]
        hf_config = config_of(community, None if hf_config is None else Path(hf_config),
                              None if spec_file is None else Path(spec_file))  # fmt: skip
    elif variant is not None:
        raise SpecError("variant", f"names a model inside an onnx-community folder; {str(source)!r} is a file")
    loaded = load_model(source)  # not an ONNX file: said first
    # a genai folder's model and a folder to write: the whole genai folder (module doc); an onnx-community folder's:
    # the folder transformers.js loads
    package: GenaiFolder | CommunityFolder | None = None
    if target.suffix != ".onnx":
        package = community_folder(community, source, target) if community is not None else genai_folder(source,
                                                                                                         target)
    place = package.folder if package is not None else target  # what the store writes: the folder, or the file
    if package is not None and (place.exists() or place.is_symlink() or not place.name):
        raise SpecError("out", f"{str(place)!r} exists: graft writes the {_kind(package)} folder whole; give a new "
                        "folder")  # fmt: skip
    check_name(place.name, "out")  # a name the store can hold, said before the audit runs
    store = Store(place.parent)
    store.clean(only=place.name)  # an earlier graft to this --out killed mid-commit: what it moved in goes first
    if package is None:
        if target.exists():
            raise SpecError("out", f"{str(target)!r} exists: give a new file")
        if target.suffix != ".onnx":
            raise SpecError("out", f"must name an .onnx file (or a new folder, for a model with genai_config.json "
                            f"beside it), got {str(target)!r}")  # fmt: skip
        if target.with_name(f"{target.name}.data").exists():
            raise SpecError("out", f"{str(target.with_name(target.name + '.data'))!r} exists (the tables' file of "
                            f"{target.name}): give a new file")  # fmt: skip
    encodings = encodings_for(hf_config, spec_file, loaded)  # bad input said before the audit runs
    before = audit(source, hf_config, spec_file=spec_file, effects=False)
    _refuse_unchecked(before)
    spec = encodings.first
    config = Path(hf_config) if hf_config is not None else Path(checkpoint or ".") / "config.json"
    proof = None if checkpoint is None else DecoderProof(config, Path(checkpoint), source, proof_cache_gib, truth,
                                                          truth_gib)  # fmt: skip
    implied = sorted(({f["name"] for s in before.sites for f in s["findings"]} - PRECISION)
                     | {f["name"] for f in before.findings if f["name"] == "query-scale"})  # its factor: another one
    if implied and trust != "config":
        raise SpecError("trust", f"the model's tables imply another schedule than the config's ({', '.join(implied)}):"
                        " give `trust` config to replace them with the config's anyway")  # fmt: skip
    if proof is not None:  # the original must run before anything is written; one session of it at a time
        _refuse_unprovable(proof, proof.judge(source))
    original = _short_outputs(source, spec)
    fixing = [i for i, site in enumerate(before.sites) if not site["exact"]]
    model_, records, fixing, functions = _what_to_repair(loaded, source, before.sites, fixing)
    graph, replaced = repair(model_, source, records, encodings, fixing)
    if any(f["name"] == "query-scale" for f in before.findings):  # the query's factor table (``query_scale``)
        from ropeexport.audits.query_scale import repair as repair_query_scale

        replaced += repair_query_scale(graph, hf_config)
    # genai_config.json names the model by its name; transformers.js reads onnx/FILE
    name = (package.model if isinstance(package, CommunityFolder) else source.name) if package is not None \
        else target.name
    path = place / name if package is not None else target
    result = GraftResult(path, replaced, before, changed_schedule=implied, functions=functions)
    # Written and proven in the store's work folder beside ``out``, then moved into place: an interrupted graft
    # (Ctrl-C, SIGTERM, kill -9) never leaves an unproven model, or half a genai folder, at ``out``.
    with store.draft(place.name, field="out", tree=False) as draft:
        grafted = draft.path / name
        grafted.parent.mkdir(exist_ok=True)
        write_model(graph, grafted)  # the weights copied from the source's data file block by block
        result.after = audit(grafted, hf_config, spec_file=spec_file, effects=False)
        result.after.model = str(result.path)
        result.short_call = _compare(original, _short_outputs(grafted, spec))
        if proof is not None:
            result.decoder = proof.run({"original": source, "grafted": grafted})
            # the original's error on the runs its users make, the same runs as the grafted model's (``effect``)
            result.decoder["use"] = between(grafted, source, encodings)
            if result.decoder.get("outside_encoding"):  # where, read off the grafted model's hidden states
                where = proof.locate(grafted, "the grafted model")
                if where is not None:
                    result.decoder["first_difference"] = where
        if package is None:
            written = sorted(p.name for p in draft.path.iterdir())
            draft.commit_files(sorted(written, key=lambda n: n == target.name))  # the model file last
            return result
        package.write(draft.path)
        record = {"model": str(source), "config": str(hf_config if hf_config is not None else spec_file),
                  "trust": trust}  # fmt: skip
        manifest = {"artifact": "graft", "spec": record, "proven": result.proven, "verdict": result.verdict,
                    "ropeexport_version": __version__}  # fmt: skip
        moved = draft.commit(manifest, result.proven, guard_verified=False)  # the folder moved in whole
        # Listed once it is in place, so the list is what the folder holds: manifest.json included.
        if isinstance(package, CommunityFolder):
            files = sorted(p.relative_to(moved.path).as_posix() for p in moved.path.rglob("*") if p.is_file())
            result.transformersjs = {"folder": str(place), "model": name, "files": files}
        else:
            result.genai = {"folder": str(place), "model": name, "files": sorted(p.name for p in moved.path.iterdir())}
    return result


def _kind(package: GenaiFolder | CommunityFolder) -> str:
    """What a folder ``graft`` writes is, in words."""
    return "transformers.js" if isinstance(package, CommunityFolder) else "onnxruntime-genai"




def _what_to_repair(loaded: ir.Model, source: Path, sites: list[JsonObject],
                    fixing: list[int]) -> tuple[ir.Model, list[JsonObject], list[int], JsonObject | None]:  # fmt: skip
    """The model graft repairs and writes, the site records as they name its parts, the sites to repair among them,
    and what becomes of the model's local functions (None: it has none). The audit reads a model's functions inlined
    (``audits.functions``); where no site graft repairs lies inside one, the model is repaired as it was written, its
    functions kept as they were (the records of the sites inside them, exact, left out; each subgraph found again in
    the graph before inlining: ``functions.original_scope``); else the inlined model is written, and said.
    """  # noqa: D205
    original = load_model(source, inline=False)
    if not original.functions:
        return loaded, sites, fixing, None
    names = sorted(words(key) for key in original.functions)
    inside = sorted({f for i in fixing for f in sites[i].get("functions", [])})
    records: list[JsonObject] = []
    chosen: list[int] = []
    for index, record in enumerate(sites):
        if inside:
            break
        if record.get("functions"):
            continue  # exact (a site to repair inside a function would have inlined the model): left as it is
        scope = original_scope(Site.from_dict(record).scope, loaded, original)
        if scope is None:  # a subgraph the two graphs do not agree on: the inlined model is what graft can repair
            inside = [f"the {record.get('graph')} (not found again before inlining)"]
            break
        if index in fixing:
            chosen.append(len(records))
        records.append(record | ({"scope": [list(step) for step in scope]} if "scope" in record else {}))
    if not inside:
        return original, records, chosen, {"kept": names}
    for node in ir.traversal.RecursiveGraphIterator(loaded.graph):  # the reading's own bookkeeping, not written
        node.metadata_props.pop(FROM, None)
    return loaded, sites, fixing, {"inlined": names, "why": f"a site graft repairs lies inside {', '.join(inside)}"}


def _refuse_unprovable(proof: DecoderProof, judged: list[JsonObject]) -> None:
    """A SpecError when the float64 recompute's logits cannot show a position error on some call
    (``proof_verdict.unprovable``): they are the same for the grafted model, whose weights are the original's, so
    the proof would be "cannot prove" whatever the graft does. Said before anything is written.
    """  # noqa: D205
    from ropeexport.audits.prove import far_calls

    calls = far_calls(proof.spec.position_spec())
    found = [(calls[i][0], r["cannot_prove"]) for i, r in enumerate(judged) if "cannot_prove" in r]
    if found:
        names = ", ".join(repr(name) for name, _ in found)
        raise SpecError("checkpoint", f"cannot prove: on the calls {names} {found[0][1]} (the recompute of "
                        f"{proof.source}): a position error cannot show in them, and the grafted model would be "
                        "judged against the same logits; graft without --checkpoint, or check the model's head "
                        "(its scales, its weights)")  # fmt: skip


def _refuse_unchecked(before: AuditResult) -> None:
    """A SpecError for a site the audit could not check whole, a computed site inside a subgraph, or a finding no
    replacement of values repairs (``UNREPAIRABLE``) (module doc).
    """  # noqa: D205
    for found in before.findings:
        if found["name"] in UNREPAIRABLE:
            raise SpecError("model", f"{found['text']}: {UNREPAIRABLE[found['name']]}")
        if found.get("unrepairable"):  # this finding's own reason (``query_scale.findings``)
            raise SpecError("model", f"{found['text']}: {found['unrepairable']}")
        if found["name"] == "query-scale" and not found.get("tables"):  # a factor the graph computes or lacks
            raise SpecError("model", f"{found['text']}: graft replaces rotary values and gathered factor tables, it "
                            "does not change the query's scale computed in the graph or add one")
    for site in before.sites:
        for found in site["findings"]:
            if found["name"] in STRUCTURAL:
                raise SpecError("model", f"{found['text']}: graft proves only what the audit could check whole")
        if not site["table"] and site.get("scope") and SiteKind(site["kind"]) is not SiteKind.ALIBI:
            raise SpecError("model", f"the {site['kind']} site reading {site['cos']!r} lies inside the "
                            f"{site['graph']}: graft replaces computed cos/sin in the main graph only")  # fmt: skip


def short_call(original: Path, grafted: Path, spec: Any, tokens: int = 8) -> dict[str, Any]:
    """Both models on one call of ``tokens`` tokens at positions 0 .. tokens - 1 (empty cache); every output.

    A cache input's undeclared head count and width come from the config (``spec``).
    """
    return _compare(_short_outputs(original, spec, tokens), _short_outputs(grafted, spec, tokens))


def _short_outputs(path: Path, spec: Any, tokens: int = 8) -> tuple[int, list[np.ndarray]]:
    """(tokens, every output of ``path`` on the short call); ONNX Runtime refusing it is a SpecError, in one line."""
    import onnxruntime as ort

    try:
        options, run = quiet()
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        feeds = session_feeds(session, tokens, lambda value, n: _short_feed(value, n, spec))
        return tokens, session.run(None, feeds, run)
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
        raise SpecError("model", f"{str(path)!r} does not run a call of {tokens} tokens in ONNX Runtime "
                        f"({ort_reason(exc)}): graft cannot compare it") from None  # fmt: skip


def _compare(original: tuple[int, list[np.ndarray]], grafted: tuple[int, list[np.ndarray]]) -> dict[str, Any]:
    """Every output of the two short calls: the worst difference, relative to the original's scale."""
    tokens = original[0]
    worst, scale = 0.0, 0.0
    for a, b in zip(original[1], grafted[1], strict=True):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        worst = max(worst, float(np.max(np.abs(a - b), initial=0)))
        scale = max(scale, float(np.max(np.abs(a), initial=0)))
    relative = worst / scale if scale else worst
    return {"tokens": tokens, "max_abs": worst, "scale": scale, "relative": relative, "equal": relative <= 1e-4}


def _short_feed(value: ir.Value, tokens: int, spec: Any) -> np.ndarray:
    """A short call's inputs: ids and positions as observe feeds them, an integer seqlens / total for GQA."""
    name = value.name or ""
    dims = [d if isinstance(d, int) else None for d in (value.shape or [])]
    state = state_shape(name, list(value.shape or []))
    if state is not None:  # a hybrid's convolution or recurrent state: a first call's, zeros (``audits.states``)
        assert value.dtype is not None, "a model input declares its element type"
        return np.zeros(state, value.dtype.numpy())
    if len(dims) == 4 and ("past" in name or "cache" in name):  # [b, KV, past, d], empty
        heads = getattr(spec, "num_kv_heads", None) or spec.num_heads  # an ALiBi spec has one head count
        assert value.dtype is not None, "a model input declares its element type"
        # a declared 0 is a width too (a NoPE latent layer's rope key, Mistral Large 4's layer 3)
        width = dims[3] if dims[3] is not None else spec.head_dim
        return np.zeros((1, dims[1] if dims[1] is not None else heads, 0, width), value.dtype.numpy())
    if name in ("seqlens_k", "total_sequence_length"):
        count = tokens - 1 if name == "seqlens_k" else tokens
        return np.array([count] if name == "seqlens_k" else count, np.int32)
    if value.dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16):  # an activation: fixed random values, 1 x tokens
        sized = [d if d is not None else 1 if i == 0 else tokens for i, d in enumerate(dims)]
        return np.random.default_rng(0).standard_normal(sized).astype(value.dtype.numpy())
    if name == "input_ids":
        return (np.arange(tokens) % 3 + 1).astype(np.int64).reshape(1, tokens)
    return feed(value, tokens)
