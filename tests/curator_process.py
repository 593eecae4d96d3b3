"""`pobo curator` as a subprocess on a free loopback port, for tests that drive it from
outside (the spec-only modeler, the ask/tell client). No pobo import: it runs the CLI."""
from __future__ import annotations

import json
import os
import queue
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A free loopback tcp port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CuratorProcess:
    """`pobo curator synthetic --grid 8 --T T [extra]` bound to a loopback port the system
    picks as it binds (or `endpoint`): `endpoint` is the one it says, once
    `wait_listening` has heard it."""

    def __init__(self, out: Path, T: int, extra: list[str] = (),
                 endpoint: str | None = None) -> None:
        self.endpoint = endpoint or "tcp://127.0.0.1:0"
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
        if "listening on" not in line and self.proc.poll() is not None:
            raise AssertionError(f"the curator exited ({self.proc.returncode}) before "
                                 f"listening: {self.proc.stderr.read()[-2000:]}")
        assert "listening on" in line, (line, self.proc.poll())
        self.endpoint = line.split("listening on", 1)[1].strip()

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


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (a killed orphan that init has
    not reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def in_group(pgid: int) -> list[int]:
    """The live (non-zombie) processes of process group `pgid` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry))
    return found


def wait_gone(pids, timeout: float = 10.0) -> list[int]:
    """Wait (bounded) until none of `pids` runs; those still running."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if running(pid)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def kill_all(pids) -> None:
    """SIGKILL whatever of `pids` still runs (cleanup, pass or fail)."""
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Lines:
    """A process's output lines, read by a daemon thread, so that each wait for the next
    line is bounded (a bare readline() waits for ever on a process that hangs silent)."""

    def __init__(self, stream) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        try:
            for line in stream:
                self._queue.put(line)
        except (OSError, ValueError):
            pass
        finally:
            self._queue.put("")  # end of output

    def next(self, timeout: float = 60.0) -> str:
        """The next line ('' at the end of the output); AssertionError after `timeout` s."""
        try:
            line = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output line within {timeout:g} s") from None
        if not line:
            self._queue.put("")
        return line
