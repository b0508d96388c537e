"""The 2026 peers' exports for ``tools/audit_peers.py``: mobius-onnx (``mobius build --config CKPT OUT``) and optimum
(optimum-onnx 0.1.0, the last release, on transformers 4.57), each run as its user runs it, in a subprocess.

mobius-onnx installs beside ropeexport's pins (``pip install -c constraints.txt mobius-onnx==0.1.0`` changes none of
torch, onnx, onnxruntime, transformers): it runs as ``python -m mobius`` of this interpreter unless another command is
given. optimum-onnx 0.1.0 requires transformers < 4.58, so it lives in its own virtual environment (its python given
as ``--optimum-python``), and reads a copy of the checkpoint whose config.json says its RoPE the way transformers 4.x
configs do (``rope_theta`` and ``rope_scaling`` at the top level, Gemma 3's local base as ``rope_local_base_freq``:
the form every hub checkpoint of these families ships in; transformers 5 writes ``rope_parameters``, which 4.57 does
not read). The weights and tokenizer are the same files (linked). The audit and the proof read the original
checkpoint's config.
"""  # noqa: D205

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

MOBIUS = "mobius-onnx 0.1.0"
OPTIMUM = "optimum-onnx 0.1.0 (transformers 4.57)"

# optimum-onnx's exporter, as ``optimum-cli export onnx`` runs it: the causal LM with its cache (past_key_values.N.key
# / .value, position_ids), float32, on CPU. The command line is printed by optimum itself when it fails.
OPTIMUM_ARGS = ["-m", "optimum.commands.optimum_cli", "export", "onnx", "--task", "text-generation-with-past",
                "--device", "cpu", "--dtype", "fp32"]  # fmt: skip


def mobius_command(ckpt: Path, out: Path, given: str | None) -> list[str] | str:
    """The ``mobius build`` command line for ``ckpt`` into ``out``, or why there is none: ``given`` is a mobius
    executable (another environment's); else this interpreter's ``-m mobius`` when mobius is importable here.
    """  # noqa: D205
    if given:
        return [given, "build", "--config", str(ckpt), str(out)]
    if importlib.util.find_spec("mobius") is None:
        return "mobius-onnx is not installed here (pip install -c constraints.txt mobius-onnx==0.1.0, or --mobius)"
    return [sys.executable, "-m", "mobius", "build", "--config", str(ckpt), str(out)]


def optimum_command(ckpt: Path, out: Path, python: str | None) -> list[str] | str:
    """The optimum export of ``ckpt`` (already in the 4.x form: ``legacy_checkpoint``) into ``out`` run by
    ``python`` (the optimum environment's interpreter), or why there is none.
    """  # noqa: D205
    if not python:
        return "optimum-onnx is not given (--optimum-python: the python of a venv with optimum-onnx==0.1.0)"
    if not Path(python).is_file():
        return f"--optimum-python {python!r} does not exist"
    return [python, *OPTIMUM_ARGS, "--model", str(ckpt), str(out)]


def legacy_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a transformers 5 config.json) with its RoPE said as transformers 4.x configs say it.

    ``rope_parameters`` becomes ``rope_theta`` and, unless its type is ``default``, ``rope_scaling`` (the rest of its
    fields); a per-layer-type one (Gemma 3) takes its full-attention entry for those and its sliding-attention theta
    as ``rope_local_base_freq``. Phi-3's ``rope_scaling`` keeps only type, short_factor and long_factor (4.57's
    check wants exactly three fields); GPT-NeoX's theta and width are also said as ``rotary_emb_base`` and
    ``rotary_pct``. Every other field is kept.
    """
    out = dict(config)
    parameters = out.pop("rope_parameters", None)
    if not isinstance(parameters, dict):
        return out
    if "full_attention" in parameters or "sliding_attention" in parameters:
        sliding = parameters.get("sliding_attention") or {}
        if "rope_theta" in sliding:
            out["rope_local_base_freq"] = sliding["rope_theta"]
        parameters = parameters.get("full_attention") or sliding
    fields = {k: v for k, v in parameters.items() if k not in ("rope_theta", "partial_rotary_factor")}
    if "rope_theta" in parameters:
        out["rope_theta"] = parameters["rope_theta"]
    if "partial_rotary_factor" in parameters and "partial_rotary_factor" not in out:
        out["partial_rotary_factor"] = parameters["partial_rotary_factor"]
    if out.get("model_type") == "gpt_neox":  # 4.x GPT-NeoX names its base and width its own way
        out["rotary_emb_base"] = out.get("rope_theta", 10000.0)
        out["rotary_pct"] = out.get("partial_rotary_factor", 1.0)
    kind = fields.get("rope_type") or fields.get("type") or "default"
    if kind == "default":
        out["rope_scaling"] = None
    elif out.get("model_type") == "phi3":
        out["rope_scaling"] = {"type": kind, "short_factor": fields["short_factor"],
                               "long_factor": fields["long_factor"]}  # fmt: skip
    else:
        out["rope_scaling"] = fields | {"rope_type": kind}
    return out


def legacy_checkpoint(ckpt: Path, folder: Path) -> Path:
    """``folder``: ``ckpt``'s files linked, its config.json rewritten by ``legacy_config`` (module doc)."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in ckpt.iterdir():
        target = folder / item.name
        if item.name == "config.json" or target.exists() or not item.is_file():
            continue
        os.symlink(item.resolve(), target)
    config = json.loads((ckpt / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(legacy_config(config), indent=2) + "\n")
    return folder
