"""Issue 43, item 14: a tiny Phi-3 LongRoPE export of onnxruntime-genai's builder against transformers' own model.

Is the builder's export wrong, or ropeexport's recompute (graft --checkpoint said "NOT proven")?

For each tiny random checkpoint (``tests.decoder.tiny``: weights spread, std ~0.2, so a wrong operation shows; a
word-level tokenizer beside them, as the builder wants one) the builder exports fp32 for the CPU, and its model runs
in ONNX Runtime on 8 tokens at positions 0..7 with an empty cache; transformers' own model of the checkpoint runs the
same ids in float64 (eager attention). Printed: max |logit difference| / max |logit| per checkpoint, and the tensor the
builder's lm_head MatMul reads (the final norm's output in a right export). ropeexport's own decoder of the same
checkpoint is compared with transformers by ``ropeexport build --checkpoint DIR --artifact decoder`` (its report's
worst_rel_transformers).

Run::

    python tools/builder_vs_transformers.py WORK_DIR [phi3-longrope-d16 llama-d16 ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
IDS = [1, 5, 9, 17, 33, 40, 61, 77]


def _checkpoint(work: Path, name: str) -> Path:
    import transformers
    from tokenizers import Tokenizer, models

    from tests.decoder.tiny import checkpoint

    folder = checkpoint(work / name, name)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(vocab - 3)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                         eos_token="</s>").save_pretrained(folder)  # fmt: skip
    return folder


def _builder_logits(folder: Path, config: dict) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = np.array([IDS], np.int64)
    head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    feed: dict[str, np.ndarray] = {}
    for value in session.get_inputs():
        if value.name == "input_ids":
            feed[value.name] = ids
        elif value.name == "attention_mask":
            feed[value.name] = np.ones_like(ids)
        elif value.name == "position_ids":
            feed[value.name] = np.arange(len(IDS), dtype=np.int64)[None]
        elif value.name.startswith("past_key_values"):  # an empty cache: [b, kv heads, 0, head_dim]
            feed[value.name] = np.zeros([1, config["num_key_value_heads"], 0, head], np.float32)
    return np.asarray(session.run(["logits"], feed)[0], np.float64)


def main(argv: list[str]) -> int:
    """Export, run and compare each checkpoint named (module doc)."""
    import torch
    import transformers

    work, names = Path(argv[0]), argv[1:] or ["phi3-longrope-d16", "llama-d16"]
    for name in names:
        ckpt = _checkpoint(work, name)
        out = work / f"og-{name}"
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out), "-p",
                   "fp32", "-e", "cpu", "-c", str(work / f"cache-{name}")]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True)
        config = json.loads((ckpt / "config.json").read_text())
        got = _builder_logits(out, config)
        model = transformers.AutoModelForCausalLM.from_pretrained(ckpt, attn_implementation="eager",
                                                                  dtype=torch.float64)  # fmt: skip
        with torch.no_grad():
            ref = model(torch.tensor([IDS])).logits.numpy()
        print(f"{name}: builder fp32 vs transformers float64, {len(IDS)} tokens at positions 0..{len(IDS) - 1}: "
              f"max |d| / max |logit| = {np.abs(got - ref).max() / np.abs(ref).max():.3e}")
        print(f"  the builder's logits are computed from: {_head_input(out)}")
    return 0


def _head_input(folder: Path) -> str:
    """The tensor the builder's lm_head MatMul reads (it should be the final norm's output)."""
    import onnx

    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    made = {o: node for node in graph.node for o in node.output}
    head = made["logits"]
    while head.op_type != "MatMul" and head.input:  # through a Cast or a Reshape, if any
        head = made[head.input[0]]
    return f"{head.input[0]!r} (the {head.name} node's first input)"




if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
