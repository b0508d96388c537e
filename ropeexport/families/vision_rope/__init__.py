"""2-D vision RoPE (axial): Pixtral's and Qwen2.5-VL's ViT rotary over (height, width) patch positions.

One stage per module (spec, reference, export, oracle, probes, recipes); nothing is imported here.
"""
