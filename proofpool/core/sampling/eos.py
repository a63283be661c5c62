"""Where a completion may end: one rule for the worker's rows, the validator's cheap checks and
the sampling check.

An honest engine stops at the first EOS, or when the completion budget runs out. So EOS appears
at most once, as the last token, and a completion shorter than the budget must end with it:
anything after an EOS is padding the model never produced (work units farmed for free), and a
short completion without one was cut where the node liked it (an answer truncated to score).
"""

from __future__ import annotations

from collections.abc import Sequence


def eos_placement_ok(tokens: Sequence[int], eos_token_id: int, max_tokens: int) -> bool:
    """EOS only at the end, and required there unless the completion hit `max_tokens`."""
    if eos_token_id in tokens[:-1]:
        return False
    ended = bool(tokens) and tokens[-1] == eos_token_id
    return ended or len(tokens) >= max_tokens
