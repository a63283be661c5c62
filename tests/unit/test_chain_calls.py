"""Hand-encoded calls must match what web3 encodes and decodes for the same function."""

from __future__ import annotations

import pytest
from eth_abi import encode
from web3 import Web3

from proofpool.infra.chain.artifacts import load_artifact
from proofpool.infra.chain.calls import AbiFunction
from proofpool.infra.chain.errors import ChainError

NODE = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
POOL_ADDRESS = "0x5FbDB2315678afecb367f032d93F642f64180aa3"


@pytest.fixture(scope="module")
def pool_contract():
    return Web3().eth.contract(address=POOL_ADDRESS, abi=load_artifact("ComputePool").abi)


def test_submit_work_calldata_is_web3s(pool_contract) -> None:
    args = (7, NODE, bytes(range(32)), 1234, 3)
    ours = AbiFunction.of(pool_contract.abi, "submitWork").encode(*args)
    assert ours == bytes.fromhex(pool_contract.encode_abi("submitWork", args=args)[2:])


def test_results_are_decoded_with_checksummed_addresses(pool_contract) -> None:
    get_work = AbiFunction.of(pool_contract.abi, "getWork")
    assert get_work.selector == bytes.fromhex(pool_contract.encode_abi("getWork", args=(1, b"\0" * 32))[2:10])
    raw = encode(list(get_work.outputs), [NODE.lower(), NODE.lower(), 2, 10, 1, 5, 6, NODE.lower()])
    node, provider, status, units, version, submitted, since, validator = get_work.decode(raw)
    assert node == provider == validator == NODE
    assert (status, units, version, submitted, since) == (2, 10, 1, 5, 6)


def test_a_string_result_and_bytes32(pool_contract) -> None:
    latest = AbiFunction.of(pool_contract.abi, "latestCheckpoint")
    raw = encode(list(latest.outputs), [4, b"\x11" * 32, "s3://bucket/manifest.json", 99])
    assert latest.decode(raw) == (4, b"\x11" * 32, "s3://bucket/manifest.json", 99)


def test_unknown_function_is_refused(pool_contract) -> None:
    with pytest.raises(ChainError, match="0 functions named 'noSuchThing'"):
        AbiFunction.of(pool_contract.abi, "noSuchThing")
