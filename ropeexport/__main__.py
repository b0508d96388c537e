"""``python -m ropeexport`` runs the CLI."""

from ropeexport.cli import main

raise SystemExit(main())
