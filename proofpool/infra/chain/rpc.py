"""Connection to a JSON-RPC node with timeouts, and retries for idempotent reads only."""

from __future__ import annotations

import requests
from web3 import HTTPProvider, Web3
from web3.providers.rpc.utils import ExceptionRetryConfiguration

from proofpool.core.errors import ServiceUnavailable

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


UNUSED_MIDDLEWARE = ("validation", "ens_name_to_address")
"""web3's default middleware we have no use for, removed because they cost a worker's submission
most of its CPU: "validation" asks the node for eth_chainId before every call, estimate and
transaction (8 extra round trips per `submitWork`; `TxSender` sets and signs the chain id itself,
and the node refuses a wrong one), and "ens_name_to_address" walks every argument looking for ENS
names, which a devnet or an L2 without ENS never has (addresses are checksummed hex everywhere)."""


def _session(url: str) -> requests.Session:
    """One HTTP session for every thread, that reads the environment once instead of per call.

    With `trust_env` (the default) requests scans the whole environment for proxy variables and
    looks for a .netrc on every request: a fifth of the CPU a worker spent on a `submitWork`.
    The proxy settings for `url` are read here, once; credentials belong in the URL, not .netrc.
    """
    session = requests.Session()
    session.trust_env = False
    session.proxies = requests.utils.get_environ_proxies(url)
    return session


def connect(url: str, timeout: float = 10.0, check: bool = True) -> Web3:
    """A `Web3` over HTTP with a request timeout; `check` fails fast when nobody answers."""
    provider = HTTPProvider(
        url,
        request_kwargs={"timeout": timeout},
        session=_session(url),
        exception_retry_configuration=ExceptionRetryConfiguration(
            errors=(ConnectionError, requests.ConnectionError, requests.Timeout),
            retries=3,
            backoff_factor=0.2,
            method_allowlist=IDEMPOTENT_METHODS,
        ),
    )
    w3 = Web3(provider)
    for name in UNUSED_MIDDLEWARE:
        w3.middleware_onion.remove(name)
    if check:
        try:
            w3.eth.chain_id  # noqa: B018 - the round trip is the check
        except Exception as exc:
            raise ServiceUnavailable(
                f"no JSON-RPC node answers at {url} ({exc.__class__.__name__}); "
                "start the devnet chain with `proofpool chain up`"
            ) from exc
    return w3
