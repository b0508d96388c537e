"""Faults planted in how one layer's rotations use cos and sin, in the graph forms exporters write, and the model run
as its users run it, independently of ropeexport's audit: what ``test_uses.py`` holds the audit's words and effects
against.

Forms (``FORMS``): ``computed``, torch.onnx.export (dynamo) of a tiny transformers model (its presents given back, as
users' exports give them): cos/sin computed from position_ids, each layer's q and k rotated as ``q * cos +
rotate_half(q) * sin``; ``gathered``, ropeexport's decomposed decoder: each layer's rows gathered from constant tables,
rotated as ``(xa cos - xb sin, xb cos + xa sin)`` of the halves; ``fused``, ropeexport's fused decoder: an opset-23
RotaryEmbedding per q and k; ``function``, the fused decoder with every RotaryEmbedding moved into a call of a
model-local function (named as the node was: the layer its call names).

Faults (``KINDS``), each on one layer: ``swap``, cos and sin exchanged where the rotations use them; ``sign``, the
rotation turned the other way (rotate(x) = (x2, -x1), or the sin table negated for a fused reader); ``pairing``, the
channels paired as interleaved pairs (2i, 2i + 1) where the config pairs halves; ``shift-qk``, the layer's cos/sin of
positions shifted by one for its q and its k alike (a translation, which cancels in q.k); ``shift-k``, the same for
its k alone (which does not).

``users_run``: a model on whole sequences of its context (positions 0 .. E - 1, an empty cache, several random
prompts), the worst 8-token window's max |logits - reference| over max |reference|: the independent measurement.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FORMS = ("computed", "gathered", "fused", "function")
DEAD = "planted_dead"  # a node an edit left unread, dropped when the graph is sorted
KINDS = ("swap", "sign", "pairing", "shift-qk", "shift-k")

EXPORT = r"""
import sys, torch, transformers
from transformers import DynamicCache
folder, out = sys.argv[1], sys.argv[2]
model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
cfg = model.config
n = cfg.num_hidden_layers
d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
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
        flat = []
        for layer in o.past_key_values.layers:
            flat += [layer.keys, layer.values]
        return (o.logits, *flat)
dyn = torch.export.Dim.DYNAMIC
past = [torch.zeros(1, kv, 5, d) for _ in range(2 * n)]
example = (torch.zeros(1, 3, dtype=torch.int64), torch.ones(1, 8, dtype=torch.int64),
           torch.arange(5, 8).reshape(1, 3), past)
names = [f"past_key_values.{i}.{t}" for i in range(n) for t in ("key", "value")]
outs = [f"present.{i}.{t}" for i in range(n) for t in ("key", "value")]
with torch.no_grad():
    torch.onnx.export(Flat(), example, out, dynamo=True, external_data=True,
                      dynamic_shapes=({1: dyn}, {1: dyn}, {1: dyn}, [{2: dyn}] * (2 * n)),
                      input_names=["input_ids", "attention_mask", "position_ids", *names],
                      output_names=["logits", *outs])
"""


def dynamo_export(checkpoint: Path, folder: Path) -> Path:
    """torch.onnx.export (dynamo) of the checkpoint with its cache given and given back, in its own process (a dynamo
    export leaves fake tensors in transformers' modules).
    """  # noqa: D205
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "model.onnx"
    done = subprocess.run([sys.executable, "-c", EXPORT, str(checkpoint), str(model)], capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    assert done.returncode == 0 and model.is_file(), done.stderr[-3000:]
    return model


def _layer(node: onnx.NodeProto) -> int | None:
    from ropeexport.audits.layers import layer_of

    return layer_of(node.name, {p.key: p.value for p in node.metadata_props})


class Graph:
    """A model's main graph with its producers and fresh names (what the plantings edit)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model, self.graph = model, model.graph
        self.made = {o: n for n in self.graph.node for o in n.output}
        self.inits = {t.name: t for t in self.graph.initializer}
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"planted_{stem}_{self.count}"

    def const(self, stem: str, array: np.ndarray) -> str:
        name = self.fresh(stem)
        self.graph.initializer.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: object) -> str:
        """A new node's output, appended (``sort`` puts the graph in order once every edit is made: rebuilding the
        node list would detach the nodes an edit holds).
        """  # noqa: D205
        out = self.fresh(op.lower())
        self.add(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def add(self, node: onnx.NodeProto) -> None:
        self.graph.node.add().CopyFrom(node)
        for output in node.output:
            self.made[output] = self.graph.node[len(self.graph.node) - 1]

    def sort(self) -> None:
        """The nodes in an order where each is after what it reads (Kahn's)."""
        ready = {i.name for i in self.graph.input} | {t.name for t in self.graph.initializer} | {""}
        waiting, ordered = [n for n in self.graph.node if n.name != DEAD], []
        while waiting:
            left = []
            for node in waiting:
                (ordered if all(i in ready for i in node.input) else left).append(node)
                if node in ordered:
                    ready.update(node.output)
            assert len(left) < len(waiting), [n.name for n in left][:5]
            waiting = left
        copies = [onnx.NodeProto() for _ in ordered]
        for copy, node in zip(copies, ordered, strict=True):
            copy.CopyFrom(node)
        del self.graph.node[:]
        self.graph.node.extend(copies)

    def producer(self, name: str) -> onnx.NodeProto | None:
        return self.made.get(name)


def _rotate_halves(g: Graph, x: str, width: int, interleaved: bool) -> str:
    """rotate(x) as new nodes: halves (-x2, x1) or interleaved pairs (-x_odd, x_even) (x [b, h, s, width])."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    if not interleaved:
        hi = g.node("Slice", [x, g.const("s", i64(width // 2)), g.const("e", i64(width)), g.const("a", i64(-1))])
        lo = g.node("Slice", [x, g.const("s", i64(0)), g.const("e", i64(width // 2)), g.const("a", i64(-1))])
        return g.node("Concat", [g.node("Neg", [hi]), lo], axis=-1)
    even = g.node("Slice", [x, g.const("s", i64(0)), g.const("e", i64(width)), g.const("a", i64(-1)),
                            g.const("t", i64(2))])  # fmt: skip
    odd = g.node("Slice", [x, g.const("s", i64(1)), g.const("e", i64(width)), g.const("a", i64(-1)),
                           g.const("t", i64(2))])  # fmt: skip
    axis = g.const("u", i64(-1))
    pairs = g.node("Concat", [g.node("Unsqueeze", [g.node("Neg", [odd]), axis]),
                              g.node("Unsqueeze", [even, axis])], axis=-1)  # fmt: skip
    return g.node("Reshape", [pairs, g.const("shape", i64(0, 0, 0, width))])


# --- computed: transformers' q * cos + rotate_half(q) * sin, as dynamo exports it ----------------------------------


def _computed_rotations(g: Graph, layer: int) -> list[dict[str, object]]:
    """The layer's rotations in node order (q, then k): the Add, its Mul of x (``mx``, x and cos at ``xi`` / ``ci``)
    and its Mul of rotate_half(x) (``mr``, R and sin), the Concat and Neg making R, x.
    """  # noqa: D205
    found = []
    for add in g.graph.node:
        if add.op_type != "Add" or _layer(add) != layer:
            continue
        muls = [g.producer(i) for i in add.input]
        if any(m is None or m.op_type != "Mul" for m in muls):
            continue
        for mx, mr in (muls, muls[::-1]):
            concat = next((g.producer(i) for i in mr.input if g.producer(i) is not None
                           and g.producer(i).op_type == "Concat"), None)  # fmt: skip
            neg = g.producer(concat.input[0]) if concat is not None else None
            if neg is None or neg.op_type != "Neg":
                continue
            x = g.producer(neg.input[0]).input[0]  # the Slice of x's upper half
            if x not in mx.input:
                continue
            found.append({"add": add, "mx": mx, "mr": mr, "concat": concat, "neg": neg, "x": x,
                          "xi": list(mx.input).index(x), "ri": list(mr.input).index(concat.output[0])})  # fmt: skip
            break
    return found


def _shifted_angles(g: Graph, values: list[str]) -> dict[str, str]:
    """Copies of the nodes computing ``values`` from position_ids, fed position_ids + 1: value -> its copy."""
    plus = g.node("Add", ["position_ids", g.const("one", np.array(1, np.int64))])
    wanted, stack = set(), list(values)
    while stack:  # the nodes between position_ids and the values
        node = g.producer(stack.pop())
        if node is None or id(node) in wanted:
            continue
        wanted.add(id(node))
        stack += list(node.input)
    renamed = {"position_ids": plus}
    for node in [n for n in g.graph.node if id(n) in wanted]:
        if not any(i in renamed for i in node.input):
            continue  # does not depend on position_ids: shared as it is
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = g.fresh("shifted")
        copy.input[:] = [renamed.get(i, i) for i in node.input]
        copy.output[:] = [renamed.setdefault(o, g.fresh("shifted")) for o in node.output]
        g.add(copy)
    return {v: renamed[v] for v in values}


def _plant_computed(g: Graph, kind: str, layer: int, width: int) -> None:
    rotations = _computed_rotations(g, layer)
    assert len(rotations) == 2, rotations
    for k, rot in enumerate(rotations):
        mx, mr, concat, neg = rot["mx"], rot["mr"], rot["concat"], rot["neg"]
        ci, si = 1 - rot["xi"], 1 - rot["ri"]
        if kind == "swap":
            mx.input[ci], mr.input[si] = mr.input[si], mx.input[ci]
        elif kind == "sign":  # (-x2, x1) -> (x2, -x1)
            upper, lower = neg.input[0], concat.input[1]
            neg.input[0] = lower
            concat.input[:] = [upper, neg.output[0]]
        elif kind == "pairing":
            mr.input[rot["ri"]] = _rotate_halves(g, rot["x"], width, interleaved=True)
        elif kind == "shift-qk" or (kind == "shift-k" and k == 1):
            copies = _shifted_angles(g, [mx.input[ci], mr.input[si]])
            mx.input[ci], mr.input[si] = copies[mx.input[ci]], copies[mr.input[si]]


# --- gathered: ropeexport's decomposed form --------------------------------------------------------------------------


def _gathered_rotations(g: Graph, layer: int) -> list[dict[str, object]]:
    """The layer's rotations (q: ``query_out``, k: ``key_out``): the Concat of (Sub, Add) and the nodes around it."""
    found = []
    for role in ("query_out", "key_out"):
        concat = next(n for n in g.graph.node if n.name == f"layers.{layer}/rope/{role}_node")
        sub, add = (g.producer(i) for i in concat.input)
        muls = [g.producer(i) for i in (*sub.input, *add.input)]
        entries = {}
        for mul in muls:
            for name in mul.input:
                made = g.producer(name)
                if made is not None and made.op_type == "Unsqueeze":
                    entries[made.name] = made
        cos, sin = sorted(entries.values(), key=lambda n: "sin" in n.input[0])
        split = g.producer(muls[0].input[0])
        found.append({"concat": concat, "sub": sub, "add": add, "cos": cos, "sin": sin, "split": split})
    return found


def _shifted_table(g: Graph, table: str, sin: bool) -> str:
    """A copy of ``table`` whose row p holds position p - 1 (row 0: position -1, from row 1: cos(-a) = cos a,
    sin(-a) = -sin a).
    """  # noqa: D205
    array = numpy_helper.to_array(g.inits[table])
    first = -array[1:2] if sin else array[1:2]
    return g.const("shifted_table", np.concatenate([first, array[:-1]]).astype(array.dtype))


def _shift_gathered(g: Graph, rotations: list[dict[str, object]], alone: bool) -> None:
    """The rotations' rows gathered from tables shifted by one (``_shifted_table``): q's and k's alike through one new
    pair of Gathers in place of the layer's (``alone`` False), or k's alone through its own pair, of its own rows
    (an Identity of them: a pair of gathers per rows value is what the gathered form is).
    """  # noqa: D205
    chosen = rotations[1:] if alone else rotations
    old = [g.producer(chosen[0][part].input[0]) for part in ("cos", "sin")]
    rows = old[0].input[1]
    if alone:
        rows = g.node("Identity", [rows])
    made = {part: g.node("Gather", [_shifted_table(g, gather.input[0], part == "sin"), rows], axis=0)
            for part, gather in zip(("cos", "sin"), old, strict=True)}  # fmt: skip
    for rotation in chosen:
        rotation["cos"].input[0], rotation["sin"].input[0] = made["cos"], made["sin"]
    if not alone:  # the layer's own gathers, read by nothing now: dropped by ``sort``
        for gather in old:
            gather.name = DEAD


def _plant_gathered(g: Graph, kind: str, layer: int, width: int) -> None:
    rotations = _gathered_rotations(g, layer)
    if kind in ("shift-qk", "shift-k"):
        _shift_gathered(g, rotations, kind == "shift-k")
        return
    for rot in rotations:
        cos, sin, sub, add = rot["cos"], rot["sin"], rot["sub"], rot["add"]
        if kind == "swap":
            cos.input[0], sin.input[0] = sin.input[0], cos.input[0]
        elif kind == "sign":  # (xa c - xb s, xb c + xa s) -> (xa c + xb s, xb c - xa s)
            sub.op_type, add.op_type = "Add", "Sub"
        elif kind == "pairing":  # the halves taken as interleaved pairs, and put back so
            split, concat = rot["split"], rot["concat"]
            i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
            data, halves = split.input[0], list(split.output)
            split.name = DEAD  # the halves are taken as pairs below
            for part, start in zip(halves, (0, 1), strict=True):
                g.add(helper.make_node("Slice", [data, g.const("s", i64(start)), g.const("e", i64(width)),
                                                 g.const("a", i64(-1)), g.const("t", i64(2))], [part],
                                       name=g.fresh("pairs")))  # fmt: skip
            out = concat.output[0]
            concat.name = DEAD  # the pairs are put back below
            axis = g.const("u", i64(-1))
            pairs = g.node("Concat", [g.node("Unsqueeze", [sub.output[0], axis]),
                                      g.node("Unsqueeze", [add.output[0], axis])], axis=-1)  # fmt: skip
            g.add(helper.make_node("Reshape", [pairs, g.const("shape", i64(0, 0, 0, width))], [out],
                                   name=g.fresh("merge")))  # fmt: skip


# --- fused and function: RotaryEmbedding (opset 23) ------------------------------------------------------------------


def _plant_fused(g: Graph, kind: str, layer: int) -> None:
    for k, role in enumerate(("query_out", "key_out")):
        node = next(n for n in g.graph.node if n.name == f"layers.{layer}/rope/{role}_node")
        if kind == "swap":
            node.input[1], node.input[2] = node.input[2], node.input[1]
        elif kind == "sign":
            node.input[2] = g.const("negated_sin", -numpy_helper.to_array(g.inits[node.input[2]]))
        elif kind == "pairing":
            kept = [a for a in node.attribute if a.name != "interleaved"]
            del node.attribute[:]
            node.attribute.extend([*kept, helper.make_attribute("interleaved", 1)])
        elif kind == "shift-qk" or (kind == "shift-k" and k == 1):
            node.input[1] = _shifted_table(g, node.input[1], False)
            node.input[2] = _shifted_table(g, node.input[2], True)


def in_functions(model: onnx.ModelProto) -> None:
    """Every RotaryEmbedding moved into a call of the model-local function local:Rot, named as the node was."""
    opsets = [helper.make_opsetid("", 23)]
    functions = {}
    for index, node in enumerate(list(model.graph.node)):
        if node.op_type != "RotaryEmbedding":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        key = "Rot_" + "_".join(f"{k}{v}" for k, v in sorted(attrs.items()))
        if key not in functions:
            body = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], **attrs)
            functions[key] = helper.make_function("local", key, ["x", "cos", "sin", "pos"], ["y"], [body], opsets)
        call = helper.make_node(key, list(node.input), list(node.output), name=node.name, domain="local")
        model.graph.node[index].CopyFrom(call)
    model.functions.extend(functions.values())
    model.opset_import.append(helper.make_opsetid("local", 1))


def plant(source: Path, target: Path, form: str, kind: str, layer: int, width: int) -> Path:
    """``source`` with the fault ``kind`` planted on ``layer`` (module doc), written to ``target`` (weights beside)."""
    model = onnx.load(str(source))
    g = Graph(model)
    if form == "computed":
        _plant_computed(g, kind, layer, width)
    elif form == "gathered":
        _plant_gathered(g, kind, layer, width)
    else:
        _plant_fused(g, kind, layer)
    g.sort()
    if form == "function":
        in_functions(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target), save_as_external_data=True, location=f"{target.name}.data")
    return target


def save_as(source: Path, target: Path, change: object = None) -> Path:
    """A copy of ``source`` (``change(model)`` applied) written to ``target`` with its weights beside."""
    model = onnx.load(str(source))
    if callable(change):
        change(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target), save_as_external_data=True, location=f"{target.name}.data")
    return target


def users_run(model: Path, reference: Path, positions: int, prompts: int = 3) -> float:
    """The independent measurement (module doc): the worst 8-token window over ``prompts`` random prompts of
    ``positions`` tokens, each model called once per prompt on the whole sequence with an empty cache.
    """  # noqa: D205
    import onnxruntime as ort

    worst = 0.0
    got: dict[str, list[np.ndarray]] = {}
    for path in (model, reference):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        inputs = {i.name: i for i in session.get_inputs()}
        vocab = session.get_outputs()[0].shape[-1]
        rng = np.random.default_rng(12345)
        got[str(path)] = []
        for _ in range(prompts):
            ids = rng.integers(0, vocab, (1, positions))
            feeds = {"input_ids": ids, "attention_mask": np.ones((1, positions), np.int64),
                     "position_ids": np.arange(positions).reshape(1, positions)}  # fmt: skip
            for name, value in inputs.items():
                if name.startswith("past"):
                    heads, width = value.shape[1], value.shape[3]
                    feeds[name] = np.zeros((1, heads, 0, width), np.float32)
            feeds = {k: v for k, v in feeds.items() if k in inputs}
            got[str(path)].append(session.run(["logits"], feeds)[0][0].astype(np.float64))
        del session
    for a, b in zip(got[str(model)], got[str(reference)], strict=True):
        for start in range(0, positions - 7, 8):
            window = slice(start, start + 8)
            scale = np.max(np.abs(b[window]))
            worst = max(worst, float(np.max(np.abs(a[window] - b[window])) / scale))
    return worst


__all__ = ["FORMS", "KINDS", "TensorProto", "dynamo_export", "in_functions", "plant", "save_as", "users_run"]


def users_run_cached(model: Path, reference: Path, positions: int, chunk: int = 512, draws: int = 3) -> float:
    """The independent measurement of a long context (module doc), its own cache fed back: a prompt of
    ``positions`` - 8 random tokens in calls of ``chunk``, each given the presents of the call before, then
    ``draws`` calls of 8 random tokens at the far end from that cache; the worst 8-token window (of the prompt and of
    the draws) of max |logits - reference| over max |reference|. One session at a time.
    """  # noqa: D205
    import onnxruntime as ort

    got: dict[Path, list[np.ndarray]] = {}
    for path in (model, reference):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        outputs = [o.name for o in session.get_outputs()]
        vocab = session.get_outputs()[0].shape[-1]
        rng = np.random.default_rng(54321)
        prompt = rng.integers(0, vocab, positions - 8)
        past = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
                for i in session.get_inputs() if i.name.startswith("past")}  # fmt: skip
        done, logits = 0, []
        while done < len(prompt):
            ids = prompt[done : done + chunk]
            feeds = {"input_ids": ids[None], "attention_mask": np.ones((1, done + len(ids)), np.int64),
                     "position_ids": np.arange(done, done + len(ids))[None], **past}  # fmt: skip
            out = dict(zip(outputs, session.run(None, feeds), strict=True))
            logits.append(out["logits"][0])
            past = {name: out[name.replace("past_key_values", "present")] for name in past}
            done += len(ids)
        whole = np.concatenate(logits)
        got[path] = [whole[start : start + 8] for start in range(0, len(whole) - 7, 8)]
        for _ in range(draws):
            feeds = {"input_ids": rng.integers(0, vocab, (1, 8)), "attention_mask": np.ones((1, done + 8), np.int64),
                     "position_ids": np.arange(done, done + 8)[None], **past}  # fmt: skip
            got[path].append(session.run(["logits"], feeds)[0][0])
        del session
    return max(float(np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b.astype(np.float64))))
               for a, b in zip(got[model], got[reference], strict=True))  # fmt: skip
