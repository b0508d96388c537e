"""T5 relative position buckets (Raffel et al. 2020): a learned bias per bucket and head.

One stage per module (spec, reference, export, oracle, probes, kinds); nothing is imported here.
"""
