"""Models other tools exported, from the API: ``audit`` (every rotary site checked at every position) and
``graft`` (exact tables grafted in, and proven). Their modules load when first called: onnx-ir and ONNX Runtime
sessions stay out of import time.
"""  # noqa: D205

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ropeexport.api.shared import _path

if TYPE_CHECKING:
    from collections.abc import Callable

    from ropeexport.audits.core import AuditResult
    from ropeexport.audits.graft import GraftResult
    from ropeexport.audits.zoo import ZooResult
    from ropeexport.results import JsonObject


@dataclass
class FolderAudit:
    """Every variant of an onnx-community folder audited: ``results`` maps each model's path inside the folder
    (``onnx/model_q4.onnx``) to its ``AuditResult``; ``passed``: every variant's gate passed.
    """  # noqa: D205

    folder: Path
    config: str | None
    results: dict[str, AuditResult] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        """The folder (``rx.Result``'s ``path``)."""
        return self.folder

    @property
    def passed(self) -> bool:
        """Every variant's gate (``--fail-on``) passed."""
        return all(r.gate["passed"] for r in self.results.values())

    def __bool__(self) -> bool:
        return self.passed

    def to_dict(self) -> dict[str, object]:
        """The folder, its config, and each variant's audit as plain data."""
        return {"folder": str(self.folder), "config": self.config, "passed": self.passed,
                "variants": {name: r.to_dict() for name, r in self.results.items()}}  # fmt: skip


def audit(
    model: str | Path,
    hf_config: str | Path | None = None,
    out: str | Path | None = None,
    threads: int = 2,
    spec_file: str | Path | None = None,
    effects: bool = True,
    fail_on: str = "minor",
    optimized: str | None = None,
    optimized_model: str | Path | None = None,
) -> AuditResult:
    """Every rotary site of a foreign ONNX ``model`` against the encoding of the layers that read it at every
    position (``ropeexport.audits``): ``hf_config``'s (a transformers config.json), or ``spec_file``'s (a position
    spec, per layer where they differ; exactly one of the two); each finding's effect on the logits measured unless
    ``effects`` is False (it runs the model twice per finding: ``{"not_measured": "not asked"}`` instead); with
    ``out``, audit.json, audit.md, audit.html written there. An ``AuditResult``, its ``gate`` at ``fail_on`` (advice).
    ``optimized`` (``basic``, ``extended`` or ``all``, ONNX Runtime's default): the graph ONNX Runtime's CPU provider
    runs at that level audited too, with what its optimizer did to each rotation (``result.optimized``); or
    ``optimized_model``: such a graph saved elsewhere (a GPU provider's session), audited in its place.
    """  # noqa: D205
    from ropeexport.audits.core import audit as _audit
    from ropeexport.audits.core import write

    config = None if hf_config is None else _path(hf_config, "hf_config")
    spec = None if spec_file is None else _path(spec_file, "spec_file")
    given = None if optimized_model is None else _path(optimized_model, "optimized_model")
    result = _audit(_path(model, "model"), config, threads, spec, effects, fail_on, optimized, given)
    if out is not None:
        write(result, _path(out, "out_dir"))
    return result


def audit_zoo(
    zoo: str | Path,
    out: str | Path,
    confine: bool = False,
    effects: bool = True,
    fail_on: str = "minor",
    ray: str | None = None,
    threads: int = 2,
    on_row: Callable[[JsonObject], None] | None = None,
) -> ZooResult:
    """Every model ``zoo`` (a ZOO.toml: ``[[model]]`` tables with ``name``, ``onnx``, ``hf_config`` or ``spec``,
    optional ``checkpoint``; paths relative to its folder) audited as ``audit`` does, each into ``out/NAME``, and
    ``out/zoo.json`` / ``out/zoo.html``: one row per model, worst first (``ropeexport.audits.zoo``). A model that
    cannot be audited is its row (exit 2), never the end of the run; the result's ``exit_code`` is the worst row's.
    ``confine``: every path must lie inside the zoo's folder tree. A rerun skips the models whose folder holds the
    audit of the same files and options. ``ray``: a Ray address (``local``, ``auto``, ``HOST:PORT``,
    ``ray://HOST:PORT``; ``ropeexport.fanout``), each model a Ray task, the folders written here all the same;
    None: one model after another in this process, Ray not imported. ``on_row(row)`` sees each row as it lands.
    """  # noqa: D205
    from ropeexport.audits.zoo import ZooOptions
    from ropeexport.audits.zoo import audit_zoo as _audit_zoo

    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        from ropeexport.errors import SpecError

        raise SpecError("threads", f"must be an integer >= 1, got {threads!r}")
    options = ZooOptions(bool(effects), fail_on, threads)
    return _audit_zoo(_path(zoo, "zoo"), _path(out, "out_dir"), bool(confine), options, ray, on_row)
def audit_folder(
    folder: str | Path,
    hf_config: str | Path | None = None,
    out: str | Path | None = None,
    variant: str | None = None,
    threads: int = 2,
    spec_file: str | Path | None = None,
    effects: bool = True,
    fail_on: str = "minor",
    optimized: str | None = None,
) -> FolderAudit:
    """Every model of an onnx-community ``folder`` (``onnx/model*.onnx``: fp32, fp16, q4, q4f16, quantized, ...;
    ``audits.community``), or the one ``variant`` names (``model_q4.onnx`` or ``q4``), audited as ``audit`` audits one,
    against the folder's config.json unless ``hf_config`` or ``spec_file`` is given. With ``out``, each variant's
    audit.json, audit.md and audit.html written into ``out/<variant name without .onnx>``. A ``FolderAudit``:
    ``results`` (each variant's ``AuditResult``), ``passed`` (every variant's gate at ``fail_on``).
    """  # noqa: D205
    from ropeexport.audits.community import chosen, config_of
    from ropeexport.audits.core import audit as _audit
    from ropeexport.audits.core import write

    where = _path(folder, "model")
    models = chosen(where, variant)  # the folder's models, and the variant's name, checked before anything runs
    spec = None if spec_file is None else _path(spec_file, "spec_file")
    config = config_of(where, None if hf_config is None else _path(hf_config, "hf_config"), spec)
    result = FolderAudit(where, None if config is None else str(config))
    for model in models:
        name = model.relative_to(where).as_posix()
        result.results[name] = _audit(model, config, threads, spec, effects, fail_on, optimized, None)
    if out is not None:
        for name, one in result.results.items():
            write(one, _path(out, "out_dir") / Path(name).stem)
    return result


def graft(
    model: str | Path,
    hf_config: str | Path | None,
    out: str | Path,
    trust: str = "model",
    checkpoint: str | Path | None = None,
    spec_file: str | Path | None = None,
    proof_cache_gib: float = 4.0,
    truth: str = "auto",
    truth_gib: float | None = None,
    variant: str | None = None,
) -> GraftResult:
    """``model`` with every wrong rotary site replaced by the exact values of its layers' encoding (``hf_config``'s,
    or ``spec_file``'s: exactly one of the two), written to ``out`` (an .onnx file that must not exist; for a model
    with genai_config.json beside it, the new onnxruntime-genai folder, written whole: ``audits.package``) and proven
    (``ropeexport.audits.graft``); with ``checkpoint`` (the folder the model was exported from) its logits are judged
    against the whole decoder's float64 recompute at far positions and across original_max_position_embeddings too,
    a call whose cache would take more than ``proof_cache_gib`` GiB not run (and said: the verdict is then
    ``partial``, proven up to a position, never ``proven``); ``truth``: what they are judged against (``auto``:
    ropeexport's float64 decoder where it builds the model type, else transformers' model in float64, eager, exact
    float64 angles per layer type; ``oracle`` / ``transformers`` forces one); ``truth_gib``: the most memory
    transformers' float64 model may take (default: what is available now; over it, refused before loading). ``model``
    may be an onnx-community folder: ``variant`` names the model in its ``onnx/`` to graft, its config.json is the
    config unless one is given, and a folder ``out`` is written as transformers.js loads it (``audits.community``).
    Returns a ``GraftResult``.
    """  # noqa: D205
    from ropeexport.audits.graft import graft as _graft

    folder = None if checkpoint is None else _path(checkpoint, "checkpoint")
    config = None if hf_config is None else _path(hf_config, "hf_config")
    spec = None if spec_file is None else _path(spec_file, "spec_file")
    return _graft(_path(model, "model"), config, _path(out, "out"), trust, folder, spec, proof_cache_gib, truth,
                  truth_gib, variant)  # fmt: skip
