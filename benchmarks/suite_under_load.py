"""The README's test command under a hostile neighbourhood (issue 48 item 4): passes in a row.

    python benchmarks/suite_under_load.py [--runs 3] [--burners 2] [--port 5555]
                                          [-- PYTEST-ARGS...]

Starts `--burners` CPU-bound processes (each a busy Python loop) and a process listening
on tcp://127.0.0.1:`--port` (accepting and never answering), then runs the README's test
command (`python -m pytest`, with PYTEST-ARGS appended) `--runs` times in a row, and prints
each run's outcome and wall time, and the load average. Exits 0 only if every run passed.
Every process it starts is stopped at the end, pass or fail.
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BURN = "while True: pass"
LISTEN = ("import socket, time\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('127.0.0.1', {port})); s.listen(64)\n"
          "held = []\n"
          "while True: held.append(s.accept()[0])\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--port", type=int, default=5555)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)
    helpers = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(args.burners)]
    helpers.append(subprocess.Popen([sys.executable, "-c", LISTEN.format(port=args.port)]))
    try:
        time.sleep(1.0)
        if helpers[-1].poll() is not None:
            raise SystemExit(f"could not listen on {args.port} (in use?)")
        with socket.create_connection(("127.0.0.1", args.port), timeout=5):
            pass  # the listener is up: the suite must pass beside it
        outcomes = []
        for k in range(args.runs):
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", *args.pytest_args],
                                  cwd=ROOT, capture_output=True, text=True)
            wall = time.monotonic() - started
            last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
            outcomes.append(done.returncode == 0)
            print(f"run {k + 1}: exit {done.returncode} in {wall / 60:.1f} min, load "
                  f"{os.getloadavg()[0]:.1f}: {last}", flush=True)
            if done.returncode != 0:
                print("\n".join(line for line in done.stdout.splitlines()
                                if line.startswith(("FAILED", "ERROR"))), flush=True)
        print(f"{sum(outcomes)} of {args.runs} runs passed with {args.burners} CPU-bound "
              f"processes and a listener on {args.port}")
        return 0 if all(outcomes) else 1
    finally:
        for proc in helpers:
            proc.kill()
            proc.wait(10)


if __name__ == "__main__":
    sys.exit(main())
