"""The ``decoder`` artifact: a whole decoder-only model from a transformers config, verified by greedy generation.

Stages, one way: ``architectures`` (what each model type computes, where its weights sit) and ``spec`` (torch-free;
one ``LayerSpec`` per layer) -> ``checkpoint`` (seeded weights, or a local checkpoint checked tensor by tensor) ->
``parts`` (each layer's component specs and position piece) -> ``export`` (the components' graphs composed over the
layers: embeddings, norm, attention, MLP, head) -> ``greedy`` (greedy generation in a runtime, present -> past, over
the scenarios of ``scenarios``) -> ``verify`` (every call against the float64 no-cache recompute of ``oracle``, the
components' twins composed the same way, and transformers' eager model of ``reference``) -> ``report`` and
``build`` (the folder). A decoder sits above the catalog: it composes the components (``ropeexport.components``)
and the families' pieces (``kinds.PositionPiece``).
"""
