"""What a decoder build is asked for (``decoder.request.DecoderRequest``, ``rx.DecoderRequest``): checked when it is
made, one SpecError naming the field; and the CLI's build flags becoming one request in one place
(``cli.decoder.request_of``).
"""  # noqa: D205

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import ropeexport as rx
from ropeexport.cli import make_parser
from ropeexport.cli.decoder import request_of
from ropeexport.decoder.request import DecoderRequest
from ropeexport.errors import SpecError

# (fields, the field the error names, words of its message): each refused as the request is made.
BAD = [
    ({"preset": "llama-2-7b", "checkpoint": "ckpt"}, "preset", "cannot be combined with `checkpoint`"),
    ({"preset": "llama-2-7b", "hf_config": "c.json"}, "preset", "cannot be combined with `hf_config`"),
    ({"preset": "llama-2-7b", "config": {}}, "preset", "cannot be combined with `config`"),
    ({"config": {}, "hf_config": "c.json"}, "config", "cannot be combined with `hf_config`"),
    ({"hf_config": ""}, "hf_config", "is empty"),
    ({"checkpoint": " "}, "checkpoint", "is empty"),
    ({"checkpoint": 3}, "checkpoint", "must be a path"),
    ({"preset": ""}, "preset", "must be a preset's name"),
    ({"config": ["model_type"]}, "config", "must be a mapping"),
    ({"dtype": "bf16"}, "dtype", "must be one of fp32, fp16"),
    ({"graph": "static-cache"}, "graph", "must be one of fused"),
    ({"num_layers": 0}, "num_layers", "at least 1"),
    ({"hidden_size": "256"}, "hidden_size", "must be an integer"),
    ({"vocab_size": True}, "vocab_size", "must be an integer"),
    ({"max_positions": 1.5}, "max_positions", "must be an integer"),
    ({"name": 7}, "name", "must be a folder name"),
    ({"weight_format": None}, "weight_format", 'must be "int4" or ""'),
    ({"block_size": -1}, "block_size", "at least 0"),
    ({"accuracy_level": "4"}, "accuracy_level", "must be an integer"),
    ({"symmetric": "maybe"}, "symmetric", "true or false"),
    ({"eager": 1}, "eager", "true or false"),
]


@pytest.mark.parametrize(("fields", "field", "words"), BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_a_bad_value_is_one_line_naming_the_field(fields: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        DecoderRequest(**fields)  # type: ignore[arg-type]
    assert info.value.field == field
    assert words in str(info.value) and "\n" not in str(info.value)


def test_fields_are_keyword_only_and_normalised() -> None:
    with pytest.raises(TypeError):
        DecoderRequest("config.json")  # type: ignore[misc]
    request = DecoderRequest(hf_config="config.json", num_layers=2.0, symmetric="false")  # type: ignore[arg-type]
    assert request.hf_config == Path("config.json") and isinstance(request.hf_config, Path)
    assert request.num_layers == 2 and type(request.num_layers) is int
    assert request.symmetric is False
    again = dataclasses.replace(request, dtype="fp16")  # checked again
    assert again.dtype == "fp16" and again.hf_config == Path("config.json")
    with pytest.raises(SpecError, match="dtype"):
        dataclasses.replace(request, dtype="fp8")


def test_it_is_the_public_name() -> None:
    assert rx.DecoderRequest is DecoderRequest
    assert "DecoderRequest" in rx.__all__


# The CLI: each build flag and the request field it sets (FLAG_FIELDS), and the fields no flag sets (a mapping in
# memory is for Python only). A field added to DecoderRequest fails test_every_field_is_a_flag_or_said_not_to_be until
# it gets a flag here (and in cli.decoder.request_of) or a line in LIBRARY_ONLY.
FLAG_FIELDS = [
    (["--hf-config", "c.json"], "hf_config", Path("c.json")),
    (["--checkpoint", "ckpt"], "checkpoint", Path("ckpt")),
    (["--preset", "llama-2-7b"], "preset", "llama-2-7b"),
    (["--dtype", "fp16"], "dtype", "fp16"),
    (["--graph", "gqa"], "graph", "gqa"),
    (["--num-layers", "2"], "num_layers", 2),
    (["--hidden-size", "64"], "hidden_size", 64),
    (["--vocab-size", "100"], "vocab_size", 100),
    (["--max-positions", "512"], "max_positions", 512),
    (["--name", "mine"], "name", "mine"),
    (["--weight-format", "int4"], "weight_format", "int4"),
    (["--block-size", "64"], "block_size", 64),
    (["--accuracy-level", "4"], "accuracy_level", 4),
    (["--no-symmetric"], "symmetric", False),
    (["--no-eager"], "eager", False),
    (["--runtime", "onnx-reference"], "runtimes", ("onnx-reference",)),
    (["--latent-cache"], "latent_cache", True),
]
LIBRARY_ONLY = {"config"}


def _request(flags: list[str]) -> DecoderRequest:
    return request_of(make_parser("build").parse_args(["build", "--artifact", "decoder", *flags]))


def test_no_flag_is_a_default_request() -> None:
    assert _request([]) == DecoderRequest()


@pytest.mark.parametrize(("flags", "field", "value"), FLAG_FIELDS, ids=[f[1] for f in FLAG_FIELDS])
def test_each_build_flag_sets_its_field_alone(flags: list[str], field: str, value: object) -> None:
    assert _request(flags) == DecoderRequest(**{field: value})  # type: ignore[arg-type]


def test_every_field_is_a_flag_or_said_not_to_be() -> None:
    fields = {f.name for f in dataclasses.fields(DecoderRequest)}
    assert {f for _, f, _ in FLAG_FIELDS} | LIBRARY_ONLY == fields
