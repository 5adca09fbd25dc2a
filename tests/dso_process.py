"""A `dso` server run as a user runs it, in its own process, ready once it says 'listening on'."""

import signal
import subprocess
import sys
import threading
import time

READY_S = 180  # a cold start on a loaded 2-core machine: Python, the SDKs, WordLlama's weights


class Server:
    """A `dso` server process whose stderr is read as it comes; ready once it says 'listening on'."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "dsonet.cli.main", *args], stderr=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def banner(self) -> str:
        deadline = time.monotonic() + READY_S
        while not any("listening on" in line for line in self.lines):
            assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.lines[-5:]}"
            assert time.monotonic() < deadline, f"no 'listening on' within {READY_S} s: {self.lines[-5:]}"
            time.sleep(0.05)
        return next(line for line in self.lines if "listening on" in line)

    def stop(self) -> list[str]:
        """SIGTERM, then everything it wrote to stderr."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        self.reader.join(10)
        return self.lines
