"""Revert data of every shape becomes a ContractRevert, never another exception."""

from __future__ import annotations

import pytest
from eth_abi import encode

from proofpool.infra.chain import errors
from proofpool.infra.chain.errors import ContractRevert, decode_revert


@pytest.fixture(autouse=True)
def _known_errors(monkeypatch):
    table = {bytes.fromhex("deadbeef"): ("ComputePoolDuplicateWork", ["uint256", "bytes32"])}
    monkeypatch.setattr(errors, "_error_table", lambda: table)


def test_custom_error_is_named_and_its_arguments_decoded():
    data = bytes.fromhex("deadbeef") + encode(["uint256", "bytes32"], [7, b"\x01" * 32])
    revert = decode_revert("0x" + data.hex())
    assert (revert.name, revert.args) == ("ComputePoolDuplicateWork", (7, b"\x01" * 32))
    assert "ComputePoolDuplicateWork(7, 0x0101" in str(revert)


@pytest.mark.parametrize(
    ("data", "name", "args"),
    [
        (bytes.fromhex("08c379a0") + encode(["string"], ["nope"]), "Error", ("nope",)),
        (bytes.fromhex("4e487b71") + encode(["uint256"], [0x11]), "Panic", (0x11,)),
        (b"", "EmptyRevert", ()),
        (None, "EmptyRevert", ()),
        (b"\x01\x02", "EmptyRevert", ()),
        (bytes.fromhex("12345678"), "UnknownError", ("0x12345678",)),
    ],
)
def test_standard_and_odd_revert_data(data, name, args):
    revert = decode_revert(data)
    assert isinstance(revert, ContractRevert)
    assert (revert.name, revert.args) == (name, args)


def test_truncated_arguments_are_reported_as_malformed():
    revert = decode_revert(bytes.fromhex("deadbeef") + b"\x00" * 5)
    assert revert.name == "MalformedRevert"
    assert revert.args[0] == "0xdeadbeef" + "00" * 5
