"""Ctrl-C and SIGTERM at any moment, import time included: one line, exit 130 / 143, no traceback.

`install(before)` (the first thing `python -m tasks.train` and the reproduce driver do, before
their heavy imports) makes Ctrl-C and SIGTERM exceptions of our own (`Interrupted`, `Terminated`:
BaseExceptions, so no `except Exception` swallows them) and catches an uncaught stop in
`sys.excepthook`: one line `error: interrupted (Ctrl-C) <before>` and exit 130 (SIGTERM: 143).
A stop inside a run is caught earlier, by tasks/common/runner.py, which names the checkpoint.

The reproduce driver starts its runs in their own session (the launcher `adopt`s them), so a
Ctrl-C of the terminal reaches the driver only; the driver passes that one signal on to each live
run (which stops and prints where it resumes from), and its launcher threads, which the signal
does not interrupt, read the runs' last lines until they exit.
Only the first signal stops anything: later ones are ignored while the runs wind down.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

_children: set = set()  # the driver's live runs (subprocess.Popen)
_stopping = False
_received = None  # the first stop signal this process got (signal.SIGINT / SIGTERM)
_exit_now = None  # the line to end on at once, while nothing needs cleaning up (install)
_held = False     # hold_stops(): a stop now is raised at release_stops(), not where the process is
_pending = None   # the stop signal that arrived while held


class Stop(BaseException):
    """A stop signal, raised where the process is (a BaseException: `except Exception` lets it
    pass)."""


class Terminated(Stop):
    """SIGTERM."""


class Interrupted(Stop):
    """Ctrl-C. Not a KeyboardInterrupt: Lightning catches that in fit/test to print its own
    "Detected KeyboardInterrupt, attempting graceful shutdown ..." and sys.exit(1); any other
    BaseException takes its silent path (callbacks' on_exception, teardown, re-raise), so a
    stopped run prints our one line only."""


# what a stop can arrive as: ours, or Python's own KeyboardInterrupt where no handler is installed
STOPS = (KeyboardInterrupt, Stop)


def how(exc: BaseException) -> tuple[str, int]:
    """('terminated (SIGTERM)', 143) or ('interrupted (Ctrl-C)', 130)."""
    if isinstance(exc, Terminated):
        return "terminated (SIGTERM)", 143
    return "interrupted (Ctrl-C)", 130


def _stop_of(signum) -> Stop:
    return Terminated() if signum == signal.SIGTERM else Interrupted()


def _on_signal(signum, frame):
    global _stopping, _received, _pending
    if _stopping:  # the runs are winding down after the first stop: let them
        return
    _stopping, _received = True, signum
    if _exit_now is not None:  # nothing to clean up yet: exit here, inside no library's code
        _say_and_exit(_stop_of(signum), _exit_now)
    for proc in list(_children):
        if proc.poll() is None:
            proc.send_signal(signum)
    if _held:
        _pending = signum
        return
    raise _stop_of(signum)


def hold_stops() -> None:
    """Until release_stops(), a stop signal is raised there instead of where the process is:
    resume.StepCheckpoint holds from a step checkpoint to the next hook, because Lightning logs the
    CSV row of that step's batch after the callbacks' on_train_batch_end. A stop in between lost
    the row for good (the resumed run starts after it; the resume test failed so under load)."""
    global _held
    _held = True


def holding() -> bool:
    return _held


def release_stops(raise_pending: bool = True) -> None:
    """End hold_stops(); a stop that arrived meanwhile is raised now (unless `raise_pending` is
    False: an exception is already unwinding)."""
    global _held, _pending
    signum, _held, _pending = _pending, False, None
    if signum is not None and raise_pending:
        raise _stop_of(signum)


def stop_behind(exc: BaseException) -> BaseException | None:
    """The stop that `exc` is, or that it replaced, or None. A library's cleanup can fail while
    a stop unwinds through it (omegaconf's `flag_override` on a half-built config raised an
    AttributeError in its `finally`), and that error then replaces the stop: Python keeps the
    stop as its `__context__`. Once this process got a stop signal, any error is its consequence."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, STOPS):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None if _received is None else _stop_of(_received)


def _say_and_exit(stop: BaseException, before: str):
    what, code = how(stop)
    try:
        print(f"error: {what} {before}", file=sys.stderr, flush=True)
        sys.stdout.flush()
    finally:
        os._exit(code)  # not Python's SIGINT re-raise: the status is 130 / 143 as said


def install(before: str, exit_now: bool = True) -> None:
    """Signal handlers and the excepthook; `before` ends the line of an uncaught stop, e.g.
    'before the run started: nothing was written'. Until `raise_from_now()` (`exit_now`, the
    default of every entry point) a stop exits from the signal handler itself: raised while the
    imports and Hydra's compose run, it can be replaced by an error of omegaconf's cleanup (a
    traceback, exit 1; CI, stop 40) or swallowed in importlib's weakref callback ("Exception
    ignored", exit 0; CI, stop 41). `exit_now=False`: raise from the start."""
    global _exit_now
    _exit_now = before if exit_now else None
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            if signal.getsignal(sig) is not signal.SIG_IGN:  # a background job's ignored SIGINT stays
                signal.signal(sig, _on_signal)
    previous = sys.excepthook

    def hook(tp, value, tb):
        stop = stop_behind(value)
        if stop is None:
            return previous(tp, value, tb)
        _say_and_exit(stop, before)
    sys.excepthook = hook


def raise_from_now() -> None:
    """From here on a stop is raised where the process is (a run: its checkpoint is named)."""
    global _exit_now
    _exit_now = None


def adopt(proc) -> None:
    """Register a run started elsewhere (the launcher), so that a stop is passed on to it."""
    _children.add(proc)


def release(proc) -> None:
    _children.discard(proc)


def stop_children() -> None:
    """The adopted runs stopped (SIGTERM to each one's session), unless the handler already
    passed a stop on to them."""
    for proc in [] if _stopping else list(_children):
        try:  # SIGTERM: the run saves nothing more and exits 143; its claim expires or is released
            os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            pass
