"""Sinusoidal positions (Vaswani et al. 2017): the absolute encoding added to the input or to q and k.

One stage per module (spec, reference, export, oracle, probes, kinds); nothing is imported here.
"""
