"""Models other tools exported: audit (and graft) the rotary position encoding inside them.

``core.audit`` runs the stages: ``model`` (the file read, every tensor's external data checked, ONNX Runtime's
refusals said in one line), ``sites`` (where cos/sin are read, in the main graph and inside every If / Loop / Scan
body, by the patterns of ``patterns``), ``observe`` (what they are at each call length, evaluated by ONNX Runtime),
``diagnose`` and ``checks`` (against the config's schedule in float64, what is wrong, named, and what could not be
checked, said); ``graft`` replaces tables with exact ones (``tables``, ``rows``) and proves it (``prove``: the whole
decoder against float64).

The package is ``audits``, not ``audit``: Python sets a subpackage as an attribute of its parent on import, and a
``ropeexport/audit/`` would replace the API function ``rx.audit`` with itself (``tests/test_api.py`` checks that no
submodule is named after an API function).
"""
