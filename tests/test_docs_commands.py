"""Every `pobo` command the README and docs/ show runs as written: each one is parsed by
the real command line (an unknown flag, a missing value or a wrong choice fails here),
every file it names under ../shared/data exists there, and a few quick ones are run."""
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDER = re.compile(r"\[|\.\.\.|\b[A-Z][A-Z_]{2,}\b(?!\.)")  # synopsis: [opt], FILE, DIR


def commands(page: Path) -> list[tuple[int, str]]:
    """(line, command) of each concrete `pobo` command in the page's fenced blocks."""
    out, block, joined, start = [], False, "", 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            block, joined = not block, ""
            continue
        if not block:
            continue
        text = line.split("  #")[0].strip()
        if joined:
            joined += " " + text
        elif text.startswith(("pobo ", "python -m pobo ")):
            joined, start = text, number
        if joined and not joined.endswith("\\"):
            if not PLACEHOLDER.search(joined.replace("python -m pobo", "pobo")):
                out.append((start, joined))
            joined = ""
        elif joined:
            joined = joined[:-1].strip()
    return out


ALL = [(page.name, line, cmd) for page in PAGES for line, cmd in commands(page)]


def test_the_pages_show_commands():
    assert len(ALL) >= 10, ALL


@pytest.mark.parametrize("page,line,command", ALL, ids=[f"{p}:{n}" for p, n, _ in ALL])
def test_a_documented_command_parses(page, line, command):
    from pobo.scenarios.cli import build_parser

    argv = shlex.split(command.replace("python -m pobo", "pobo"))[1:]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{page}:{line}: `{command}` does not parse (exit {exc.code})")
    for word in argv:
        if word.startswith("../shared/data/") and (ROOT.parent / "shared").is_dir():
            assert (ROOT / word).exists(), f"{page}:{line}: {word} is not in shared/data"


def test_the_quick_commands_run(tmp_path):
    """The documented commands that take a second, run as written (in a scratch folder)."""
    quick = [c for _, _, c in ALL if c.startswith("pobo --version")
             or c.startswith("pobo runs")]
    for command in quick:
        argv = shlex.split(command)[1:]
        done = subprocess.run([sys.executable, "-m", "pobo", *argv], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode in (0, 1), (command, done.stderr)
        assert "Traceback" not in done.stderr, (command, done.stderr)
