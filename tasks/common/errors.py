"""The one exception type for bad configuration or missing data: its message is one line that
names the fix; `tasks.train` prints it as `error: ...` and exits with status 2 (the commands
too, through `fail`)."""
import argparse
import sys


class ConfigError(ValueError):
    def __init__(self, msg: str):
        super().__init__(" ".join(str(msg).split()))  # one line, whatever the source wrapped


class NoRows(ConfigError):
    """An experiment file without rows at the asked profile (e.g. ablation/lm at cpu)."""


class NotInProtocol(Exception):
    """A point of a Cartesian sweep that the protocol does not have (a MAD setting id of
    another task, say): the run is skipped with one line, nothing is trained or written."""


def short_reason(exc: BaseException, limit: int = 120) -> str:
    """'ExcType: first sentence' of a third-party exception, cut to `limit` characters."""
    text = " ".join(str(exc).split())
    first = text.split(". ")[0]
    if len(first) > limit:
        first = first[: limit - 1] + "…"
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class _OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line naming the fix and exit 2 (argparse prints its usage block
    first; `make reproduce-table1 PROFILE=gpu` ended in four lines)."""

    def error(self, message):
        self.exit(2, f"error: {message} (`{self.prog} --help` lists the arguments)\n")


def cli_parser(doc: str) -> argparse.ArgumentParser:
    """A command's argument parser, described by its module docstring's first line."""
    return _OneLineParser(description=doc.splitlines()[0])


def fail(msg) -> int:
    """`error: <msg>` on stderr, and a command's exit status for it (2)."""
    print(f"error: {msg}", file=sys.stderr)
    return 2
