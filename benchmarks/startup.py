"""Start-up cost of the command line and of `pobo run` (issue 16 item 10).

    python benchmarks/startup.py [--reps 7] [--pythonpath TREE ...]

(a) pobo's own import time for `python -X importtime -m pobo --help`: the cumulative
    time of every outermost `pobo*` import in the -X importtime report -- so everything
    pobo imports on its own behalf, third-party modules included (numpy, if pulled in,
    counts against pobo) -- and, for information, the self time of the pobo modules
    alone. Python's own start-up (site, encodings) is not counted. Goal: < 0.25 s.
(b) the wall time of `pobo run synthetic` (three interpreters: the parent `pobo run`,
    counted in full, and the curator and modeler processes it starts) against a
    baseline measured in the same run: the wall of two bare `python -c "import numpy,
    zmq"` starts plus the run's rounds (the modeler's `seconds` in result.json: from
    its Hello to the End, the Welcome's dataset included). Goal: ratio <= 2.

pobo's bytecode is cached in __pycache__ (as an installed package has it; this
environment sets PYTHONDONTWRITEBYTECODE, which --no-bytecode keeps). Each repetition
runs the baseline and the candidates interleaved; figures are medians
over the repetitions, and the ratio is the median of the per-repetition ratios. With
several --pythonpath trees (e.g. a checkout of the commit before and this one) each is
measured the same way in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
BARE = [sys.executable, "-c", "import numpy, zmq"]
_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


def env_for(tree: Path, bytecode: bool = True) -> dict[str, str]:
    """The environment that makes `python -m pobo` import pobo from `tree` (with its
    bytecode cached, as an installed package has it, unless not `bytecode`)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def pobo_import_seconds(report: str) -> tuple[float, float]:
    """(cumulative, self) seconds of pobo's imports in a -X importtime report: the
    cumulative time of every outermost pobo* entry, and the self time of all of them."""
    cumulative = own = 0.0
    for line in report.splitlines():
        m = _LINE.match(line)
        if not m or not m.group(4).startswith("pobo"):
            continue
        own += int(m.group(1)) / 1e6
        if not m.group(3):  # outermost: not imported by another module being imported
            cumulative += int(m.group(2)) / 1e6
    return cumulative, own


def help_imports(tree: Path, bytecode: bool) -> tuple[float, float]:
    """pobo_import_seconds of one `python -X importtime -m pobo --help`."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "pobo", "--help"],
                          capture_output=True, text=True, env=env_for(tree, bytecode), check=True,
                          cwd=tempfile.gettempdir())
    return pobo_import_seconds(done.stderr)


def wall(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> float:
    """Seconds from starting `argv` to its exit (which must be 0)."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env, cwd=cwd)
    return time.perf_counter() - start


def run_once(tree: Path, scratch: Path, bytecode: bool) -> tuple[float, float]:
    """(wall seconds of `pobo run synthetic`, the modeler's session seconds)."""
    out = scratch / f"run-{time.monotonic_ns()}"
    seconds = wall([sys.executable, "-m", "pobo", "run", "synthetic", "--out", str(out)],
                   env_for(tree, bytecode), cwd=str(scratch))
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok" and result["consistent"], "the run failed"
    return seconds, result["modeler"]["seconds"]


def main(argv: list[str] | None = None) -> None:
    """Measure and print both figures for every tree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="repetitions (medians over them)")
    parser.add_argument("--pythonpath", type=Path, action="append",
                        help="a pobo source tree to measure (repeatable; default: this one)")
    parser.add_argument("--no-bytecode", action="store_true",
                        help="compile pobo's sources at every start (PYTHONDONTWRITEBYTECODE=1; "
                             "default: cached in __pycache__ as an installed package has it)")
    args = parser.parse_args(argv)
    trees = args.pythonpath or [HERE]
    helps: dict[Path, list[tuple[float, float]]] = {t: [] for t in trees}
    runs: dict[Path, list[tuple[float, float, float]]] = {t: [] for t in trees}
    bares: list[float] = []
    bytecode = not args.no_bytecode
    with tempfile.TemporaryDirectory(prefix="pobo-startup-") as tmp:
        scratch = Path(tmp)
        for tree in trees:  # warm the file cache: the first start of each is not timed
            help_imports(tree, bytecode)
            run_once(tree, scratch, bytecode)
        for _ in range(args.reps):
            for tree in trees:
                helps[tree].append(help_imports(tree, bytecode))
            for tree in trees:
                bare = wall(BARE) + wall(BARE)
                bares.append(bare)
                total, rounds = run_once(tree, scratch, bytecode)
                runs[tree].append((total, rounds, total / (bare + rounds)))
    med = statistics.median
    print(f"{args.reps} repetitions, medians, pobo's bytecode "
          f"{'cached' if bytecode else 'compiled at every start'}; two bare `import numpy, "
          f"zmq` starts: {med(bares) * 1e3:.0f} ms")
    for tree in trees:
        cumulative = med(h[0] for h in helps[tree])
        own = med(h[1] for h in helps[tree])
        total, rounds, ratio = (med(r[i] for r in runs[tree]) for i in range(3))
        print(f"{tree}:")
        print(f"  (a) python -X importtime -m pobo --help: pobo's imports {cumulative * 1e3:.0f} ms "
              f"cumulative ({own * 1e3:.0f} ms in pobo modules themselves); goal < 250 ms: "
              f"{'met' if cumulative < 0.25 else 'NOT met'}")
        print(f"  (b) pobo run synthetic: {total * 1e3:.0f} ms wall, rounds {rounds * 1e3:.0f} ms; "
              f"ratio to (2 bare starts + rounds) {ratio:.2f}; goal <= 2: "
              f"{'met' if ratio <= 2 else 'NOT met'}", flush=True)


if __name__ == "__main__":
    main()
