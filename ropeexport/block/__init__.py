"""The ``block`` artifact: one attention layer with a KV cache, its positions encoded by a family's graph piece.

Contract (``block.export``): inputs ``hidden`` [batch, seq, hidden], ``position_ids`` int64 [batch, seq],
``attention_mask`` int64 [batch, past + seq] (1 = a real token; left padding allowed), ``past_key`` /
``past_value`` [batch, num_kv_heads, past, head_dim]; outputs ``output`` [batch, seq, hidden] and ``present_key`` /
``present_value`` [batch, num_kv_heads, past + seq, head_dim], keys stored rotated. Key j is visible to query i iff
j <= i + past (bottom-right causal, as ONNX ``Attention`` with a cache) and ``attention_mask`` marks j real; a
query that sees no key (a left-padded slot) outputs zeros, never NaN.

Stages, as in a family: ``projections`` (seeded projections, float64 rounded once), ``export`` (the ``attention``
component's graph, ``components.attention``, with the family's piece called through ``graph.compose``, as an
artifact), ``reference`` (eager PyTorch), ``oracle`` (float64: the component's twin with the family's oracle),
``probes`` (prefill, decode at cache offsets, chunked prefill, left padding, far positions, regime
switches). RoPE's ``block`` kind wires them (``families/rope/recipes.py``).
"""
