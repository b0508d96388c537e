"""T5 relative position buckets: ``bias``, ``scores``, ``attention`` and ``block`` artifacts, and the float64 oracle."""

from __future__ import annotations

from ropeexport.families.bias.recipes import bias_recipes
from ropeexport.families.t5.export import t5_bias_nodes
from ropeexport.families.t5.oracle import t5_oracle
from ropeexport.families.t5.reference import t5_bias

RECIPES, POSITIONS = bias_recipes("t5", t5_bias_nodes, t5_bias, t5_oracle)
