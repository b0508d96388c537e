"""Fixtures of the audit tests."""

from __future__ import annotations

import pytest

NOT_RUN = "not run (a test that reads no `use`: tests/audits/test_uses.py measures it)"


@pytest.fixture
def graft_without_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """graft with a checkpoint, less its record of the original on the runs its users make (``decoder.use``,
    ``effect.between``: both models run again to the far end of the context, a third of such a test's time on a
    hybrid without a cache), for tests that read nothing of it. ``use`` is only reported: the proof's verdict does
    not read it, and a model between cannot run is recorded, never raised. tests/audits/test_uses.py checks it.
    """  # noqa: D205
    import ropeexport.audits.graft as grafting

    monkeypatch.setattr(grafting, "between", lambda *_, **__: {"not_measured": NOT_RUN})
