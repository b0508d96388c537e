"""A seeded random-weight checkpoint (with a tokenizer) and every model the benchmark builds from it.

- ``make_checkpoint``: models/llama-3.1-8b.toml's ``[config]`` with a ``shapes.SHAPES`` shape, weights ``INIT``
  from ``torch.manual_seed(seed)``, saved with ``save_pretrained``; a WordLevel tokenizer (``<unk>``, ``<s>``,
  ``</s>``, ``w0`` ..) saved beside it, because onnxruntime-genai's builder refuses a checkpoint without one;
- ``build_ours``: ``ropeexport.build_decoder`` (fp32, ``fused`` or ``gqa``, weights fp32 or int4; it verifies
  itself, eager peer off);
- ``build_og``: ``python -m onnxruntime_genai.models.builder -p fp32|int4 -e cpu`` (offline, from the same folder).

int4 like for like: ``BUILDER_INT4`` is what the builder's ``-p int4 -e cpu`` writes (read from
onnxruntime_genai/models/builder.py and quantization/quant_config.py of 0.18, and checked on its model): every
MatMul quantized by ONNX Runtime's ``MatMulNBitsQuantizer`` (RTN, ``quantize_matmul_4bits``), ``lm_head`` included,
the embedding not; block size 32, symmetric (no zero points), accuracy_level 4 on the CPU (int8 activations); q|k|v
packed into one MatMulNBits, gate and up two. Ours packs q|k|v and gate|up, each column quantized alone (so the
stored values are the same). ``OWN_INT4`` is ``ropeexport build --weight-format int4`` at its own defaults: the
same but accuracy level 0 (fp32 activations, verified to fp32's tolerance).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import tomllib

from .shapes import SHAPES

ROOT = Path(__file__).resolve().parents[2]
# Attention scores of order one, so a position error shows in the logits: with normal(0, 0.02) everywhere (norm
# weights included) every query attends almost uniformly and float32 angles at 100k cost nothing visible.
INIT = "matrices normal(0, 0.1), norm weights 1 + normal(0, 0.1)"
CARD = ROOT / "models" / "llama-3.1-8b.toml"


def config(shape: str) -> dict[str, Any]:
    """The Llama-3.1-8B config with ``shape``'s widths (the positional schedule untouched)."""
    cfg = tomllib.loads(CARD.read_text())["config"]
    return cfg | SHAPES[shape]


def make_checkpoint(folder: Path, shape: str, seed: int = 0) -> dict[str, Any]:
    """Write the checkpoint and tokenizer into ``folder`` (kept when already complete); what was made."""
    done = folder / "made.json"
    if done.is_file():
        return json.loads(done.read_text())
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    cfg = config(shape)
    start = time.perf_counter()
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg))
    with torch.no_grad():  # one generator, parameters in module order: the same weights in every run
        for p in model.parameters():  # matrices N(0, 0.1), norm weights 1 + N(0, 0.1): see INIT
            p.normal_(0.0, 0.1)
            if p.ndim == 1:
                p.add_(1.0)
    model.save_pretrained(folder)
    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(cfg["vocab_size"] - 3)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                                eos_token="</s>")  # fmt: skip
    fast.save_pretrained(folder)
    made = {"shape": shape, "seed": seed, "config": cfg, "init": INIT,
            "parameters": sum(p.numel() for p in model.parameters()),
            "embedding_parameters": model.get_input_embeddings().weight.numel(),
            "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip
    done.write_text(json.dumps(made, indent=2))
    return made


BUILDER_INT4 = {"weight_format": "int4", "block_size": 32, "accuracy_level": 4, "symmetric": True}
OWN_INT4 = {"weight_format": "int4", "block_size": 32, "accuracy_level": 0, "symmetric": True}


def build_ours(checkpoint: Path, out: Path, graph: str, weights: dict[str, Any] | None = None) -> dict[str, Any]:
    """ropeexport's decoder of the checkpoint (fp32, ``graph``, ``weights``: ``build_decoder``'s weight-format
    arguments, None for fp32) under ``out``; its folder and the build's verdict.
    """  # noqa: D205
    import ropeexport as rx
    from ropeexport.decoder.spec import weight_label

    label = "-".join(x for x in ("fp32", weight_label(weights or {}), graph) if x)
    found = sorted(out.glob(f"*-decoder-{label}/decoder.json"))
    if found:
        return {"folder": str(found[0].parent), "passed": None, "seconds": 0.0, "reused": True}
    start = time.perf_counter()
    result = rx.build_decoder(out, checkpoint=checkpoint, graph=graph, eager=False, **(weights or {}))
    return {"folder": str(result.path), "passed": bool(result.passed), "seconds": round(time.perf_counter() - start, 1)}


def build_og(checkpoint: Path, out: Path, precision: str = "fp32") -> dict[str, Any]:
    """onnxruntime-genai's model builder, ``precision`` (fp32, int4: its defaults) CPU, on the same checkpoint."""
    if (out / "genai_config.json").is_file():
        return {"folder": str(out), "seconds": 0.0, "reused": True}
    command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint), "-o", str(out),
               "-p", precision, "-e", "cpu", "-c", str(out.parent / "og-cache")]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(f"the onnxruntime-genai builder failed (rc {done.returncode}): {tail[-1] if tail else ''}")
    return {"folder": str(out), "seconds": round(time.perf_counter() - start, 1),
            "command": " ".join(["python"] + command[1:])}  # fmt: skip
