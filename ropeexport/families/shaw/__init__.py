"""Shaw et al. 2018: learned relative position representations on keys and values.

One stage per module (spec, reference, export, oracle, probes, kinds); nothing is imported here.
"""
