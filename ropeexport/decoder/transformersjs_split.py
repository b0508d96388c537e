"""A decoder split as transformers.js 4.3.1 runs Gemma 4: an ``embed_tokens`` model, then a decoder fed its outputs.

transformers.js has no causal-LM class for ``gemma4_text``; its ``gemma4`` class (``Gemma4ForCausalLM``, loading a
config whose ``architectures`` names ``Gemma4ForConditionalGeneration``, in text-only mode:
``src/models/modeling_utils.js:180-202``, ``src/models/session_config.js:78-90``) runs Gemma 3n's forward
(``src/models/gemma3n/modeling_gemma3n.js:46-50``, ``78-91``): ``onnx/embed_tokens.onnx`` fed ``input_ids`` gives
``inputs_embeds`` and ``per_layer_inputs``, and ``onnx/decoder_model_merged.onnx`` is fed those with
``attention_mask``, ``position_ids`` and the cache (the cache of the first ``num_hidden_layers - num_kv_shared_layers``
layers: ``src/configs.js:403-415``).

ropeexport's Gemma 4 decoder reads ``input_ids`` in two places only, each a token lookup times a constant:
``Gather(embed, input_ids) * embed_scale`` (the embeddings times Gemma's sqrt(hidden); in int4 with a tied head, a
``GatherBlockQuantized`` of the head's int4 weights) and, with per-layer input embeddings,
``Gather(embed_per_layer, input_ids) * per_layer_embed_scale``. ``split`` moves exactly those nodes (with the
constant nodes a lookup's table is made by, copied) into the embed model, whose outputs are those two products, and
makes them inputs of the decoder under the names transformers.js feeds: the decoder computes everything else (the
per-layer projection from ``inputs_embeds`` included) as before, on the same values. A graph that reads ``input_ids``
any other way is refused.

Shapes: input_ids [b, s] -> inputs_embeds [b, s, hidden], per_layer_inputs [b, s, num_layers * per_layer_width].
"""

from __future__ import annotations

import onnx
from onnx import helper

from ropeexport.errors import SpecError

IDS = "input_ids"
# the constant each lookup is scaled by -> the name transformers.js gives the embed model's output made so
OUTPUTS = {"embed_scale": "inputs_embeds", "per_layer_embed_scale": "per_layer_inputs"}
LOOKUPS = ("Gather", "GatherBlockQuantized")  # a table in the dtype; a tied head's int4 weights (com.microsoft)
EMBED = "embed_tokens"
DECODER = "decoder_model_merged"


def split(model: onnx.ModelProto) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(the embed model, the decoder fed its outputs) of a decoder graph (module doc); ``model`` is not changed."""
    graph = model.graph
    tables = {t.name: t for t in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    cuts: list[tuple[onnx.NodeProto, onnx.NodeProto, str]] = []  # (lookup, mul, the name its product takes)
    for gather in consumers.get(IDS, []):
        after = consumers.get(gather.output[0], [])
        if (gather.op_type not in LOOKUPS or gather.input[1] != IDS or len(after) != 1 or after[0].op_type != "Mul"
                or after[0].input[1] not in OUTPUTS):  # fmt: skip
            raise SpecError("decoder", f"its graph reads {IDS} in node {gather.name!r} ({gather.op_type}), not as a "
                            f"token lookup times {' or '.join(OUTPUTS)}: it cannot be split into {EMBED} and "
                            f"{DECODER}")  # fmt: skip
        cuts.append((gather, after[0], OUTPUTS[after[0].input[1]]))
    cuts.sort(key=lambda cut: cut[2])  # inputs_embeds first
    if sorted(name for _, _, name in cuts) not in (["inputs_embeds"], ["inputs_embeds", "per_layer_inputs"]):
        raise SpecError("decoder", f"its graph's token lookups give {sorted(n for _, _, n in cuts)}, not one "
                        "inputs_embeds (and at most one per_layer_inputs)")  # fmt: skip
    ids = next(v for v in graph.input if v.name == IDS)
    dtype = tables[cuts[0][1].input[1]].data_type  # the scale's: the activations' dtype
    batch, seq = (d.dim_param for d in ids.type.tensor_type.shape.dim)
    # the width: the table's second axis where the table is a tensor, else named (an int4 table is packed)
    produced = [helper.make_tensor_value_info(name, dtype, [batch, seq, tables[g.input[0]].dims[1]
                                                            if g.input[0] in tables else f"{name}_width"])
                for g, _, name in cuts]  # fmt: skip

    made = {o: n for n in graph.node for o in n.output}
    constant: list[onnx.NodeProto] = []  # the nodes a lookup's table is made by, in graph order
    wanted = [i for gather, mul, _ in cuts for i in (*gather.input, mul.input[1]) if i != IDS]
    while wanted:
        name = wanted.pop()
        node = made.get(name)
        if node is not None and all(id(node) != id(c) for c in constant):
            constant.append(node)
            wanted += [i for i in node.input if i]
    if any(IDS in node.input for node in constant):
        raise SpecError("decoder", f"a token lookup's table depends on {IDS}: it cannot be split into {EMBED}")
    order = {id(n): k for k, n in enumerate(graph.node)}
    nodes = sorted(constant, key=lambda n: order[id(n)])
    for gather, mul, name in cuts:
        nodes += [gather, helper.make_node("Mul", list(mul.input), [name], name=mul.name)]
    used = {i for n in nodes for i in n.input}
    embed = helper.make_model(
        helper.make_graph(nodes, EMBED, [ids], produced, [t for t in graph.initializer if t.name in used]),
        opset_imports=list(model.opset_import), ir_version=model.ir_version)  # fmt: skip

    decoder = onnx.ModelProto()
    decoder.CopyFrom(model)
    dropped = {id(n) for gather, mul, _ in cuts for n in (gather, mul)}  # by position: names may repeat or be empty
    renamed = {mul.output[0]: name for _, mul, name in cuts}
    kept = [c for n, c in zip(graph.node, decoder.graph.node, strict=True) if id(n) not in dropped]
    for node in kept:
        node.input[:] = [renamed.get(i, i) for i in node.input]
    outputs = {v.name for v in decoder.graph.output}
    while True:  # a node whose outputs nothing reads any more (a table made only for the lookup) goes too
        read = {i for n in kept for i in n.input} | outputs
        alive = [n for n in kept if any(o in read for o in n.output)]
        if len(alive) == len(kept):
            break
        kept = alive
    del decoder.graph.node[:]
    decoder.graph.node.extend(kept)
    inputs = [v for v in decoder.graph.input if v.name != IDS]
    del decoder.graph.input[:]
    decoder.graph.input.extend([*produced, *inputs])
    gone = {o for gather, mul, _ in cuts for o in (*gather.output, *mul.output)}
    shapes = [v for v in decoder.graph.value_info if v.name not in gone]
    del decoder.graph.value_info[:]
    decoder.graph.value_info.extend(shapes)
    read = {i for n in kept for i in n.input}  # a table the head still reads (a tied head) stays
    tables_kept = [t for t in decoder.graph.initializer if t.name in read]
    del decoder.graph.initializer[:]
    decoder.graph.initializer.extend(tables_kept)
    return embed, decoder
