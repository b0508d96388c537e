"""Verification: float64 oracles, comparisons with tolerances, and per-encoding probes."""
