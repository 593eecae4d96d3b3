"""`pobo curator` as a subprocess on a free loopback port, for tests that drive it from
outside (the spec-only modeler, the ask/tell client). No pobo import: it runs the CLI."""
from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A free loopback tcp port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CuratorProcess:
    """`pobo curator synthetic --grid 8 --T T [extra]` bound to a free loopback port."""

    def __init__(self, out: Path, T: int, extra: list[str] = (),
                 endpoint: str | None = None) -> None:
        self.endpoint = endpoint or f"tcp://127.0.0.1:{free_port()}"
        self.out = out
        cmd = [sys.executable, "-m", "pobo", "curator", "synthetic", "--grid", "8",
               "--T", str(T), "--bind", self.endpoint, "--out", str(out),
               "--accept-timeout", "60", "--timeout", "30", *extra]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def wait_listening(self, timeout: float = 60.0) -> None:
        """Wait (bounded) for the '[curator] listening on ...' line."""
        deadline, line = time.monotonic() + timeout, ""
        while time.monotonic() < deadline and self.proc.poll() is None:
            if select.select([self.proc.stdout], [], [], 0.5)[0]:
                line = self.proc.stdout.readline()
                if "listening on" in line or not line:
                    break
        assert "listening on" in line, (line, self.proc.poll())

    def finish(self, timeout: float = 60.0) -> dict:
        """Wait for a clean exit; the curator's record."""
        _, stderr = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, stderr[-2000:]
        return json.loads((self.out / "curator.json").read_text())

    def kill(self) -> None:
        """Kill it if it still runs (pass or fail, no process left behind)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
