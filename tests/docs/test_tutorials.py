"""The tutorials (and the re-verify how-to) run top to bottom as a new user types them (``tests/docs/pages.py``
``RUN``), their printed lines compared with the page's recorded output excerpts. Apart from ``test_blocks.py``: the
audit tutorial alone is minutes, and CI's ``--dist loadfile`` gives a file to one worker whole.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.pages import NEEDS, RUN, SHELL, blocks
from tests.docs.test_blocks import _run, site


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One folder per group of ``RUN`` pages, shared by the pages of a group (module doc of tests/docs/pages.py)."""
    return {group: tmp_path_factory.mktemp(group) for group in sorted(set(RUN.values()))}


@pytest.mark.slow  # the tutorials build real artifacts and decoders: minutes on 2 cores
@pytest.mark.parametrize("page", list(RUN))
def test_a_tutorial_runs_top_to_bottom(page: str, folders: dict[str, Path]) -> None:
    folder = folders[RUN[page]]
    if page in NEEDS and not (folder / NEEDS[page][0]).exists():  # run alone: make what the earlier page made
        need, other, index = NEEDS[page]
        _run([b for b in blocks(other) if b.info == "python"][index], folder)
        assert (folder / need).exists(), need
    runnable = [b for b in blocks(page) if b.info in (*SHELL, "python") and b.skip is None]
    assert runnable, f"{page} has nothing to run"
    records = [{"text": block.text, "output": _run(block, folder)} for block in runnable]
    # The page's output excerpts are what this run printed, line for line (issue 43 item 11: a tutorial showed
    # figures a user did not get); a figure there differs when the code's output does: record the run again.
    for name in sorted(n for n, (figure, _, _) in site.OUTPUTS.items() if site.load_figure(figure)["page"] == page):
        assert _same_lines(site.excerpt(name, records), site.output(name)), (
            f"{page}: this run prints other lines than the committed output excerpt {name!r}; rerun "
            f"`python tools/tutorial_outputs.py {page} --out tools/figures/{site.OUTPUTS[name][0]}.json`, then "
            f"`{site.COMMAND}`, and read the page's words against the new figures"
        )


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]\d+)?")
FIGURE = 0.1  # relative: a float figure of another machine's run (its CPU's kernels round otherwise: 4.62e-05 here
# was 4.64e-05 for an outside tester, issue 43 item 11); a change of the code's output moves more, or moves words


def _same_lines(got: str, recorded: str) -> bool:
    """The same words and lines, each float in scientific notation within ``FIGURE`` of the recorded one, and every
    other number (positions, counts) the same unless it is where a float figure is worst (``at position N``).
    """  # noqa: D205
    if NUMBER.sub("#", got) != NUMBER.sub("#", recorded):
        return False
    for a, b in zip(NUMBER.finditer(got), NUMBER.finditer(recorded), strict=True):
        x, y = a.group(), b.group()
        if "e" in x or "e" in y:
            if abs(float(x) - float(y)) > FIGURE * abs(float(y)):
                return False
        elif x != y and not got[max(0, a.start() - 12):a.start()].endswith("position "):
            return False
    return True


# (what this run printed, the recorded excerpt, the same?)
LINES = [("harmless: 4.19e-05 of the logit scale at position 116711", "harmless: 4.62e-05 of the logit scale at "
          "position 130890", True),  # another machine's rounding: the figure within 10%, its worst position moved
         ("harmless: 4.19e-05 of the logit scale", "harmless: 5.35e-05 of the logit scale", False),
         ("1 rotary site(s), exact", "2 rotary site(s), exact", False),
         ("minor: 4.19e-05", "harmless: 4.19e-05", False),
         ("cos_cache / sin_cache: 131072 rows", "cos_cache / sin_cache: 131072 rows", True)]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("got", "recorded", "same"), LINES)
def test_a_tutorials_output_is_compared_within_another_machines_rounding(got: str, recorded: str, same: bool) -> None:
    assert _same_lines(got, recorded) is same
