"""Sandwich (Chi et al. 2023): the bias implied by sinusoidal embeddings' inner products.

One stage per module (spec, reference, export, oracle, probes, kinds); nothing is imported here.
"""
