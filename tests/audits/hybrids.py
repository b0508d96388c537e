"""The 2026 families ropeexport does not build as decoders, as tiny random checkpoints and torch.onnx dynamo exports:
what ``test_truth.py`` and ``tools/truth_families.py`` audit, graft and prove against transformers' own model.

``FAMILIES``: per family its transformers model type and config fields (random weights, nothing downloaded): Qwen3.5
text (``qwen3_5_text``: linear-attention layers between full ones, a quarter of each head rotated, mrope keys),
Granite 4 (``granitemoehybrid``: Mamba2 layers between attention ones, a mixture of experts, RoPE switched on), LFM2
(``lfm2``: convolution layers between attention ones) and Gemma 3n (``gemma3n_text``: sliding layers at theta 1e4,
a full one at 1e6; no KV sharing). Each is exported without a cache (``EXPORT``: input_ids, attention_mask,
position_ids -> logits, ``use_cache=False``): its convolution and recurrent states then start empty on every call,
as on a first call, and the proof's calls are placed by position_ids (``audits.truth``). An export that dynamo
refuses gives the exporter's reason, in one line, not a model.
"""  # noqa: D205

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

TINY = {"vocab_size": 160, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 4096, "initializer_range": 0.1}  # fmt: skip

# family -> (model_type, fields, the rotated layers, the layer a fault is planted in, rotated width of a head)
FAMILIES: dict[str, tuple[str, dict[str, Any], tuple[int, ...], int, int]] = {
    "Qwen3.5": ("qwen3_5_text", {**TINY, "num_hidden_layers": 4, "head_dim": 64,
                                 "layer_types": ["linear_attention", "full_attention"] * 2,
                                 "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
                                 "linear_value_head_dim": 16,
                                 "rope_parameters": {"rope_type": "default", "rope_theta": 1e7,
                                                     "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                                                     "mrope_interleaved": True}}, (1, 3), 3, 16),
    "Granite 4": ("granitemoehybrid", {**TINY, "num_hidden_layers": 4, "position_embedding_type": "rope",
                                       "layer_types": ["linear_attention", "full_attention"] * 2,
                                       "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16,
                                       "mamba_chunk_size": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
                                       "shared_intermediate_size": 64,
                                       "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
                  (1, 3), 1, 16),
    "LFM2": ("lfm2", {**TINY, "num_hidden_layers": 4, "layer_types": ["conv", "full_attention"] * 2,
                      "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}, (1, 3), 3, 16),
    "Gemma 3n": ("gemma3n_text", {**TINY, "num_hidden_layers": 5, "head_dim": 16, "sliding_window": 64,
                                  "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
                                  "num_kv_shared_layers": 0, "laurel_rank": 8, "hidden_size_per_layer_input": 16,
                                  "vocab_size_per_layer_input": 160, "intermediate_size": [128] * 5,
                                  "activation_sparsity_pattern": [0.0] * 5,
                                  "rope_parameters": {"sliding_attention": {"rope_type": "default",
                                                                            "rope_theta": 10000.0},
                                                      "full_attention": {"rope_type": "default",
                                                                         "rope_theta": 1000000.0}}},
                 (0, 1, 2, 3, 4), 4, 16),
}

WRITE = r"""
import sys, torch, transformers
model_type, folder, fields = sys.argv[1], sys.argv[2], __import__("json").loads(sys.argv[3])
torch.manual_seed(0)
config = transformers.AutoConfig.for_model(model_type, **fields)
model = transformers.AutoModelForCausalLM.from_config(config)
model.save_pretrained(folder)
"""

EXPORT = r"""
import sys, torch, transformers
folder, out, experts = sys.argv[1], sys.argv[2], sys.argv[3]
# A mixture of experts through batched_mm, as tools/audit_peers.py exports one (grouped_mm does not lower to ONNX):
# "always", or "auto": where the config names num_local_experts
if experts == "auto":
    experts = "always" if transformers.AutoConfig.from_pretrained(folder).to_dict().get("num_local_experts") else ""
moe = {"experts_implementation": "batched_mm"} if experts == "always" else {}
model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **moe).eval()
class Flat(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = model
    def forward(self, input_ids, attention_mask, position_ids):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=False).logits
dyn = torch.export.Dim.DYNAMIC
example = (torch.zeros(1, 8, dtype=torch.int64), torch.ones(1, 8, dtype=torch.int64), torch.arange(8).reshape(1, 8))
with torch.no_grad():
    torch.onnx.export(Flat(), example, out, dynamo=True, external_data=True,
                      dynamic_shapes=({1: dyn}, {1: dyn}, {1: dyn}),
                      input_names=["input_ids", "attention_mask", "position_ids"], output_names=["logits"])
"""


def write_checkpoint(family: str, folder: Path) -> Path:
    """A random checkpoint of ``family`` saved with save_pretrained into ``folder`` (its own process)."""
    import json

    model_type, fields, *_ = FAMILIES[family]
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", WRITE, model_type, str(folder), json.dumps(fields)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0 and (folder / "config.json").is_file(), done.stderr[-3000:]
    return folder


def export(checkpoint: Path, folder: Path, batched_mm: bool | None = None, timeout: int = 900,
           prelude: str = "") -> Path | str:
    """torch.onnx.export (dynamo) of the checkpoint without a cache, in its own process (a dynamo export leaves fake
    tensors in transformers' modules): ``folder``/model.onnx, or the exporter's reason in one line (``reason``).
    ``batched_mm``: the experts through batched_mm always (True), or where the config names num_local_experts (None;
    a composite config, Llama 4's, names them in its text config: say True). ``prelude``: Python run after the
    imports, before the model loads (e.g. transformers' functions replaced by ones the exporter can write).
    """  # noqa: D205
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "model.onnx"
    experts = "always" if batched_mm else "auto" if batched_mm is None else "never"
    head = "import sys, torch, transformers\n"
    script = EXPORT.replace(head, head + prelude + "\n", 1)
    done = subprocess.run([sys.executable, "-c", script, str(checkpoint), str(model), experts], capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    if done.returncode == 0 and model.is_file():
        return model
    return reason(done.stderr, done.returncode)


def reason(stderr: str, code: int) -> str:
    """A failed export or build in one line: torch.onnx's first error of its exception summary (what it could not
    translate), else the last line naming an error.
    """  # noqa: D205
    summary = stderr.split("## Exception summary", 1)
    if len(summary) == 2:
        first = next((line for line in summary[1].splitlines() if "Error" in line), "")
        if first:
            return first.strip()[:400]
    lines = [line for line in stderr.splitlines() if line.strip()]
    found = next((line for line in reversed(lines) if "Error" in line or "error" in line), lines[-1] if lines else "")
    return found.strip()[:400] or f"exit {code}"
