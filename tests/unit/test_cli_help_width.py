"""Every `proofpool ... --help` reads whole in an 80-column terminal: no line wider than the
terminal, no option name, default or summary cut short ("--samples-per-st…", "unbond,...")."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from proofpool.cli.main import app
from typer.testing import CliRunner

WIDTH = 80


def _commands() -> Iterator[tuple[list[str], Any]]:
    """(path, click command) of the root, every group and every command under it."""

    def walk(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(app), [])


COMMANDS = list(_commands())


def _help(path: list[str]) -> str:
    result = CliRunner(env={"COLUMNS": str(WIDTH)}).invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def _letters(text: str) -> str:
    """`text` without whitespace: wrapping may break a line at a space or after a hyphen."""
    return "".join(text.split())


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) or "proofpool" for p, _ in COMMANDS])
def test_help_fits_80_columns_and_cuts_nothing(path: list[str], command: Any) -> None:
    text = _help(path)
    assert max(len(line) for line in text.splitlines()) <= WIDTH, text
    assert "…" not in text, text
    tokens = set(re.split(r"[\s,/]+", text))  # "-k, --key", "--verify-ledger / --no-verify-ledger"
    for param in command.params:
        for flag in (*param.opts, *param.secondary_opts):
            if flag.startswith("-"):
                assert flag in tokens, f"{flag} is not whole in:\n{text}"
    # each subcommand's summary is the whole first paragraph of its help, wrapped, never cut
    for name, sub in getattr(command, "commands", {}).items():
        summary = inspect.cleandoc(sub.help or "").split("\n\n", 1)[0]
        assert _letters(summary) in _letters(text), f"{name}: {summary!r} not whole in:\n{text}"


def test_long_defaults_in_option_help_are_whole() -> None:
    """The words the rich panels used to cut at 80 columns."""
    assert "$PROOFPOOL_STATE_DIR/run." in _help(["devnet", "run"]).split()
    assert "$PROOFPOOL_PRIVATE_KEY." in _help(["trainer", "run"]).split()
