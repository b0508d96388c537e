"""Sandwich: ``bias``, ``scores``, ``attention`` and ``block`` artifacts, and the float64 oracle."""

from __future__ import annotations

from ropeexport.families.bias.probes import bias_guards
from ropeexport.families.bias.recipes import bias_recipes
from ropeexport.families.sandwich.export import sandwich_bias_nodes
from ropeexport.families.sandwich.oracle import sandwich_oracle
from ropeexport.families.sandwich.reference import sandwich_bias

RECIPES, POSITIONS = bias_recipes("sandwich", sandwich_bias_nodes, sandwich_bias, sandwich_oracle, guards=bias_guards)
