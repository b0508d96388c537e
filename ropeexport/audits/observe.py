"""What cos/sin a site really uses for a call of length L: the model's own nodes evaluated, not read from its text.

The nodes that compute a site's cos and sin are cut out of the model (onnx-ir: outputs set to the pair, everything
else removed) and run in ONNX Runtime with the inputs of one call of L tokens at positions 0 .. L - 1: input_ids
and attention_mask [1, L] (ones), position_ids [1, L] (0 .. L - 1), an empty cache (past length 0). A site inside
subgraphs (``Site.scope``) is evaluated as if every If on its path took its branch and every Loop or Scan ran its
body once: the subgraphs on the path are inlined into the main graph (their nodes put before the node holding them,
their initializers made the main graph's), which evaluates exactly what the branch or body computes whenever it runs
(a site whose values depend on a body's own inputs is ``blocked`` and never gets here). The result, per site and L,
is cos and sin [rows, rotary_dim / 2] in float64 (values as stored):
- a table: the rows the operator reads for positions 0 .. L - 1: its position_ids input as the graph computes it
  (a second regime's row offset, say), or the positions themselves for GroupQueryAttention; every row the table has
  when that is all (the caller compares rows 0 .. L - 1; fewer rows is a finding);
- per-token values ([b, s, w], [b, 1, s, w], ...): the first batch row's L rows, the duplicated half (rotate-half:
  cat(f, f)) or pair (interleaved: repeat_interleave(f, 2)) removed when the width says so.

ONNX Runtime refusing the cut-out graph is ``NotEvaluated`` (the values cannot be computed apart from the model);
refusing one call is ``CallRefused`` (a position guard, a table too short): ``longest`` finds the longest call the
model takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits import axes
from ropeexport.audits.model import load_model, materialize, ort_reason, quiet
from ropeexport.audits.patterns.base import Site, Step, ancestors
from ropeexport.audits.sites import find_value, scope_graphs
from ropeexport.errors import SpecError


class NotEvaluated(Exception):  # noqa: N818 - a state the audit reports, not a failure of ropeexport
    """ONNX Runtime refuses the graph that computes a site's values; ``str``: its reason."""


class CallRefused(Exception):  # noqa: N818
    """ONNX Runtime refuses a call of ``length`` tokens (``reason``: its words)."""

    def __init__(self, length: int, reason: str) -> None:
        super().__init__(f"L = {length}: {reason}")
        self.length, self.reason = length, reason


def feed(value: ir.Value, length: int) -> np.ndarray:
    """One call's value for a graph input, by the names every exporter of decoders uses."""
    name = value.name or ""
    dtype = value.dtype.numpy() if value.dtype is not None else np.int64
    if name in ("input_ids", "attention_mask", "position_ids") or name.endswith(("position_ids", "attention_mask")):
        row = (np.arange(length) if "position" in name else np.ones(length)).astype(dtype).reshape(1, length)
        return axes.rows(row, value.shape) if "position" in name else row  # M-RoPE's [3, 1, L]: text, one row
    dims = [d if isinstance(d, int) else None for d in (value.shape or [])]
    if len(dims) == 4 and ("past" in name or "cache" in name):  # [b, heads, past, d]: no past
        # a declared 0 is a width too (a NoPE latent layer's rope key, Mistral Large 4's layer 3): fed 1 wide, ONNX
        # Runtime refuses every cut-out that reads it ("Got invalid dimensions ... Got: 1 Expected: 0")
        width = dims[3] if dims[3] is not None else 1
        return np.zeros((1, dims[1] or 1, 0, width), dtype)
    if name == "total_sequence_length":  # GroupQueryAttention's own inputs, when a graph takes them as given
        return np.array(length, dtype)
    if name == "seqlens_k":
        return np.array([length - 1], dtype)
    raise SpecError("model", f"the rotary site reads input {name!r}, which ropeexport cannot feed (it feeds "
                    "input_ids, attention_mask, position_ids, total_sequence_length, seqlens_k and empty past "
                    "caches)")  # fmt: skip


def inline(model: ir.Model, scope: tuple[Step, ...]) -> None:
    """The subgraphs ``scope`` names inlined into the main graph of ``model`` (module doc), outermost first."""
    chain = scope_graphs(model, scope)
    holders = [list(outer)[index] for outer, (index, _, _) in zip(chain, scope, strict=False)]
    main = model.graph
    taken = {v.name for v in (*main.inputs, *main.initializers.values(), *(o for n in main for o in n.outputs))}
    for holder, sub in zip(holders, chain[1:], strict=True):
        nodes = list(sub)
        sub.remove(nodes, safe=False)
        main.insert_before(holder, nodes)  # every value they read from outside is computed before their holder
        for value in (o for node in nodes for o in node.outputs):
            while value.name in taken:  # a subgraph may reuse an outer name; the main graph may not
                value.name = f"{value.name}__inlined"
            taken.add(value.name)
        for name in list(sub.initializers):
            value = sub.initializers.pop(name)
            while value.name in taken:
                value.name = f"{value.name}__inlined"
            taken.add(value.name)
            main.register_initializer(value)


def _cut(graph: ir.Graph) -> None:
    """Everything ``graph``'s outputs are not computed from removed: nodes, initializers (never read: a model's weights
    stay on disk), inputs. Judged by ``ancestors``, not by uses: a node left inside a removed If still uses its reads.
    """  # noqa: D205
    needed = ancestors(graph.outputs)
    graph.remove([n for n in graph if not any(id(o) in needed for o in n.outputs)], safe=False)
    for name in [n for n, v in graph.initializers.items() if id(v) not in needed]:
        graph.initializers.pop(name)
    kept = [v for v in graph.inputs if id(v) in needed]
    graph.inputs.clear()
    graph.inputs.extend(kept)


class Evaluator:
    """Evaluates sites of one model file; each site's cut-out graph is built once."""

    def __init__(self, path: Path, threads: int = 2) -> None:
        self.path, self.threads = path, threads
        self._sessions: dict[tuple[Any, ...], Any] = {}

    def _session(self, site: Site) -> Any:
        key = (site.scope, site.cos, site.sin, site.positions or "")
        if key not in self._sessions:
            import onnxruntime as ort

            model = load_model(self.path)
            chain = scope_graphs(model, site.scope)
            found = [find_value(chain, n) for n in (site.cos, site.sin, site.positions) if n]
            wanted = [v for v in found if v is not None]
            if len(wanted) != len(found):
                raise NotEvaluated(f"the values {site.cos!r} / {site.sin!r} are not in {site.where or 'the graph'}")
            inline(model, site.scope)
            model.graph.outputs.clear()
            model.graph.outputs.extend(_output_for(model.graph, v) for v in wanted)
            _cut(model.graph)
            materialize(model)  # the session is built from bytes: nothing may be left for ORT to read from disk
            options = quiet(self.threads)[0]
            proto = ir.serde.serialize_model(model)
            try:
                self._sessions[key] = ort.InferenceSession(proto.SerializeToString(), options,
                                                           providers=["CPUExecutionProvider"])  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - ORT's reason is what the audit reports
                raise NotEvaluated(ort_reason(exc)) from None
        return self._sessions[key]

    def evaluate(self, site: Site, length: int, width: int, axis: int | None = None,
                 ) -> tuple[np.ndarray, np.ndarray, str]:  # fmt: skip
        """cos and sin [rows, width] (float64) of ``site`` in a call of ``length`` tokens (module doc), and the
        dtype they are stored in (``float32``, ``float16``, ..); ``axis`` as ``raw``'s.
        """  # noqa: D205
        cos, sin, *rows = self.raw(site, length, axis)
        dtype = str(cos.dtype)
        cos, sin = _rows(cos, site, length, width), _rows(sin, site, length, width) * site.sign  # as applied
        if rows:  # the rows the operator reads for positions 0 .. L - 1 (a row past the table ends what is read)
            index = np.asarray(rows[0]).reshape(-1)[:length].astype(np.int64)
            inside = int(np.argmax(index >= len(cos))) if np.any(index >= len(cos)) else len(index)
            cos, sin = cos[index[:inside]], sin[index[:inside]]
        return cos, sin, dtype

    def raw(self, site: Site, length: int, axis: int | None = None) -> list[np.ndarray]:
        """The site's values as the model computes them in a call of ``length`` tokens: cos, sin (and the rows).
        ``axis``: an M-RoPE model's position axis counting 0 .. L - 1, the others at 0 (``axes.apart``).
        """  # noqa: D205
        session = self._session(site)
        feeds = session_feeds(session, length)
        if axis is not None:
            for name, value in feeds.items():
                if "position" in name and value.ndim == 3:
                    feeds[name] = axes.apart(length, axis).astype(value.dtype)
        try:
            return session.run(None, feeds, quiet()[1])
        except Exception as exc:  # noqa: BLE001 - a call the model refuses is a finding, in ORT's words
            raise CallRefused(length, ort_reason(exc)) from None

    def longest(self, site: Site, refused: int) -> int | None:
        """The longest call below ``refused`` tokens the site's graph takes (bisection), or None when not even one."""
        def takes(n: int) -> bool:
            try:
                self.raw(site, n)
            except CallRefused:
                return False
            return True

        if not takes(1):
            return None
        good, bad = 1, refused
        while bad - good > 1:
            middle = (good + bad) // 2
            good, bad = (middle, bad) if takes(middle) else (good, middle)
        return good


def evaluate_values(path: Path, names: list[str], length: int, threads: int = 2) -> list[np.ndarray]:
    """The main graph's values ``names`` of the model at ``path`` as it computes them in one call of ``length`` tokens
    at positions 0 .. L - 1 with an empty cache (``feed``): the nodes computing them cut out and run (module doc).
    """  # noqa: D205
    import onnxruntime as ort

    model = load_model(path)
    wanted = [find_value([model.graph], n) for n in names]
    if any(v is None for v in wanted):
        raise NotEvaluated(f"the values {names!r} are not all in the main graph")
    model.graph.outputs.clear()
    model.graph.outputs.extend(_output_for(model.graph, v) for v in wanted if v is not None)
    _cut(model.graph)
    materialize(model)
    proto = ir.serde.serialize_model(model)
    try:
        session = ort.InferenceSession(proto.SerializeToString(), quiet(threads)[0], providers=["CPUExecutionProvider"])
        return session.run(None, session_feeds(session, length), quiet()[1])
    except Exception as exc:  # noqa: BLE001 - ORT's reason is what the caller reports
        raise NotEvaluated(ort_reason(exc)) from None


def session_feeds(session: Any, length: int, given: Any = None) -> dict[str, np.ndarray]:
    """Feeds for every input of an ORT ``session``: ``given(value, length)`` (default ``feed``) of a value carrying
    the input's name, declared shape (None where symbolic) and dtype.
    """  # noqa: D205
    feeds = {}
    for value in session.get_inputs():
        holder = ir.Value(name=value.name, shape=ir.Shape([d if isinstance(d, int) else None for d in value.shape]))
        holder.dtype = _ort_dtype(value.type)
        feeds[value.name] = (given or feed)(holder, length)
    return feeds


def _output_for(graph: ir.Graph, value: ir.Value) -> ir.Value:
    """``value`` as a graph output (an initializer or input needs an Identity in front: an output is a node's)."""
    if value.producer() is not None:
        return value
    node = ir.node("Identity", [value], num_outputs=1)
    node.outputs[0].name = f"{value.name}__audit"
    graph.append(node)
    return node.outputs[0]


def _ort_dtype(text: str) -> ir.DataType:
    names = {"tensor(int64)": ir.DataType.INT64, "tensor(int32)": ir.DataType.INT32, "tensor(float)": ir.DataType.FLOAT,
             "tensor(float16)": ir.DataType.FLOAT16, "tensor(bool)": ir.DataType.BOOL}  # fmt: skip
    return names.get(text, ir.DataType.INT64)


def _rows(array: np.ndarray, site: Site, length: int, width: int) -> np.ndarray:
    """The values as [rows, width] float64 (module doc)."""
    a = np.asarray(array, dtype=np.float64)
    if site.table:
        return a.reshape(-1, a.shape[-1]) if a.ndim >= 2 else a.reshape(-1, 1)
    while a.ndim > 2:  # [b, (1,) s, w]: the first of each leading axis until [s, w]
        # [b, s, 1, w] (Gemma 3n's cos, unsqueezed for q in [b, s, heads, d]): its head axis first
        a = a[..., 0, :] if a.shape[-2] == 1 and a.shape[-3] > 1 else a[0]
    if a.shape[-1] == 2 * width:
        halves, pairs = a[:, :width], a[:, 0::2]
        if site.interleaved is not True and np.array_equal(halves, a[:, width:]):
            return halves
        if np.array_equal(pairs, a[:, 1::2]):
            return pairs
        if np.array_equal(halves, a[:, width:]):  # halves duplicated, read by an interleaved reader
            return halves
        return a  # neither duplicated: twice the width asked (a whole head rotated where the config rotates part)
    return a
