"""Greedy generation by onnxruntime-genai (``ropeexport generate DIR --engine onnxruntime-genai``).

The decoder folder is checked as for ropeexport's own loop (``serve.DecoderSession`` without a runtime: the files'
sha256, the prompt's ids and positions), then onnxruntime-genai 0.18 opens the folder itself (``og.Model``: its
``genai_config.json``, written by the build where it can serve the decoder: ``genai.unservable``) and runs its own
loop: a prompt at positions 0 .. n - 1 (it feeds cumsum(attention_mask) - 1), its cache kept across a RoPE regime
switch (the ``keep`` policy), generation stopped at the config's end-of-sequence id. A decoder it cannot serve (latent
attention's two cache widths, Gemma 4's head size per layer or shared key/value layers) is one line naming why, exit
2, before onnxruntime-genai is asked: asked, it answers a folder without genai_config.json with "Model package support
requires building onnxruntime-genai against ONNX Runtime with the OrtModelPackageApi experimental functions"
(0.18.0, measured), which says nothing of the model.

Timings are wall-clock per call of onnxruntime-genai (``append_tokens`` and the first ``generate_next_token``: the
prefill; each later ``generate_next_token``: a decode step), as ``serve`` times its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import numpy as np

from ropeexport.decoder.genai import unservable
from ropeexport.decoder.scenarios import regime
from ropeexport.decoder.serve import TOKENIZER, DecoderSession, Generation, Step, text_positions
from ropeexport.errors import RuntimeUnavailable, SpecError

ENGINES = ("ort", "onnxruntime-genai")


def genai_generate(
    session: DecoderSession,
    prompt: Sequence[int],
    max_new_tokens: int,
    position_offset: int = 0,
    policy: str | None = None,
) -> Generation:
    """onnxruntime-genai's greedy tokens after ``prompt`` (module doc); SpecError naming the field for what it cannot
    do (the decoder, an offset, the re-prefill policy), RuntimeUnavailable when it is not installed.
    """  # noqa: D205
    why = unservable(session.spec)
    if why:
        raise SpecError("engine", f"onnxruntime-genai cannot serve {session.spec.name}: {why}; generate with "
                        "--engine ort (ONNX Runtime, ropeexport's loop)")  # fmt: skip
    if position_offset:
        raise SpecError("position_offset", "must be 0 with onnxruntime-genai: it places a prompt at positions 0 .. "
                        "n - 1 (cumsum of its attention mask); --engine ort takes an offset")  # fmt: skip
    if policy not in (None, "keep"):
        raise SpecError("policy", f"onnxruntime-genai keeps its cache across a RoPE regime switch (keep), got "
                        f"{policy!r}; --engine ort re-prefills")  # fmt: skip
    ids = session.check(prompt, max_new_tokens, 0)
    tokenizer = session.tokenizer() if (session.folder / TOKENIZER).is_file() else None
    try:
        import onnxruntime_genai as og
    except ImportError:
        raise RuntimeUnavailable("onnxruntime-genai is not installed (pip install -c constraints.txt "
                                 "onnxruntime-genai; the test extra has it)") from None  # fmt: skip
    config = og.Config(str(session.folder))
    if session.threads is not None:  # the package's own session options, overridden for this run only
        options = {"intra_op_num_threads": session.threads, "log_id": "onnxruntime-genai", "provider_options": []}
        config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
    model = og.Model(config)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + max_new_tokens, do_sample=False)
    generator = og.Generator(model, params)
    position = session.position
    steps: list[Step] = []
    new: list[int] = []
    start = time.perf_counter()
    generator.append_tokens(np.array([ids], np.int32))
    while not generator.is_done():
        generator.generate_next_token()
        token = int(generator.get_next_tokens()[0])
        seconds, start = time.perf_counter() - start, time.perf_counter()
        last = len(ids) + len(new) - 1  # the position whose logits chose the token
        first = 0 if not new else last
        steps.append(Step("prefill" if not new else "decode", first, last, last - first + 1,
                          regime(position, last + 1), seconds, token))  # fmt: skip
        new.append(token)
    text = None if tokenizer is None else tokenizer.decode(new)
    # it stops early only at its config's eos_token_id (a stand-in id where the checkpoint's lies outside the
    # vocabulary: ``genai.genai_config``)
    return Generation(ids, new, steps, 0, "keep", session.threads, session.max_positions, text, session.spec.name,
                      len(new) < max_new_tokens, text_positions(session.spec))  # fmt: skip
