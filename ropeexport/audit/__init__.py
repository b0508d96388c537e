"""Models other tools exported: audit (and, next, repair) the rotary position encoding inside them.

``core.audit`` runs the stages: ``sites`` (where cos/sin are read), ``observe`` (what they are at each call length,
evaluated by ONNX Runtime), ``diagnose`` (against the config's schedule in float64, and what is wrong, named).
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    """This package, callable as ``rx.audit``: importing ``ropeexport.audit`` sets the attribute ``audit`` of
    ``ropeexport`` to the package (Python's import system does so for every subpackage), which would hide the API
    function ``rx.audit`` for the rest of the process. Called, the package is that function.
    """  # noqa: D205

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ropeexport.api import audit

        return audit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
