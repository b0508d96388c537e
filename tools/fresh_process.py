"""One timing in a fresh process: the child pattern ``tools/genai_ab.py``, ``tools/session_ab.py`` and
``tools/decode_profile.py`` share (the first model a process loads runs slower than later ones: ``tools/genai_ab.py``).
"""  # noqa: D205

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def child_json(script: str, args: list[str], what: str) -> Any:
    """Run ``python script *args`` and return its last stdout line parsed as JSON; exit naming ``what`` if it fails."""
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
