"""The ``decoder`` artifact: a whole decoder-only model from a transformers config, verified by greedy generation.

Stages, one way: ``architectures`` (what each model type computes, where its weights sit) and ``spec`` (torch-free)
-> ``weights`` (seeded, or a local checkpoint checked tensor by tensor) -> ``export`` (embeddings, layers that call
the encoding's ``block`` artifact through ``graph.compose``, norms, MLP, head) -> ``generate`` (greedy generation in
a runtime, present -> past, over the scenarios of ``probes``) -> ``verify`` (every call against the float64 no-cache
recompute of ``oracle`` and transformers' eager model of ``reference``) -> ``report`` and ``build`` (the folder).
A decoder sits above the catalog: it composes the families' pieces (``kinds.PositionPiece``).
"""
