"""Models other tools exported: audit (and graft) the rotary position encoding inside them.

``core.audit`` runs the stages: ``model`` (the file read, every tensor's external data checked, ONNX Runtime's
refusals said in one line), ``sites`` (where cos/sin are read, in the main graph and inside every If / Loop / Scan
body, by the patterns of ``patterns``), ``observe`` (what they are at each call length, evaluated by ONNX Runtime),
``diagnose`` and ``checks`` (against the config's schedule in float64, what is wrong, named, and what could not be
checked, said); ``graft`` replaces tables with exact ones (``tables``, ``rows``) and proves it (``prove``: the whole
decoder against float64).
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    """The package, callable as ``rx.audit``: importing ``ropeexport.audit`` sets the attribute ``audit`` of
    ``ropeexport`` to the package (Python's import system does so for every subpackage), which would hide the API
    function ``rx.audit`` for the rest of the process. Called, the package is that function.
    """  # noqa: D205

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ropeexport.api import audit

        return audit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
