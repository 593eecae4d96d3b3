"""Logging and progress (issue 16 item 6): records of `pobo.*` loggers, -v/-q levels, a
bar on a terminal and plain lines elsewhere, and answer lines that cost O(1) each."""
from __future__ import annotations

import asyncio
import io
import logging

from pobo.parties.curator import Curator
from pobo.progress import configure_logging, level_for, step
from pobo.session import RunConfig, run_inproc


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _emit(out, err, **kw) -> None:
    configure_logging(out=out, err=err, **kw)
    log = logging.getLogger("pobo.curator")
    for done in range(1, 6):
        step(log, f"[curator] t={done}/5", done, 5)
    log.info("a plain line")
    log.warning("a warning")
    configure_logging()  # back to the defaults for the other tests


def test_plain_lines_when_not_a_terminal():
    out, err = io.StringIO(), io.StringIO()
    _emit(out, err)
    assert out.getvalue().splitlines() == [f"[curator] t={i}/5" for i in range(1, 6)] + \
        ["a plain line"]
    assert err.getvalue() == "a warning\n"


def test_a_bar_on_a_terminal_instead_of_answer_lines():
    out, err = io.StringIO(), Terminal()
    _emit(out, err)
    assert "t=3/5" not in out.getvalue() and "a plain line" in out.getvalue()
    assert "100%" in err.getvalue() and "5/5" in err.getvalue()
    verbose_out = io.StringIO()
    _emit(verbose_out, Terminal(), verbose=1)  # -v: every line, no bar
    assert "[curator] t=3/5" in verbose_out.getvalue()


def test_quiet_keeps_warnings_only():
    out, err = io.StringIO(), io.StringIO()
    _emit(out, err, quiet=True)
    assert out.getvalue() == "" and err.getvalue() == "a warning\n"
    assert level_for(2) == logging.DEBUG and level_for(0) == logging.INFO


def test_answer_lines_do_not_recompute_regret(tmp_path, monkeypatch):
    """The per-answer line keeps the best f so far (O(1)); the regret traces are computed
    once, for the result -- not once per answer (O(T^2) per session)."""
    calls = []
    original = Curator.regret

    def counted(self):
        calls.append(len(self.queries))
        return original(self)

    monkeypatch.setattr(Curator, "regret", counted)
    out = io.StringIO()
    configure_logging(out=out)
    try:
        result = asyncio.run(run_inproc(RunConfig("synthetic", T=30, seed=1,
                                                  options={"grid": 8}), tmp_path,
                                        verbose=True))
    finally:
        configure_logging()
    lines = [line for line in out.getvalue().splitlines() if line.startswith("[curator] t=")]
    assert len(lines) == 30 and calls == [30]
    last = float(lines[-1].rsplit("simple_regret=", 1)[1])
    assert abs(last - result["simple_regret"][-1]) < 1e-5
