"""Objectives evaluated on demand: a Python function, a command, or a value entered later.

A tabulated objective (a vector f over every row, `Problem.f`) is measured at once,
inside the journal transaction that records the answer. A real curator evaluates f
when asked -- a lab test on the chosen patient, a loan's outcome pulled from a system
-- which can take seconds or days. Such an evaluation is first *reserved* in the
journal (its ledger entries charged, so a refusal still comes before anything is
evaluated), then measured here without holding the journal's write lock, then
answered in a second transaction. Each objective below is one way of measuring:

- `FunctionObjective`: a Python function of the row index (a scenario script's
  `evaluate`), run in a worker thread;
- `CommandObjective`: `--objective-cmd 'CMD {index}'`, whose standard output is the
  value; a failing command is a typed `evaluation_failed` error, and the session may
  retry the query (it is not charged again);
- `DeferredObjective`: `--objective-wait` -- the value is entered later with
  `pobo answer --journal DB SESSION SEQ VALUE` (any process, any time, also after a
  curator restart), or written to a results file the curator watches
  (`--results-file`, lines `SESSION SEQ VALUE`).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pobo.parties.journal import Journal
from pobo.protocol.errors import ErrorCode, PoboError, ProtocolError

log = logging.getLogger("pobo.objective")
PLACEHOLDERS = ("index", "session", "seq")


class EvaluationFailed(ProtocolError):
    """The objective could not be evaluated at a row (a command that failed or printed no
    number, a function that raised or returned NaN): nothing is released, the
    reservation stays, and the modeler may retry the query.

    Its text (the command's stderr, what it printed, the exception) is about the row's
    data, so it stays with the curator (its log); the modeler is told only `public`."""

    PUBLIC = ("the curator could not evaluate this query (its own log says why); "
              "it may be retried")

    def __init__(self, message: str, public: bool = False) -> None:
        super().__init__(message, ErrorCode.EVALUATION_FAILED)
        self.public = message if public else self.PUBLIC  # what the modeler is told


@dataclass(frozen=True)
class EvaluationRequest:
    """One reserved evaluation: which session's query, at which row, and its journal."""

    session: str
    seq: int
    index: int
    journal: Journal


class Objective(Protocol):
    """Measures f at one row when asked (the curator's side of an on-demand objective)."""

    name: str

    async def measure(self, request: EvaluationRequest) -> float:
        """The measured value of f at `request.index`; EvaluationFailed if there is none."""


def checked_value(value: object, what: str) -> float:
    """`value` as a finite float, or EvaluationFailed naming `what` produced it."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise EvaluationFailed(f"{what} gave {str(value)[:80]!r}, not a number") from None
    if not math.isfinite(number):
        raise EvaluationFailed(f"{what} gave {number}, not a finite number")
    return number


@dataclass(frozen=True)
class FunctionObjective:
    """f(index) computed by a Python function (a scenario script's `evaluate`), in a
    worker thread so that a slow function never stalls the curator's other sessions."""

    function: Callable[[int], float]
    name: str = "function"

    async def measure(self, request: EvaluationRequest) -> float:
        """The function's value at the row (an exception becomes EvaluationFailed)."""
        what = f"the objective function at row {request.index}"
        try:
            value = await _in_daemon_thread(self.function, request.index)
        except Exception as exc:  # the user's code: any failure is a failed evaluation
            raise EvaluationFailed(f"{what} raised {type(exc).__name__}: {exc}"[:500]) from None
        return checked_value(value, what)


@dataclass(frozen=True)
class CommandObjective:
    """f(index) printed by a command: `template` is split like a shell line (no shell
    runs it) and each word formatted with {index}, {session} and {seq}; the command's
    standard output, stripped, must be one number. A non-zero exit, a timeout or
    anything else printed is EvaluationFailed."""

    template: str
    timeout: float = 3600.0
    name: str = "command"
    # the template split once (not at every query), before its words are formatted
    words: tuple[str, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        if not self.template.strip():
            raise ValueError("--objective-cmd is empty")
        if "{index}" not in self.template:
            raise ValueError("--objective-cmd must name the row as {index}, e.g. "
                             "'./measure.sh {index}'")
        if not (self.timeout > 0):
            raise ValueError(f"the command timeout must be > 0 seconds, got {self.timeout}")
        try:
            object.__setattr__(self, "words", tuple(shlex.split(self.template)))
        except ValueError as exc:  # an unclosed quotation
            raise ValueError(f"--objective-cmd {self.template!r}: {exc}") from None
        self.argv(EvaluationRequest("s", 1, 0, None))  # type: ignore[arg-type]  # bad braces

    def argv(self, request: EvaluationRequest) -> list[str]:
        """The command line for one evaluation."""
        values = {"index": request.index, "session": request.session, "seq": request.seq}
        try:
            return [word.format(**values) for word in self.words]
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"--objective-cmd {self.template!r}: bad placeholder ({exc}); "
                             f"it may use {{{'}, {'.join(PLACEHOLDERS)}}}") from None

    async def measure(self, request: EvaluationRequest) -> float:
        """Run the command for the row; its stdout is the value."""
        argv = self.argv(request)
        what = f"objective command {shlex.join(argv)!r}"
        try:
            code, out, err = await run_command(argv, self.timeout)
        except asyncio.TimeoutError:  # (first: an OSError too, since Python 3.11)
            raise EvaluationFailed(f"{what} ran past {self.timeout:g} s and was killed") from None
        except OSError as exc:
            raise EvaluationFailed(f"{what} could not start: {exc}") from None
        if code != 0:
            last = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise EvaluationFailed(f"{what} exited with {code}: {last[0][:200]}")
        return checked_value(out.decode(errors="replace").strip(), what)


_REAP_S = 5.0  # how long a killed command may take to exit (asyncio's: to close its pipes)


@functools.lru_cache(maxsize=1)
def pidfd_usable() -> bool:
    """Whether a child's exit can be watched through a pidfd here (Linux >= 5.3, and not
    refused by a sandbox): the check Python 3.12's asyncio makes before it uses one."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


async def run_command(argv: list[str], timeout: float) -> tuple[int, bytes, bytes]:
    """(exit code, stdout, stderr) of `argv`, run with no stdin in a process group of
    its own, once it has exited and closed its output; OSError if it cannot start.
    Past `timeout` s (asyncio.TimeoutError) or cancelled, the whole group is killed
    first (a lab tool it started too), and the wait for it is bounded (`_REAP_S`).

    Where a pidfd can watch the exit (Linux), the loop itself watches both pipes and
    the exit: asyncio's subprocess support (Python 3.11) starts a thread per command
    to wait for it and takes some thirty loop turns a command, about twice the
    curator's CPU per command (benchmarks/batches.py prints both); elsewhere it is
    asyncio's."""
    if pidfd_usable():
        return await _run_watched(argv, timeout)
    return await _run_asyncio(argv, timeout)


async def _run_watched(argv: list[str], timeout: float) -> tuple[int, bytes, bytes]:
    """`run_command` with readers on the loop for both pipes and the child's pidfd."""
    loop = asyncio.get_running_loop()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    watched: list[int] = []  # the descriptors with a reader on the loop

    def unwatch(fd: int) -> None:
        if fd in watched:
            watched.remove(fd)
            loop.remove_reader(fd)

    def collect(fd: int) -> asyncio.Future:
        """What `fd` gives until its end, as a future."""
        chunks: list[bytes] = []
        done = loop.create_future()

        def readable() -> None:
            try:
                data = os.read(fd, 1 << 16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # (as an end of file: nothing more can be read)
                data = b""
            if data:
                chunks.append(data)
                return
            unwatch(fd)
            if not done.done():
                done.set_result(b"".join(chunks))

        os.set_blocking(fd, False)
        loop.add_reader(fd, readable)
        watched.append(fd)
        return done

    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:  # (no descriptor left, say): not started after all
        _kill_group(proc)
        proc.wait()
        _close_pipes(proc)
        raise
    exited = loop.create_future()

    def ended() -> None:
        unwatch(pidfd)
        if not exited.done():
            exited.set_result(None)

    try:
        loop.add_reader(pidfd, ended)
        watched.append(pidfd)
        out = collect(proc.stdout.fileno())  # type: ignore[union-attr]
        err = collect(proc.stderr.fileno())  # type: ignore[union-attr]
        try:  # (asyncio.wait cancels none of them: `exited` stays to be waited for)
            _, left = await asyncio.wait((out, err, exited), timeout=timeout)
            if left:
                raise asyncio.TimeoutError
        except (asyncio.TimeoutError, asyncio.CancelledError):
            _kill_group(proc)
            await asyncio.wait((exited,), timeout=_REAP_S)
            if not exited.done():
                log.warning("a killed objective command (pid %d) has not exited after "
                            "%g s; its pipes are closed", proc.pid, _REAP_S)
            raise
        return proc.wait(), out.result(), err.result()
    finally:
        for fd in list(watched):
            unwatch(fd)
        os.close(pidfd)
        _close_pipes(proc)
        if exited.done():
            proc.wait()  # reaped (it has exited: at once)


def _close_pipes(proc: subprocess.Popen) -> None:
    """Close this side of a command's output pipes."""
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _kill_group(proc: subprocess.Popen | asyncio.subprocess.Process) -> None:
    """SIGKILL a command and its process group (the group's id is not reused while a
    member lives, nor the command's pid before it is reaped)."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


async def _run_asyncio(argv: list[str], timeout: float) -> tuple[int, bytes, bytes]:
    """`run_command` by asyncio's subprocess support (no pidfd here)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        await _kill(proc)
        raise
    assert proc.returncode is not None
    return proc.returncode, out, err


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """Kill a command and its process group, and reap it within _REAP_S: asyncio's
    `wait()` also waits for the command's pipes to close, which a child that left the
    group could hold open for ever -- past _REAP_S the pipes are closed from this side."""
    _kill_group(proc)
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), _REAP_S)
    except asyncio.TimeoutError:
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()  # the pipes: wait() ends once the process is reaped
        log.warning("a killed objective command (pid %d) left its output pipes open; "
                    "closed them", proc.pid)


async def _in_daemon_thread(function: Callable[[int], float], index: int) -> float:
    """`function(index)` in a daemon thread of its own: unlike `asyncio.to_thread`, a
    function that never returns neither blocks the loop's shutdown (which joins the
    default executor's threads, without a bound before Python 3.12) nor the process's
    exit; a cancelled wait leaves it running, its result dropped."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(value: float | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        try:
            value, error = function(index), None
        except Exception as exc:  # handed to the waiting task
            value, error = None, exc
        except BaseException as exc:  # SystemExit in user code: a failure, not an exit
            value, error = None, RuntimeError(f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=work, name="pobo-objective", daemon=True).start()
    return await future


@dataclass(frozen=True)
class DeferredObjective:
    """f(index) entered later: the value a person or another system puts into the journal
    (`pobo answer`), or a line `SESSION SEQ VALUE` of `results_file`; polled every
    `poll` seconds. The reservation is in the journal, so a curator restarted in
    between finds it again and the value may be entered while no curator runs."""

    results_file: Path | None = None
    poll: float = 1.0
    name: str = "deferred"
    # why the results file could not be read, each said once (not at every poll)
    unreadable: set[str] = field(default_factory=set, compare=False, repr=False)

    async def measure(self, request: EvaluationRequest) -> float:
        """Wait until a value for the query has been entered; return it."""
        while True:
            if self.results_file is not None:
                ingest_results(self.results_file, request.journal, self.unreadable)
            value = request.journal.supplied(request.session, request.seq)
            if value is not None:
                return checked_value(value, f"the value entered for query {request.seq}")
            await asyncio.sleep(self.poll)


def complete_lines(text: str) -> list[str]:
    """The lines of `text` that end with a newline: a last line still being written
    (`12` of what becomes `123.456`) is left for the next read."""
    return text.split("\n")[:-1]


def ingest_results(path: str | Path, journal: Journal, said: set[str] | None = None) -> int:
    """Enter every complete (newline-terminated) line `SESSION SEQ VALUE` (whitespace or
    commas; '#' comments) of a results file whose query is pending in `journal` and has
    no value yet; returns how many were entered. A line for another journal's session,
    an answered query or a malformed line is skipped (logged): the file may hold every
    session's results. Why the file cannot be read is logged once per reason in `said`
    (the caller's, kept between polls), else every time."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:  # missing (not yet written), a directory, unreadable
        why = f"{type(exc).__name__}: {exc.strerror or exc}"
        if not isinstance(exc, FileNotFoundError) and (said is None or why not in said):
            log.warning("results file %s cannot be read: %s", path, exc)
            if said is not None:
                said.add(why)
        return 0
    waiting = {(p.session, p.seq) for p in journal.pending(live=True) if p.measured is None}
    entered = 0
    for number, line in enumerate(complete_lines(text), 1):
        words = line.split("#", 1)[0].replace(",", " ").split()
        if not words:
            continue
        try:
            session, seq, value = words[0], int(words[1]), float(words[2])
        except (IndexError, ValueError):
            log.debug("%s:%d: not 'SESSION SEQ VALUE': %r", path, number, line[:80])
            continue
        if (session, seq) not in waiting:
            continue
        try:
            journal.supply(session, seq, value)
            entered += 1
        except PoboError as exc:
            log.warning("%s:%d: %s", path, number, exc)
    return entered
