"""ALiBi: ``bias``, ``scores``, ``attention`` artifacts, and ``block`` (``ropeexport.block``, from POSITIONS)."""

from __future__ import annotations

from ropeexport.families.alibi.export import alibi_bias_nodes, alibi_single_pass
from ropeexport.families.alibi.oracle import alibi_oracle, check_slopes
from ropeexport.families.alibi.reference import alibi_bias
from ropeexport.families.bias.recipes import bias_recipes

RECIPES, POSITIONS = bias_recipes(
    "alibi", alibi_bias_nodes, alibi_bias, alibi_oracle, tables=check_slopes, single_pass=alibi_single_pass
)
