"""Start and stop a local anvil chain (the devnet) from the npm package `@foundry-rs/anvil`, and
give any address devnet ETH (`fund_account`, `proofpool chain fund`).

Tests, benchmarks and `proofpool chain up` share this one launcher so every caller gets
the same flags, the same readiness check and the same clean shutdown.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils import is_address, to_checksum_address
from web3 import Web3
from web3.exceptions import Web3RPCError

from proofpool.core.errors import ProofpoolError, ServiceUnavailable
from proofpool.infra.chain.calls import rpc
from proofpool.infra.chain.gas import eth_balance
from proofpool.infra.chain.networks import DEVNET_CHAIN_ID
from proofpool.infra.config import get_settings

# anvil's well-known development keys (mnemonic "test test ... junk"); devnet only.
ANVIL_KEYS: tuple[str, ...] = (
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
)


ANVIL_MNEMONIC = "test test test test test test test test test test test junk"
ANVIL_ACCOUNTS = 20
"""Accounts anvil funds with `ANVIL_BALANCE_ETH` (its default is 10; the full devnet needs 13)."""
ANVIL_BALANCE_ETH = 10_000
"""ETH anvil gives each of its well-known accounts at start (its default, which `start_anvil` keeps)."""


def anvil_account(index: int) -> LocalAccount:
    """Anvil's well-known account `index`: the first ten from `ANVIL_KEYS`, later ones derived
    from the same public mnemonic (m/44'/60'/0'/0/index), as anvil itself derives them."""
    if index < len(ANVIL_KEYS):
        return Account.from_key(ANVIL_KEYS[index])
    Account.enable_unaudited_hdwallet_features()
    return Account.from_mnemonic(ANVIL_MNEMONIC, account_path=f"m/44'/60'/0'/0/{index}")


def fund_account(w3: Web3, address: str, wei: int) -> int:
    """Add `wei` to `address`'s ETH on the devnet chain (anvil's `anvil_setBalance`: no sender
    needed, and nothing is taken from the well-known accounts); returns the new balance.

    Refuses any chain but the devnet's (chain id 31337): anywhere else ETH has to be sent by someone
    who holds it.
    """
    chain_id = w3.eth.chain_id
    if chain_id != DEVNET_CHAIN_ID:
        raise ProofpoolError(
            f"chain {chain_id} is not the devnet (chain id {DEVNET_CHAIN_ID}): only a devnet chain makes ETH; "
            "send some from a funded wallet"
        )
    if not is_address(address):
        raise ProofpoolError(f"not an address: {address!r} (expected 0x and 40 hex digits)")
    account = to_checksum_address(address)
    try:
        rpc(w3, "anvil_setBalance", [account, hex(eth_balance(w3, account) + wei)])
    except Web3RPCError as exc:
        raise ProofpoolError(f"the chain refused anvil_setBalance ({exc}): is it anvil?") from exc
    return eth_balance(w3, account)


def advance_time(w3: Web3, seconds: int) -> None:
    """Move anvil's clock `seconds` forward and mine a block at the new time (devnet time travel: a
    dispute window or an unbonding period passes at once)."""
    rpc(w3, "evm_increaseTime", [seconds])
    rpc(w3, "evm_mine", [])


def anvil_binary() -> Path:
    """The anvil executable: the pinned one `make setup` installs in `contracts/node_modules`, else
    one on PATH (an installed wheel has no npm toolchain of its own)."""
    path = get_settings().contracts_dir / "node_modules" / ".bin" / "anvil"
    if path.exists():
        return path
    found = shutil.which("anvil")
    if found is None:
        raise ServiceUnavailable(
            f"anvil not found at {path} nor on PATH: run `make setup` in a checkout, or install Foundry's anvil"
        )
    return Path(found)


def free_port() -> int:
    """A TCP port on loopback that nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rpc_ready(url: str, timeout: float = 1.0) -> bool:
    """True when a JSON-RPC node answers `eth_chainId` at `url`."""
    try:
        reply = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"}, timeout=timeout)
        return reply.status_code == 200 and "result" in reply.json()
    except (httpx.HTTPError, ValueError):
        return False


@dataclass
class AnvilProcess:
    """A running anvil; stop it with `.stop()` or use it as a context manager."""

    port: int
    chain_id: int
    process: subprocess.Popen[bytes]
    log_path: Path | None = None
    url: str = field(init=False)

    def __post_init__(self) -> None:
        self.url = f"http://127.0.0.1:{self.port}"

    def rpc(self, method: str, params: list | None = None) -> object:
        """One raw JSON-RPC call (for anvil's own methods: evm_snapshot, evm_increaseTime, ...)."""
        reply = httpx.post(self.url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []})
        body = reply.json()
        if "error" in body:
            raise ServiceUnavailable(f"anvil {method} failed: {body['error']}")
        return body["result"]

    def stop(self) -> None:
        """Terminate anvil and wait for it, killing it if it does not exit in 5 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> AnvilProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_anvil(
    port: int | None = None,
    *,
    chain_id: int = 31337,
    block_time: float | None = None,
    log_path: Path | None = None,
    startup_timeout: float = 15.0,
) -> AnvilProcess:
    """Start anvil on loopback and return once it answers JSON-RPC.

    `port=None` picks a free port (tests); `block_time=None` mines one block per
    transaction, which keeps tests fast and deterministic.
    """
    port = port or free_port()
    args = [
        str(anvil_binary()),
        *("--host", "127.0.0.1", "--port", str(port), "--chain-id", str(chain_id)),
        *("--accounts", str(ANVIL_ACCOUNTS)),
    ]
    if block_time is not None:
        args += ["--block-time", str(block_time)]
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    anvil = AnvilProcess(port=port, chain_id=chain_id, process=process, log_path=log_path)
    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServiceUnavailable(f"anvil exited with code {process.returncode} (port {port} in use?)")
        if rpc_ready(anvil.url, timeout=0.5):
            return anvil
        time.sleep(0.05)
    with contextlib.suppress(Exception):
        anvil.stop()
    raise ServiceUnavailable(f"anvil did not answer on {anvil.url} within {startup_timeout:.0f} s")
