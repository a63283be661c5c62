"""POOL token and ETH amounts: 18 decimals on-chain, decimal strings for people."""

from __future__ import annotations

from decimal import ROUND_DOWN, Decimal, InvalidOperation, localcontext

from proofpool.core.errors import ProofpoolError

DECIMALS = 18
TOKEN = 10**DECIMALS
"""One POOL in its smallest unit."""
WEI_PER_ETH = 10**18
"""One ETH in wei."""
ETH_DIGITS = 4
"""Significant digits of an ETH amount in a message (gas costs and balances, not exact sums)."""


def parse_pool(text: str) -> int:
    """'250.5' -> 250.5 POOL in base units; refuses negatives, junk and sub-unit precision."""
    try:
        with localcontext() as ctx:
            ctx.prec = 100
            value = Decimal(text.strip())
            units = value * TOKEN
    except (InvalidOperation, AttributeError) as exc:
        raise ProofpoolError(f"not a token amount: {text!r} (expected e.g. 250.5)") from exc
    if not value.is_finite() or value < 0:
        raise ProofpoolError(f"token amount must be a non-negative number, got {text!r}")
    if units != units.to_integral_value():
        raise ProofpoolError(f"{text!r} has more than {DECIMALS} decimals")
    return int(units)


def format_pool(units: int) -> str:
    """Base units -> '250.5' (no trailing zeros), exact for any uint256."""
    with localcontext() as ctx:
        ctx.prec = 100  # uint256 has 78 digits; the default 28 would round large balances
        text = format(Decimal(units) / TOKEN, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def parse_eth(text: str) -> int:
    """'0.5' -> wei: ETH has POOL's 18 decimals, so `parse_pool`'s rules and errors apply."""
    return parse_pool(text)


def format_eth(wei: int) -> str:
    """Wei -> ETH to `ETH_DIGITS` significant digits, rounded down so a balance never shows more than
    it holds ('0.0004213', '9.999'); whole ETH are never rounded ('12345678')."""
    if wei == 0:
        return "0"
    with localcontext() as ctx:
        ctx.prec = 100
        value = Decimal(wei) / WEI_PER_ETH
        last_digit = min(value.adjusted() - (ETH_DIGITS - 1), 0)
        text = format(value.quantize(Decimal(1).scaleb(last_digit), rounding=ROUND_DOWN), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
