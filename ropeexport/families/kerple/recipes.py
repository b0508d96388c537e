"""KERPLE: ``bias``, ``scores``, ``attention`` and ``block`` artifacts, and the float64 oracle."""

from __future__ import annotations

from ropeexport.families.bias.recipes import bias_recipes
from ropeexport.families.kerple.export import kerple_bias_nodes
from ropeexport.families.kerple.oracle import kerple_oracle
from ropeexport.families.kerple.reference import kerple_bias

RECIPES, POSITIONS = bias_recipes("kerple", kerple_bias_nodes, kerple_bias, kerple_oracle)
