"""Models other tools exported: audit (and, next, repair) the rotary position encoding inside them.

``core.audit`` runs the stages: ``sites`` (where cos/sin are read), ``observe`` (what they are at each call length,
evaluated by ONNX Runtime), ``diagnose`` (against the config's schedule in float64, and what is wrong, named).
"""
