"""The version, in a module of its own: every stage may import it without importing the package API."""

__version__ = "0.1.0"
