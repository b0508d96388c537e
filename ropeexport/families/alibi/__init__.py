"""ALiBi (Press et al. 2022): per-head linear biases on the attention logits.

One stage per module (spec, reference, export, oracle, probes, kinds); nothing is imported here.
"""
