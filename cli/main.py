"""The `proofpool` command: one typer group per audience, mounted here.

Commands parse, call the library and render. Every `ProofpoolError` becomes a one-line
message and exit code 1 (`--verbose` keeps the traceback); anything else is a bug.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import sys
from collections.abc import Collection, Sequence

import typer
from rich.console import Console
from rich.markup import escape

from proofpool.core.errors import ProofpoolError

# (group name, module under proofpool.cli, help) - modules import heavy libraries lazily.
GROUPS: tuple[tuple[str, str, str], ...] = (
    ("chain", "chain", "Run the local devnet chain (anvil)."),
    ("contracts", "contracts", "Compile and deploy the proofpool contracts."),
    ("keys", "keys", "Create and inspect keys."),
    ("provider", "provider", "Compute providers: register, stake, add nodes, unbond, withdraw."),
    ("pool", "pool", "Pool creators and managers: create, fund, start, invite, publish checkpoints."),
    ("worker", "worker", "Provider nodes: run the worker agent for a pool, inspect its journal."),
    ("validator", "validator", "Validators: run the Celery validator on a key, show verdicts and earnings."),
    ("trainer", "trainer", "Pool creators: GRPO on accepted rollouts, publishing each step as a checkpoint."),
    ("training", "training", "Training pool creators: pack a tokenized dataset, write a DiLoCo spec."),
    ("model", "model", "Environments and base models: list what is installed, prepare a pool's model."),
    ("env", "env", "Task environments: list them, show a problem, score a completion."),
    ("db", "db", "Operators: create and migrate the PostgreSQL schema."),
    ("indexer", "indexer", "Operators: follow the chain into PostgreSQL and dispatch validations."),
    ("backend", "backend", "Operators: run the HTTP backend (discovery, orchestrator, uploads, ledger)."),
    ("storage", "storage", "Operators: run the devnet S3 object store (SeaweedFS)."),
    ("relay", "relay", "Operators: relay checkpoints to workers and validators, mirrored from S3 or a relay."),
    ("ledger", "ledger", "Auditors: query the contribution ledger."),
    ("explorer", "explorer", "Auditors, providers, pool creators: serve the market explorer's web pages."),
    ("devnet", "devnet", "Run the embedded devnet market end to end."),
)

_state = {"verbose": False}


def main(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show tracebacks and debug logs."),
) -> None:
    """proofpool command line."""
    _state["verbose"] = verbose
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


def build_app(groups: Collection[str] | None = None) -> typer.Typer:
    """The `proofpool` command with the named groups mounted (None: every group). A group's module
    imports what its commands need (web3, torch, vLLM...) at import, which costs up to seconds, so
    the console script mounts only the group it was asked for (`run`)."""
    app = typer.Typer(
        name="proofpool",
        help="Blockchain-anchored compute marketplace for decentralized RL: chain, pools, providers, "
        "workers, validators, trainer and ledger.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        # click's plain help, for every command below: it wraps option names, defaults and help at
        # the terminal's width ($COLUMNS), where typer's rich panels cut long words ("--samples-per-st…",
        # "$PROOFPOOL_PRIVATE_KE…") to fit their seven columns into 80.
        rich_markup_mode=None,
    )
    app.callback()(main)
    for name, module, help_text in GROUPS:
        if groups is None or name in groups:
            group = importlib.import_module(f"proofpool.cli.{module}").app
            _give_full_summaries(group)
            app.add_typer(group, name=name, help=help_text, short_help=help_text)
    return app


def _give_full_summaries(group: typer.Typer) -> None:
    """Set each command's one-line summary (its `short_help`) to the whole first paragraph of its
    help. Without one, click cuts the summary it lists beside the command's name in the group's
    help to what fits one line ("Stake tokens so your nodes may join pools (approves the...");
    a summary that is set is wrapped instead."""
    for command in group.registered_commands:
        if command.short_help is None:
            text = command.help or inspect.getdoc(command.callback) or ""
            command.short_help = " ".join(text.split("\n\n", 1)[0].split())


def requested_group(argv: Sequence[str]) -> str | None:
    """The group a command line names (`proofpool -v ledger pools` -> `ledger`), or None when it
    names none (`proofpool --help`, a typo): then every group is mounted, to list or suggest them."""
    words = [arg for arg in argv if not arg.startswith("-")]
    names = {name for name, _, _ in GROUPS}
    return words[0] if words and words[0] in names else None


@functools.cache
def _full_app() -> typer.Typer:
    return build_app()


def __getattr__(name: str) -> typer.Typer:
    """`app`: the command with every group (tests, documentation), built on first use."""
    if name == "app":
        return _full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run() -> None:
    """Console-script entry point."""
    try:
        # Without standalone mode a command's `typer.Exit(code)` (and Ctrl-C's 130) is returned,
        # not raised: pass it on, or `ledger verify`'s 1/2 and `devnet run`'s 1 would exit 0.
        group = requested_group(sys.argv[1:])
        command = build_app(None if group is None else {group})
        code = command(standalone_mode=False)
        if isinstance(code, int) and not isinstance(code, bool) and code != 0:
            sys.exit(code)
    except ProofpoolError as exc:
        if _state["verbose"]:
            raise
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}")  # messages may hold [brackets]
        sys.exit(1)
    except typer.Abort:
        Console(stderr=True).print("aborted")
        sys.exit(130)
    except Exception as exc:  # usage errors carry their own exit code
        # Typer vendors click (typer._click), so its exceptions are not `click`'s: match the shape.
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        if type(exc).__name__ == "Exit" and isinstance(getattr(exc, "exit_code", None), int):
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        raise


if __name__ == "__main__":
    run()
