"""A synthetic index (``tree.index_dict``'s shape) with the longest values each column of index.html shows: a
100-character artifact name, a Hugging Face snapshot path as a decoder's weights, a long config path with per-layer
words, an int4 decoder's second figure, TensorRT skipped with its reason, a failed rebuild kept apart, a damaged
folder. index.html must fit it in 1,400 px (``tests/report/test_index_width.py``, ``tools/index_width.py``).
"""  # noqa: D205

from __future__ import annotations

from typing import Any

SNAPSHOT = ("/home/someone/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/"
            "0e9e39f249a16976918f6564b8830bc894c89659")  # fmt: skip
CONFIG = "/home/someone/checkpoints/gemma-3-4b-it-with-a-long-folder-name/config.json"
VERSIONS = {"ropeexport": "0.1.0", "onnxruntime": "1.31.1", "numpy": "2.4.6"}


def _entry(name: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": name, "encoding": "rope", "artifact": "rope", "dtype": "fp32",
                            "graph": "decomposed", "max_positions": 131072, "passed": True, "status": "passed",
                            "path": name,
                            "report": f"{name}/report.html", "worst_max_abs": {"eager": 3.1e-06, "float64": 4.99e-01},
                            "worst_ratio": {"eager": 0.031, "float64": 0.123}, "bytes": {"model": 70923393,
                            "folder": 71176945}, "build_seconds": 1234.5,
                            "origin": {"hf_config": CONFIG}, "versions": VERSIONS,
                            "runtimes": [{"name": "ort", "status": "verified",
                                          "device": "onnxruntime 1.31.1 CPUExecutionProvider"},
                                         {"name": "trt", "status": "skipped", "reason": "TensorRT is not "
                                          "installed (pip install tensorrt-cu12)"}]}  # fmt: skip
    return base | fields


def sample_index() -> dict[str, Any]:
    """The index (module doc): five rows, every column at its longest."""
    decoder = {"artifact": "decoder", "graph": "gqa", "weight_format": "int4 block 128 (accuracy level 4)",
               "worst_max_abs": {"float64": 2.81e-06}, "worst_ratio": {"float64": 0.0093},
               "worst_rel": {"float64": 9.26e-07, "transformers": 1.23e-06},
               "worst_rel_of": "max |float64 logit| of the call (the logit scale)",
               "scenarios": {"passed": 6, "total": 6}, "quantization_cost": {"worst_rel": 3.2e-02},
               "origin": {"weights": f"checkpoint {SNAPSHOT}"},
               "runtimes": [{"name": "ort", "status": "verified",
                             "device": "onnxruntime 1.31.1 CPUExecutionProvider"}]}  # fmt: skip
    layers = {"hf_config": CONFIG, "layers": "0-4, 6-10, 12-16, 18-22, 24-28, 30-33",
              "no_rope_layers": "5, 11, 17, 23, 29"}  # fmt: skip
    return {
        "schema": "ropeexport.index/1", "created": "2026-11-26T01:00:00Z", "path": "/home/someone/out",
        "passed": 3, "failed": 2, "last_build": {"wall_seconds": 1234.5, "jobs": 2}, "versions": VERSIONS,
        "artifacts": [
            _entry("x" * 100),  # the longest name the store takes, and no hyphen to break at
            _entry("meta-llama-3.1-8b-instruct-decoder-l32-h4096-v128256-fp16-gqa-int4-b128", **decoder),
            _entry("gemma-3-4b-it-sliding-rope-fp16-decomposed", origin=layers, dtype="fp16"),
            _entry("bloom-560m-bias-fp16-fused", encoding="alibi", artifact="bias", passed=False, status="failed",
                   failed_rebuild=f"_failed/bloom-560m-bias-fp16-fused ({SNAPSHOT})",
                   worst_ratio={"eager": 1.5, "float64": None}),
            _entry("damaged-artifact", status="unreadable", passed=False, encoding=None, artifact=None, dtype=None,
                   graph=None, max_positions=None, worst_max_abs={}, worst_ratio={}, bytes={"model": 0, "folder": 0},
                   build_seconds=None, runtimes=[], origin={},
                   reason=f"manifest.json: {SNAPSHOT}/model.onnx.data changed since it was written (sha256 differs)"),
        ],
    }  # fmt: skip
