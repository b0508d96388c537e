"""KERPLE (Chi et al. 2022): kernelized relative positional biases (log and power kernels).

One stage per module (spec, reference, export, oracle, probes, kinds); nothing is imported here.
"""
