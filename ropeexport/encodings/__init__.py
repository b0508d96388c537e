"""Encoding families: reference modules and frequency schedules, one module per family."""
