"""RoPE (Su et al. 2021, RoFormer): half, interleaved and complex layouts, partial rotation, GQA, 7 schedules.

One stage per module (spec, reference, export, oracle, probes, kinds); nothing is imported here.
"""
