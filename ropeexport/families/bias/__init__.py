"""The additive-bias machinery ALiBi, T5, KERPLE and Sandwich share: bias, scores and attention artifacts.

One stage per module (spec, reference, export, oracle, probes, kinds); nothing is imported here.
"""
