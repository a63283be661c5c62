"""`proofpool.validator.pipeline.drawn`: which submissions `--sample-rate p` recomputes in full."""

from __future__ import annotations

import hashlib

from proofpool.validator.pipeline import drawn


def keys(n: int) -> list[bytes]:
    return [hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(n)]


def test_about_a_fraction_p_is_drawn_and_the_draw_is_repeatable() -> None:
    block = b"\x11" * 32
    picked = [k for k in keys(4000) if drawn(1 / 8, block, k)]
    assert 400 <= len(picked) <= 600  # 500 expected; the binomial sd is about 21
    assert picked == [k for k in keys(4000) if drawn(1 / 8, block, k)]


def test_another_block_hash_draws_other_submissions() -> None:
    first = {k for k in keys(2000) if drawn(0.5, b"\x01" * 32, k)}
    second = {k for k in keys(2000) if drawn(0.5, b"\x02" * 32, k)}
    assert first != second and 0.3 < len(first & second) / len(first) < 0.7


def test_rate_bounds() -> None:
    assert not any(drawn(0.0, b"x", k) for k in keys(100))
    assert all(drawn(1.0, b"x", k) for k in keys(100))
