"""Every decoder ropeexport builds, in every graph form, audits exact against its checkpoint's config.

Built from the tiny random checkpoints of ``tests.decoder.tiny`` (every architecture, each schedule), without the
generation scenarios (``tests/decoder`` verifies those). BLOOM's ALiBi is what the audit missed before: the fused,
tensorrt and gqa forms add the bias inside a fused attention (no Softmax to anchor on), and BLOOM's config has no
length of its own, so the audit now reads the positions the model was built for from its ``ropeexport.max_positions``
metadata (the config's import said 4096 where the build used 2048, and the model's guard refused the probe). Slopes
planted in reverse head order are found in every form: the site found is the bias the model uses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import ropeexport as rx
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.checkpoint import load_checkpoint
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.spec import FORMS
from ropeexport.graph.onnx_io import save_model
from tests.cases import tiered
from tests.decoder.tiny import CONFIGS, VARIANTS

# Gemma 2 has no tensorrt form (TensorRT cannot cap attention logits), nor DeepSeek V3 (latent attention's keys and
# values differ in width). Gemma 3's layers use two encodings and SmolLM3's leave some layers unrotated: each site is
# checked against the encoding of the layers reading it.
NO_TENSORRT = ("gemma2", "deepseek_v3", "glm4_moe_lite", "mistral4", "deepseek_v2")
# GLM-4.7-Flash's, Mistral 4's and DeepSeek V2's latent attention is DeepSeek V3's component, audited above in every
# form: their decoders in one (CI time)
ONE_FORM = {"glm4_moe_lite": "fused", "mistral4": "fused", "deepseek_v2": "fused"}
# DeepSeek V3.2 and GLM-5 are audited in tests/audits/test_audit_indexer.py (every form they build, exact): their
# indexer layers read two rotary sites of one kind (the attention's and the indexer's), which the count of sites per
# kind below does not take. Their graft proof (its indexer keys fed) is a row of PROVEN.
NOT_AUDITED = ("deepseek_v32", "glm_moe_dsa")
# Gemma 4 as 26B-A4B's shape (``tests.decoder.tiny.VARIANTS``: the dense tiny gemma4 with the mixture beside every
# MLP) in place of the dense one: the same rotations, read among the router's, the experts' and their norms' nodes
CASES = [(name if name != "gemma4" else "gemma4-moe", form) for name in CONFIGS for form in FORMS
         if not (name in NO_TENSORRT and form == "tensorrt") and ONE_FORM.get(name, form) == form
         and name not in NOT_AUDITED]  # fmt: skip
# Fast tier: BLOOM in every form, a RoPE decoder of each site kind the forms make (fused operator, gathered table), and
# the per-layer decoders (two encodings; layers without RoPE; gpt-oss's sinks, windows and YaRN untruncated) in one
# form each
FAST = {("bloom", form) for form in FORMS} | {("phi3-longrope", "gqa"), ("llama", "decomposed"), ("gemma3", "fused"),
                                              ("smollm3-nope", "decomposed"), ("gpt_oss", "gqa")}  # fmt: skip


def _decoder(folder: Path, ckpt: Path, graph: str, latent_cache: bool = False) -> Path:
    """The decoder's model.onnx as ``build --artifact decoder`` writes it, without running its scenarios."""
    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph=graph, latent_cache=latent_cache))
    save_model(build_decoder_graph(spec, load_checkpoint(spec, ckpt), str(ckpt)), folder)
    return folder / "model.onnx"


@pytest.mark.parametrize(("name", "graph"), tiered(CASES, lambda c: c in FAST), ids=[f"{n}-{g}" for n, g in CASES])
def test_every_decoder_ropeexport_builds_audits_exact(name: str, graph: str, tmp_path: Path, tiny_checkpoint) -> None:  # noqa: ANN001
    ckpt = tiny_checkpoint(name)
    model = _decoder(tmp_path, ckpt, graph)
    result = rx.audit(model, ckpt / "config.json")
    assert result.verdict == "exact", [(s["kind"], f["text"]) for s in result.sites for f in s["findings"]]
    declared = {p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}
    assert result.spec["max_positions"] == int(declared["ropeexport.max_positions"])
    alibi = (CONFIGS | VARIANTS)[name][0] == "bloom"
    assert result.sites and all((s["kind"] == "ALiBi bias") == alibi for s in result.sites), result.sites
    if name in ("deepseek_v3", "glm4_moe_lite", "mistral4", "deepseek_v2", "llama4"):  # rope slices, NoPE, scales
        from tests.audits.test_audit_latent import read_right

        read_right(result, name)
    assert all(s["probes"] and not s["findings"] for s in result.sites)
    assert not result.findings
    if not alibi:  # every site's readers name their layer; each layer the config rotates reads one of each kind
        # (the gqa form's decode steps rotate in GroupQueryAttention, its prompts with RotaryEmbedding: one table, two
        # kinds of reader in each such layer), and only those
        config = rx.from_hf_config(ckpt / "config.json")
        by_kind: dict[str, list[int]] = {}
        for site in result.sites:
            by_kind.setdefault(site["kind"], []).extend(site["layers"])
        groups = {g["label"]: g["layers"] for g in result.layers["groups"]}
        for kind, found in by_kind.items():
            expected = sorted(i for layers in groups.values() for i in layers) or list(range(len(found)))
            assert sorted(found) == expected, (kind, found, groups)
        assert len(result.layers["groups"]) == len(config)
        for site in result.sites:  # checked against its own layers' encoding
            assert all(i in groups[site["checked_as"][0]] or not groups[site["checked_as"][0]] for i in site["layers"])


@pytest.mark.parametrize("graph", FORMS)
def test_wrong_slopes_in_ropeexports_bloom_decoder_are_found_in_every_form(
    graph: str,
    tmp_path: Path,
    tiny_checkpoint,  # noqa: ANN001
) -> None:
    ckpt = tiny_checkpoint("bloom")
    model = _decoder(tmp_path, ckpt, graph)
    proto = onnx.load(str(model))
    (slopes,) = [t for t in proto.graph.initializer if t.name.endswith("slopes")]
    slopes.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(numpy_helper.to_array(slopes)[:, ::-1]), slopes.name))
    onnx.save(proto, str(model))
    result = rx.audit(model, ckpt / "config.json")
    assert result.verdict == "findings" and result.sites
    for site in result.sites:
        assert [f["name"] for f in site["findings"]] == ["alibi-slopes"], site["findings"]
        assert "in reverse head order" in site["findings"][0]["text"]


# The graft proof's float64 recompute takes each layer's own encoding: every architecture's own decoder passes it.
PROVEN_FAST = ("gemma2", "gemma3", "smollm3-nope", "qwen3", "gpt_oss")


# (name, graph, latent cache): every architecture fused, and latent attention's latent cache (decomposed: the form
# that builds it), fed as the model takes it (the latent and the rotated rope key, ``truth.Cache``), with and without
# an indexer, and Mistral Large 4's, whose reusing layer 2 has its indexer keys alone as cache inputs (fed them; it and
# the recompute read its source layer 0's latent: ``Feeder.reads``; refused by the proof before, in one line). Gemma
# 4's shared layers (no cache inputs of their own: refused before, as Large 4's) read their source's alike.
PROVEN = [(name, "fused", False) for name in [*CONFIGS, "gemma4-shared"]] + [
    (name, "decomposed", True) for name in ("deepseek_v3", "glm_moe_dsa", "mistral_large4")]  # fmt: skip


@pytest.mark.parametrize(("name", "graph", "latent"), tiered(PROVEN, lambda c: c[0] in PROVEN_FAST),
                         ids=[f"{n}{'-latent-cache' * c}" for n, _, c in PROVEN])  # fmt: skip
def test_the_graft_proof_judges_every_decoder_ropeexport_builds(name: str, graph: str, latent: bool, tmp_path: Path,
                                                                tiny_checkpoint) -> None:  # noqa: ANN001  # fmt: skip
    from ropeexport.audits.prove import DecoderProof

    ckpt = tiny_checkpoint(name)
    model = _decoder(tmp_path, ckpt, graph, latent)
    proof = DecoderProof(ckpt / "config.json", ckpt, model)
    assert proof.cache == ("latent" if latent else "expanded")  # read from the model's cache inputs
    run = proof.run({"built": model})
    assert run["passed"]["built"] and run["calls_run"]["built"] >= 2, run
