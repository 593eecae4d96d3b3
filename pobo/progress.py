"""What pobo prints, through `logging`: levels from -v/-q, a progress bar on a terminal.

Every line a party or a sweep prints is a record of a `pobo.*` logger. A record that
reports progress carries `extra={STEP: (done, total)}` (see `step`). `configure_logging`
installs one handler on the `pobo` logger: on a terminal those records drive a tqdm bar
per logger (and other lines are written above the bars); elsewhere (a pipe, a file, CI)
every record is a plain line. Informational lines go to standard output, warnings and
errors to standard error. `-q` shows warnings and errors only; `-v` adds the modeler's
per-query lines, `-vv` debugging detail.
"""
from __future__ import annotations

import logging
import sys
from typing import TextIO

STEP = "pobo_step"  # the attribute of a progress record: (done, total)
ROOT = "pobo"


def step(logger: logging.Logger, message: str, done: int, total: int,
         level: int = logging.INFO) -> None:
    """Log one line of progress: `done` of `total` (a bar on a terminal)."""
    logger.log(level, message, extra={STEP: (int(done), int(total))})


def level_for(verbose: int = 0, quiet: bool = False) -> int:
    """The `pobo` logger's level for -v (count) and -q."""
    if quiet:
        return logging.WARNING
    return logging.DEBUG if verbose >= 2 else logging.INFO


class ProgressHandler(logging.Handler):
    """Plain lines, or (with `bars`) tqdm bars for progress records and lines above them."""

    def __init__(self, out: TextIO | None, err: TextIO | None, bars: bool) -> None:
        super().__init__()
        self._out, self._err, self.bars = out, err, bars  # None: sys.stdout/err when used
        self._bars: dict[str, object] = {}

    @property
    def out(self) -> TextIO:
        return sys.stdout if self._out is None else self._out

    @property
    def err(self) -> TextIO:
        return sys.stderr if self._err is None else self._err

    def emit(self, record: logging.LogRecord) -> None:
        try:
            progress = getattr(record, STEP, None)
            if self.bars and progress is not None:
                self._advance(record.name, *progress)
                return
            stream = self.err if record.levelno >= logging.WARNING else self.out
            line = self.format(record)
            if self._bars:
                from tqdm import tqdm
                tqdm.write(line, file=stream)
            else:
                stream.write(line + "\n")
                stream.flush()
        except Exception:  # logging must never take the program down
            self.handleError(record)

    def _advance(self, name: str, done: int, total: int) -> None:
        from tqdm import tqdm
        bar = self._bars.get(name)
        if bar is None or bar.total != total:
            bar = self._bars[name] = tqdm(total=total, desc=name.removeprefix(f"{ROOT}."),
                                          file=self.err, leave=True, dynamic_ncols=True)
        bar.update(max(0, done - bar.n))
        if done >= total:
            bar.close()
            del self._bars[name]

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()
        super().close()


def configure_logging(verbose: int = 0, quiet: bool = False, out: TextIO | None = None,
                      err: TextIO | None = None) -> logging.Logger:
    """Send the `pobo` loggers' records to the terminal (bars when it is one, tqdm
    installed and not -v) or as plain lines; returns the `pobo` logger."""
    logger = logging.getLogger(ROOT)
    for old in list(logger.handlers):
        if isinstance(old, ProgressHandler):
            logger.removeHandler(old)
            old.close()
    bars = (_is_terminal(sys.stderr if err is None else err) and not verbose and not quiet
            and _has_tqdm())
    handler = ProgressHandler(out, err, bars)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level_for(verbose, quiet))
    return logger


def _is_terminal(stream: TextIO) -> bool:
    """A terminal a bar can be drawn on (a pseudo-terminal without a size cannot)."""
    import os

    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):
        return False
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):  # a terminal-like stream with no descriptor
        return True
    return size.columns > 0 and size.lines > 0


def _has_tqdm() -> bool:
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True
