"""DeepSeek Sparse Attention's indexer audited and proven (``audits.indexer``): ropeexport's own DeepSeek V3.2 and
GLM-5 decoders in every form they build audit exact and pass the graft proof, its cached indexer keys fed; faults
planted in the indexer alone are each named as the indexer's, on its layers, and grafted and proven or refused.

Before (dev at 27f5bb9): the fused DeepSeek V3.2 decoder audited "findings" (its indexer's half-split rotation read as
a pairing fault against the attention's interleaved pairs, and its first 8 dims as the attention's nope dims: a
rope-slice fault), GLM-5's fused one a rope-slice fault; every indexer layer's rope slices unread; graft's proof
refused any model with ``past_key_values.{i}.index_key`` inputs by name. The tiny checkpoints (``tests.decoder.tiny``):
DeepSeek V3.2 with 2 layers (index_layout half), GLM-5 with 3 (interleaved; layer 1 "shared": no indexer of its own),
Mistral Large 4 with 4 (interleaved; layer 1 shared, layer 3 NoPE).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import ropeexport as rx
from tests.audits import indexer_planted as plant
from tests.audits import test_audit_latent as latent
from tests.audits.planted import graft_as_planted
from tests.audits.test_audit_latent import built

# per architecture: the layers with an indexer rotation of their own and its pairs (the config read as the
# architecture reads it: deepseek_v32's half, glm_moe_dsa's interleaved, its shared layer 1 none)
LAYOUTS = {"deepseek_v32": {"0": "half", "1": "half"}, "glm_moe_dsa": {"0": "interleaved", "2": "interleaved"}}
LAYERS = {"deepseek_v32": 2, "glm_moe_dsa": 3}
FORMS = [("fused", False), ("decomposed", False), ("decomposed", True)]  # (graph, latent cache)
CLEAN = [(name, graph, latent) for name in LAYOUTS for graph, latent in FORMS]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint) -> Callable[..., Path]:  # noqa: ANN001
    """``clean(name, graph, latent_cache)``: ropeexport's decoder of the tiny checkpoint, built once per module."""
    made: dict[tuple[str, str, bool], Path] = {}

    def get(name: str, graph: str = "fused", latent_cache: bool = False) -> Path:
        key = (name, graph, latent_cache)
        if key not in made:
            made[key] = built(tiny_checkpoint(name), tmp_path_factory.mktemp(f"clean-{name}"), graph,
                              latent_cache=latent_cache)  # fmt: skip
        return made[key]

    return get


@pytest.mark.parametrize(("name", "graph", "latent"), CLEAN, ids=[f"{n}-{g}{'-latent' * c}" for n, g, c in CLEAN])
def test_ropeexports_indexer_decoders_audit_exact_with_the_indexers_rotations_read_as_its_own(
        name: str, graph: str, latent: bool, tiny_checkpoint, clean: Callable[..., Path]) -> None:  # noqa: ANN001  # fmt: skip
    result = rx.audit(clean(name, graph, latent), tiny_checkpoint(name) / "config.json")
    assert result.verdict == "exact" and not result.findings, [(f["name"], f["text"]) for f in result.findings]
    assert result.layers["indexer"] == LAYOUTS[name], result.layers  # per layer its indexer's pairs, read
    own = [s for s in result.sites if s.get("indexer")]
    # one indexer site per indexer layer, its readers that layer's, paired as the layer's indexer pairs where read
    assert sorted(i for s in own for i in s["layers"]) == sorted(int(i) for i in LAYOUTS[name]), own
    assert all(s["interleaved"] in (None, LAYOUTS[name][str(s["layers"][0])] == "interleaved") for s in own), own
    assert all(s["probes"] and s["exact"] for s in result.sites), result.sites
    # the rope slices: the indexer's query and key rotate their FIRST 8 dims of 16, the attention's query its LAST 8
    slices = result.layers["rope_slices"]
    indexed = {(s["layer"], s["role"]): s.get("channels") for s in slices if s.get("indexer")}
    assert indexed == {(int(i), r): list(range(8)) for i in LAYOUTS[name] for r in "qk"}, slices
    queries = {s["layer"]: s.get("channels") for s in slices if s["role"] == "q" and not s.get("indexer")}
    assert queries == {i: list(range(8, 16)) for i in range(LAYERS[name])}, slices


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_the_graft_proof_feeds_the_indexers_key_cache_and_fails_when_it_is_not_the_truths(
        name: str, tiny_checkpoint, clean: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001  # fmt: skip
    # the clean build passes the proof (test_audit_own_decoders' PROVEN); here the indexer caches it feeds, their
    # width read from the graph ([batch, 1, past, 16], none for GLM-5's shared layer), and the control: the same build
    # fed other cached indexer keys than the recompute is given (zeros) fails, so the pass reads the cache it is fed
    from ropeexport.audits import prove

    ckpt = tiny_checkpoint(name)
    model = clean(name, "fused")
    proof = prove.DecoderProof(ckpt / "config.json", ckpt, model)
    fed = prove.Feeder(prove.Signature(model), proof.spec, model)
    assert {i: fed.index_width(i) for i in fed.indexed} == {int(i): 16 for i in LAYOUTS[name]}
    feeds = prove.Feeder.feeds

    def zeroed(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = feeds(self, *args, **kwargs)
        return {k: v * 0 if k.endswith("index_key") else v for k, v in out.items()}

    monkeypatch.setattr(prove.Feeder, "feeds", zeroed)
    run = proof.run({"built": model})
    assert not run["passed"]["built"], run


@dataclass(frozen=True)
class Planted(latent.Planted):
    """A fault planted in the indexer of ropeexport's decoder of ``name`` (``test_audit_latent.Planted``'s fields;
    ``build``: a context the build runs in): the findings it must be named by, each the indexer's, with ``words`` at
    the start of the first's; its effect as the audit measures it at least ``effect`` (0: not measured, an unread or
    unrepairable finding); graft's answer (``proven``, the refusal's words, or "": not run here).
    """  # noqa: D205

    build: Callable[[], Any] | None = None


HALVES, PAIRS = "halves (i, i + r/2: rotate_half)", "interleaved pairs (2i, 2i + 1)"
PLANTED = [
    # an exporter that reads the attention's pairing (V3.2's config has no rope_interleave) for the indexer too
    Planted("v32-interleaved", "deepseek_v32", ("pairing",), f"the indexer on layers 0-1: channels paired as {PAIRS} "
            f"(interleaved=1) where the config's indexer pairs {HALVES}", 0.1, "proven",
            edit=plant.layout("interleaved")),
    Planted("v32-interleaved-decomposed", "deepseek_v32", ("pairing",), f"the indexer on layers 0-1: channels paired "
            f"as {PAIRS} (read from its rotations) where the config's indexer pairs {HALVES}", 0.1, "proven",
            graph="decomposed", edit=plant.layout("interleaved")),
    # the reverse: GLM-5 exported with V3.2's half-split indexer
    Planted("glm-half", "glm_moe_dsa", ("pairing",), f"the indexer on layers 0, 2: channels paired as {HALVES} "
            f"(interleaved=0) where the config's indexer pairs {PAIRS}", 0.1, "proven", edit=plant.layout("half")),
    Planted("glm-half-decomposed", "glm_moe_dsa", ("pairing",), f"the indexer on layers 0, 2: channels paired as "
            f"{HALVES} (read from its rotations) where the config's indexer pairs {PAIRS}", 0.1, "proven",
            graph="decomposed", edit=plant.layout("half")),
    # the latent cache form: named alike, and grafted proven (the proof feeds its latent cache: ``truth.Cache``)
    Planted("glm-half-latent-cache", "glm_moe_dsa", ("pairing",), f"the indexer on layers 0, 2: channels paired as "
            f"{HALVES} (read from its rotations) where the config's indexer pairs {PAIRS}", 0.1, "proven",
            graph="decomposed", latent_cache=True, edit=plant.layout("half")),
    # the indexer's rope on its nope part (transformers splits q_rot first, the attention's rope part last)
    Planted("v32-rope-on-nope-part", "deepseek_v32", ("rope-slice",), "the indexer on layers 0-1 rotates its "
            "query's channels 8-15 of each 16-channel indexer head (its nope part: index_head_dim 16 past "
            "qk_rope_head_dim 8) where the config rotates the first 8 (qk_rope_head_dim)", 0.0,
            "does not change which channels a node rotates", plant=plant.rope_on_nope_part),
    # a wrong table in the indexer only (its own copy at theta 5e5), the attention's right
    Planted("v32-indexer-theta", "deepseek_v32", ("theta",), "the indexer on layers 0-1: theta 500000 where the "
            "config says 10000", 0.1, "proven", plant=plant.indexer_theta(5e5)),
    # Large 4's NoPE layer 3 given an indexer rotation (layer 0's), as an exporter rotating every indexer writes it;
    # (its learned query scale read right from the checkpoint beside the config: audits.learned_scale); grafted and
    # proven (its reusing layer 2 fed its indexer keys alone: prove.Feeder.reads; graft's short call gives layer 3's
    # rope key 0 wide as declared; before, the proof refused it and the short call fed it 8 wide: not run; 10 s, 8 s
    # without the graft)
    Planted("l4-indexer-on-nope-layer", "mistral_large4", ("nope-rotated",),
            "the indexer on layer 3 rotates where the config gives it no indexer rotation", 0.01, "proven",
            graph="decomposed", latent_cache=True, build=lambda: plant.rotated_nope_layer(3, 0)),
    # a scale between the indexer's projection and its rotation: the selection unchanged (a positive factor keeps
    # each query's order) but which channels it rotates cannot be read: said unread, never exact
    Planted("v32-slice-unread", "deepseek_v32", ("rope-slice-unread",), "the indexer on layers 0-1: which channels "
            "its query's rotation turns is not read (its values are not moved channels of the projection's output): "
            "not checked", 0.0, "a rotation turns was not read", plant=plant.query_scaled_before_rotation),
]  # fmt: skip


@pytest.mark.parametrize("bug", PLANTED, ids=[b.case for b in PLANTED])
def test_a_fault_planted_in_the_indexer_is_named_as_the_indexers_with_its_effect_and_grafted_or_refused(
        bug: Planted, tmp_path: Path, tiny_checkpoint) -> None:  # noqa: ANN001  # fmt: skip
    ckpt = tiny_checkpoint(bug.name)
    with bug.build() if bug.build is not None else contextlib.nullcontext():
        model = built(ckpt, tmp_path / "planted", bug.graph, edit=bug.edit, latent_cache=bug.latent_cache)
    if bug.plant is not None:
        bug.plant(model)
    result = rx.audit(model, ckpt / "config.json")
    named = [(f["name"], f["text"]) for f in result.findings]
    assert result.verdict == "findings" and sorted(f["name"] for f in result.findings) == sorted(bug.findings), named
    ours = [f for f in result.findings if f["name"] == bug.findings[0]]
    assert len(ours) == 1 and ours[0].get("indexer") and ours[0]["text"].startswith(bug.words), named
    assert ours[0]["layers"], ours  # each finding names its layers
    measured = ours[0]["effect"].get("relative")
    assert (measured is not None and measured > bug.effect) if bug.effect else measured is None, ours[0]["effect"]
    if bug.graft:
        graft_as_planted(model, ckpt / "config.json", ckpt, tmp_path / "fixed" / "model.onnx", bug.graft)


def test_an_indexer_model_audited_against_a_config_without_an_indexer_is_judged_by_the_attentions_pairs(
        tmp_path: Path, tiny_checkpoint, clean: Callable[..., Path]) -> None:  # noqa: ANN001  # fmt: skip
    # the control of ``Encodings.indexer``: the same fused V3.2 decoder against its config with the indexer's keys
    # taken out (a DeepSeek V3 reading) has its indexer's half-split pairs named against the attention's interleaved
    import json

    config = json.loads((tiny_checkpoint("deepseek_v32") / "config.json").read_text())
    kept = {k: v for k, v in config.items() if not k.startswith("index_") and k != "layer_types"}
    config = kept | {"model_type": "deepseek_v3"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    shutil.copy(clean("deepseek_v32", "fused"), tmp_path / "model.onnx")
    result = rx.audit(tmp_path / "model.onnx", tmp_path / "config.json", effects=False)
    assert "indexer" not in result.layers, result.layers
    texts = [f["text"] for f in result.findings if f["name"] == "pairing"]
    assert texts == [f"the indexer on layers 0-1: channels paired as {HALVES} (interleaved=0) where the config (which "
                     f"gives no indexer) pairs {PAIRS}"], result.findings  # fmt: skip
