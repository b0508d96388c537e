"""An onnx-community folder made from an fp32 one, its variants made as transformers.js's conversion makes them.

The fp32 folder holds config.json and onnx/model.onnx: a ropeexport transformers.js package, or an Optimum export.
The variants are made as ``scripts/quantize.py`` of huggingface/transformers.js makes them, with the ONNX Runtime
quantizers it calls (installed here with onnxruntime):

- ``model_q4.onnx``: ``MatMulNBitsQuantizer`` (what its ``MatMul4BitsQuantizer`` is now), block 32, symmetric: every
  MatMul becomes com.microsoft MatMulNBits. The embedding Gather is quantized too (GatherBlockQuantized, the same
  quantizer asked for Gather), which quantize.py does not ask for but int4 exports with quantized embeddings carry;
  the other Gathers are excluded by name: asked for every Gather, the quantizer also turns ropeexport's int64
  position guard table into a GatherBlockQuantized ONNX Runtime refuses to load.
- ``model_fp16.onnx``, ``model_q4f16.onnx``: ``float16.convert_float_to_float16(keep_io_types=True)`` of the fp32 and
  of the q4 model, then sorted topologically. quantize.py calls its own copy of that function (scripts/float16.py),
  then onnxslim, which sorts; here onnxruntime's, which it was copied from, and onnxruntime's topological sort.
- ``model_quantized.onnx``: ``ONNXQuantizer`` in IntegerOps mode, int8 weights, uint8 activations
  (MatMulInteger), quantize.py's ``q8``, with ``--op_block_list Attention``: asked for its default op types it
  turns the opset-23 Attention into a QAttention ONNX Runtime refuses.

As a script: ``python tools/community_variants.py SOURCE OUT`` makes OUT from SOURCE (a folder with onnx/model.onnx,
or, with ``--checkpoint CKPT --optimum-python PY``, the Optimum export of CKPT that tools/peer_exports.py runs, as
onnx-community's folders are exported: optimum-onnx 0.1.0 in its own environment), then audits OUT
(``ropeexport audit OUT``) and prints its rows. What it found on a tiny Llama's Optimum export is in
docs/reference/audit.md (a folder published for transformers.js).
"""  # noqa: D205

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

VARIANTS = ("model.onnx", "model_fp16.onnx", "model_q4.onnx", "model_q4f16.onnx", "model_quantized.onnx")


def _q4(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    weights = {i.name: i for i in model.graph.initializer}
    embedding = [n.name for n in model.graph.node if n.op_type == "Gather" and n.input[0] in weights
                 and len(weights[n.input[0]].dims) == 2 and n.input[1] == "input_ids"]  # fmt: skip
    assert len(embedding) == 1, embedding
    others = [n.name for n in model.graph.node if n.op_type == "Gather" and n.name not in embedding]
    quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True, nodes_to_exclude=others,
                                     op_types_to_quantize=("MatMul", "Gather"),
                                     quant_axes=(("MatMul", 0), ("Gather", -1)))  # fmt: skip
    quantizer.process()
    return quantizer.model.model


def _fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.transformers.float16 import convert_float_to_float16
    from onnxruntime.transformers.onnx_model import OnnxModel

    converted = convert_float_to_float16(model, keep_io_types=True)
    # the converter appends the casts of the graph's inputs after their readers; quantize.py sorts the graph again
    # (onnxslim) before saving, and so does this
    OnnxModel(converted).topological_sort()
    return converted


def _q8(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantizationMode, QuantType
    from onnxruntime.quantization.onnx_quantizer import ONNXQuantizer
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    quantizer = ONNXQuantizer(model, False, False, mode=QuantizationMode.IntegerOps, static=False,
                              weight_qType=QuantType.QInt8, activation_qType=QuantType.QUInt8, tensors_range=None,
                              nodes_to_quantize=[], nodes_to_exclude=[],
                              op_types_to_quantize=set(IntegerOpsRegistry) - {"Attention"},
                              extra_options={"EnableSubgraph": True, "MatMulConstBOnly": True})  # fmt: skip
    quantizer.quantize_model()
    return quantizer.model.model


def community_folder(package: Path, folder: Path) -> Path:
    """``folder``: the package's config, generation config and tokenizer files, and its fp32 ``onnx/model.onnx``
    with the four variants made from it (module doc). The package's own manifest and reports are left out.
    """  # noqa: D205
    shutil.copytree(package, folder, ignore=shutil.ignore_patterns("manifest.json", "report.json", "reference.json"))
    onnx_dir = folder / "onnx"
    fp32 = str(onnx_dir / "model.onnx")
    # the quantizers change the model they are given: each reads its own copy
    onnx.save(_q4(onnx.load(fp32)), str(onnx_dir / "model_q4.onnx"))
    onnx.save(_fp16(onnx.load(fp32)), str(onnx_dir / "model_fp16.onnx"))
    onnx.save(_fp16(onnx.load(str(onnx_dir / "model_q4.onnx"))), str(onnx_dir / "model_q4f16.onnx"))
    onnx.save(_q8(onnx.load(fp32)), str(onnx_dir / "model_quantized.onnx"))
    return folder


def ops(model: Path) -> set[str]:
    """The operator types of ``model``'s main graph."""
    return {n.op_type for n in onnx.load(str(model), load_external_data=False).graph.node}


def _optimum_source(checkpoint: Path, python: str, work: Path) -> Path:
    """The Optimum export of ``checkpoint`` laid out as a transformers.js folder (configs beside onnx/model.onnx)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import peer_exports

    command = peer_exports.optimum_command(peer_exports.legacy_checkpoint(checkpoint, work / "legacy"), work / "export",
                                           python)  # fmt: skip
    if isinstance(command, str):
        raise SystemExit(f"community_variants: {command}")
    subprocess.run(command, check=True)
    source = work / "source"
    (source / "onnx").mkdir(parents=True)
    for name in ("config.json", "generation_config.json"):
        if (work / "export" / name).is_file():
            shutil.copyfile(work / "export" / name, source / name)
    shutil.copyfile(work / "export" / "model.onnx", source / "onnx" / "model.onnx")
    return source


def main() -> int:
    """Make the folder, audit it, print the audit (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", nargs="?", help="a folder with config.json and onnx/model.onnx (fp32)")
    parser.add_argument("out", help="the folder to write (must not exist)")
    parser.add_argument("--checkpoint", help="export this checkpoint with Optimum instead of reading SOURCE")
    parser.add_argument("--optimum-python", help="the python of a venv with optimum-onnx==0.1.0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        if args.checkpoint:
            source = _optimum_source(Path(args.checkpoint), args.optimum_python, Path(work))
        elif args.source:
            source = Path(args.source)
        else:
            parser.error("give SOURCE or --checkpoint")
        folder = community_folder(source, Path(args.out))
    for model in sorted((folder / "onnx").glob("*.onnx")):
        print(f"{model.name}: {', '.join(sorted(ops(model) & QUANTIZED)) or 'no quantized operator'}")
    return subprocess.run([sys.executable, "-m", "ropeexport", "audit", str(folder)], check=False).returncode


QUANTIZED = {"MatMulNBits", "GatherBlockQuantized", "MatMulInteger", "DynamicQuantizeLinear"}

if __name__ == "__main__":
    raise SystemExit(main())
