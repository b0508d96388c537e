"""torch.onnx (dynamo) export of a Qwen-VL checkpoint's text model, fed position_ids [3, batch, seq] (issue 39 item 4).

The whole ``...ForConditionalGeneration`` loaded (``AutoModelForImageTextToText``) and run on token ids only (no
pixels: its vision tower never runs), without a cache: inputs input_ids [b, s], attention_mask [b, s], position_ids
[3, b, s] (time, height, width, as transformers' ``get_rope_index`` gives them), output logits. What
``docs/how-to/multimodal-positions.md`` audits and grafts; the export runs in this process (about 45 s for a tiny
checkpoint on a loaded 2-core machine).

    python tools/export_qwen_vl_text.py CHECKPOINT OUT/model.onnx
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    """Export (module doc); exit 2 with one line where the checkpoint or the output is not usable."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, help="a qwen2_vl, qwen2_5_vl or qwen3_vl checkpoint folder")
    parser.add_argument("out", type=Path, help="the .onnx file to write (its folder is made; it must not exist)")
    args = parser.parse_args(argv)
    if not (args.checkpoint / "config.json").is_file():
        print(f"error: checkpoint: {str(args.checkpoint)!r} holds no config.json", file=sys.stderr)
        return 2
    if args.out.exists() or args.out.suffix != ".onnx":
        print(f"error: out: {str(args.out)!r} must be a new .onnx file", file=sys.stderr)
        return 2
    import torch
    import transformers

    model = transformers.AutoModelForImageTextToText.from_pretrained(args.checkpoint, dtype=torch.float32).eval()

    class Text(torch.nn.Module):
        """The text model: logits of token ids at [3, b, s] positions, no cache."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              use_cache=False).logits  # fmt: skip

    dyn = torch.export.Dim.DYNAMIC
    example = (torch.zeros(1, 8, dtype=torch.int64), torch.ones(1, 8, dtype=torch.int64),
               torch.arange(8).reshape(1, 1, 8).expand(3, 1, 8).contiguous())  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        names = ["input_ids", "attention_mask", "position_ids"]
        torch.onnx.export(Text(), example, str(args.out), dynamo=True, external_data=True, input_names=names,
                          dynamic_shapes=({1: dyn}, {1: dyn}, {2: dyn}), output_names=["logits"])  # fmt: skip
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
