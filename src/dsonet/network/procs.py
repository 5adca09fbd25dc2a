"""Node processes on this machine (for tests and `dso bench network`): start, wait, stop, kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from dsonet.network.cluster_spec import free_ports
from dsonet.network.node import NodeError


@dataclass
class NodeProcess:
    data_dir: Path
    nats_urls: list[str]
    port: int = 0  # 0: a free port
    args: list[str] = field(default_factory=list)  # extra `dso node start` options
    token: str | None = None
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if not self.port:
            self.port = free_ports(1)[0]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, timeout: float = 30.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def start(self) -> "NodeProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-c", "from dsonet.cli.main import cli; cli()", "node", "start",
               "--data-dir", str(self.data_dir), "--nats", ",".join(self.nats_urls), "--port", str(self.port),
               *self.args]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        if self.token:
            env["DSONET_TOKEN"] = self.token
        log = open(self.data_dir / "node.log", "ab")
        try:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        finally:
            log.close()
        return self

    def wait_ready(self, timeout_s: float = 120.0) -> "NodeProcess":
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise NodeError(f"node on port {self.port} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise NodeError(f"node on port {self.port} not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (graceful: pending experiences are published), SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return self.kill()

    def kill(self) -> int:
        """kill -9: no flush, no goodbye."""
        self.proc.kill()
        return self.proc.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join((self.data_dir / "node.log").read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"
