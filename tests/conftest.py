"""What tests across folders share, built once per session (slow to make, read-only to use).

- ``tiny_checkpoint(name)``: a random transformers checkpoint of ``tests.decoder.tiny.CONFIGS[name]`` saved with
  save_pretrained (nothing is downloaded). The same folder is handed to every test that asks: copy it
  (``shutil.copytree``) before changing it.
- ``seeded_decoder``: the folder of a tiny seeded Llama-2 decoder (1 layer, hidden 256, vocabulary 128, no
  transformers reference), built and verified once; copy it before changing it.

Tiers (docs/how-to/test-suite.md): ``pytest -m fast`` is the loop run after every edit (specs, registries, graph
builds, components against their float64 twins); ``-m "not slow"`` adds the rest but the long-running tests; CI runs
every test. ``pytest_collection_modifyitems`` below refuses a fast test that is also slow or asks for a whole decoder,
and orders the files longest first by ``tests/durations.json`` (``longest_first``).

Signals: SIGINT and SIGTERM stop the whole run (``pytest_configure`` below). A test that runs the CLI in-process
(``tests.clirun``, ``ropeexport.cli.main``) hands the signal back to these handlers once the artifact in flight has
unwound, so the suite stops there too instead of counting one call's exit 130 or 143 and carrying on.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

# signal -> the handler it had before the run (restored when the run ends)
_BEFORE: dict[int, Any] = {}


def _stop_the_run(signum: int, frame: FrameType | None) -> None:
    """SIGINT or SIGTERM: a KeyboardInterrupt, on which pytest ends the run (teardowns run, the summary says so)."""
    raise KeyboardInterrupt(f"{signal.Signals(signum).name}: the test run stops")


def pytest_configure(config: pytest.Config) -> None:
    """Own SIGINT and SIGTERM where they have Python's defaults (a signal ignored stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return
    # SIGTERM's default ends pytest at once, with no summary and its subprocesses left running; SIGINT's is a
    # KeyboardInterrupt already, but a handler of the suite's own is what ropeexport.cli.main hands a signal back to.
    for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(signum) == default:
            _BEFORE[signum] = default
            signal.signal(signum, _stop_the_run)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Put back the handlers ``pytest_configure`` replaced."""
    while _BEFORE:
        signum, before = _BEFORE.popitem()
        signal.signal(signum, before)


# Fixtures that build or load a whole decoder: never in the fast tier, whose minute they would take alone.
DECODER_FIXTURES = ("tiny_checkpoint", "seeded_decoder")


def tier_faults(item: pytest.Item) -> list[str]:
    """Why ``item`` may not be in the fast tier (empty when it may, or when it is not marked fast)."""
    if item.get_closest_marker("fast") is None:
        return []
    faults = []
    if item.get_closest_marker("slow") is not None:
        faults.append("marked both fast and slow")
    # fixturenames is the whole closure: a module fixture that asks for a decoder counts too
    wanted = [f for f in DECODER_FIXTURES if f in getattr(item, "fixturenames", ())]
    if wanted:
        faults.append(f"marked fast but builds a whole decoder ({', '.join(wanted)})")
    return faults


DURATIONS = Path(__file__).with_name("durations.json")  # written by tools/test_durations.py


def longest_first(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Sort ``items`` in place: files by ``seconds`` (each file's measured duration), longest first; a file's tests
    keep their order. A file not measured yet goes first: it may be long, and a short one first costs little.

    pytest-xdist with ``--dist loadfile --no-loadscope-reorder`` hands whole files to its processes in this order,
    so the long files start first and the last to start are short (the longest-processing-time-first rule).
    """
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(item.nodeid.split("::")[0], index)
    unmeasured = float("inf")
    items.sort(key=lambda item: (-seconds.get(path := item.nodeid.split("::")[0], unmeasured), first_seen[path]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse the run, before any test starts, when a fast test breaks the tier's rules (``tier_faults``); order
    the files longest first (``longest_first``)."""
    wrong = [f"{item.nodeid}: {fault}" for item in items for fault in tier_faults(item)]
    if wrong:
        raise pytest.UsageError("the fast tier's rules (docs/how-to/test-suite.md) are broken:\n" + "\n".join(wrong))
    if DURATIONS.is_file():
        longest_first(items, json.loads(DURATIONS.read_text())["seconds"])


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``tiny_checkpoint(name, seed=0)``: the checkpoint folder, made on first use."""
    root = tmp_path_factory.mktemp("checkpoints")
    made: dict[tuple[str, int], Path] = {}

    def get(name: str, seed: int = 0) -> Path:
        if (name, seed) not in made:
            from tests.decoder.tiny import checkpoint

            # the folder is named as the config: a decoder takes its default name from it
            made[name, seed] = checkpoint(root / f"seed{seed}" / name, name, seed)
        return made[name, seed]

    return get


@pytest.fixture(scope="session")
def seeded_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A verified tiny seeded decoder's folder (module doc)."""
    import ropeexport as rx

    result = rx.build_decoder(tmp_path_factory.mktemp("decoder") / "out", preset="llama-2-7b", num_layers=1,
                              hidden_size=256, vocab_size=128, eager=False)  # fmt: skip
    assert result.passed, result.report
    return result.path
