"""docs/how-to/add-an-architecture.md walked through: a made-up architecture is its own folder and one catalog line.

The how-to's folder (the ``python`` block of its first step, taken from the page itself) is written into a copy of
the ``ropeexport`` package, its catalog line added to ``PACKAGES``, and nothing else changed: the copy's files differ
from the package's in exactly those two places. A fresh process importing the copy then builds a decoder of the
made-up type from a config naming it, with seeded weights, and verifies it by generation against the float64
recompute in ONNX Runtime (no transformers model exists for it: the report says so), reads the type's encoding
through its own hook, and maps its checkpoint names both ways. A step left out (the catalog line, the hook, a
checkpoint name) fails here.
"""

from __future__ import annotations

import filecmp
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "how-to" / "add-an-architecture.md"
CATALOG_LINE = '    "ropeexport.architectures.toyformer",\n'
CONFIG = {"model_type": "toyformer", "vocab_size": 96, "num_hidden_layers": 2, "hidden_size": 32,
          "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
          "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 50000.0}  # fmt: skip
# What the fresh process runs against the copy: a build, the hook's reading, the names both ways.
CHILD = """
import json, sys
import numpy as np
import ropeexport as rx
from ropeexport.architectures import ARCHITECTURES
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.checkpoint import to_transformers
from ropeexport.decoder.weights import seeded_weights
from ropeexport.hf import import_config

config, out = sys.argv[1], sys.argv[2]
result = rx.build_decoder(out, hf_config=config, eager=False)
spec, _ = resolve(DecoderRequest(hf_config=config))
imported = import_config(json.load(open(config)))
keys = sorted(to_transformers(spec, seeded_weights(spec)))
print(json.dumps({"passed": result.passed, "catalog": list(ARCHITECTURES)[-1], "layer": spec.layers[1].to_dict(),
                  "theta": imported.fields["theta"], "layout": imported.sources["layout"], "keys": keys,
                  "transformers": result.decoder_report.references.transformers,
                  "scenarios": [s.name for s in result.decoder_report.scenarios if s.passed]}))
"""


def _folder_from_the_page() -> str:
    """The how-to's module of the made-up architecture (its first ``python`` block)."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert blocks, "docs/how-to/add-an-architecture.md shows no python block"
    return textwrap.dedent(blocks[0])


def _differences(left: Path, right: Path) -> list[str]:
    """Every file that differs between two package trees (caches aside), as paths relative to ``left``."""
    out: list[str] = []

    def walk(cmp: filecmp.dircmp[str], here: Path) -> None:
        out.extend(str(here / n) for n in cmp.left_only + cmp.right_only + cmp.diff_files if n != "__pycache__")
        for name, sub in cmp.subdirs.items():
            if name != "__pycache__":
                walk(sub, here / name)

    walk(filecmp.dircmp(left, right, ignore=["__pycache__"]), Path("."))
    return sorted(out)


def test_a_made_up_architecture_is_one_folder_and_one_catalog_line(tmp_path: Path) -> None:
    copy = tmp_path / "src" / "ropeexport"
    shutil.copytree(ROOT / "ropeexport", copy, ignore=shutil.ignore_patterns("__pycache__"))
    folder = copy / "architectures" / "toyformer"
    folder.mkdir()
    (folder / "__init__.py").write_text(_folder_from_the_page())
    catalog = copy / "architectures" / "__init__.py"
    text = catalog.read_text()
    assert text.count("\n)\n") == 1  # the catalog's closing line: the made-up type goes last, as the page says
    catalog.write_text(text.replace("\n)\n", "\n" + CATALOG_LINE + ")\n", 1))
    assert _differences(ROOT / "ropeexport", copy) == ["architectures/__init__.py", "architectures/toyformer"]
    config = tmp_path / "toyformer.json"
    config.write_text(json.dumps(CONFIG))
    run = subprocess.run([sys.executable, "-c", CHILD, str(config), str(tmp_path / "out")], cwd=tmp_path,
                         env={"PYTHONPATH": str(copy.parent), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                         capture_output=True, text=True, timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["catalog"] == "toyformer"
    assert got["passed"] and {"decode-64", "far-positions", "left-padded"} <= set(got["scenarios"]), got["scenarios"]
    assert got["transformers"] == "skipped: not asked for (--no-eager)"
    # its hook: the pairing and the theta as its folder says; its layers: what its builder adds (q/k norms)
    assert got["layout"] == "toyformer: interleaved pairs (2i, 2i+1) (its rotate takes x[..., ::2], x[..., 1::2])"
    assert got["theta"] == 50000.0 and got["layer"]["qk_norm"] == "rms" and got["layer"]["residual"] == "parallel"
    # its checkpoint names, every one used
    assert "blocks.1.attn.wq.weight" in got["keys"] and "blocks.1.attn.q_norm.weight" in got["keys"]
