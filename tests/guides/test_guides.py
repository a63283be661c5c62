"""The guides, run as written: the README's by-hand section, and the operator, validator,
provider and auditor guides one after another on one market, each against a fresh isolated
stack. A documented command that fails, hangs or no longer prints what the guide shows fails
the test, so a guide cannot change without its commands still working.

What the test adds to the guides is in the tables below: the values of their placeholders
(`0xPROVIDER`, `https://api.example.org`, ...), and the moments a reader waits for or a
third party acts (the operator's faucet sends POOL; the reader waits for the first accepted
file; the dispute window passes, by anvil time travel)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from proofpool.infra.chain.accounts import keystore_address
from proofpool.infra.config import REPO_ROOT
from tests.guides.markdown import Command, guide_commands
from tests.guides.shell import GuideFailure, GuideShell, Service
from tests.guides.stack import KEY_PASSWORD, S3_ACCESS_KEY, S3_SECRET_KEY, Stack, isolated_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

SERVICES = (
    Service(r"proofpool chain up(?!.*--detach)", r"anvil up at"),
    Service(r"proofpool storage up(?!.*--detach)", r"SeaweedFS"),
    Service(r"proofpool indexer run(?!.*--once)", r"indexer following|following the chain|indexed"),
    Service(r"proofpool backend serve", r"Application startup complete"),
    Service(r"proofpool backend sweep(?!.*--once)", r"sweep"),
    Service(r"proofpool worker run", r"joined pool|checkpoint \d+.* loaded", timeout=300.0),
    Service(r"proofpool validator run", r"ready\.", timeout=240.0),
    # The pool's trainer: no documented command waits for it, so its start (minutes on a busy machine:
    # torch, the model, the held-out score) overlaps the commands after it.
    Service(r"proofpool trainer run", r"trainer|step|held-out", timeout=240.0, deferred=True),
    Service(r"proofpool relay serve", r"relay on http"),
)
"""Commands that keep running, and the log line that says each is ready."""

ROLES_ON_ONE_MACHINE = (
    ("docs/operator.md", None, None),
    ("docs/validator-guide.md", None, "3. What you earn"),
    ("docs/provider.md", None, None),
    ("docs/validator-guide.md", "3. What you earn", None),
    ("docs/auditor.md", None, None),
)
"""The market's story: the operator deploys and runs the services, a validator joins, a provider
works and is paid, the validator collects its fees, an auditor checks everything. (doc, first
section, section to stop before)."""


def test_operator_validator_provider_and_auditor_guides(tmp_path: Path) -> None:
    with isolated_stack(tmp_path, chain=True, storage=True) as stack, reader(stack) as (shell, market):
        for doc, first, stop in ROLES_ON_ONE_MACHINE:
            commands = _sections(guide_commands(REPO_ROOT / doc, REPO_ROOT), first, stop)
            assert commands, f"no commands in {doc} from {first!r} to {stop!r}"
            shell.run_all(commands, before=market.before)
            shell.check_services_alive()
        shell.until_ready()


def test_readme_by_hand(tmp_path: Path) -> None:
    section = "Running the services by hand"
    with isolated_stack(tmp_path, chain=False, storage=False) as stack:
        commands = [c for c in guide_commands(REPO_ROOT / "README.md", REPO_ROOT) if c.section == section]
        assert len(commands) > 10, f"the README's section {section!r} lost its commands"
        with reader(stack, teardown="proofpool chain down; proofpool storage down; true") as (shell, market):
            shell.run_all(commands, before=market.before)
            shell.until_ready()
            shell.check_services_alive()


@contextmanager
def reader(stack: Stack, teardown: str | None = None) -> Iterator[tuple[GuideShell, Market]]:
    """A reader's terminal on `stack` and the market around it; a failure shows the last commands
    and what they printed; every service is stopped at the end (then `teardown` runs)."""
    shell = _shell(stack)
    try:
        yield shell, Market(stack, shell)
    except GuideFailure as failure:
        raise GuideFailure(f"{failure}\n\nlast commands:\n" + "\n".join(shell.transcript[-30:])) from None
    finally:
        shell.close()
        if teardown:
            shell.sh(teardown, timeout=60)


def _sections(commands: list[Command], first: str | None, stop: str | None) -> list[Command]:
    """The commands from section `first` (a heading's start) to before section `stop`."""
    start = 0 if first is None else next(i for i, c in enumerate(commands) if c.section.startswith(first))
    end = len(commands) if stop is None else next(i for i, c in enumerate(commands) if c.section.startswith(stop))
    return commands[start:end]


def _shell(stack: Stack) -> GuideShell:
    shell = GuideShell(stack.workdir, dict(stack.env), SERVICES)
    shell.substitutions = _placeholders(stack, shell)
    return shell


def _placeholders(stack: Stack, shell: GuideShell) -> dict[str, str | Callable[[], str]]:
    """What each placeholder of the guides stands for in this stack."""
    backend = f"http://127.0.0.1:{stack.backend_port}"

    def address(keyfile: str) -> Callable[[], str]:
        return lambda: keystore_address(stack.workdir / keyfile)

    def ownership(field: str) -> Callable[[], str]:
        return lambda: str(json.loads(_last_json(shell.output_of("provider sign-node")))[field])

    return {
        # the operator's infrastructure
        "https://rpc.example-l2.org": stack.rpc_url,
        "postgresql://proofpool:SECRET@db.internal:5432/proofpool": stack.database_url,
        "https://s3.eu-central-1.amazonaws.com": stack.s3_endpoint,
        "PROOFPOOL_S3_REGION=eu-central-1": "PROOFPOOL_S3_REGION=us-east-1",
        "proofpool-prod": stack.bucket,
        "AWS_ACCESS_KEY_ID=...": f"AWS_ACCESS_KEY_ID={S3_ACCESS_KEY}",
        "AWS_SECRET_ACCESS_KEY=...": f"AWS_SECRET_ACCESS_KEY={S3_SECRET_KEY}",
        "PROOFPOOL_KEY_PASSWORD=...": f"PROOFPOOL_KEY_PASSWORD={KEY_PASSWORD}",
        "PROOFPOOL_RPC_URL=...": f"PROOFPOOL_RPC_URL={stack.rpc_url}",
        "S3_ENDPOINT_URL=...": f"S3_ENDPOINT_URL={stack.s3_endpoint}",
        "PROOFPOOL_S3_BUCKET=...": f"PROOFPOOL_S3_BUCKET={stack.bucket}",
        "https://api.example.org": backend,
        "http://127.0.0.1:8000": backend,
        "127.0.0.1:8000": backend.removeprefix("http://"),
        "--port 8000": f"--port {stack.backend_port}",
        "127.0.0.1:9107": f"127.0.0.1:{stack.metrics_port}",
        "9108": str(stack.validator_metrics_port),
        "10.0.0.5": "127.0.0.1",
        "8790": str(stack.relay_ports[0]),
        "8791": str(stack.relay_ports[1]),
        "PROOFPOOL_CONFIRMATIONS=12": "PROOFPOOL_CONFIRMATIONS=0",  # anvil mines a block per transaction
        "--workers 4": "--workers 2",
        # the parties' addresses, read from the keystores the guides make
        "0xMANAGER": address("manager.json"),
        "0xTREASURY": address("creator.json"),
        "0xYOUR_PROVIDER_ADDRESS": address("provider.json"),
        "0xPROVIDER": address("provider.json"),
        "0x15d3...": address("provider.json"),
        "0xVALIDATOR": address("validator.json"),
        "0xNODE": address("node.json"),
        # what `provider sign-node` printed, as the reader copies it into `add-node`
        "0xSIGNATURE": ownership("signature"),
        "DEADLINE": ownership("deadline"),
        # a submission and a transaction of the pool, as the reader finds them in the ledger
        "0x5c94...2a21": lambda: _ledger_items(backend, "submissions", pool_id=1)[0]["work_key"],
        "5c94...2a21": lambda: _ledger_items(backend, "submissions", pool_id=1)[0]["work_key"].removeprefix("0x"),
        "0x7acc75...6235": lambda: _ledger_items(backend, "submissions", pool_id=1)[0]["tx_hash"],
    }


def _last_json(output: str) -> str:
    start, end = output.rfind("{"), output.rfind("}")
    assert 0 <= start < end, f"no JSON object in:\n{output}"
    return output[start : end + 1]


class Market:
    """The moments a reader waits, and what the rest of the market does meanwhile."""

    def __init__(self, stack: Stack, shell: GuideShell) -> None:
        self.stack = stack
        self.shell = shell
        self.backend = f"http://127.0.0.1:{stack.backend_port}"

    def before(self, command: Command) -> None:
        text, doc = command.text, command.doc
        if doc == "README.md":
            if text.startswith("proofpool ledger submissions"):
                self._wait_for_accepted()
        elif doc == "docs/provider.md" and text.startswith("proofpool provider register"):
            self._faucet("provider.json", 2000)
        elif doc == "docs/validator-guide.md" and text.startswith("proofpool validator stake"):
            self._faucet("validator.json", 1000)
        elif doc == "docs/provider.md" and text.startswith("proofpool provider status --key"):
            self._wait_for("a submission of the worker", lambda: bool(self._items("submissions", pool_id=1)))
        elif doc == "docs/provider.md" and text.startswith("proofpool provider finalize"):
            self._wait_for_accepted()
            self.stack.advance_time(3601)  # the pool's dispute window passes
        elif doc == "docs/provider.md" and text.startswith("proofpool provider withdraw"):
            self._settle_and_wait_unbonding()

    def _wait_for_accepted(self) -> None:
        self._wait_for(
            "accepted submission", lambda: bool(self._items("submissions", pool_id=1, status="accepted")), 420.0
        )

    def _faucet(self, keyfile: str, amount: int) -> None:
        """The operator's faucet (the deployer's MINTER_ROLE on a devnet chain) sends POOL."""
        self.shell.sh(f"proofpool contracts mint $(proofpool keys show {keyfile}) {amount} --key admin.json")

    def _settle_and_wait_unbonding(self) -> None:
        """The provider stops its worker, every file is judged and finalized, the unbonding
        period (14 days in the operator guide's deployment) passes."""
        self.shell.stop(r"proofpool worker run")
        self._wait_for("every submission judged", lambda: not self._items("submissions", pool_id=1, status="pending"))
        self.stack.advance_time(15 * 24 * 3600)
        self.shell.sh("proofpool provider finalize --key provider.json")

    def _items(self, listing: str, **params: object) -> list[dict]:
        return _ledger_items(self.backend, listing, **params)

    def _wait_for(self, what: str, ready: Callable[[], bool], timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            self.shell.check_services_alive()
            if time.monotonic() > deadline:
                raise GuideFailure(f"no {what} after {timeout:.0f} s")
            time.sleep(0.5)  # one ledger query: the reader's next command runs as soon as it can


def _ledger_items(backend: str, listing: str, **params: object) -> list[dict]:
    response = httpx.get(f"{backend}/v1/ledger/{listing}", params=params, timeout=10)
    response.raise_for_status()
    return response.json()["items"]


def test_placeholders_cover_the_guides() -> None:
    """Every `0xUPPERCASE` placeholder a guide's commands use has a value in the test's table (a new
    placeholder without one would reach the shell as text)."""
    shell = GuideShell(Path("."), {}, SERVICES)
    known = set(_placeholders(Stack(Path("."), "", "", 0, 0, 0), shell))
    for doc in ("README.md", *(d for d, _, _ in ROLES_ON_ONE_MACHINE)):
        for command in guide_commands(REPO_ROOT / doc, REPO_ROOT):
            for placeholder in re.findall(r"0x[A-Z_]{4,}", command.text):
                assert any(placeholder in k for k in known), f"{command.where}: {placeholder} has no value"
