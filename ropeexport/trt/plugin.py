"""The Triton RoPE kernel as the TensorRT plugin ``ropeexport::RotaryEmbedding`` (a quickly deployable plugin).

API followed: ``tensorrt.plugin`` (TensorRT >= 10.6), as documented at
https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/tensorrt.plugin/trt_plugin_register.html
and .../trt_plugin_impl.html, and as used in NVIDIA/TensorRT ``samples/python/quickly_deployable_plugins``
(``qdp_defs.py``: ``@trtp.register`` returns ``inp0.like()``; ``@trtp.impl`` receives ``trtp.Tensor`` inputs, the
attributes it needs, ``outputs`` and ``stream``, and launches the Triton kernel under
``torch.cuda.stream(torch.cuda.ExternalStream(stream))``).

Plugin contract (one rotation, as one node of ``ropeexport.families.rope.plugin.build_rope_plugin_graph``):
- inputs ``x`` [b, h, s, d] (fp32 / fp16 / bf16), ``cos_cache`` and ``sin_cache`` [P, rotary_dim / 2] (half-width
  tables, rounded once), ``position_ids`` int64 [b, s] (table rows);
- attributes ``interleaved`` (0 half, 1 interleaved) and ``rotary_dim`` (ints: ONNX has no bool attribute, and the
  ONNX parser hands node attributes to the plugin creator by name);
- output: x's shape and dtype.

The ONNX parser maps a node to this plugin by its ``op_type`` (``RotaryEmbedding``, the plugin name) and a string
attribute ``plugin_namespace = "ropeexport"`` (NVIDIA's sample README, "ONNX model with a plugin"); the node's ONNX
domain is not consulted. Recent onnx-tensorrt (``ModelImporter.cpp``, ``parseNode``) prefers a registered plugin for
a node carrying ``plugin_namespace`` even where a native importer of the same op_type exists, but on versions with the
native ``RotaryEmbedding`` importer (10.15+) its static checker runs on the node first: untested, and those versions
should get the fused graph anyway.

The implementation is the JIT kind (``@trtp.impl``): the engine calls back into Python at run time, so running an
engine needs this module imported and ``register()`` called. Positions are not checked inside the engine (that would
cost a device sync per call); runners reject positions outside the table before running, and the kernel writes NaN
for any it is given anyway (see ``plugins.triton_rope``).

``tensorrt`` is imported only inside ``register()``: this module imports without it, and ``missing()`` says why the
plugin cannot be registered here.
"""

from __future__ import annotations

from typing import Any

from ropeexport.errors import RuntimeUnavailable

PLUGIN_ID = "ropeexport::RotaryEmbedding"
NAMESPACE, NAME = PLUGIN_ID.split("::")
MIN_TENSORRT = (10, 6)  # first release with tensorrt.plugin (quickly deployable plugins)

_registered = False


def _version(text: str) -> tuple[int, int]:
    parts = (text.split(".") + ["0", "0"])[:2]
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


def missing() -> str | None:
    """Why the plugin cannot be registered in this environment, or None when it can."""
    try:
        import tensorrt
    except ImportError as exc:
        return f"TensorRT is not installed ({exc}); the plugin needs TensorRT >= 10.6 and its tensorrt.plugin module"
    version = getattr(tensorrt, "__version__", "0.0")
    if _version(version) < MIN_TENSORRT:
        return f"TensorRT {version} has no tensorrt.plugin module (quickly deployable plugins need TensorRT >= 10.6)"
    try:
        import tensorrt.plugin  # noqa: F401
    except ImportError as exc:
        return f"TensorRT {version} is installed but tensorrt.plugin cannot be imported ({exc})"
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        return f"Triton is not installed ({exc}); the plugin's implementation is a Triton kernel"
    return None


class _DeviceView:
    """A trtp.Tensor's buffer as a ``__cuda_array_interface__`` torch can wrap, bfloat16 included.

    ``trtp.Tensor.__cuda_array_interface__`` refuses BF16 (numpy has no bfloat16), so bf16 buffers are described as
    int16 with the same bytes and reinterpreted by torch afterwards.
    """

    def __init__(self, tensor: Any, typestr: str, itemsize: int) -> None:
        self._interface = {
            "shape": tuple(int(n) for n in tensor.shape),
            "typestr": typestr,
            "data": (int(tensor.data_ptr), False),
            "strides": tuple(int(n) * itemsize for n in tensor.strides),
            "version": 3,
            "stream": None,  # the kernel is launched on TensorRT's stream itself
        }

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self._interface


def _as_torch(tensor: Any) -> Any:
    """A zero-copy torch CUDA tensor over a trtp.Tensor's buffer."""
    import torch

    kinds = {
        "FLOAT": ("<f4", 4, torch.float32),
        "HALF": ("<f2", 2, torch.float16),
        "BF16": ("<i2", 2, torch.bfloat16),
        "INT64": ("<i8", 8, torch.int64),
    }
    name = str(tensor.dtype).rsplit(".", 1)[-1]
    if name not in kinds:
        raise RuntimeError(f"{PLUGIN_ID}: unsupported tensor dtype {tensor.dtype}; allowed: FLOAT, HALF, BF16, INT64")
    typestr, itemsize, dtype = kinds[name]
    view = torch.as_tensor(_DeviceView(tensor, typestr, itemsize), device="cuda")
    return view.view(dtype) if view.dtype != dtype else view


def register() -> None:
    """Register ``ropeexport::RotaryEmbedding`` with TensorRT's plugin registry (once per process).

    Raises RuntimeUnavailable naming what is missing (TensorRT, its version, tensorrt.plugin, Triton).
    """
    global _registered
    if _registered:
        return
    reason = missing()
    if reason is not None:
        raise RuntimeUnavailable(f"cannot register the TensorRT plugin {PLUGIN_ID}: {reason}")
    import tensorrt.plugin as trtp
    import torch

    from ropeexport.trt.triton_rope import rope_triton

    def describe(x, cos_cache, sin_cache, position_ids, interleaved, rotary_dim):  # type: ignore[no-untyped-def]
        return x.like()  # [b, h, s, d], x's dtype

    # tensorrt.plugin reads these annotations with issubclass(), so they must be classes, not the strings that
    # ``from __future__ import annotations`` would leave: set them explicitly.
    describe.__annotations__ = {
        "x": trtp.TensorDesc,
        "cos_cache": trtp.TensorDesc,
        "sin_cache": trtp.TensorDesc,
        "position_ids": trtp.TensorDesc,
        "interleaved": int,
        "rotary_dim": int,
        "return": trtp.TensorDesc,
    }

    def enqueue(x, cos_cache, sin_cache, position_ids, interleaved, rotary_dim, outputs, stream):  # type: ignore[no-untyped-def]
        # Annotations are optional for impl functions (and none are given: see above).
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            rope_triton(
                _as_torch(x),
                _as_torch(cos_cache),
                _as_torch(sin_cache),
                _as_torch(position_ids),
                interleaved=bool(interleaved),
                rotary_dim=int(rotary_dim),
                out=_as_torch(outputs[0]),
                check=False,  # no device sync inside an engine; invalid rows come out as NaN
            )

    trtp.register(PLUGIN_ID)(describe)
    trtp.impl(PLUGIN_ID)(enqueue)
    _registered = True
