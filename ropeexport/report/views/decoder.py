"""The view of a decoder's report.json (``decoder.kind.run_scenarios``: its scenarios from ``decoder.verify``, its
runtime records from ``decoder.runs``) and of a re-verified decoder's rows (``decoder.runs.rows``).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropeexport.errors import ArtifactError
from ropeexport.report.views.base import FLAG, LIST, NUMBER, OBJECT, TEXT, WHOLE, Field, View
from ropeexport.results import JsonObject


class CallError(View):
    """One call's logits against a reference, over its real slots: ``max_abs`` in logits, ``rel`` over the call's
    logit scale (``scale``: max |reference logit|).
    """  # noqa: D205

    max_abs = Field[float]("max_abs", NUMBER, "Largest |logit - reference logit|.")
    rel = Field[float]("rel", NUMBER, "max_abs over the logit scale (the figure a call is judged by).")
    scale = Field[float]("scale", NUMBER, "The logit scale: max |reference logit| of the call.")


class CallTokens(View):
    """The next token each row's last slot picks [b], by who computed the logits."""

    runtime = Field[list[int]]("runtime", LIST, "The runtime's picks [b].")
    float64 = Field[list[int]]("float64", LIST, "The float64 truth's [b].")
    transformers = Field[list[int] | None]("transformers", LIST, "transformers' [b], when it was compared.",
                                           optional=True)  # fmt: skip
    unquantized = Field[list[int] | None]("unquantized", LIST, "The unquantized recompute's [b] (int4 decoders).",
                                          optional=True)  # fmt: skip


class RoutingFlip(View):
    """A token a mixture of experts routed to its (k + 1)-th expert in place of its k-th, or a query whose DeepSeek
    Sparse Attention indexer selected its (k + 1)-th key in place of its k-th (``decoder.verify``).
    """  # noqa: D205

    layer = Field[int]("layer", WHOLE, "The layer.")
    row = Field[int]("row", WHOLE, "The batch row.")
    slot = Field[int]("slot", WHOLE, "The sequence slot (an indexer's: the query's).")
    margin = Field[float | None]("margin", NUMBER, "The float64 margin between the two experts (an indexer's: the "
                                 "two keys' scores).", nullable=True)  # fmt: skip
    key_in = Field[int | None]("key_in", WHOLE, "An indexer's flip: the key it took in (None: a router's flip).",
                               optional=True)  # fmt: skip
    key_out = Field[int | None]("key_out", WHOLE, "An indexer's flip: the key it left out (None: a router's flip).",
                                optional=True)  # fmt: skip


class CallRecord(View):
    """One call of a scenario, judged against the float64 truth (``decoder.verify.judge_call``)."""

    index = Field[int]("index", WHOLE, "The call's index in its scenario.")
    kind = Field[str]("kind", TEXT, "prefill, chunk, decode or re-prefill.")
    positions = Field[list[int]]("positions", LIST, "[first, last] position of the slots it computed.")
    length = Field[int]("L", WHOLE, "L = max(position_ids) + 1 of its longest row.")
    regime = Field[str]("regime", TEXT, "Its rows' regime ('long / short' when they differ).")
    stale_cache = Field[bool]("stale_cache", FLAG, "Every row read keys cached under another regime: the call is "
                              "that regime's cost, not judged.")  # fmt: skip
    float64 = Field[CallError]("float64", OBJECT, "Against the float64 truth (judged).", view=CallError)
    stale_rows = Field[list[int] | None]("stale_rows", LIST, "The rows that read stale keys, when only some did.",
                                         optional=True)  # fmt: skip
    regime_cost = Field[CallError | None]("regime_cost", OBJECT, "Those rows against the truth: the regime's cost.",
                                          optional=True, view=CallError)  # fmt: skip
    transformers = Field[CallError | None]("transformers", OBJECT, "Against transformers, when compared.",
                                           optional=True, view=CallError)  # fmt: skip
    transformers_vs_float64 = Field[CallError | None]("transformers_vs_float64", OBJECT, "transformers against "
                                                      "the truth, when compared.", optional=True,
                                                      view=CallError)  # fmt: skip
    quantization_cost = Field[CallError | None]("quantization_cost", OBJECT, "Against the recompute with the "
                                                "weights unquantized (int4 decoders): reported, not judged.",
                                                optional=True, view=CallError)  # fmt: skip
    tokens = Field[CallTokens]("tokens", OBJECT, "The next tokens picked.", view=CallTokens)
    margin = Field[float]("margin", NUMBER, "The smallest float64 top-2 margin over the rows.")
    near_ties = Field[list[int]]("near_ties", LIST, "Rows whose pick differs within their error: listed, not "
                                 "counted.")  # fmt: skip
    diverged_rows = Field[list[int]]("diverged_rows", LIST, "Rows whose pick differs from the truth's.")
    passed = Field[bool]("passed", FLAG, "Within the tolerance and no row diverged (or a stale call).")
    routing_flips = Field[list[RoutingFlip] | None]("routing_flips", LIST, "The near ties the truth took the other "
                                                    "way (a mixture of experts), when any.", optional=True,
                                                    view=RoutingFlip)  # fmt: skip


class ScenarioSummary(View):
    """A scenario's figures over its judged calls; errors are over the logit scale of each call."""

    calls = Field[int]("calls", WHOLE, "How many calls.")
    worst_rel = Field[float]("worst_rel", NUMBER, "The worst error over the logit scale against float64.")
    worst_abs = Field[float]("worst_abs", NUMBER, "The worst absolute logit error against float64.")
    agreement = Field[str]("agreement", TEXT, "'agreeing/rows': greedy picks equal to float64's (near ties out).")
    first_divergence = Field[int | None]("first_divergence", WHOLE, "The first call a row diverged at; None: none.",
                                         nullable=True)  # fmt: skip
    near_ties = Field[list[int]]("near_ties", LIST, "The calls with near ties.")
    re_prefills = Field[int]("re_prefills", WHOLE, "How many re-prefills a regime switch caused.")
    positions = Field[list[int]]("positions", LIST, "[first, last] position over every call.")
    regimes = Field[list[str]]("regimes", LIST, "The regimes the calls ran in, sorted.")
    routing_flips = Field[list[int] | None]("routing_flips", LIST, "The calls judged against a routing their near "
                                            "ties allow (a mixture of experts), when any.", optional=True)  # fmt: skip
    worst_rel_transformers = Field[float | None]("worst_rel_transformers", NUMBER, "The worst error over the logit "
                                                 "scale against transformers, when compared.",
                                                 optional=True)  # fmt: skip
    worst_rel_transformers_vs_float64 = Field[float | None]("worst_rel_transformers_vs_float64", NUMBER,
                                                            "transformers' own worst error against float64, when "
                                                            "compared.", optional=True)  # fmt: skip
    cost_rel = Field[float | None]("cost_rel", NUMBER, "The quantization cost over the logit scale (int4).",
                                   optional=True)  # fmt: skip
    cost_abs = Field[float | None]("cost_abs", NUMBER, "The quantization cost in logits (int4).", optional=True)
    cost_agreement = Field[str | None]("cost_agreement", TEXT, "'same/rows': picks equal to the unquantized "
                                       "recompute's (int4).", optional=True)  # fmt: skip
    regime_cost_rel = Field[float | None]("regime_cost_rel", NUMBER, "The worst stale-key error over the logit "
                                          "scale (the keep policy across a switch), when any.",
                                          optional=True)  # fmt: skip
    regime_cost_calls = Field[int | None]("regime_cost_calls", WHOLE, "How many calls (or stale row sets) that "
                                          "cost covers.", optional=True)  # fmt: skip


class ScenarioRecord(View):
    """One scenario: a greedy generation run through the runtime, every call judged (``decoder.verify``)."""

    name = Field[str]("name", TEXT, "The scenario: decode-64, chunked-prefill...")
    about = Field[str]("about", TEXT, "What it does, in words.")
    policy = Field[str]("policy", TEXT, "The cache policy at a regime switch: re-prefill or keep.")
    batch = Field[int]("batch", WHOLE, "Rows in the batch.")
    passed = Field[bool]("passed", FLAG, "Every call passed.")
    summary = Field[ScenarioSummary]("summary", OBJECT, "Its figures.", view=ScenarioSummary)
    calls = Field[list[CallRecord]]("calls", LIST, "Every call, in order.", view=CallRecord)


class DecoderRuntimeRecord(View):
    """``runtimes``: one runtime a decoder was verified on (``decoder.runs``), or skipped on."""

    name = Field[str]("name", TEXT, "The runtime's registry name.")
    status = Field[str]("status", TEXT, "'verified' or 'skipped'.")
    device = Field[str | None]("device", TEXT, "What ran (the runner's words); absent when skipped.", optional=True)
    reason = Field[str | None]("reason", TEXT, "Why it could not run here; absent when verified.", optional=True)
    passed = Field[bool | None]("passed", FLAG, "Every scenario passed on it; absent when skipped.", optional=True)
    seconds = Field[float | None]("seconds", NUMBER, "Its wall time; absent when skipped.", optional=True)
    worst_rel = Field[float | None]("worst_rel", NUMBER, "The worst error over the logit scale over its scenarios; "
                                    "None when it raised, absent when skipped.", optional=True,
                                    nullable=True)  # fmt: skip
    agreement = Field[str | None]("agreement", TEXT, "Greedy agreement over its scenarios; absent when skipped.",
                                  optional=True)  # fmt: skip
    error = Field[str | None]("error", TEXT, "What it raised on a valid call (it fails), when it did.",
                              optional=True)  # fmt: skip
    fallback = Field[bool]("fallback", FLAG, "It ran because no runtime named could (absent: False).",
                           optional=True, absent=False)  # fmt: skip
    scenarios = Field[list[ScenarioRecord] | None]("scenarios", LIST, "Its scenarios; absent in report.json for the "
                                                   "first verified runtime (they are the report's ``scenarios``).",
                                                   optional=True, view=ScenarioRecord)  # fmt: skip


class References(View):
    """``references``: what each figure is against, in words."""

    float64 = Field[str]("float64", TEXT, "The truth: the no-cache full recompute in float64.")
    transformers = Field[str]("transformers", TEXT, "transformers' eager model, or 'skipped: <why>'.")
    unquantized = Field[str | None]("unquantized", TEXT, "The quantization cost's reference (int4 decoders).",
                                    optional=True)  # fmt: skip


class DecoderTolerance(View):
    """``tolerance``: the bound a call's error is judged by."""

    rel = Field[float]("rel", NUMBER, "The bound on a call's error over its logit scale.")
    of = Field[str]("of", TEXT, "What the error is relative to (the logit scale).")


class DecoderReport(View):
    """A decoder's report.json (``decoder.kind.run_scenarios``): every scenario on each runtime asked for."""

    artifact = Field[str]("artifact", TEXT, "'decoder'.")
    name = Field[str]("name", TEXT, "The decoder's name.")
    ropeexport = Field[str]("ropeexport", TEXT, "The version that wrote it.")
    spec = Field[JsonObject]("spec", OBJECT, "The DecoderSpec's fields (decoder.json's ``spec``).")
    weights = Field[str]("weights", TEXT, "Where the weights came from: seeded, or checkpoint '<folder>'.")
    runtime = Field[str]("runtime", TEXT, "The first verified runtime's device, whose scenarios ``scenarios`` are.")
    runtimes = Field[list[DecoderRuntimeRecord]]("runtimes", LIST, "One record per runtime, in the order named, the "
                                                 "fallback last.", view=DecoderRuntimeRecord)  # fmt: skip
    references = Field[References]("references", OBJECT, "What the figures are against.", view=References)
    weight_format = Field[str]("weight_format", TEXT, "How projections are stored: fp32, or int4 (MatMulNBits...).")
    tolerance = Field[DecoderTolerance]("tolerance", OBJECT, "The bound and its unit.", view=DecoderTolerance)
    passed = Field[bool]("passed", FLAG, "A runtime ran and every one that ran passed.")
    seconds = Field[float]("seconds", NUMBER, "Wall time of the verification.")
    scenarios = Field[list[ScenarioRecord]]("scenarios", LIST, "The first verified runtime's scenarios.",
                                            view=ScenarioRecord)  # fmt: skip
    files = Field[JsonObject]("files", OBJECT, "{file name: sha256} of the decoder's files.")
    optimizer = Field[JsonObject | None]("optimizer", OBJECT, "What ONNX Runtime's optimizer did to the rotations "
                                         "(``audits.optimizer``): written by verify.", optional=True)  # fmt: skip

    def __init__(self, data: Mapping[str, Any], path: str = "", source: str = "report.json") -> None:
        super().__init__(data, path, source)
        if "artifact" in data and data["artifact"] != "decoder":
            raise ArtifactError(self.where("artifact"), f"is {data['artifact']!r}: read it as an EncodingReport")


class ScenarioRerun(View):
    """A row of ``DecoderVerifyResult.scenarios`` (``decoder.runs.rows``): one scenario now beside the stored one."""

    name = Field[str]("name", TEXT, "The scenario.")
    passed = Field[bool]("passed", FLAG, "It passed now.")
    worst_rel = Field[float]("worst_rel", NUMBER, "Its worst error over the logit scale now.")
    agreement = Field[str]("agreement", TEXT, "Its greedy agreement now.")
    stored_passed = Field[bool | None]("stored_passed", FLAG, "As stored; None: not in the stored report.",
                                       nullable=True)  # fmt: skip
    stored_worst_rel = Field[float | None]("stored_worst_rel", NUMBER, "As stored; None: not stored.", nullable=True)
    stored_agreement = Field[str | None]("stored_agreement", TEXT, "As stored; None: not stored.", nullable=True)
