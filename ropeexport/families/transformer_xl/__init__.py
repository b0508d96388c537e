"""Transformer-XL (Dai et al. 2019): the four-term relative logit with W_R R_(i-j), u and v.

One stage per module (spec, reference, export, oracle, probes, kinds); nothing is imported here.
"""
