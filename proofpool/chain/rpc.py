"""Connection to a JSON-RPC node with timeouts, and retries for idempotent reads only."""

from __future__ import annotations

import requests
from web3 import HTTPProvider, Web3
from web3.providers.rpc.utils import ExceptionRetryConfiguration

from proofpool.errors import ServiceUnavailable

# Reads that are safe to repeat; sending a transaction is never retried here (tx.py decides).
IDEMPOTENT_METHODS = (
    "eth_chainId",
    "eth_blockNumber",
    "eth_getBlockByNumber",
    "eth_getBlockByHash",
    "eth_getLogs",
    "eth_call",
    "eth_getBalance",
    "eth_getCode",
    "eth_getTransactionCount",
    "eth_getTransactionReceipt",
    "eth_getTransactionByHash",
    "eth_estimateGas",
    "eth_gasPrice",
    "eth_maxPriorityFeePerGas",
    "eth_feeHistory",
    "net_version",
)


def connect(url: str, timeout: float = 10.0, check: bool = True) -> Web3:
    """A `Web3` over HTTP with a request timeout; `check` fails fast when nobody answers."""
    provider = HTTPProvider(
        url,
        request_kwargs={"timeout": timeout},
        exception_retry_configuration=ExceptionRetryConfiguration(
            errors=(ConnectionError, requests.ConnectionError, requests.Timeout),
            retries=3,
            backoff_factor=0.2,
            method_allowlist=IDEMPOTENT_METHODS,
        ),
    )
    w3 = Web3(provider)
    if check:
        try:
            w3.eth.chain_id  # noqa: B018 - the round trip is the check
        except Exception as exc:
            raise ServiceUnavailable(
                f"no JSON-RPC node answers at {url} ({exc.__class__.__name__}); "
                "start the devnet chain with `proofpool chain up`"
            ) from exc
    return w3
