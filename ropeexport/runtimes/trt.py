"""TensorRT runner, built with Polygraphy's loaders (NVIDIA's well-kept path from ONNX to an engine).

Runs where TensorRT and a CUDA GPU are present. Elsewhere ``TrtRunner(...)`` raises RuntimeUnavailable with the
reason, so a build reports ``trt: skipped: <reason>`` and verifies on the other runtimes.

Optimization profiles come from the artifact's symbolic dims: ``batch`` 1 / 1 / 16 (min / opt / max), sequence dims
1 / min(512, max_positions) / max_positions, capped at 8192 for q_len and k_len (a [b, heads, q, k] output at 131072^2
would not fit any GPU). Precision follows the model's dtype; with ``strict_types`` the layers keep the precision the
graph states. With ``keep_fp32`` (the default) the layers that read the cos/sin tables or compute angles (node names
holding ``cos``, ``sin``, ``table``, ``rows``, ``angle``, ``dyn_``, ``slopes``) stay in fp32 whenever the builder may
reduce precision, since an fp16 angle is off by whole radians past position 2048. The serialized engine is saved
with the TensorRT version and GPU name that built it, and loading it under another version or GPU is refused. A
timing cache per TensorRT version and GPU (``~/.cache/ropeexport/``) makes rebuilds fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ropeexport.errors import RuntimeUnavailable, SpecError
from ropeexport.runtimes.base import Runner

ENGINE_FILE = "model.engine"
FP32_LAYER_KEYS = ("cos", "sin", "table", "rows", "angle", "dyn_", "slopes")
CACHE_DIR = Path.home() / ".cache" / "ropeexport"
SEQ_OPT = 512
PAIR_DIM_CAP = 8192  # q_len / k_len maximum in a profile: [b, heads, q, k] outputs grow with its square
BATCH = (1, 1, 16)


def _tensorrt() -> Any:
    try:
        import tensorrt as trt
    except ImportError:
        raise RuntimeUnavailable(
            "TensorRT is not installed (it needs an NVIDIA GPU host: pip install 'ropeexport[gpu]')"
        ) from None
    return trt


def _gpu_name() -> str:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        raise RuntimeUnavailable("no CUDA GPU: torch is not installed") from None
    if not torch.cuda.is_available():
        raise RuntimeUnavailable("no CUDA GPU on this machine")
    return torch.cuda.get_device_name(0)


def profile_shapes(model: onnx.ModelProto, max_positions: int) -> dict[str, tuple[list[int], list[int], list[int]]]:
    """(min, opt, max) shape of every input from its symbolic dims (module docstring for the choices)."""
    shapes = {}
    for vi in model.graph.input:
        dims: list[tuple[int, int, int]] = []
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                dims.append((d.dim_value, d.dim_value, d.dim_value))
            elif d.dim_param == "batch":
                dims.append(BATCH)
            else:
                top = max_positions if d.dim_param == "seq" else min(max_positions, PAIR_DIM_CAP)
                dims.append((1, min(SEQ_OPT, top), top))
        shapes[vi.name] = ([d[0] for d in dims], [d[1] for d in dims], [d[2] for d in dims])
    return shapes


def _keep_fp32(trt: Any, network: Any) -> None:
    """Pin the table-reading and angle-computing layers to fp32 (module docstring)."""
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        if any(key in layer.name for key in FP32_LAYER_KEYS) and layer.type != trt.LayerType.SHAPE:
            layer.precision = trt.float32


class TrtRunner(Runner):
    """Builds (or loads) a TensorRT engine for the model and runs it through Polygraphy's TrtRunner."""

    name = "trt"

    def __init__(self, model_path: str | Path, engine_path: str | Path | None = None, keep_fp32: bool = True) -> None:
        """Load ``engine_path`` (default: ``model.engine`` beside the model) if it exists, else build and save it."""
        super().__init__(model_path)
        engine_path = Path(engine_path) if engine_path else Path(model_path).with_name(ENGINE_FILE)
        trt = _tensorrt()
        self.gpu = _gpu_name()
        self.version = trt.__version__
        from polygraphy.backend.trt import (
            CreateConfig,
            EngineFromBytes,
            EngineFromNetwork,
            NetworkFromOnnxPath,
            PostprocessNetwork,
            Profile,
        )
        from polygraphy.backend.trt import TrtRunner as PolygraphyTrtRunner

        model = onnx.load(str(self.model_path), load_external_data=False)
        max_positions = (self.checker.max_positions if self.checker is not None else None) or 4096
        meta = {p.key: p.value for p in model.metadata_props}
        self._check_parser_support(model)
        if meta.get("ropeexport.graph") == "plugin":
            from ropeexport.trt.plugin import register  # the Triton kernel as ropeexport::RotaryEmbedding

            register()
        dtype = json.loads(meta.get("ropeexport.spec", "{}")).get("dtype", "fp32")
        built = not engine_path.is_file()
        if not built:
            self._check_engine_info(engine_path)
            loader = EngineFromBytes(engine_path.read_bytes())
        else:
            profile = Profile()
            for name, (lo, opt, hi) in profile_shapes(model, max_positions).items():
                profile.add(name, min=lo, opt=opt, max=hi)
            cache = CACHE_DIR / f"timing-{self.version}-{self.gpu.replace(' ', '_')}.cache"
            cache.parent.mkdir(parents=True, exist_ok=True)
            reduced = dtype != "fp32"
            config = CreateConfig(
                fp16=dtype == "fp16",
                bf16=dtype == "bf16",
                profiles=[profile],
                precision_constraints="obey" if reduced else None,
                load_timing_cache=str(cache) if cache.is_file() else None,
            )
            network = NetworkFromOnnxPath(str(self.model_path))
            if reduced and keep_fp32:
                network = PostprocessNetwork(network, lambda net: _keep_fp32(trt, net))
            loader = EngineFromNetwork(network, config=config, save_timing_cache=str(cache))
        self.shapes = profile_shapes(model, max_positions)
        try:
            self.runner = PolygraphyTrtRunner(loader)
            self.runner.activate()
        except Exception as exc:  # the ONNX parser or builder refused the graph: say why
            raise RuntimeUnavailable(f"TensorRT {self.version} could not build the engine: {exc}") from None
        if built:
            self.save_engine(engine_path)

    def _check_parser_support(self, model: onnx.ModelProto) -> None:
        """Refuse, with check-trt's reason, a graph this TensorRT cannot parse (the spec chooses the graph)."""
        from ropeexport.trt.compat import check_trt

        release = ".".join(self.version.split(".")[:2])
        try:
            verdict = check_trt(model, release)
        except SpecError:
            return  # a release the support table does not know: let the parser itself decide
        if not verdict.compatible:
            first = verdict.reasons[0]
            raise RuntimeUnavailable(
                f"TensorRT {self.version} cannot parse this graph: {first['op_type']} {first['node']}: "
                f"{first['reason']} (ropeexport check-trt lists every node)"
            )

    def _check_engine_info(self, engine_path: Path) -> None:
        info_path = engine_path.with_suffix(".json")
        info = json.loads(info_path.read_text()) if info_path.is_file() else {}
        if info.get("tensorrt") != self.version or info.get("gpu") != self.gpu:
            raise SpecError(
                "engine",
                f"{engine_path.name} was built with TensorRT {info.get('tensorrt')} on {info.get('gpu')}; this host "
                f"has TensorRT {self.version} on {self.gpu}: rebuild it (delete the file)",
            )

    def save_engine(self, engine_path: Path) -> dict[str, Any]:
        """Serialize the engine beside a JSON naming the TensorRT version, GPU and profile it was built for."""
        engine_path.write_bytes(bytes(self.runner.engine.serialize()))
        info = {
            "tensorrt": self.version,
            "gpu": self.gpu,
            "file": engine_path.name,
            "profiles": {n: {"min": lo, "opt": opt, "max": hi} for n, (lo, opt, hi) in self.shapes.items()},
        }
        engine_path.with_suffix(".json").write_text(json.dumps(info, indent=2) + "\n")
        return info

    def describe(self) -> str:
        """For example ``TensorRT 10.15.1 NVIDIA H100 80GB HBM3``."""
        return f"TensorRT {self.version} {self.gpu}"

    def close(self) -> None:
        """Free the engine and its buffers."""
        runner = getattr(self, "runner", None)
        if runner is not None and runner.is_active:
            runner.deactivate()

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name, value in feeds.items():
            lo, _, hi = self.shapes[name]
            if any(not (a <= v <= b) for a, v, b in zip(lo, value.shape, hi, strict=True)):
                raise SpecError(name, f"shape {list(value.shape)} is outside the engine's profile {lo}..{hi}")
        return dict(self.runner.infer({k: np.ascontiguousarray(v) for k, v in feeds.items()}))
