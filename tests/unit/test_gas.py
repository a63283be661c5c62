"""Too little ETH for gas is one `InsufficientGas` naming the address, its balance and the need,
whether the node says so on the estimate or on the send; ETH amounts read as ETH; the warning a
role's balance deserves. The chain is a fake here: tests/integration/test_cli_gas.py has anvil."""

from __future__ import annotations

from typing import Any

import pytest
from eth_account import Account
from web3.exceptions import Web3RPCError

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.errors import InsufficientGas
from proofpool.infra.chain.gas import gas_warning
from proofpool.infra.chain.tx import TxSender, max_cost
from proofpool.infra.chain.units import WEI_PER_ETH, format_eth, parse_eth
from proofpool.infra.config import get_settings

GWEI = 10**9
ANVIL_REFUSAL = "Insufficient funds for gas * price + value"


@pytest.mark.parametrize(
    ("wei", "shown"),
    [
        (0, "0"),
        (1, "0.000000000000000001"),
        (421_337 * GWEI, "0.0004213"),  # 4 significant digits, rounded down
        (9_999_999_823_748_237_482_374, "9999"),  # whole ETH never rounded; never more than it holds
        (12_345_678 * WEI_PER_ETH, "12345678"),
        (WEI_PER_ETH // 100, "0.01"),
    ],
)
def test_eth_amounts_read_as_eth(wei, shown):
    assert format_eth(wei) == shown


def test_eth_amounts_parse_like_pool_amounts():
    assert parse_eth("2.5") == 5 * WEI_PER_ETH // 2
    with pytest.raises(ProofpoolError, match="non-negative"):
        parse_eth("-1")


def test_the_message_names_address_balance_need_and_on_the_devnet_the_faucet():
    devnet = InsufficientGas("0xAbC", 0, 31337, "this transaction needs about 0.0004 ETH")
    assert str(devnet) == (
        "0xAbC has 0 ETH for gas (this transaction needs about 0.0004 ETH): send it some "
        "(devnet: proofpool chain fund 0xAbC)"
    )
    elsewhere = InsufficientGas("0xAbC", WEI_PER_ETH // 1000, 1)
    assert str(elsewhere) == "0xAbC has 0.001 ETH for gas: send it some"


@pytest.mark.parametrize(
    ("balance", "minimum", "warning"),
    [
        (0, 0, "no transaction can be sent"),
        (0, 10**16, "no transaction can be sent"),
        (10**15, 10**16, "under the 0.01 ETH minimum"),
        (5 * 10**16, 10**16, "under 10x the 0.01 ETH minimum; top it up before it runs out"),
        (10**17, 10**16, None),
        (1, 0, None),
    ],
)
def test_gas_warning(balance, minimum, warning):
    assert gas_warning(balance, minimum) == warning


def test_max_cost_is_gas_times_max_fee_plus_value():
    assert max_cost({"gas": 21_000, "maxFeePerGas": 3 * GWEI, "value": 5}) == 63_000 * GWEI + 5
    assert max_cost({"gas": 21_000, "gasPrice": 2 * GWEI}) == 42_000 * GWEI


class FakeEth:
    """Just what a `TxSender` reads: chain id, fees, a balance."""

    chain_id = 31337
    max_priority_fee = GWEI

    def __init__(self, balance: int) -> None:
        self.balance = balance

    def get_balance(self, address: str) -> int:
        return self.balance

    def get_block(self, which: str) -> dict[str, int]:
        return {"baseFeePerGas": GWEI}


class FakeNode:
    """A JSON-RPC node whose answer to eth_sendRawTransaction is `send_error`."""

    def __init__(self, send_error: str) -> None:
        self.send_error = send_error

    def make_request(self, method: str, params: list[Any]) -> dict[str, Any]:
        if method == "eth_getTransactionCount":
            return {"result": "0x0"}
        assert method == "eth_sendRawTransaction", method
        return {"error": {"code": -32003, "message": self.send_error}}


class FakeW3:
    def __init__(self, balance: int, send_error: str = ANVIL_REFUSAL) -> None:
        self.eth = FakeEth(balance)
        self.provider = FakeNode(send_error)


class RefusedEstimate:
    """A contract function whose gas estimate the node refuses (geth: a value the sender lacks)."""

    def estimate_gas(self, tx: dict[str, Any]) -> int:
        raise Web3RPCError("insufficient funds for transfer", rpc_response={"error": {"message": "insufficient funds"}})


@pytest.fixture
def sender_of(tmp_path, monkeypatch):
    monkeypatch.setenv("PROOFPOOL_STATE_DIR", str(tmp_path))  # the nonce lock files
    get_settings.cache_clear()
    yield lambda w3: TxSender(w3, Account.create())  # type: ignore[arg-type]
    get_settings.cache_clear()


def test_a_refused_send_says_what_the_transaction_needs(sender_of):
    sender = sender_of(FakeW3(balance=10**17))
    with pytest.raises(InsufficientGas) as refused:
        sender.transfer_eth(sender.address, WEI_PER_ETH // 2)
    # 21000 gas at a max fee of 2 * base fee + tip = 3 gwei, plus the 0.5 ETH sent
    assert str(refused.value).startswith(
        f"{sender.address} has 0.1 ETH for gas (this transaction needs about 0.5 ETH): send it some"
    )
    assert refused.value.balance == 10**17


def test_a_refused_estimate_is_the_same_error_without_a_figure(sender_of):
    sender = sender_of(FakeW3(balance=0))
    with pytest.raises(InsufficientGas, match=rf"^{sender.address} has 0 ETH for gas: send it some \(devnet: "):
        sender.send(RefusedEstimate())  # type: ignore[arg-type]


def test_other_node_errors_pass_through_unchanged(sender_of):
    sender = sender_of(FakeW3(balance=WEI_PER_ETH, send_error="exceeds block gas limit"))
    with pytest.raises(Web3RPCError, match="exceeds block gas limit"):
        sender.transfer_eth(sender.address, 1)
