"""TUPE (Ke et al. 2021): untied positional correlation plus a T5 relative bias.

One stage per module (spec, reference, export, oracle, probes, kinds); nothing is imported here.
"""
