"""The onnxruntime-genai folder of a grafted model: what ``og.Model(folder)`` needs beside the grafted file.

A model with ``genai_config.json`` beside it (onnxruntime-genai's builder writes one, ropeexport's decoders have one,
and so do the folders published for onnxruntime-genai) is served from its folder, not from the file: a grafted file
alone is not loadable by onnxruntime-genai. Given ``--out FOLDER`` (no .onnx suffix), ``graft`` writes the whole
folder there: the grafted model under the original's file name (with its external data), and every other regular
file of the original's folder copied as it is (genai_config.json, which names the model by that file name; tokenizer
files, chat templates, the other models of a multi-model package and their data), links followed (a Hugging Face
snapshot is links into its blob store). Left out: hidden files (locks, work folders), sub-folders (the builder's
cache), the original model and its external data files (the grafted ones replace them), and the store's
manifest.json of an earlier graft (the new folder gets its own). FOLDER must not exist: the store
(``ropeexport.store``) writes it whole or not at all.
"""

from __future__ import annotations

import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropeexport.audits.model import external_files
from ropeexport.decoder.genai import CONFIG
from ropeexport.errors import SpecError
from ropeexport.inputs import read_json
from ropeexport.store import MANIFEST


@dataclass
class GenaiFolder:
    """Where the folder goes, and the files copied into it beside the grafted model (module doc)."""

    folder: Path
    companions: dict[str, Path] = field(default_factory=dict)  # name -> the original folder's file

    def write(self, into: Path) -> list[str]:
        """Copy the companions into ``into`` (the store's work folder); their names."""
        for name, path in self.companions.items():
            shutil.copyfile(path, into / name)
        return list(self.companions)


def genai_folder(source: Path, out: Path) -> GenaiFolder | None:
    """The genai folder to write for ``source`` at ``out`` (module doc), or None when ``source`` has no
    genai_config.json beside it; a config that does not read, or names no file ``source``'s name, is a SpecError.
    """  # noqa: D205
    config_path = source.parent / CONFIG
    if not config_path.is_file():
        return None
    config = read_json(config_path, CONFIG)
    named = _filenames(config)
    if source.name not in named:
        raise SpecError("model", f"{str(config_path)!r} beside the model names no file {source.name!r} (it names "
                        f"{', '.join(sorted(set(named))) or 'none'}): graft a model the folder serves, or give "
                        "--out an .onnx file")  # fmt: skip
    skipped = {MANIFEST, source.name, f"{source.name}.data", *external_files(source)}  # the grafted model's names
    return GenaiFolder(out, regular_files(source.parent, skipped))


def regular_files(folder: Path, skipped: set[str]) -> dict[str, Path]:
    """``folder``'s regular top-level files by name (links followed; hidden ones and ``skipped`` left out): what a
    grafted folder copies beside its model.
    """  # noqa: D205
    companions = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.name in skipped:
            continue
        try:
            regular = stat.S_ISREG(path.stat().st_mode)  # links followed; a FIFO or a device is never opened
        except OSError:  # a dangling link: nothing to copy
            continue
        if regular:
            companions[path.name] = path
    return companions


def _filenames(config: Any) -> list[str]:
    """Every ``filename`` value of the config, at any depth (decoder, pipeline stages, vision, embedding, ..)."""
    if isinstance(config, dict):
        found = [v for k, v in config.items() if k == "filename" and isinstance(v, str)]
        return found + [f for v in config.values() for f in _filenames(v)]
    if isinstance(config, list):
        return [f for v in config for f in _filenames(v)]
    return []
