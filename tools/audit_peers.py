"""``ropeexport audit`` on what other tools export: tiny random checkpoints of real schedules, each exported by
onnxruntime-genai's model builder (fp32, CPU), by torch.onnx.export with dynamo (its cache flattened) and with the
TorchScript exporter (opset 17, no cache), audited against its config and
grafted (``rx.graft``, trusting the config where the model's tables imply another schedule), and both models' logits
judged against the float64 recompute of the whole decoder from the checkpoint at positions 0..7, at max_positions - 1
and on both sides of original_max_position_embeddings (``audit.prove``).

    python tools/audit_peers.py --work /tmp/audit-peers --out tools/figures

Writes ``audit-peers.json`` and ``audit-peers.md`` under ``--out``: per schedule x source, the sites found, the
verdict, the findings, the worst table error against float64 over every probed call length, and the worst logit error
of the whole model before and after the graft. Checkpoints: transformers
model classes with random weights (2 layers, hidden 64, 4 / 2 heads, head_dim 16), saved with save_pretrained, real
schedule parameters and lengths; nothing is downloaded. Each export runs in its own process (a dynamo export leaves
fake tensors in transformers' modules). A source that fails to export is recorded with its reason. A mixture of
experts (gpt-oss) is loaded with ``experts_implementation="batched_mm"``, a kernel transformers ships: its default
(grouped_mm) exports with neither exporter (dynamo: no ONNX function for transformers.grouped_mm_fallback; TorchScript:
aten::histc not in opset 17), and its eager loop over the experts hit is data-dependent (torch.export refuses it).

The 2026 peers, when asked (``--sources``; ``tools/peer_exports.py``): mobius-onnx 0.1.0 (``mobius build --config
CKPT OUT``, float32) and optimum-onnx 0.1.0 on transformers 4.57 (its own venv, ``--optimum-python``; the
checkpoint's config said in the 4.x form). Graft's proof then also records the original against the grafted model as
users run them (each its own cache from its own prefill to the far end: ``use``), and the audit's effects can be
limited to some schedules (``--effects``: a 131072-position prefill is minutes on 2 CPUs), and graft's own two such
prefills skipped (``--no-use``, said in each row: for a precision finding the audit's effect is that comparison).
``--name`` writes
another figure (``audit-peers-2026``: ``tools/peers_table.py`` renders its page), ``--merge`` keeps the rows of an
earlier run of that figure that this run does not redo:

    python tools/audit_peers.py --work /tmp/ap26 --out tools/figures --name audit-peers-2026 --merge \
        --sources "mobius-onnx 0.1.0" "optimum-onnx 0.1.0 (transformers 4.57)" \
        --optimum-python /work/optimum-venv/bin/python --schedules "yarn x4 + q/k norms (Qwen3)"
"""  # noqa: D205

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from peer_exports import MOBIUS, OPTIMUM, legacy_checkpoint, mobius_command, optimum_command  # noqa: E402

# vocab_size differs from intermediate_size on purpose: onnxruntime-genai 0.18's builder takes any Linear with
# vocab_size outputs for the LM head (has_lm_head), so a model whose MLP is as wide as its vocabulary gets its logits
# from layer 0's MLP input. initializer_range 0.1 (not 0.02) makes the attention sharp enough for an angle error to
# show in the logits.
TINY = {"vocab_size": 160, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "initializer_range": 0.1}  # fmt: skip
SCHEDULES: dict[str, tuple[str, dict[str, Any]]] = {
    "default (Llama 2)": ("llama", {"max_position_embeddings": 4096, "rope_theta": 10000.0}),
    "linear x4": ("llama", {"max_position_embeddings": 16384, "rope_theta": 10000.0,
                            "rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    "llama3 (Llama 3.1)": ("llama", {"max_position_embeddings": 131072, "rope_theta": 500000.0,
                                     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 8192}}),
    "yarn x4 (Qwen2.5)": ("qwen2", {"max_position_embeddings": 131072, "rope_theta": 1000000.0,
                                    "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 32768}}),
    "longrope (Phi-3)": ("phi3", {"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                                  "rope_theta": 10000.0, "pad_token_id": 0,
                                  "rope_scaling": {"type": "longrope",
                                                   "short_factor": [1.0, 1.02, 1.05, 1.1, 1.2, 1.4, 1.7, 2.0],
                                                   "long_factor": [1.0, 1.5, 2.5, 4.0, 8.0, 16.0, 24.0, 32.0]}}),
    # BLOOM's MLP is 4 x hidden whatever intermediate_size says (and GPT-J's, n_inner being null): the field is set to
    # what the model builds, as mobius-onnx reads it (TINY's 128 made its weights mismatch the checkpoint's)
    "alibi (BLOOM, 12 heads)": ("bloom", {"hidden_size": 96, "num_attention_heads": 12, "num_key_value_heads": 12,
                                          "intermediate_size": 384}),
    # The 2026 families (Qwen3, Gemma 2 and SmolLM3 with layer types; SmolLM3's every 4th layer without RoPE):
    "yarn x4 + q/k norms (Qwen3)": ("qwen3", {"max_position_embeddings": 131072, "head_dim": 16,
                                             "rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                                                 "rope_theta": 1000000.0,
                                                                 "original_max_position_embeddings": 32768}}),
    "default + soft caps, windows (Gemma 2)": ("gemma2", {"max_position_embeddings": 8192, "head_dim": 16,
                                                         "query_pre_attn_scalar": 16, "sliding_window": 64,
                                                         "pad_token_id": 0}),
    "no RoPE on every 4th layer (SmolLM3)": ("smollm3", {"max_position_embeddings": 65536, "num_hidden_layers": 4,
                                                        "pad_token_id": 0}),
    # Per layer: two encodings (Gemma 3's sliding layers at theta 10000 unscaled, its global ones at 1e6 linear x8)
    "two encodings: sliding 1e4, global 1e6 linear x8 (Gemma 3)": (
        "gemma3_text", {"max_position_embeddings": 8192, "head_dim": 16, "query_pre_attn_scalar": 16,
                        "sliding_window": 64, "pad_token_id": 0, "num_hidden_layers": 4,
                        "layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                                        "sliding_attention"],
                        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                            "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                               "rope_theta": 1000000.0}}}),
    # gpt-oss: YaRN x32 untruncated (truncate: false) over 4096 positions, sinks, alternating 128-token windows, a
    # mixture of 4 experts (2 per token) in place of the MLP; head_dim 16 (real: 64)
    "yarn x32 untruncated, sinks, windows, experts (gpt-oss)": (
        "gpt_oss", {"max_position_embeddings": 131072, "head_dim": 16, "sliding_window": 128, "pad_token_id": 0,
                    "num_local_experts": 4, "num_experts_per_tok": 2,
                    "layer_types": ["sliding_attention", "full_attention"],
                    "rope_parameters": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                        "truncate": False, "rope_theta": 150000.0,
                                        "original_max_position_embeddings": 4096}}),
    # Phi-4-mini's shape: LongRoPE on a partial rotary width (0.75 of head_dim 16: 12 channels, 6 factors a list)
    "longrope, partial rotary 0.75 (Phi-4-mini)": (
        "phi3", {"max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
                 "partial_rotary_factor": 0.75, "pad_token_id": 0,
                 "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0, 1.05, 1.1, 1.3, 1.6, 2.0],
                                  "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]}}),
    # Issue 39's families (tests/audits/families.py plants their peers' bugs), each at 8192 positions: Gemma 4's
    # sliding layers (head_dim 16, theta 1e4) and proportional global ones (their own head_dim 32, a quarter of the
    # pairs real, theta 1e6); Cohere 2 and EXAONE 4 with RoPE on the local layers only (every 4th global, NoPE);
    # GLM-4's interleaved pairs on half of each head; Ministral 3's YaRN x4 over 2048 with the query factor
    # (llama_4_scaling_beta 0.1: a step every 2048 positions); OLMo 3's YaRN on its full layer only
    "proportional global layers, own head_dim (Gemma 4)": (
        "gemma4_text", {"max_position_embeddings": 8192, "num_hidden_layers": 4, "head_dim": 16, "global_head_dim": 32,
                        "sliding_window": 64, "pad_token_id": 0, "hidden_size_per_layer_input": 0,
                        "layer_types": ["sliding_attention", "full_attention"] * 2,
                        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                            "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                                                               "partial_rotary_factor": 0.25}}}),
    "interleaved, NoPE global layers (Cohere 2)": ("cohere2", {"max_position_embeddings": 8192,
                                                              "num_hidden_layers": 4, "sliding_window": 64,
                                                              "pad_token_id": 0}),
    "NoPE global layers, LLLG (EXAONE 4)": ("exaone4", {"max_position_embeddings": 8192, "num_hidden_layers": 4,
                                                       "sliding_window": 64, "pad_token_id": 0}),
    "interleaved, partial rotary 0.5 (GLM-4)": ("glm4", {"max_position_embeddings": 8192, "head_dim": 16,
                                                        "pad_token_id": 0}),
    "yarn x4 + query factor (Ministral 3)": (
        "ministral3", {"max_position_embeddings": 8192, "head_dim": 16, "pad_token_id": 0,
                       "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                                           "original_max_position_embeddings": 2048, "beta_fast": 32.0,
                                           "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                           "llama_4_scaling_beta": 0.1}}),
    "yarn x4 on full layers only (OLMo 3)": ("olmo3", {"max_position_embeddings": 8192, "num_hidden_layers": 4,
                                                      "sliding_window": 64, "rope_theta": 10000.0, "pad_token_id": 0,
                                                      "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                                       "original_max_position_embeddings": 2048}}),
    # The other families ropeexport and mobius-onnx both build, at their real parameters: Mistral 7B v0.1 (4096-token
    # windows over 32768), Pythia (a quarter of each head rotated, NeoX pairing), GPT-J (rotary_dim 64 of 256 there:
    # 8 of 16 here, pairs interleaved)
    "default, 4096-token windows (Mistral 7B v0.1)": ("mistral", {"max_position_embeddings": 32768,
                                                                  "rope_theta": 10000.0, "sliding_window": 4096}),
    # (neither has grouped keys: num_key_value_heads is set to the head count their attention builds, as BLOOM's)
    "default, partial rotary 0.25 (Pythia, GPT-NeoX)": ("gpt_neox", {"max_position_embeddings": 2048,
                                                                     "rotary_pct": 0.25, "rotary_emb_base": 10000,
                                                                     "num_key_value_heads": 4}),
    "default, rotary_dim 8 of 16 interleaved (GPT-J)": ("gptj", {"n_positions": 2048, "rotary_dim": 8,
                                                                 "intermediate_size": 256,
                                                                 "num_key_value_heads": 4}),
}  # fmt: skip

_EXPORT = r"""
import sys, torch, transformers
from transformers import DynamicCache
folder, out = sys.argv[1], sys.argv[2]
# A mixture of experts: transformers' default kernel (grouped_mm) is the custom op transformers.grouped_mm_fallback,
# which torch.onnx.export cannot lower ("No ONNX function found"), and its eager loop over the experts hit is
# data-dependent (torch.export refuses it); batched_mm (every token through its k experts, gathered) exports.
moe = {"experts_implementation": "batched_mm"} if "num_local_experts" in transformers.AutoConfig.from_pretrained(
    folder).to_dict() else {}
model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **moe).eval()
cfg = model.config
n, d = cfg.num_hidden_layers, cfg.hidden_size // cfg.num_attention_heads
kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
class Flat(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = model
    def forward(self, input_ids, attention_mask, position_ids, past):
        cache = DynamicCache(config=cfg)
        for i in range(n):
            cache.update(past[2 * i], past[2 * i + 1], i)
        o = self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                       past_key_values=cache, use_cache=True)
        return o.logits
dyn = torch.export.Dim.DYNAMIC
past = [torch.zeros(1, kv, 5, d) for _ in range(2 * n)]
example = (torch.zeros(1, 3, dtype=torch.int64), torch.ones(1, 8, dtype=torch.int64),
           torch.arange(5, 8).reshape(1, 3), past)
names = [f"past_key_values.{i}.{t}" for i in range(n) for t in ("key", "value")]
with torch.no_grad():
    torch.onnx.export(Flat(), example, out, dynamo=True, external_data=True,
                      dynamic_shapes=({1: dyn}, {1: dyn}, {1: dyn}, [{2: dyn}] * (2 * n)),
                      input_names=["input_ids", "attention_mask", "position_ids", *names], output_names=["logits"])
"""


_TORCHSCRIPT = r"""
import sys, torch, transformers
folder, out = sys.argv[1], sys.argv[2]
# A mixture of experts: grouped_mm's routing counts tokens with aten::histc, which opset 17 does not have
moe = {"experts_implementation": "batched_mm"} if "num_local_experts" in transformers.AutoConfig.from_pretrained(
    folder).to_dict() else {}
model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **moe).eval()
class Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = model
    def forward(self, input_ids, attention_mask, position_ids):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=False).logits
example = (torch.zeros(1, 8, dtype=torch.int64), torch.ones(1, 8, dtype=torch.int64), torch.arange(8).reshape(1, 8))
axes = {"input_ids": {1: "s"}, "attention_mask": {1: "s"}, "position_ids": {1: "s"}}
with torch.no_grad():
    torch.onnx.export(Plain(), example, out, dynamo=False, opset_version=17, dynamic_axes=axes,
                      input_names=["input_ids", "attention_mask", "position_ids"], output_names=["logits"])
"""
SOURCES = ("onnxruntime-genai builder", "torch.onnx.export (dynamo)", "torch.onnx.export (TorchScript)")
# The 2026 peers (tools/peer_exports.py), run only when asked (--sources): CI installs neither
ALL_SOURCES = (*SOURCES, MOBIUS, OPTIMUM)


def checkpoint(folder: Path, model_type: str, fields: dict[str, Any]) -> Path:
    """A random tiny model of the schedule saved with save_pretrained (its config.json is what is audited against)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models

    if (folder / "tokenizer.json").is_file():
        return folder
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **(TINY | fields), bos_token_id=1, eos_token_id=2)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    # a tokenizer, as the builder wants one beside the weights: a word-level vocabulary of the model's size
    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(TINY["vocab_size"] - 3)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                         eos_token="</s>").save_pretrained(folder)  # fmt: skip
    return folder


def export(source: str, ckpt: Path, out: Path, tools: dict[str, str | None] | None = None,
           ) -> tuple[Path | None, str | None, float]:  # fmt: skip
    """(model path, failure reason, seconds) of one source's export; ``tools``: the mobius command and the optimum
    environment's python (``peer_exports``), where given.
    """  # noqa: D205
    tools = tools or {}
    out.mkdir(parents=True, exist_ok=True)
    model = out / "model.onnx"
    if source == "onnxruntime-genai builder":
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out),
                   "-p", "fp32", "-e", "cpu", "-c", str(out / "cache")]  # fmt: skip
    elif source == MOBIUS:
        given = mobius_command(ckpt, out, tools.get("mobius"))
        if isinstance(given, str):
            return None, given, 0.0
        command = given
    elif source == OPTIMUM:
        given = optimum_command(legacy_checkpoint(ckpt, out.parent / f"{out.name}-legacy"), out, tools.get("optimum"))
        if isinstance(given, str):
            return None, given, 0.0
        command = given
    else:
        script = _EXPORT if source == SOURCES[1] else _TORCHSCRIPT
        command = [sys.executable, "-c", script, str(ckpt), str(model)]
    done_mark = out / "exported.json"  # written after a whole export: a later run with the same --work reuses it
    if model.is_file() and done_mark.is_file():
        return model, None, float(json.loads(done_mark.read_text())["seconds"])
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    seconds = round(time.perf_counter() - start, 1)
    if done.returncode != 0 or not model.is_file():
        return None, failure(done.stderr or done.stdout, done.returncode), seconds
    done_mark.write_text(json.dumps({"command": command, "seconds": seconds}) + "\n")
    return model, None, seconds


def failure(text: str, code: int) -> str:
    """An export's reason in one line: the exception's last line (the last line naming an error or exception;
    else the last line; else the exit code).
    """  # noqa: D205
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Exit)\b|^Error", line)]
    return ((named or lines or [f"exit {code}"])[-1])[:300]


def graft_row(model: Path, ckpt: Path, result: Any, folder: Path) -> dict[str, Any]:
    """``rx.graft`` of an audited model (trusting the config where the model's tables imply another schedule), and the
    whole-decoder proof of the model before and after (an exact model: of itself).
    """  # noqa: D205
    import shutil

    import ropeexport as rx
    from ropeexport.audits.graft import PRECISION
    from ropeexport.audits.prove import DecoderProof
    from ropeexport.errors import SpecError

    config = ckpt / "config.json"
    if result.verdict == "exact":
        proof = DecoderProof(config, ckpt, model).run({"original": model})
        return {"skipped": "exact already", "decoder": decoder_row(proof)}
    shutil.rmtree(folder, ignore_errors=True)
    implied = {f["name"] for s in result.sites for f in s["findings"]} - PRECISION
    trust = "config" if implied else "model"
    try:
        done = rx.graft(model, config, folder / "model.onnx", trust=trust, checkpoint=ckpt)
    except SpecError as exc:
        return {"refused": str(exc)}
    except Exception as exc:  # noqa: BLE001 - recorded: one row's crash is a result, the others still run
        return {"refused": f"graft failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    return {"trust": trust, "proven": done.proven, "verdict": done.verdict, "text": done.text,
            "after": done.after.verdict,
            "short_call_relative": done.short_call["relative"], "tables": len(done.replaced),
            "decoder": decoder_row(done.decoder), "use": use_row((done.decoder or {}).get("use"))}  # fmt: skip


def use_row(use: dict[str, Any] | None) -> dict[str, Any]:
    """graft's record of the original against the grafted model as users run them (``effect.between``: each its own
    cache from its own prefill to the far end): the worst window, and the worst of the draws at the far end.
    """  # noqa: D205
    if not use or "relative" not in use:
        return {"not_measured": (use or {}).get("not_measured", "no checkpoint")}
    far = [p["relative"] for p in use.get("places", []) if p["name"].startswith("the far end")]
    return {"worst": use["relative"], "worst_at": use.get("at"), "far_end": max(far, default=None),
            "how": use.get("how"), "windows": use.get("windows"), **({"short": use["short"]} if "short" in use else {})}


def decoder_row(proof: dict[str, Any]) -> dict[str, Any]:
    """Per model: the worst logit error against float64 over the calls run, the call it was on, pass / fail (passed:
    no call run failed; ``verdict`` says whether some were not run: ``audit.prove``).
    """  # noqa: D205
    out: dict[str, Any] = {"calls": [c["call"] for c in proof["calls"]]}
    for label, said in proof["verdict"].items():
        passed = said["verdict"] != "not proven"
        run = [(c["models"][label]["rel"], c["call"]) for c in proof["calls"] if "rel" in c["models"][label]]
        worst = max(run, default=(None, None))
        not_run = sorted({c["models"][label]["not_run"] for c in proof["calls"] if "not_run" in c["models"][label]})
        out[label] = {"worst_rel": worst[0], "worst_call": worst[1], "passed": passed, "verdict": said["verdict"],
                      "calls_run": len(run), "not_run": not_run,
                      "per_call": {call: rel for rel, call in run}}  # fmt: skip
    if proof.get("outside_encoding"):  # both models miss float64 alike: where the grafted one first departs
        out["outside_encoding"] = True
        out["first_difference"] = proof.get("first_difference")
    return out


def far_end(effect: dict[str, Any] | None) -> float | None:
    """The worst of an effect's draws at the far end of the context (``runs.plan``'s last places), or None."""
    far = [p["relative"] for p in (effect or {}).get("places", []) if p["name"].startswith("the far end")]
    return max(far, default=None)


def _effect(found: dict[str, Any]) -> str:
    """A finding with its effect on the logits: ``float32 angles .. (logits 1e-06 of the scale)``."""
    effect = found.get("effect") or {}
    if "relative" in effect:
        return f"{found['text']} (effect {effect['relative']:.2g} of the logit scale at position {effect['position']})"
    return f"{found['text']} (effect not measured: {effect.get('not_measured', '')})"


def _logits(model: dict[str, Any]) -> str:
    """``2.1e-06 (last position)``, FAIL marked, why calls were not run said."""
    if model["worst_rel"] is None:
        return "not run: " + "; ".join(model["not_run"])
    text = f"{model['worst_rel']:.2g} ({model['worst_call']}){'' if model['passed'] else ' FAIL'}"
    return text + (f"; far calls not run: {'; '.join(model['not_run'])}" if model["not_run"] else "")


def audit_row(row: dict[str, Any], model: Path, ckpt: Path, folder: Path, effects: bool = True) -> dict[str, Any]:
    """``row`` with the audit of ``model`` against its checkpoint's config (each finding's effect measured unless
    ``effects`` is False), and its graft (``graft_row``).
    """  # noqa: D205
    import time

    import ropeexport as rx

    name, source = row["schedule"], row["source"]
    start = time.perf_counter()
    try:
        result = rx.audit(model, ckpt / "config.json", effects=effects)
    except Exception as exc:  # noqa: BLE001 - recorded: a site audit cannot read is a result too
        print(f"{name} / {source}: audit failed: {exc}", flush=True)
        return row | {"error": f"audit: {exc}"}
    row["audit_s"] = round(time.perf_counter() - start, 1)
    worst = max((p["max_abs"] for s in result.sites for p in s["probes"]), default=None)
    row = row | {"verdict": result.verdict, "sites": [s["kind"] for s in result.sites], "max_abs": worst,
                 "site_layers": [s.get("layers") for s in result.sites],
                 "checked_as": [s.get("checked_as") for s in result.sites],
                 "effects": [{"name": f["name"], "text": f["text"], "effect": f.get("effect"),
                              "far_end": far_end(f.get("effect")), "level": (f.get("severity") or {}).get("level")}
                             for f in result.findings],
                 "findings": sorted({f["text"] for s in result.sites for f in s["findings"]}),
                 "finding_names": sorted({f["name"] for s in result.sites for f in s["findings"]}),
                 "dtype": sorted({s["dtype"] for s in result.sites if s["dtype"]})}  # fmt: skip
    row["graft"] = graft_row(model, ckpt, result, folder)
    print(f"{name} / {source}: {result.verdict}, worst {worst}; graft: {row['graft']}", flush=True)
    return row


def plant_slopes(model: Path, ckpt: Path, folder: Path) -> Path:
    """A copy of an exported ALiBi model whose slopes (the float constant with one value per head) follow the
    power-of-two formula 2^(-8h/n) whatever n: the classic mistake for 12 heads.
    """  # noqa: D205
    import numpy as np
    import onnx_ir as ir

    graph = ir.load(model)
    config = json.loads((ckpt / "config.json").read_text())
    heads = int(config.get("n_head") or config["num_attention_heads"])
    naive = np.array([2.0 ** (-8.0 * h / heads) for h in range(1, heads + 1)])
    for value in graph.graph.initializers.values():
        array = value.const_value.numpy()
        if array.size == heads and np.issubdtype(array.dtype, np.floating):
            array = (np.sign(array) * naive.reshape(array.shape)).astype(array.dtype)
        value.const_value = ir.tensor(array, name=value.name)  # read now: saved elsewhere
    for node in graph.graph:
        tensor = node.attributes["value"].value if node.op_type == "Constant" and "value" in node.attributes else None
        if tensor is not None and tensor.size == heads and np.issubdtype(tensor.numpy().dtype, np.floating):
            planted = (np.sign(tensor.numpy()) * naive.reshape(tensor.numpy().shape)).astype(tensor.numpy().dtype)
            node.attributes["value"] = ir.AttrTensor("value", ir.tensor(planted))
    folder.mkdir(parents=True, exist_ok=True)
    ir.save(graph, folder / "model.onnx", external_data="model.onnx.data")
    return folder / "model.onnx"


def plant_sincos_swap(model: Path, folder: Path) -> Path:
    """A copy of an exported GPT-J model whose one sin | cos table (``embed_positions``: the float constant [P, r]
    whose row 0 is zero in its first half, as ``audits.patterns.split_table`` reads it) is stored cos | sin: the
    graph still splits it sin then cos, so every layer's rotation takes cos for sin.
    """  # noqa: D205
    import numpy as np
    import onnx_ir as ir

    def swapped(array: np.ndarray) -> np.ndarray | None:
        half = array.shape[-1] // 2 if array.ndim == 2 else 0
        if not half or not np.issubdtype(array.dtype, np.floating) or np.any(array[0, :half]) or array.shape[0] < 2:
            return None
        return np.roll(array, half, axis=1)

    graph, planted = ir.load(model), 0
    for value in graph.graph.initializers.values():
        array = value.const_value.numpy()
        moved = swapped(array)
        value.const_value = ir.tensor(array if moved is None else moved, name=value.name)  # read now: saved elsewhere
        planted += moved is not None
    for node in graph.graph:
        tensor = node.attributes["value"].value if node.op_type == "Constant" and "value" in node.attributes else None
        moved = None if tensor is None else swapped(tensor.numpy())
        if moved is not None:
            node.attributes["value"] = ir.AttrTensor("value", ir.tensor(moved))
            planted += 1
    if not planted:
        raise ValueError(f"{model}: no sin | cos table (a float [P, r] constant whose row 0 starts with zeros)")
    folder.mkdir(parents=True, exist_ok=True)
    ir.save(graph, folder / "model.onnx", external_data="model.onnx.data")
    return folder / "model.onnx"


def spans(layers: list[int]) -> str:
    """Layer indices as runs (``hf.spans``)."""
    from ropeexport.hf import spans as runs

    return runs(layers)


def main(argv: list[str] | None = None) -> int:
    """Checkpoints, exports, audits; write the table (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="checkpoints and exports go here (reused when present)")
    parser.add_argument("--out", required=True, help="folder for NAME.json and NAME.md")
    parser.add_argument("--schedules", nargs="+", choices=list(SCHEDULES), default=list(SCHEDULES))
    parser.add_argument("--sources", nargs="+", choices=ALL_SOURCES, default=list(SOURCES),
                        help="the exporters run (default: the builder, dynamo and TorchScript)")
    parser.add_argument("--mobius", help="the mobius executable to run (default: python -m mobius, if installed)")
    parser.add_argument("--optimum-python", help="the python of a venv holding optimum-onnx 0.1.0")
    parser.add_argument("--effects", nargs="*", choices=list(SCHEDULES), default=None,
                        help="the schedules whose findings' effects the audit measures (default: every one; none "
                             "given: none; graft's proof still runs both models as users run them)")
    parser.add_argument("--no-use", action="store_true",
                        help="graft's proof does not run the two models as users run them (two more prefills to the "
                             "far end; the audit's effect of a precision finding is the same comparison): recorded "
                             "as not run")
    parser.add_argument("--name", default="audit-peers", help="the figure's file stem (default: audit-peers)")
    parser.add_argument("--merge", action="store_true",
                        help="keep NAME.json's rows of the schedule x source pairs not run now (a table filled in "
                             "several runs)")
    args = parser.parse_args(argv)
    if args.no_use:  # graft's ``between`` (audits/effect.py), replaced for this run only: said in each row
        import ropeexport.audits.graft as grafting

        grafting.between = lambda *_, **__: {"not_measured": "not run (--no-use: the audit's effect measures the "
                                                              "same runs)"}  # fmt: skip
    work, rows = Path(args.work), []
    tools = {"mobius": args.mobius, "optimum": args.optimum_python}
    measured = set(SCHEDULES if args.effects is None else args.effects)
    load_before = [round(x, 2) for x in os.getloadavg()]
    for name in args.schedules:
        i = list(SCHEDULES).index(name)  # a schedule's folder is the same whichever others are asked for
        model_type, fields = SCHEDULES[name]
        ckpt = checkpoint(work / f"s{i}" / "checkpoint", model_type, fields)
        for source in args.sources:
            j = ALL_SOURCES.index(source)  # a source's folder too
            model, error, seconds = export(source, ckpt, work / f"s{i}" / f"x{j}", tools)
            row: dict[str, Any] = {"schedule": name, "source": source, "export_s": seconds}
            if model is None:
                rows.append(row | {"error": error})
                print(f"{name} / {source}: export failed: {error}", flush=True)
                continue
            variants = [(source, model)]
            if model_type == "bloom":  # the mistake ALiBi exporters make for a head count that is not a power of two
                variants.append(
                    (f"{source}, power-of-two slopes planted", plant_slopes(model, ckpt, work / f"s{i}" / f"x{j}p"))
                )
            if model_type == "gptj" and source == OPTIMUM:  # its one sin | cos table, stored the other way round
                swapped = plant_sincos_swap(model, work / f"s{i}" / f"x{j}s")
                variants.append((f"{source}, sin and cos halves swapped planted", swapped))
            for label, path in variants:
                folder = work / f"s{i}" / f"{path.parent.name}-grafted"
                rows.append(audit_row(row | {"source": label}, path, ckpt, folder, name in measured))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python tools/audit_peers.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    rows = [r | {"command": command} for r in rows]  # the run each row came from (--merge keeps rows of several)
    commands = [command]
    lock = open(out / f".{args.name}.lock", "w")  # noqa: SIM115 - held until written: runs merging at once wait
    fcntl.flock(lock, fcntl.LOCK_EX)
    if args.merge and (out / f"{args.name}.json").is_file():
        before = json.loads((out / f"{args.name}.json").read_text())
        done = {(r["schedule"], r["source"]) for r in rows}
        kept = [r for r in before["rows"] if (r["schedule"], r["source"]) not in done]
        rows = sorted(kept + rows, key=_order)
        commands = [c for c in before.get("commands", [before.get("command")]) if c] + commands
    record = {"command": commands[-1], "commands": commands, "rows": rows,
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
              "load_average": {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]}}  # fmt: skip
    (out / f"{args.name}.json").write_text(json.dumps(record, indent=2) + "\n")
    if args.name != "audit-peers":  # the 2026 page's table (tools/peers_table.py)
        from peers_table import render

        (out / f"{args.name}.md").write_text(render(record))
        return 0
    lines = ["# ropeexport audit on models other tools exported", "", f"`{command}`; tiny random checkpoints "
             "(2 layers, SmolLM3 and Gemma 3 4; head_dim 16) of each schedule's real parameters and lengths; sites: "
             "each with the encoding it was checked as and the layers whose nodes read it; tables = max |cos/sin - "
             "float64| over every position of every probed call length; effect: max |logits - logits with the "
             "finding's sites repaired| / max |logit| on 8 tokens ending where it is worst; logits = max |logit - "
             "float64 recompute of the whole decoder| / max |float64 logit|, the worst of the calls (positions 0..7, "
             "the last at max_positions - 1, L = original and original + 1), before -> after the graft (tolerance "
             "1e-4).", "",
             "| schedule | source | sites (their layers) | verdict | tables | findings (effect) | graft "
             "| logits before -> after |",
             "|---|---|---|---|---:|---|---|---|"]  # fmt: skip
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['schedule']} | {r['source']} | | not audited | | {r['error']} | | |")
            continue
        kinds = ", ".join(sorted(set(r["sites"])))
        layered = [f"{'/'.join(c or []) or 'all'}: {spans(ls) if ls else 'not told'}"
                   for ls, c in zip(r.get("site_layers", []), r.get("checked_as", []), strict=False)]  # fmt: skip
        kinds += f" ({'; '.join(layered)})" if layered else ""
        found = "<br>".join(_effect(e) for e in r.get("effects", [])) or "none"
        g = r["graft"]
        if "refused" in g:
            grafted = f"refused: {g['refused']}"
        elif "skipped" in g:
            grafted = g["skipped"]
        else:
            grafted = (
                f"{g['tables']} site value(s) replaced, audit after: {g['after']}, short call vs original "
                f"{g['short_call_relative']:.1g} (trust {g['trust']}): {g['text']}"
            )
        logits = " -> ".join(_logits(g.get("decoder", {}).get(label)) for label in ("original", "grafted")
                             if label in g.get("decoder", {}))  # fmt: skip
        lines.append(f"| {r['schedule']} | {r['source']} | {kinds} | {r['verdict']} | {r['max_abs']:.2g} | {found} "
                     f"| {grafted} | {logits} |")  # fmt: skip
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    return 0


def _order(row: dict[str, Any]) -> tuple[int, int, str]:
    """A row's place in the table: its schedule's, then its source's, then planted variants after."""
    source = next((k for k, s in enumerate(ALL_SOURCES) if row["source"].startswith(s)), len(ALL_SOURCES))
    return list(SCHEDULES).index(row["schedule"]), source, row["source"]


if __name__ == "__main__":
    raise SystemExit(main())
