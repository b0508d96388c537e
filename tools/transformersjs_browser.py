"""A transformers.js package run in headless Chromium (onnxruntime-web, WASM, one thread): greedy tokens and logits.

    python tools/transformersjs_browser.py PACKAGE_DIR --prompt-ids 1,2,3 --max-new-tokens 16 [--dtype fp32]

Serves, on 127.0.0.1 only, tools/transformersjs (browser.html, browser.mjs and the pinned npm packages:
transformers.js's self-contained browser build and onnxruntime-web's WASM files) and the package under ``/pkg/``;
starts Debian's ``chromium --headless`` on the page and waits for the page to POST its result to ``/result``. Prints
the result as one JSON object: {"tokens": [...], "logits": [[...]], "agent": "..."} or {"error": "..."}. WebGPU is
not used: these machines have none, and the page asks for the ``wasm`` device.
"""

from __future__ import annotations

import argparse
import http.server
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "transformersjs"
BROWSERS = ("chromium", "chromium-browser")


def browser() -> str | None:
    """The Chromium executable on PATH, or None."""
    return next((found for name in BROWSERS if (found := shutil.which(name)) is not None), None)


def missing() -> str | None:
    """Why the browser run cannot happen here, or None."""
    if browser() is None:
        return "no chromium on PATH (Debian: apt-get install chromium)"
    if not (HERE / "node_modules" / "onnxruntime-web" / "dist").is_dir():
        return f"the npm packages are not installed in {HERE} (ONNXRUNTIME_NODE_INSTALL=skip npm ci --prefix {HERE})"
    return None


def run(package: Path, prompt: list[int], count: int, dtype: str = "fp32", timeout: float = 600.0) -> dict[str, Any]:
    """The page's result for ``package`` (module doc); {"error": ...} when the page failed or timed out."""
    results: list[dict[str, Any]] = []
    got = threading.Event()
    roots = {"/pkg/": package.resolve(), "/": HERE}

    class Handler(http.server.SimpleHTTPRequestHandler):
        def translate_path(self, path: str) -> str:
            path = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
            for prefix, root in roots.items():  # /pkg/ first
                if path.startswith(prefix):
                    return str(root / path[len(prefix) :])
            return str(HERE / "missing")

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            results.append(json.loads(body))
            self.send_response(204)
            self.end_headers()
            got.set()

        def log_message(self, *args: Any) -> None:
            pass

    Handler.extensions_map = {**Handler.extensions_map, ".mjs": "text/javascript", ".wasm": "application/wasm"}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    query = urllib.parse.urlencode({"model": "pkg", "ids": ",".join(map(str, prompt)), "n": count, "dtype": dtype})
    url = f"http://127.0.0.1:{server.server_address[1]}/browser.html?{query}"
    with tempfile.TemporaryDirectory(prefix="ropeexport-chromium-") as profile:
        command = [browser() or "chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                   f"--user-data-dir={profile}", url]  # fmt: skip
        chromium = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if not got.wait(timeout):
                return {"error": f"no result from the page within {timeout:.0f} s"}
        finally:
            chromium.terminate()
            try:
                chromium.wait(30)
            except subprocess.TimeoutExpired:
                chromium.kill()
                chromium.wait()
            server.shutdown()
            server.server_close()
    return results[0]


def main(argv: list[str] | None = None) -> int:
    """Run the package in the browser and print the result (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("package", type=Path)
    parser.add_argument("--prompt-ids", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--dtype", default="fp32")
    args = parser.parse_args(argv)
    why = missing()
    if why is not None:
        print(why, file=sys.stderr)
        return 2
    prompt = [int(t) for t in args.prompt_ids.split(",")]
    result = run(args.package, prompt, args.max_new_tokens, args.dtype)
    print(json.dumps(result))
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
