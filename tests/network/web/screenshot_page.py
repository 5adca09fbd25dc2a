"""The screenshots of the node's page in docs/: the test's node (served_node), photographed by headless Chromium.

    python tests/network/web/screenshot_page.py docs/
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlencode

import served_node

SHOTS = {"node-page.png": ({}, "1280,1560"),
         "node-page-ask.png": ({"ask": "How do I sort a list in Python?"}, "1280,900")}


def main(out: Path) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("chromium is not on PATH: make system (apt-get install -y chromium)")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        held = served_node.ServedNode(Path(tmp) / "nodes")
        url = held.start()
        try:
            for name, (query, size) in SHOTS.items():
                sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []
                subprocess.run([chromium, "--headless", "--disable-gpu", *sandbox, "--hide-scrollbars",
                                f"--user-data-dir={tmp}/profile-{name}", f"--window-size={size}",
                                f"--screenshot={out / name}",
                                f"{url}/?{urlencode({'token': served_node.TOKEN, **query})}"],
                               check=True, capture_output=True, timeout=120)
                print(out / name)
        finally:
            held.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs"))
