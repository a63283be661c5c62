"""POOL amounts round-trip exactly, even at uint256 scale, and junk is refused with a reason."""

from __future__ import annotations

import pytest

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.units import TOKEN, format_pool, parse_pool


@pytest.mark.parametrize("units", [0, 1, TOKEN, 250 * TOKEN + TOKEN // 2, 2**256 - 1, 10**40 + 7])
def test_format_then_parse_is_exact(units):
    assert parse_pool(format_pool(units)) == units


@pytest.mark.parametrize(("text", "units"), [("250.5", 250_500_000_000_000_000_000), ("0.000000000000000001", 1)])
def test_parse(text, units):
    assert parse_pool(text) == units


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc", "not a token amount"),
        ("-1", "non-negative"),
        ("nan", "non-negative"),
        ("0.0000000000000000001", "decimals"),
    ],
)
def test_junk_is_refused(text, message):
    with pytest.raises(ProofpoolError, match=message):
        parse_pool(text)
