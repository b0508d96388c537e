"""Bytes one token adds to a DeepSeek V3 decoder's cache, per layer, read from the built graph's cache inputs.

The decoder is DeepSeek V3's config (transformers 5.23's ``DeepseekV3Config`` defaults: 128 heads, keys 128 nope +
64 rope wide, values 128, latent 512, query LoRA 1536, width 7168; YaRN x40 over 4096) shrunk to one dense layer
whose MLP is 64 wide and a vocabulary of 64, which leave the attention as it is; built in fp16 with seeded weights
in each form a decoder caches differently (fused: expanded; gqa: expanded, values padded to the key's width;
decomposed with ``latent_cache``: the latent and the rotated rope key), the graph only (no scenario runs). Each
layer's past inputs [batch, heads, past, width] give heads x width x 2 bytes a token.

    python tools/latent_cache_bytes.py            # writes tools/figures/latent-cache-bytes.json
    python tools/latent_cache_bytes.py --model deepseek-v2-lite   # latent-cache-bytes-v2-lite.json

``--model deepseek-v2-lite``: DeepSeek-V2-Lite's widths as ``tools/write_checkpoint.py``'s ``deepseek-v2-lite-v3``
writes them (16 heads, latent 512, keys 128 + 64, values 128, no query LoRA, YaRN x40 with mscale 0.707; 27 layers),
at deepseek_v3 (ropeexport builds no deepseek_v2; the attention and its cache are the same).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROPE = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
        "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0, "rope_theta": 10000.0}  # fmt: skip
FORMS = (("expanded", "fused", False), ("expanded, gqa (values padded)", "gqa", False),
         ("latent", "decomposed", True))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Build each form's graph and write the figures."""
    import transformers

    from ropeexport.decoder.build import DecoderRequest, resolve
    from ropeexport.decoder.export import build_decoder_graph, cache_names
    from ropeexport.decoder.weights import seeded_weights

    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--model", choices=("deepseek-v3", "deepseek-v2-lite"), default="deepseek-v3")
    args = p.parse_args(argv)
    if args.model == "deepseek-v3":
        full, name, out_name = transformers.DeepseekV3Config(), "DeepSeek V3 (DeepseekV3Config defaults)", ""
        rope = ROPE
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        from write_checkpoint import MODELS

        fields = MODELS["deepseek-v2-lite-v3"][1]
        full, rope = transformers.DeepseekV3Config(**fields), fields["rope_parameters"]
        name, out_name = "DeepSeek-V2-Lite's widths at deepseek_v3 (tools/write_checkpoint.py)", "-v2-lite"
    config = {**full.to_dict(), "model_type": "deepseek_v3", "rope_parameters": rope, "intermediate_size": 64,
              "max_position_embeddings": 163840}  # fmt: skip
    rows = []
    for label, graph, latent in FORMS:
        request = DecoderRequest(config=config, num_layers=1, vocab_size=64, dtype="fp16",
                                 graph=graph, latent_cache=latent, max_positions=8192)  # fmt: skip
        spec, _ = resolve(request)
        model = build_decoder_graph(spec, seeded_weights(spec), "seeded")
        dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input}
        key, value = (dims[name] for name in cache_names(0)[:2])
        per_token = 2 * (key[1] * key[3] + value[1] * value[3])
        rows.append({"cache": label, "graph": graph, "key": key, "value": value, "bytes_per_token_per_layer": per_token,
                     "bytes_per_token_all_layers": full.num_hidden_layers * per_token})  # fmt: skip
        print(f"{label:32s} key {key} value {value}: {per_token:,} bytes a token a layer")
    out = Path(__file__).parent / "figures" / f"latent-cache-bytes{out_name}.json"
    out.write_text(json.dumps({"dtype": "fp16", "model": name,
                               "layers": full.num_hidden_layers, "rows": rows}, indent=1) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
