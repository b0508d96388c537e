"""The transformers.js package of a decoder: the folder ``@huggingface/transformers`` 4.3.1 loads as it is.

transformers.js (``AutoModelForCausalLM.from_pretrained(folder)``) reads, from a model folder:

- ``config.json``: ``model_type`` picks the model class (its ``models/registry.js``) and the names of the cache
  inputs (``configs.js``: ``past_key_values.{i}.key/value``, ours); ``num_hidden_layers``, ``num_key_value_heads``,
  ``head_dim`` and ``hidden_size`` are its normalized config. ``transformers.js_config.use_external_data_format``
  says which model files have external data and in how many chunks.
- ``generation_config.json``: bos, eos and pad ids (greedy is its default).
- the tokenizer files, when the checkpoint had them (``tokenizer.json``, ``tokenizer_config.json``, ...).
- ``onnx/model{suffix}.onnx``: the suffix names the dtype asked for (``utils/dtypes.js``): ``""`` fp32,
  ``_fp16`` fp16, ``_q4`` int4 weights with fp32 activations, ``_q4f16`` int4 weights with fp16 activations.
  External data is ``onnx/model{suffix}.onnx_data`` (``utils/model-loader.js``), its location inside the model
  written so.

The first call's empty cache is sized from each cache input's shape in the model's input metadata
(``modeling_utils.js: addPastKeyValues``): the symbolic dimension named ``batch_size`` becomes the batch, numbers stay,
every other symbolic dimension becomes 0. Ours is named ``batch``: the packaged graph is the decoder's with that one
dimension renamed (inputs and outputs; nothing else changes, so per-layer cache shapes, sliding windows, sinks and
experts are the decoder's own). Left as ``batch``, transformers.js feeds a batch of 0 and ONNX Runtime's Attention
refuses the call.

A model type transformers.js has no class for, but whose decoder runs as it is under another type's plain class (glm4 as
``glm``, exaone4 as ``exaone``: ``MAPPED``, each with the lines of its source that say so), is packaged with that type
in config.json and the config keys that class reads; the manifest keeps the decoder's own type. gemma3_text is packaged
as ``gemma2`` too: under its own type transformers.js feeds position_ids from 1 (``START_ONE``; transformers counts from
0, as the decoder does), so its logits were rotated one position off and a prompt reaching the last position of the
context fed ``max_positions``, which the decoder refuses (measured: ``tests/decoder/test_transformersjs.py``).
The Qwen-VL text decoders (qwen2_vl_text, qwen2_5_vl_text, qwen3_vl_text) are packaged as ``qwen2`` or ``qwen3``,
the plain text types their text model is but for multimodal RoPE: under their own wrapper's type transformers.js
places every text-only decode step 2 x the prompt length past transformers' position
(``src/models/qwen2_vl/modeling_qwen2_vl.js:44``). The plain class feeds ``position_ids`` [b, s] from 0, and one Expand
in front of the graph (``transformersjs_rows``) makes the three equal rows [3, b, s] a text-only prompt takes; image
positions cannot be fed (``TEXT_ONLY``: no vision tower is built).
gemma4_text is packaged as transformers.js runs Gemma 4 (``TWO_FILES``): config.json a ``gemma4`` wrapper around its
text config, the decoder split into ``onnx/embed_tokens.onnx`` and ``onnx/decoder_model_merged.onnx``
(``transformersjs_split``). What it cannot load, or would run as another model, is refused by name before anything is
written (``refusal``): each reason is read from transformers.js 4.3.1's own source (``REFUSED``, with file and line),
never guessed. A decoder in bf16 is refused too (none is built: ``decoder.spec.DTYPES``).

The int4 mixtures of experts (gpt_oss, qwen3_moe, deepseek_v3, llama4_text) load as their int4 decoders are built:
ONNX Runtime's QMoE (``com.microsoft``, ``components.qmoe``) in the gqa form, a MatMulNBits per expert elsewhere;
onnxruntime-node 1.30.0 has QMoE's CPU kernel and runs both (measured: ``tests/decoder/test_transformersjs.py``).
One form it cannot load: QMoE at an ``accuracy_level`` (``--accuracy-level`` 1-4). That attribute is newer than its
QMoE schema, which refuses the model ("Unrecognized attribute: accuracy_level for operator QMoE", in Node and in
the pinned onnxruntime-web's WASM build alike), so such a decoder is refused with the two forms that load
(``qmoe_refusal``); MatMulNBits takes the attribute there.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from ropeexport.decoder.genai import TOKENIZER_FILES, _token
from ropeexport.decoder.parts import in_qmoe
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.transformersjs_rows import prefix_rows
from ropeexport.decoder.transformersjs_split import DECODER, EMBED, split
from ropeexport.decoder.weights import geometry
from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import DATA_FILE

ENGINE = "transformers.js"
ENGINES = (ENGINE,)  # what ``package --for`` takes
ARTIFACT = "transformers.js-package"  # the manifest's artifact: what ``verify`` recognises a package by
VERSION = "4.3.1"  # the transformers.js whose source this layout was read from, and the one the tests run
# The onnxruntime-node it runs on in Node (tools/transformersjs/package-lock.json pins both): what qmoe_refusal measured
ORT_NODE = "1.30.0"
# The model types ropeexport builds that transformers.js 4.3.1 loads as one decoder file fed input_ids: each is in its
# causal-LM map (src/models/registry.js:261-340, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) with a class whose forward is the
# plain decoder's (llama4_text: Llama4ForCausalLM, line 274; deepseek_v3: DeepseekV3ForCausalLM, line 324, its cache
# inputs named past_key_values.{i}.key/value and sized from the model's own input shapes, so latent attention's keys
# and values of two widths, or its latent cache, load as they are: modeling_utils.js:1288-1321; mistral4:
# Mistral4ForCausalLM, line 319, a bare class (src/models/mistral4/modeling_mistral4.js:5) whose config reads
# deepseek_v3's keys (src/configs.js:210-218), fed position_ids from 0 where the model takes them
# (modeling_utils.js:1365-1372), which its query scale reads inside the graph).
LOADED = ("llama", "mistral", "qwen2", "phi3", "qwen3", "gemma2", "gpt_neox", "gptj", "bloom",
          "gpt_oss", "smollm3", "olmo3", "cohere2", "qwen3_moe", "ministral3", "llama4_text",
          "deepseek_v3", "mistral4")  # fmt: skip
# The model types ropeexport builds that transformers.js 4.3.1 has no class of their own for, or one that feeds them
# other positions than transformers does (gemma3_text, and the Qwen-VL text decoders added below: issue 42), but runs
# under another type's class:
# {ours: (the type config.json says, why that class runs this decoder as it is)}. Each class named is a
# bare PreTrainedModel (no forward of its own), so it runs the plain decoder's: decoder_forward feeds input_ids,
# attention_mask, position_ids counted from 0 and the cache, sized from the model's own cache inputs
# (src/models/modeling_utils.js:1355-1384, 1288-1321); what the architecture computes is inside the graph. The config
# keys that class's normalized config reads are written with the decoder's values (package_config). The package's
# manifest keeps the decoder's own type ("model_type").
# The line of transformers.js 4.3.1 that counts position_ids from 1 for the types it lists (decoder_forward)
START_ONE = "src/models/modeling_utils.js:1371"
_PLAIN = ("a bare PreTrainedModel with no forward of its own ({}), so transformers.js runs it as the plain decoder: "
          "input_ids, attention_mask, position_ids from 0 and a cache sized from the model's own inputs "
          "(src/models/modeling_utils.js:1355-1384); {}")  # fmt: skip
MAPPED = {
    "glm4": ("glm", "transformers.js 4.3.1 has no class for 'glm4', and its causal-LM map "
             "(src/models/registry.js:261-340) has 'glm' (GlmForCausalLM, line 296): " + _PLAIN.format(
                 "src/models/glm/modeling_glm.js:5", "its config reads num_key_value_heads, num_hidden_layers and "
                 "head_dim (src/configs.js:170-181), as GLM-4's config names them; the sandwich norms, q/k/v biases "
                 "and interleaved partial RoPE are inside the graph")),
    "exaone4": ("exaone", "transformers.js 4.3.1 has no class for 'exaone4', and its causal-LM map "
                "(src/models/registry.js:261-340) has 'exaone' (ExaoneForCausalLM, line 280): " + _PLAIN.format(
                    "src/models/exaone/modeling_exaone.js:5", "its config reads the layer count from num_layers "
                    "(src/configs.js:203-208), which EXAONE 4's config lacks, so the package's config.json adds it; "
                    "the sliding windows, the global layers without RoPE and the q/k norms are inside the graph")),
    "gemma3_text": ("gemma2", "transformers.js 4.3.1 feeds the types 'paligemma', 'gemma3_text' and 'gemma3' "
                    f"position_ids counted from 1 ({START_ONE}), where transformers' Gemma3ForCausalLM counts from 0 "
                    "as the decoder does (so under its own type the last position of the context would be "
                    "max_positions, which the decoder refuses); its causal-LM map (src/models/registry.js:261-340) "
                    "has 'gemma2' (Gemma2ForCausalLM, line 291): " + _PLAIN.format(
                        "src/models/gemma2/modeling_gemma2.js:13", "its config reads num_key_value_heads, "
                        "num_hidden_layers and head_dim (src/configs.js:165-181, the case gemma3_text shares); the "
                        "per-layer RoPE, the sliding windows and the q/k norms are inside the graph")),
}  # fmt: skip
# The model types packaged as two files, the layout of the class transformers.js runs them under: {ours: (the type
# config.json says, the architecture it names, why)}. transformersjs_split.py splits the decoder so.
TWO_FILES = {
    "gemma4_text": ("gemma4", "Gemma4ForConditionalGeneration", (
        f"transformers.js {VERSION} has no class for 'gemma4_text', and its causal-LM map (src/models/registry.js:"
        "261-340) has 'gemma4' (Gemma4ForCausalLM, line 312), whose forward is Gemma 3n's "
        "(src/models/gemma4/modeling_gemma4.js:27, src/models/gemma3n/modeling_gemma3n.js:46-50 and 78-91): an "
        "embed_tokens model fed input_ids gives inputs_embeds and per_layer_inputs, then decoder_model_merged is fed "
        "them; with config.json's architectures naming Gemma4ForConditionalGeneration (src/models/registry.js:633-637) "
        "it loads those two files in text-only mode (src/models/modeling_utils.js:180-202, "
        "src/models/session_config.js:78-90) and feeds the cache of the layers that store one "
        "(src/configs.js:403-415), so the decoder is split there (transformersjs_split)")),
}  # fmt: skip
# The Qwen-VL text decoders (issue 42). transformers.js runs their wrapper's model_type (qwen2_vl ...) from two files,
# an embed_tokens model and a decoder_model_merged fed inputs_embeds (src/models/session_config.js:58-61), and computes
# their [3, b, s] position_ids itself: for a text-only prompt its rope delta is max + 1 + n
# (src/models/qwen2_vl/modeling_qwen2_vl.js:44, where transformers' is max + 1 - n), so every decode step sits 2n past
# transformers' position (measured by tools/transformersjs_qwen_vl.py and tests/decoder/test_transformersjs.py). Their
# text model is qwen2's (qwen2_vl_text, qwen2_5_vl_text: q/k/v biases) or qwen3's (qwen3_vl_text: q/k norms) but for
# multimodal RoPE, which is inside the graph; so each is packaged as that plain type, whose bare class feeds
# position_ids [b, s] from 0, with one node in front of the graph that makes the three equal rows a text-only prompt
# takes (transformersjs_rows). Lost: image positions (no vision tower is built; TEXT_ONLY).
def _qwen_vl(wrapper: str, plain: str, line: int, keys: str, inside: str) -> str:
    """Why a Qwen-VL text decoder is packaged as ``plain`` (the comment above), its source cited."""
    cls = f"{plain.capitalize()}ForCausalLM"
    return (f"transformers.js {VERSION} runs {wrapper!r} (its class for the text model) from two files and places its "
            "text-only decode steps 2 x the prompt length past transformers' positions (its rope delta is max + 1 + "
            "n, src/models/qwen2_vl/modeling_qwen2_vl.js:44, where transformers' is max + 1 - n); the text model is "
            f"{plain}'s but for multimodal RoPE, and the causal-LM map (src/models/registry.js:261-340) has {plain!r} "
            f"({cls}, line {line}): " + _PLAIN.format(f"src/models/{plain}/modeling_{plain}.js:13", f"its config "
            f"reads {keys}; the package's graph takes that position_ids [b, s] and makes the three equal rows "
            f"[3, b, s] of a text-only prompt in one Expand (transformersjs_rows); {inside} are inside the graph"))


_QWEN2 = ("num_key_value_heads, num_hidden_layers, hidden_size, num_attention_heads and head_dim "
          "(src/configs.js:143-160)")
_QWEN3 = "num_key_value_heads, num_hidden_layers and head_dim (src/configs.js:161-181)"
MAPPED |= {
    "qwen2_vl_text": ("qwen2", _qwen_vl("qwen2_vl", "qwen2", 299, _QWEN2, "the q/k/v biases and M-RoPE")),
    "qwen2_5_vl_text": ("qwen2", _qwen_vl("qwen2_5_vl", "qwen2", 299, _QWEN2, "the q/k/v biases and M-RoPE")),
    "qwen3_vl_text": ("qwen3", _qwen_vl("qwen3_vl", "qwen3", 301, _QWEN3, "the q/k norms and interleaved M-RoPE")),
}
MAPPED |= {
    "glm4_moe_lite": ("deepseek_v3", "transformers.js 4.3.1 has no class for 'glm4_moe_lite' (GLM-4.7-Flash), and its "
                      "causal-LM map (src/models/registry.js:261-340) has 'deepseek_v3' (DeepseekV3ForCausalLM, line "
                      "324), whose layers these are: " + _PLAIN.format(
                          "src/models/deepseek_v3/modeling_deepseek_v3.js:5", "its config reads num_key_value_heads, "
                          "num_hidden_layers, qk_head_dim and num_attention_heads (src/configs.js:210-218); the "
                          "latent attention, the experts and mlp_layer_types' dense layers are inside the graph")),
    "deepseek_v2": ("deepseek_v3", "transformers.js 4.3.1 has no class for 'deepseek_v2' (DeepSeek-V2, V2-Lite), and "
                    "its causal-LM map (src/models/registry.js:261-340) has 'deepseek_v3' (DeepseekV3ForCausalLM, line "
                    "324), whose latent attention this is: " + _PLAIN.format(
                        "src/models/deepseek_v3/modeling_deepseek_v3.js:5", "its config reads num_key_value_heads, "
                        "num_hidden_layers, qk_head_dim and num_attention_heads (src/configs.js:210-218); the latent "
                        "attention and DeepSeek V2's router and experts are inside the graph")),
}  # fmt: skip
# What a package of a multi-axis (Qwen-VL) text decoder cannot do, said by ``package`` and in report.json
TEXT_ONLY = ("text only: position_ids [b, s] become the three equal rows of a text-only prompt, so image positions "
             "cannot be fed (nor is a vision tower built); a prompt with images needs transformers.js's own Qwen-VL "
             "model and its vision tower, whose text-only decode positions are 2 x the prompt length off "
             "(src/models/qwen2_vl/modeling_qwen2_vl.js:44)")  # fmt: skip
# model_type -> why transformers.js 4.3.1 cannot run the decoder (one sentence, its source cited). The Qwen-VL text
# decoders were refused here until they were packaged as their plain text type (above).
REFUSED: dict[str, str] = {
    "deepseek_v32": ("transformers.js 4.3.1 has no causal-LM class for 'deepseek_v32' "
                     "(src/models/registry.js:261-340), and for a model type it does not list it feeds only "
                     "past_key_values.{i}.key and .value (src/configs.js:457, getKeyValueNames): the indexer's key "
                     "cache, past_key_values.{i}.index_key, would never be fed"),
    "glm_moe_dsa": ("transformers.js 4.3.1 lists 'glm_moe_dsa' (GlmMoeDsaForCausalLM, line 297), a bare class "
                    "(src/models/glm_moe_dsa/modeling_glm_moe_dsa.js:5), but feeds it only past_key_values.{i}.key "
                    "and .value (src/configs.js:457, getKeyValueNames): the indexer's key cache, "
                    "past_key_values.{i}.index_key, would never be fed"),
    # packaged as deepseek_v3 until its indexer was wired: the empty cache is made of the session inputs that
    # getCacheNames names (src/models/modeling_utils.js:1297-1308), key and value only
    "mistral_large4_text": ("transformers.js 4.3.1 has no causal-LM class for 'mistral_large4_text' "
                            "(src/models/registry.js:261-340), and it makes a decoder's empty cache of the inputs "
                            "getCacheNames names (src/models/modeling_utils.js:1297-1308): past_key_values.{i}.key "
                            "and .value (src/configs.js:457, getKeyValueNames); the indexer's key cache, "
                            "past_key_values.{i}.index_key, would never be fed"),
}
BATCH = "batch_size"  # the symbolic dimension transformers.js sizes the first empty cache from
OUR_BATCH = "batch"


def suffix(spec: DecoderSpec) -> tuple[str, str]:
    """(transformers.js's dtype name, the model file's suffix) of the decoder: fp32 "", fp16 _fp16, int4 _q4/_q4f16."""
    int4 = spec.storage.format == "int4"
    dtype = ("q4" if spec.dtype == "fp32" else "q4f16") if int4 else spec.dtype
    return dtype, "" if dtype == "fp32" else f"_{dtype}"


def model_file(spec: DecoderSpec) -> str:
    """The decoder's path inside the package: ``onnx/model{suffix}.onnx``, or ``onnx/decoder_model_merged{suffix}.onnx``
    for a type packaged as two files (``TWO_FILES``).
    """  # noqa: D205
    return f"onnx/{DECODER if spec.model_type in TWO_FILES else 'model'}{suffix(spec)[1]}.onnx"


def embed_file(spec: DecoderSpec) -> str | None:
    """The embed model's path inside a two-file package (``onnx/embed_tokens{suffix}.onnx``), else None."""
    return f"onnx/{EMBED}{suffix(spec)[1]}.onnx" if spec.model_type in TWO_FILES else None


def loaded_as(spec: DecoderSpec) -> str:
    """The model_type the package's config.json says: the decoder's own, or the class transformers.js runs it under
    (``MAPPED``).
    """  # noqa: D205
    if spec.model_type in TWO_FILES:
        return TWO_FILES[spec.model_type][0]
    return MAPPED[spec.model_type][0] if spec.model_type in MAPPED else spec.model_type


def text_only(spec: DecoderSpec) -> str | None:
    """What the package of a multi-axis (Qwen-VL) text decoder cannot do (``TEXT_ONLY``), or None."""
    return None if spec.positions.one_axis else TEXT_ONLY


def why_loaded_as(spec: DecoderSpec) -> str | None:
    """Why config.json's model_type is not the decoder's (``MAPPED``, ``TWO_FILES``), or None when it is."""
    if spec.model_type in TWO_FILES:
        return TWO_FILES[spec.model_type][2]
    return MAPPED[spec.model_type][1] if spec.model_type in MAPPED else None


def refusal(spec: DecoderSpec) -> str | None:
    """Why transformers.js 4.3.1 cannot run the decoder as ropeexport built it (one sentence), or None when it can."""
    if spec.model_type in REFUSED:
        return REFUSED[spec.model_type]
    if any(layer.attention.index_topk for layer in spec.layers):  # Mistral Large 4's, packaged as deepseek_v3
        return (f"its layers run DeepSeek Sparse Attention's indexer, and transformers.js {VERSION} feeds only "
                "past_key_values.{i}.key and .value (src/configs.js:457, getKeyValueNames): the indexer's key cache, "
                "past_key_values.{i}.index_key, would never be fed")  # fmt: skip
    # an architecture added to ropeexport and not yet read against transformers.js
    if spec.model_type not in (*LOADED, *MAPPED, *TWO_FILES):
        return (f"ropeexport has not checked model_type {spec.model_type!r} against transformers.js {VERSION} (it "
                f"packages {', '.join((*LOADED, *MAPPED, *TWO_FILES))})")  # fmt: skip
    if spec.dtype not in ("fp32", "fp16"):
        return f"transformers.js runs fp32, fp16, q4 and q4f16 models; this decoder is {spec.dtype}"
    return qmoe_refusal(spec)


def qmoe_refusal(spec: DecoderSpec) -> str | None:
    """Why onnxruntime-node cannot load the decoder's QMoE experts (one sentence, with the forms that load), or None:
    QMoE at an accuracy level (module doc).
    """  # noqa: D205
    level = spec.weight_format().accuracy_level
    if not level or not any(in_qmoe(spec, i) for i in range(spec.num_layers)):
        return None
    return (f"its experts are ONNX Runtime's QMoE (int4, the gqa form) at accuracy level {level}, and onnxruntime-node "
            f"{ORT_NODE}, which transformers.js {VERSION} runs on, has no accuracy_level on QMoE: it refuses the model "
            "('Unrecognized attribute: accuracy_level for operator QMoE'); build the decoder with --accuracy-level 0 "
            f"(QMoE, which it runs) or in another form (--graph fused: a MatMulNBits per expert, which it runs at "
            f"accuracy level {level})")  # fmt: skip


def package_config(spec: DecoderSpec, config: Mapping[str, Any], external: bool) -> dict[str, Any]:
    """config.json: the checkpoint's config (its text config, for a multimodal wrapper) with every field
    transformers.js reads set from the decoder's spec (a shrunk decoder has fewer layers than its checkpoint), its
    ``model_type`` the class transformers.js runs it under (``loaded_as``), and
    ``transformers.js_config`` naming the model's external data when it has some.
    """  # noqa: D205
    text = config.get("text_config")
    base = dict(text) if isinstance(text, Mapping) and text.get("model_type") == spec.model_type else dict(config)
    H, KV, d = geometry(spec, 0)
    out: dict[str, Any] = {**base, "model_type": loaded_as(spec), "num_hidden_layers": spec.num_layers,
                           "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": d,
                           "hidden_size": spec.hidden_size, "vocab_size": spec.vocab_size}  # fmt: skip
    # gptj and bloom name the same fields their own way (configs.js: n_head, n_layer, n_embd)
    if spec.model_type in ("gptj", "bloom"):
        out |= {"n_head": H, "n_layer": spec.num_layers}
    if spec.model_type == "gptj":
        out["n_embd"] = spec.hidden_size
    if loaded_as(spec) == "exaone":  # its config reads the layer count from num_layers (src/configs.js:205)
        out["num_layers"] = spec.num_layers
    if spec.model_type in TWO_FILES:  # the text config inside the wrapper whose class runs the two files
        _, architecture, _ = TWO_FILES[spec.model_type]
        out = {"model_type": loaded_as(spec), "architectures": [architecture],
               "text_config": out | {"model_type": spec.model_type}}  # fmt: skip
    if external:
        files = [model_file(spec), *[name for name in [embed_file(spec)] if name is not None]]
        out["transformers.js_config"] = {"use_external_data_format": {Path(name).name: 1 for name in files}}
    return out


def generation_config(spec: DecoderSpec, config: Mapping[str, Any]) -> dict[str, Any]:
    """generation_config.json: the special ids that lie in the vocabulary (greedy is transformers.js's default)."""
    out = {}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = _token(config, key, spec.vocab_size)
        if value is not None:
            out[key] = value
    return out


def write_model(decoder: Path, spec: DecoderSpec, into: Path) -> bool:
    """The decoder's model.onnx written as the package's model file (its batch dimension renamed ``batch_size``, a
    multi-axis position input fed from one row (``transformersjs_rows``), its external data renamed
    ``model{suffix}.onnx_data`` and copied as it is); whether it has external data.
    """  # noqa: D205
    if spec.model_type in TWO_FILES:
        return _write_split(decoder, spec, into)
    model = onnx.load(str(decoder / "model.onnx"), load_external_data=False)  # the weights stay on disk
    if not _rename_batch(model):
        raise SpecError("decoder", f"{str(decoder / 'model.onnx')!r} has no dimension named {OUR_BATCH!r}: not a "
                        "decoder this ropeexport built")  # fmt: skip
    if not spec.positions.one_axis:  # Qwen-VL: fed [b, s] by the plain class it runs under (MAPPED)
        prefix_rows(model, spec.positions.axes)
    target = into / model_file(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = f"{target.name}_data"
    external = False
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                if entry.value != DATA_FILE:
                    raise SpecError("decoder", f"its model names external data {entry.value!r}, not {DATA_FILE!r}")
                entry.value, external = data, True
    target.write_bytes(model.SerializeToString(deterministic=True))
    if external:
        shutil.copyfile(decoder / DATA_FILE, target.parent / data)
    return external


def _rename_batch(model: onnx.ModelProto) -> int:
    """Every input's and output's batch dimension renamed ``batch_size``; how many."""
    renamed = 0
    for value in (*model.graph.input, *model.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param == OUR_BATCH:
                dim.dim_param = BATCH
                renamed += 1
    return renamed


def _write_split(decoder: Path, spec: DecoderSpec, into: Path) -> bool:
    """The decoder written as two files, ``embed_tokens`` and ``decoder_model_merged`` (``transformersjs_split``),
    their batch dimension renamed; whether the decoder has external data (kept so, beside the decoder's file).
    """  # noqa: D205
    whole = onnx.load(str(decoder / "model.onnx"))  # its tables are split between the two files
    if not _rename_batch(whole):  # the split's new inputs take the batch dimension's name from input_ids
        raise SpecError("decoder", f"{str(decoder / 'model.onnx')!r} has no dimension named {OUR_BATCH!r}: not a "
                        "decoder this ropeexport built")  # fmt: skip
    external = (decoder / DATA_FILE).is_file()
    embed_name = embed_file(spec)
    assert embed_name is not None  # a two-file type
    for part, name in zip(split(whole), (embed_name, model_file(spec)), strict=True):
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if external:  # each file's tables beside it, as transformers.js names them (a real embed table is GBs)
            onnx.save(part, str(target), save_as_external_data=True, location=f"{target.name}_data")
        else:
            target.write_bytes(part.SerializeToString(deterministic=True))
    return external


def write_package(decoder: Path, spec: DecoderSpec, record: Mapping[str, Any], into: Path) -> list[str]:
    """Every file of the package written into ``into`` (module doc); their names, relative to it."""
    config = record.get("config")
    config = config if isinstance(config, Mapping) else {}
    external = write_model(decoder, spec, into)
    models = [model_file(spec), *[name for name in [embed_file(spec)] if name is not None]]
    names = [*models, *[f"{name}_data" for name in models if external and (into / f"{name}_data").is_file()]]
    for name, data in (("config.json", package_config(spec, config, external)),
                       ("generation_config.json", generation_config(spec, config))):  # fmt: skip
        (into / name).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        names.append(name)
    for name in TOKENIZER_FILES:  # copied into the decoder from its checkpoint at build time, hashed there
        if (decoder / name).is_file():
            shutil.copyfile(decoder / name, into / name)
            names.append(name)
    return names
