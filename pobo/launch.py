"""Start the curator and the modeler as two separate OS processes and merge their results.

`run_processes(config, out)` is what `pobo run --transport tcp|ipc` does: it holds
`out` (a second run into it is refused: pobo.inuse), starts `pobo curator --bind ...`
on a port the system picks when the curator binds (after preparing its dataset),
forwards the curator's progress lines, reads the endpoint it bound, then starts `pobo
modeler --connect ...`, and always stops both processes before returning, pass or fail.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pobo.protocol.errors import PoboError
from pobo.inuse import holding
from pobo.progress import step
from pobo.runspec import LISTENING, ROLES, RunConfig, merge_results, release_conflict

TRANSPORTS = ("tcp", "ipc", "inproc")
STOP_WAIT = 30.0  # seconds a cancelled run_async waits for its parties to be stopped
ORPHAN_WAIT = 60.0  # seconds a modeler may run on after its curator ended normally
_POLL_S = 0.1  # how often a run waiting for its parties checks for a stop or a timeout
PARENT_PIPE = "POBO_PARENT_PIPE"  # set for a party: its stdin is a pipe from `pobo run`


class LaunchError(PoboError):
    """A party process failed to start, timed out or exited with an error."""


@dataclass(frozen=True)
class Spawned:
    """A started party process and the lines it printed."""

    role: str
    process: subprocess.Popen
    lines: list[str]
    reader: threading.Thread
    errors: list[str] = field(default_factory=list)  # its stderr lines (also echoed)
    quiet: threading.Event = field(default_factory=threading.Event)  # set: echo no more


def scenario_argv(config: RunConfig) -> list[str]:
    """The `pobo curator` options that rebuild `config` in another process."""
    argv = [config.scenario, "--timeout", str(config.timeout), "--lift", config.lift]
    for flag, value in (("--eps", config.epsilon), ("--delta", config.delta), ("--r", config.r),
                        ("--T", config.T), ("--seed", config.seed),
                        ("--ldp-eps", config.ldp_epsilon), ("--budget-eps", config.budget_epsilon),
                        ("--budget-delta", config.budget_delta),
                        ("--ldp-row-budget", config.ldp_row_budget),
                        ("--ldp-row-delta", config.ldp_row_delta),
                        ("--lift-eps", config.lift_epsilon), ("--lift-delta", config.lift_delta),
                        ("--reward-bound", config.reward_bound),
                        ("--noise-bound", config.noise_bound),
                        ("--objective-cmd", config.objective_cmd),
                        ("--results-file", config.results_file),
                        ("--max-batch", config.max_batch if config.max_batch != 1 else None),
                        ("--eval-timeout", config.eval_timeout if config.eval_timeout != 3600.0
                         else None),
                        ("--journal", config.journal),
                        ("--durability", config.durability if config.journal else None)):
        if value is not None:
            argv += [flag, value if isinstance(value, str) else repr(value)]
    if config.non_private:
        argv.append("--non-private")
    if config.objective_wait:
        argv.append("--objective-wait")
    if config.authors_code:
        argv.append("--authors-code")
    argv.append("--distinct" if config.distinct else "--no-distinct")  # the session's rule
    for key, value in sorted(config.options.items()):
        if value is True:  # a switch (--minimise)
            argv.append("--" + key.replace("_", "-"))
        elif value is not None and value is not False:
            argv += ["--" + key.replace("_", "-"), str(value)]
    return argv


def modeler_argv(config: RunConfig) -> list[str]:
    """The `pobo modeler` options that rebuild the modeler's side of `config`."""
    h = config.hyper
    argv = ["--strategy", config.strategy, "--timeout", str(config.timeout), "--fit", h.mode,
            "--n-init", str(h.n_init), "--fit-every", str(h.every), "--restarts", str(h.restarts),
            "--fit-hold", str(h.hold)]
    if h.kernel is not None:
        argv += ["--kernel", h.kernel]
    if config.beta_scale is not None:
        argv += ["--beta-scale", repr(config.beta_scale)]
    if config.moma_k is not None:
        argv += ["--moma-k", str(config.moma_k)]
    argv.append("--distinct" if config.distinct else "--no-distinct")
    if config.release is not None:
        argv += ["--release", config.release, "--release-eps", repr(config.release_epsilon),
                 "--release-delta", repr(config.release_delta)]
    if config.seed is not None:
        argv += ["--seed", str(config.seed)]
    if config.non_private:
        argv.append("--non-private")
    if config.batch != 1:
        argv += ["--batch", str(config.batch)]
    if config.authors_code:
        argv.append("--authors-code")
    return argv


def run(config: RunConfig, out: Path | str, transport: str = "tcp", *,
        verbose: bool = True, wall_timeout: float | None = None,
        curve_dir: Path | None = None, modeler_lines: bool = False,
        spin: float | None = None) -> dict:
    """Run one session over `transport` (two processes for tcp/ipc); return result.json.
    Works from a running event loop too (a notebook): see `run_async` to await it.
    `modeler_lines` also shows the modeler's per-query lines (`pobo run -v`). Ctrl-C
    raises `Interrupted` carrying the result.json of what both sides recorded. A release
    the curator would refuse at the Hello (`release_conflict`) is a LaunchError first."""
    conflict = release_conflict(config)
    if conflict is not None:
        raise LaunchError(conflict)
    if transport == "inproc":
        from pobo.blocking import run_blocking

        try:
            return run_blocking(_inproc(config, out, verbose, modeler_lines))
        except KeyboardInterrupt:  # both sides wrote their records while unwinding
            raise Interrupted(_merge_if_present(Path(out), partial=True), Path(out)) from None
    return run_processes(config, out, transport, verbose=verbose, wall_timeout=wall_timeout,
                         curve_dir=curve_dir, modeler_lines=modeler_lines, spin=spin)


async def run_async(config: RunConfig, out: Path | str, transport: str = "tcp", *,
                    verbose: bool = True, wall_timeout: float | None = None,
                    curve_dir: Path | None = None) -> dict:
    """`run`, to await from a running event loop (the party processes of tcp/ipc are
    waited for in a worker thread, so the loop stays free)."""
    import asyncio

    if transport == "inproc":
        return await _inproc(config, out, verbose)
    stop = threading.Event()
    work = asyncio.ensure_future(asyncio.to_thread(
        run_processes, config, out, transport, verbose=verbose, wall_timeout=wall_timeout,
        curve_dir=curve_dir, stop=stop))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:  # the worker thread stops both parties before it ends
        stop.set()
        await asyncio.wait({work}, timeout=STOP_WAIT)
        if work.done() and not work.cancelled():
            work.exception()  # retrieved: the cancellation is what the caller sees
        raise


async def _inproc(config: RunConfig, out: Path | str, verbose: bool,
                  modeler_lines: bool = False) -> dict:
    """One in-process session signed with the user's key-store keys (public halves
    copied to out/keys/ for reference: an audit never trusts that folder)."""
    from pobo.session import Signing, run_inproc  # the parties, in this process

    signing = Signing.from_store()
    with holding(out):  # a second run into `out` is refused while this one runs
        try:
            return await run_inproc(config, out, verbose=verbose, signing=signing,
                                    modeler_verbose=modeler_lines)
        finally:
            publish_beside_records(signing.curator.public_hex, signing.modeler.public_hex,
                                   Path(out))


def curve_argv(curve_dir: Path | None) -> tuple[list[str], list[str]]:
    """(curator, modeler) CURVE options from a `pobo keys` directory, made if missing."""
    if curve_dir is None:
        return [], []
    curve_dir = Path(curve_dir)
    if not (curve_dir / "curator.key_secret").exists():
        from pobo.transport.security import make_keys  # zmq: only to make CURVE keys

        make_keys(curve_dir)
    return (["--curve-secret", str(curve_dir / "curator.key_secret"),
             "--curve-allow", str(curve_dir / "allowed")],
            ["--curve-secret", str(curve_dir / "modeler.key_secret"),
             "--curve-server", str(curve_dir / "curator.key")])


def publish_keys(curator: str, modeler: str, out: Path) -> Path:
    """Write a run's public signing keys to out/keys/ (for `pobo audit --keys`)."""
    folder = Path(out) / "keys"
    folder.mkdir(parents=True, exist_ok=True)
    for role, key in (("curator", curator), ("modeler", modeler)):
        (folder / f"{role}.sign_public").write_text(key + "\n")
    return folder


def publish_beside_records(curator: str, modeler: str, out: Path) -> Path | None:
    """`publish_keys` once the run has recorded anything in `out` (a party's record or
    transcript): a run refused before its session starts (a scenario that cannot be
    built, a curator that never binds) leaves no folder holding its keys alone."""
    if any((out / f"{role}.{ext}").exists() for role in ROLES for ext in ("json", "transcript")):
        return publish_keys(curator, modeler, out)
    return None


def signing_argv(curve_dir: Path | None,
                 scratch: Path) -> tuple[list[str], list[str], tuple[str, str]]:
    """(curator, modeler) signing options, and the (curator, modeler) public keys: the
    keys of `curve_dir` if it holds signing keys, else the user's key store's
    (transport.keyfiles.store_signing_key, made once). The caller copies the public
    halves beside the run's records for reference (an audit never trusts that folder)."""
    from pobo.protocol.signing import load_verify_key
    from pobo.transport.keyfiles import store_signing_key  # no zmq in this process

    folder = Path(curve_dir) if curve_dir is not None else None
    if folder is not None and (folder / "curator.sign_secret").exists():
        secrets_ = {role: folder / f"{role}.sign_secret" for role in ("curator", "modeler")}
    else:
        secrets_ = {role: store_signing_key(role) for role in ("curator", "modeler")}
    public = {role: path.with_suffix(".sign_public") for role, path in secrets_.items()}
    allowed = scratch / "allowed"
    allowed.mkdir(exist_ok=True)
    modeler_key = load_verify_key(public["modeler"])
    (allowed / "modeler.sign_public").write_text(modeler_key + "\n")
    return (["--sign-secret", str(secrets_["curator"]), "--sign-allow", str(allowed)],
            ["--sign-secret", str(secrets_["modeler"]),
             "--curator-sign-key", str(public["curator"])],
            (load_verify_key(public["curator"]), modeler_key))


def run_processes(config: RunConfig, out: Path | str, transport: str = "tcp", *,
                  verbose: bool = True, wall_timeout: float | None = None,
                  start_timeout: float = 60.0, curve_dir: Path | None = None,
                  modeler_lines: bool = False, stop: threading.Event | None = None,
                  spin: float | None = None) -> dict:
    """Curator and modeler as two OS processes over loopback tcp or ipc (CURVE-encrypted
    with the keys in `curve_dir` when given); result.json. `spin`: seconds each party's
    loop polls between close frames (`--spin`, pobo.transport.spin; None: its default).
    Setting `stop` (from another thread) stops both parties and raises LaunchError; so
    does `wall_timeout` (seconds for the whole run) running out. Each party also stops by itself if this process
    dies (its stdin, a pipe from here, closes: see `scenarios.cli`)."""
    curator_curve, modeler_curve = curve_argv(curve_dir)
    if spin is not None:  # both parties' loops
        from pobo.transport.spin import checked_spin

        polling = ["--spin", repr(checked_spin(spin) * 1e6)]
        curator_curve, modeler_curve = curator_curve + polling, modeler_curve + polling
    if transport not in ("tcp", "ipc"):
        raise ValueError(f"transport must be tcp or ipc for two processes, got {transport!r}")
    out = Path(out).resolve()  # (made by the parties, as they record)
    before = _records_in(out)
    made = out  # the outermost folder this run would make (runs/ of runs/NAME, say)
    while not made.parent.exists():
        made = made.parent
    with tempfile.TemporaryDirectory(prefix="pobo-") as sockdir, holding(out):
        curator_sign, modeler_sign, public = signing_argv(curve_dir, Path(sockdir))
        curator_curve, modeler_curve = (curator_curve + curator_sign,
                                        modeler_curve + modeler_sign)
        # the curator prepares its dataset, then binds a port the system picks (tcp) and
        # says where: no port is chosen long before it is bound. The modeler starts at
        # the same time (its start-up overlaps the curator's) but learns the endpoint
        # only then, on its standard input (`--connect -`): no peer timeout runs while
        # the curator prepares (however long)
        bind = ("tcp://127.0.0.1:0" if transport == "tcp"
                else f"ipc://{sockdir}/curator.sock")
        endpoint_ready = threading.Event()
        endpoint: list[str] = []
        spawned: list[Spawned] = []
        codes: dict[str, int] = {}
        try:
            curator = _spawn("curator", ["curator", *scenario_argv(config), "--bind", bind,
                                         "--out", str(out), *curator_curve], verbose,
                             on_line=lambda line: _found_endpoint(line, endpoint, endpoint_ready))
            spawned.append(curator)
            modeler = _spawn("modeler", ["modeler", "--connect", "-", "--out", str(out),
                                         *modeler_argv(config), *modeler_curve,
                                         *(["-v"] if modeler_lines else [])],
                             verbose=modeler_lines)
            spawned.append(modeler)
            _wait_for_endpoint(curator, endpoint_ready, start_timeout, stop, modeler)
            _tell_endpoint(modeler, endpoint[0])
            codes = _wait_all(spawned, wall_timeout, stop)
        except KeyboardInterrupt:  # Ctrl-C reached the parties too: let them write
            for s in spawned:
                _wait_quietly(s.process, 15.0)
            result = _merge_if_present(out, partial=True)
            raise Interrupted(result, out) from None
        finally:
            for s in spawned:
                if s.process.poll() is None:
                    s.quiet.set()
                _stop(s.process)
                s.reader.join(5)
            if endpoint:
                publish_beside_records(*public, out)
            else:  # the curator never bound: nothing of a session was recorded
                _discard_unserved(out, before, made)
    result = _merge_if_present(out)
    failed = {role: code for role, code in codes.items() if code != 0}
    if failed or result is None:
        raise LaunchError(f"party processes failed (exit codes {codes}); "
                          f"partial records are in {out}")
    return result


def _records_in(out: Path) -> set[str] | None:
    """The names in `out` now (None: no such folder yet)."""
    try:
        return {p.name for p in out.iterdir()}
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return set()


# what the modeler moves aside when its session starts (pobo.session.keep_previous_record
# and Transcript): the only names a refused run puts back
MOVED_ASIDE = frozenset({"modeler.json", "modeler.transcript", "result.json"})


def _discard_unserved(out: Path, before: set[str] | None, made: Path) -> None:
    """Remove what a run whose curator never bound wrote in `out` (the modeler's record
    and transcript of a Hello nobody received), and the folders the run made, up to
    `made`, if they are empty: a run refused before its session starts leaves no folder
    (`pobo runs` would list it as incomplete). What was there before stays where it was:
    the records the modeler moved aside (NAME.N, pobo.session.keep_previous_record) are
    put back."""
    if before is not None:  # put back what the modeler moved aside for its session
        after = _records_in(out) or set()
        for name in sorted(after - before):
            base, _, n = name.rpartition(".")
            if n.isdigit() and base in before and base in MOVED_ASIDE:
                os.replace(out / name, out / base)  # (over the refused run's own record)
    for name in ("modeler.json", "modeler.transcript"):
        if before is None or name not in before:
            (out / name).unlink(missing_ok=True)
    if before is not None:
        return
    folder = out
    while True:
        try:
            folder.rmdir()  # only if empty: anything else written stays
        except OSError:
            return
        if folder == made or folder.parent == folder:
            return
        folder = folder.parent


def _wait_for_endpoint(curator: Spawned, ready: threading.Event, timeout: float,
                       stop: threading.Event | None = None,
                       modeler: Spawned | None = None) -> None:
    """Wait until the curator prints its endpoint; fail at once if it (or the `modeler`
    waiting for it) exits first, and after `timeout` s only of silence: a curator that
    keeps saying it works (preparing the dataset, every 10 s) is waited for as long as it
    lives."""
    deadline = time.monotonic() + timeout
    heard = len(curator.lines) + len(curator.errors)
    while not ready.wait(0.05):
        if len(curator.lines) + len(curator.errors) > heard:  # it said something: working
            heard = len(curator.lines) + len(curator.errors)
            deadline = time.monotonic() + timeout
        if stop is not None and stop.is_set():
            raise LaunchError("the run was stopped")
        if modeler is not None and (code := modeler.process.poll()) is not None:
            modeler.reader.join(2)  # (a setting it refuses, say: said on its stderr)
            raise LaunchError(f"the modeler exited with code {code} before the curator bound"
                              + (" (its error is above)" if modeler.errors else ""))
        code = curator.process.poll()
        if code is not None:
            curator.reader.join(2)
            raise LaunchError(f"the curator exited with code {code} before binding"
                              + (" (its error is above)" if curator.errors else ""))
        if time.monotonic() > deadline:
            raise LaunchError(f"the curator said nothing for {timeout:g} s and did not bind")


def _tell_endpoint(modeler: Spawned, endpoint: str) -> None:
    """Give the modeler (started with `--connect -`) the curator's endpoint, on its
    standard input; the pipe stays open (its end tells the modeler this run died)."""
    try:
        modeler.process.stdin.write(endpoint + "\n")  # type: ignore[union-attr]
        modeler.process.stdin.flush()  # type: ignore[union-attr]
    except (BrokenPipeError, OSError):  # it exited meanwhile: _wait_all says so
        pass


def _found_endpoint(line: str, endpoint: list[str], ready: threading.Event) -> None:
    if line.startswith(LISTENING) and not endpoint:
        endpoint.append(line[len(LISTENING):].strip())
        ready.set()


def _spawn(role: str, argv: list[str], verbose: bool, on_line=None) -> Spawned:
    """Start `python -m pobo ARGV` -- the installed package, so that a `scenarios/`
    folder in the working directory cannot shadow it -- forwarding its stdout line by
    line."""
    # stdin is a pipe (written to once, with a modeler's endpoint): it closes when this
    # process dies, however it dies, and the party then stops by itself (pobo.cli's
    # ParentPipe) instead of running on
    process = subprocess.Popen([sys.executable, "-m", "pobo", *argv],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.PIPE, text=True, bufsize=1,
                               env={**os.environ, PARENT_PIPE: "1"})
    lines: list[str] = []
    errors: list[str] = []

    quiet = threading.Event()

    def pump_errors() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            errors.append(line)
            if not quiet.is_set():  # a party this process stops says nothing more
                print(line, end="", file=sys.stderr, flush=True)

    threading.Thread(target=pump_errors, name=f"pobo-{role}-stderr", daemon=True).start()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if on_line is not None:
                on_line(line)
            if verbose:
                forward(role, line.rstrip("\n"))

    reader = threading.Thread(target=pump, name=f"pobo-{role}-stdout", daemon=True)
    reader.start()
    return Spawned(role, process, lines, reader, errors, quiet)


ANSWER_LINE = re.compile(r"^\[(\w+)\] t=\s*(\d+)/(\d+) ")


def forward(role: str, line: str) -> None:
    """A party's output line, logged by this process: an answer line as progress (a bar
    on a terminal), any other line as it is."""
    logger = logging.getLogger(f"pobo.{role}")
    found = ANSWER_LINE.match(line)
    if found and " evaluating " not in line:
        step(logger, line, int(found.group(2)), int(found.group(3)))
    else:
        logger.info(line)


def _wait_all(spawned: list[Spawned], timeout: float | None,
              stop: threading.Event | None) -> dict[str, int]:
    """Each party's exit code once all have exited; LaunchError when `timeout` s pass
    first or `stop` is set (the caller's finally then stops them). A curator that exits
    with an error (killed, say) while the modeler runs stops the modeler too, at once
    (it would otherwise retry for its --patience); one that ended normally leaves the
    modeler ORPHAN_WAIT s to finish. A modeler that exits with an error stops the
    curator at once (it would otherwise wait for a Hello until its accept timeout)."""
    deadline = math.inf if timeout is None else time.monotonic() + timeout
    codes: dict[str, int] = {}
    curator_gone = None
    while len(codes) < len(spawned):
        for s in spawned:
            if s.role not in codes and (code := s.process.poll()) is not None:
                codes[s.role] = code
        if len(codes) == len(spawned):
            break
        if codes.get("modeler", 0) != 0 and "curator" not in codes:
            # the modeler failed (a setting it refuses, before its Hello, say): the
            # curator would wait for it until its accept timeout; stopped, it records
            curator = next(s for s in spawned if s.role == "curator")
            _stop(curator.process)
            raise LaunchError(f"the modeler exited (code {codes['modeler']}) while the "
                              "curator was still running: the curator was stopped")
        if "curator" in codes and "modeler" not in codes:
            curator_gone = curator_gone or time.monotonic()
            if codes["curator"] != 0 or time.monotonic() - curator_gone > ORPHAN_WAIT:
                modeler = next(s for s in spawned if s.role == "modeler")
                _stop(modeler.process)
                raise LaunchError(f"the curator exited (code {codes['curator']}) while the "
                                  "modeler was still running: the modeler was stopped")
        if stop is not None and stop.is_set():
            raise LaunchError("the run was stopped")
        if time.monotonic() >= deadline:
            raise LaunchError(f"a party process ran past {timeout:g} s")
        waiting = next(s for s in spawned if s.role not in codes)
        with contextlib.suppress(subprocess.TimeoutExpired):
            waiting.process.wait(_POLL_S)
    return codes


def _stop(process: subprocess.Popen) -> None:
    """Terminate a party process if it still runs, then kill it if it will not go."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _merge_if_present(out: Path, partial: bool = False) -> dict | None:
    """Merge curator.json and modeler.json into result.json when both were written (with
    `partial`, the curator's alone will do: an interrupted run keeps what it has)."""
    paths = out / "curator.json", out / "modeler.json"
    present = [p.exists() for p in paths]
    if not present[0] or not (present[1] or partial):
        return None
    curator = json.loads(paths[0].read_text())
    modeler = json.loads(paths[1].read_text()) if present[1] else {"status": "interrupted"}
    return merge_results(curator, modeler, out)


def _wait_quietly(process: subprocess.Popen, timeout: float) -> None:
    """Wait (bounded) for a process to exit by itself; a second Ctrl-C stops waiting."""
    try:
        process.wait(timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        pass


class Interrupted(KeyboardInterrupt):
    """`pobo run` stopped by Ctrl-C; `result` is what the parties recorded (or None)."""

    def __init__(self, result: dict | None, out: Path) -> None:
        super().__init__(f"interrupted; the records are in {out}")
        self.result, self.out = result, out
