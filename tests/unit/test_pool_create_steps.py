"""When a step of `pool create` after `createPool` fails, the error names the pool and the commands
that finish it, with the same key (a hex key is never echoed). The steps are fakes here; the
refusals before any transaction run against anvil in tests/integration/test_cli_gas.py."""

from __future__ import annotations

import pytest
from proofpool.cli.pool import PoolLeftUnfinished, _finish, _same_options, _Step

from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.chain.errors import InsufficientGas

FUND = "proofpool pool fund 3 10000 --key creator.json"
START = "proofpool pool start 3 --key creator.json"


def _steps(failing: str, taken: list[str]) -> list[_Step]:
    def take(name: str) -> None:
        if name == failing:
            raise InsufficientGas("0xAbC", 0, 1, "this transaction needs about 0.0004 ETH")
        taken.append(name)

    return [
        _Step("funding", "funded", FUND, lambda: take("fund")),
        _Step("starting", "started", START, lambda: take("start")),
    ]


def test_a_failed_fund_names_both_commands_left():
    taken: list[str] = []
    with pytest.raises(PoolLeftUnfinished) as left:
        _finish(3, _steps("fund", taken))
    assert taken == []
    assert str(left.value) == (
        f"pool 3 was created but not funded: run {FUND}, then {START} (funding failed: 0xAbC has 0 ETH for gas "
        "(this transaction needs about 0.0004 ETH): send it some)"
    )


def test_a_failed_start_names_only_the_start():
    taken: list[str] = []
    with pytest.raises(PoolLeftUnfinished, match=rf"^pool 3 was created and funded but not started: run {START} \("):
        _finish(3, _steps("start", taken))
    assert taken == ["fund"]


def test_all_steps_taken_is_quiet():
    taken: list[str] = []
    _finish(3, _steps("none", taken))
    assert taken == ["fund", "start"]


def test_the_suggested_commands_repeat_the_key_but_never_a_hex_key(tmp_path, monkeypatch):
    keystore = tmp_path / "creator.json"
    keystore.write_text("{}")
    assert _same_options(str(keystore), None) == f" --key {keystore}"
    assert (
        _same_options("env:CREATOR_KEY", "http://10.0.0.5:8545")
        == " --key env:CREATOR_KEY --rpc-url http://10.0.0.5:8545"
    )
    assert _same_options(ANVIL_KEYS[0], None) == " --key <your key>"
    assert _same_options(None, None) == ""
