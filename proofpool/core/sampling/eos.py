"""Where a completion may end: one rule for the worker's rows, the validator's cheap checks and
the sampling check.

An honest engine stops at the first stop token (any id of the pool's stop set: instruct models
end a turn with one of several, e.g. `<|im_end|>` or `<|endoftext|>`), or when the completion
budget runs out. So a stop id appears at most once, as the last token, and a completion shorter
than the budget must end with one: anything after a stop is padding the model never produced (work
units farmed for free), and a short completion without one was cut where the node liked it (an
answer truncated to score).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def eos_placement_ok(tokens: Sequence[int], stop_ids: Collection[int], max_tokens: int) -> bool:
    """A stop id only at the end, and required there unless the completion hit `max_tokens`."""
    if any(t in stop_ids for t in tokens[:-1]):
        return False
    ended = bool(tokens) and tokens[-1] in stop_ids
    return ended or len(tokens) >= max_tokens


def first_stop(tokens: Sequence[int], stop_ids: Collection[int]) -> int | None:
    """Position of the first stop id in `tokens`, None if there is none."""
    return next((i for i, t in enumerate(tokens) if t in stop_ids), None)
