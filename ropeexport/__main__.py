"""``python -m ropeexport`` runs the CLI."""

from ropeexport.cli import entry

entry()
