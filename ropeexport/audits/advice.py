"""What a finding means for the model, and what to do next: each finding's severity from its measured effect
(``audits.effect``) and the next step (graft, graft --trust config, re-export, or nothing).

Severity, from r = max |logits - logits with the finding's sites repaired| / max |logit| on the worst window of the
model's run as users run it (``effect``, ``runs``: its own cache, to the far end of its context), against
t, the bound ropeexport verifies its own decoders' logits to in the model's logit dtype (``decoder.verify.TOLERANCE``:
1e-4 for float32, 2e-2 for float16 and bfloat16):

- ``harmless``: r <= t. The model is as close to its exact self as a verified decoder is to float64: a 1-ulp float32
  table error (the builder's float32 angles) moves the logits by ~1e-5 of their scale.
- ``minor``: t < r <= ``WRONG`` (1% of the logit scale): more than verification allows; it can flip a greedy token
  only where the top two are that close.
- ``wrong``: r > max(``WRONG``, t): the logits move by more than 1% of their scale: the model computes another
  function (a schedule ignored or applied twice moves them by a sizable part of it).
- ``unmeasured``: no effect was measured (asked not to, or the model cannot be run so: the reason is given), or the
  run stopped short of the far end (its cache over the budget) with r <= t there: harmless is not said of positions
  not run (over t, the level stands: a lower bound).

A gate (``audit --fail-on LEVEL``, ``rx.audit(fail_on=...)``) fails on a finding at LEVEL or above (harmless < minor
< wrong) and on every unmeasured one; the default, ``minor``, fails on any finding beyond the tolerance t and passes
a model whose findings are all harmless, saying so.

Next step: a finding graft cannot repair (``fix.UNREPAIRABLE``), or one at a site the audit could not check whole,
is for the exporter: re-export (``ropeexport build --artifact decoder`` builds a decoder verified against float64).
A schedule the model implies other than the config's (not ``causes.PRECISION``): which one is right cannot be told
from the model: graft with ``--trust config`` where the config is the one the model was exported from. A precision
finding: graft; nothing is needed when it is harmless. The graft command is the model's own (its paths, an --out
beside it; ``--trust config`` when any of its findings implies another schedule, as graft then needs it).
"""  # noqa: D205

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ropeexport.audits.causes import PRECISION
from ropeexport.audits.checks import STRUCTURAL
from ropeexport.audits.fix import UNREPAIRABLE
from ropeexport.report.words import error

WRONG = 1e-2  # a logit change over 1% of the logit scale: the model computes another function
LEVELS = ("wrong", "minor", "harmless", "unmeasured")  # most severe first
FAIL_ON = ("harmless", "minor", "wrong")  # ``--fail-on``: the least severe level that fails a gate
DEFAULT_FAIL_ON = "minor"  # any finding beyond the tolerance fails; a harmless one passes, and says so
TOLERANCE_KEY = {"float16": "fp16", "bfloat16": "fp16"}  # a logit dtype's verification bound; any other: fp32's
REEXPORT = "`ropeexport build --checkpoint CHECKPOINT --artifact decoder` builds one verified against float64"


def severity(effect: dict[str, Any]) -> dict[str, Any]:
    """``{"level", "text"}`` of an effect record (module doc)."""
    from ropeexport.decoder.verify import TOLERANCE

    if "relative" not in effect:
        return {"level": "unmeasured", "text": effect.get("not_measured", "not asked")}
    r, dtype = effect["relative"], effect.get("dtype", "float32")
    bound = TOLERANCE[TOLERANCE_KEY.get(dtype, "fp32")]
    output = effect.get("output", "logits")
    scale = "the logit scale" if output == "logits" else f"the scale of output {output!r}"  # a part of a decoder
    moved = f"{error(r)} of {scale} at position {effect['position']}"
    limit, wrong = error(bound), error(WRONG)
    if effect.get("short"):  # run short of the far end: a lower bound, never called harmless
        if r <= bound:
            return {"level": "unmeasured", "text": f"{moved}, within the {limit} ropeexport verifies {dtype} logits "
                    f"to up to position {effect['up_to']} only ({effect['short']}): not known past it"}  # fmt: skip
        moved += f" (at least: {effect['short']})"
    if r <= bound:
        return {"level": "harmless", "text": f"{moved}, within the {limit} ropeexport verifies {dtype} logits to"}
    if r <= max(WRONG, bound):
        return {"level": "minor", "text": f"{moved}: above the {limit} ropeexport verifies {dtype} logits to, under "
                f"{wrong}: can flip a greedy token where the top two are that close"}  # fmt: skip
    return {"level": "wrong", "text": f"{moved}: over {wrong}, the model computes other outputs, not the same ones "
            "rounded otherwise"}  # fmt: skip


def check_fail_on(fail_on: str) -> None:
    """A SpecError unless ``fail_on`` is one of ``FAIL_ON``."""
    if fail_on not in FAIL_ON:
        from ropeexport.errors import SpecError

        raise SpecError("fail_on", f"must be one of {', '.join(FAIL_ON)}, got {fail_on!r}")


def fails(level: str, fail_on: str) -> bool:
    """A finding of ``level`` fails a gate at ``fail_on`` (module doc): at or above that level, or ``unmeasured`` (a
    finding whose effect is not known is never passed as harmless).
    """  # noqa: D205
    if level not in FAIL_ON:
        return True
    return FAIL_ON.index(level) >= FAIL_ON.index(fail_on)


def graft_command(model: str, config: str, source: str, trust: bool) -> str:
    """The ``ropeexport graft`` line for the audited model: --out beside it (a folder for an onnxruntime-genai
    folder's model, as graft then writes the whole folder; for a transformers.js folder's variant, that folder's graft
    with ``--variant``), numbered (``-grafted-2``) past names that exist.
    """  # noqa: D205
    path = Path(model)
    genai = (path.parent / "genai_config.json").is_file()
    if in_community_folder(path) and not genai:  # graft writes the transformers.js folder: it and its variant named
        return _folder_graft_command(path, config, source, trust)
    for n in range(1, 1000):  # a name graft can write: an --out that exists is refused (a graft run before, say)
        tag = "-grafted" if n == 1 else f"-grafted-{n}"
        if genai:
            name = f"{path.parent.name or path.resolve().parent.name}{tag}"
            out = str(path.parent.parent / name) if path.parent.name else f"../{name}"
        else:
            out = str(path.with_name(f"{path.stem}{tag}.onnx"))
        if not Path(out).exists():
            break
    flag = "--hf-config" if source == "hf_config" else "--spec"
    words = ["ropeexport", "graft", model, flag, config, "--out", out, *(["--trust", "config"] if trust else [])]
    return " ".join(shlex.quote(w) for w in words)


def in_community_folder(path: Path) -> bool:
    """True for a variant of a folder published for transformers.js (``FOLDER/onnx/model*.onnx``, config.json beside
    onnx/): ``audits.community``.
    """  # noqa: D205
    from ropeexport.audits.community import CONFIG, ONNX, VARIANT

    return path.parent.name == ONNX and VARIANT.match(path.name) is not None and (path.parent.parent / CONFIG).is_file()


def _folder_graft_command(path: Path, config: str, source: str, trust: bool) -> str:
    """``ropeexport graft FOLDER --variant FILE --out FOLDER-grafted``, the config named only where it is not the
    folder's own config.json.
    """  # noqa: D205
    folder = path.parent.parent
    out = next(f"{folder}{t}" for t in ("-grafted", *(f"-grafted-{n}" for n in range(2, 1000)))
               if not Path(f"{folder}{t}").exists())  # fmt: skip
    own = source == "hf_config" and Path(config).resolve() == (folder / "config.json").resolve()
    flag = [] if own else ["--hf-config" if source == "hf_config" else "--spec", config]
    words = ["ropeexport", "graft", str(folder), "--variant", path.name, *flag, "--out", out,
             *(["--trust", "config"] if trust else [])]  # fmt: skip
    return " ".join(shlex.quote(w) for w in words)


def next_step(found: dict[str, Any], level: str, command: str, sites: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"action", "text"}``: what to do about ``found`` (module doc); ``command`` is the model's graft line."""
    name = found["name"]
    unchecked = [f["text"] for i in found["sites"] for f in sites[i]["findings"] if f["name"] in STRUCTURAL]
    why = UNREPAIRABLE.get(name) or (found.get("effect") or {}).get("unrepairable")
    if unchecked or why:
        reason = why or f"the audit could not check the site whole ({unchecked[0]})"
        return {"action": "re-export", "text": f"re-export the model ({reason}); {REEXPORT}"}
    if name not in PRECISION:
        return {"action": "graft --trust config", "text": f"if the config is the one the model was exported from: "
                f"`{command}`; else audit against the right config"}  # fmt: skip
    if level == "harmless":
        return {"action": "nothing", "text": f"nothing needed (`{command}` makes it exact)"}
    return {"action": "graft", "text": f"`{command}`"}


def advise(findings: list[dict[str, Any]], sites: list[dict[str, Any]], model: str, config: str,
           source: str) -> None:  # fmt: skip
    """Give each finding its ``severity`` and ``next`` step (module doc), in place."""
    trust = any(f["name"] not in {*PRECISION, *UNREPAIRABLE, *STRUCTURAL, "unidentified-site"} for f in findings)
    command = graft_command(model, config, source, trust)
    note = dynamic_quantization(model) if any("relative" in (f.get("effect") or {}) for f in findings) else None
    for found in findings:
        found["severity"] = severity(found.get("effect") or {})
        if note is not None and "relative" in (found.get("effect") or {}):
            found["severity"]["text"] += f"; {note}"
        found["next"] = next_step(found, found["severity"]["level"], command, sites)


def dynamic_quantization(model: str) -> str | None:
    """What to keep in mind reading an effect measured on a model that quantizes its activations at run time
    (DynamicQuantizeLinear, as an 8-bit ``model_quantized.onnx`` does), or None for any other model: repairing the
    angles moves activations across quantization steps, so the effect includes the quantization's response, not the
    angles' error alone (measured: 5.7e-02 of the logit scale for float32 angles whose error alone is about 1e-05).
    """  # noqa: D205
    import onnx

    try:
        graph = onnx.load(model, load_external_data=False).graph
    except Exception:  # noqa: BLE001 (the audit read the model already; a note is never worth failing it)
        return None
    if not any(node.op_type == "DynamicQuantizeLinear" for node in graph.node):
        return None
    return ("the model quantizes its activations at run time (DynamicQuantizeLinear): this effect includes how its "
            "quantization responds to the repair, not the angles' error alone")
