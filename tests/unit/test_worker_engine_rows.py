"""The engine's table of captured hidden-state rows, fed with hand-made captures (no vLLM).

It must find each request's rows by absolute position whatever order the forward steps
captured them in, let a recomputed position's latest capture win, and report a request with
any position missing as None rather than hand over the wrong rows.
"""

from __future__ import annotations

import numpy as np
import torch
from proofpool.worker.engine import _Capture, _RowTable


def _capture(steps: list[tuple[list[int], list[int], list[float]]]) -> _Capture:
    """A capture whose step i filed rows (key, position) with a one-column value each."""
    capture = _Capture(layout=None)  # type: ignore[arg-type]  # the table never reads the layout
    for keys, positions, values in steps:
        capture.rows.append(torch.tensor(values, dtype=torch.bfloat16).reshape(-1, 1))
        capture.keys.append(np.array(keys, dtype=np.int64))
        capture.positions.append(np.array(positions, dtype=np.int64))
    return capture


def _values(rows: torch.Tensor | None) -> list[float] | None:
    return None if rows is None else rows.flatten().tolist()


def test_rows_are_found_by_request_and_position_across_steps() -> None:
    table = _RowTable(
        _capture(
            [
                ([0, 0, 1, 1, 1], [3, 4, 5, 6, 7], [1, 2, 10, 11, 12]),  # prefill: prompt tails of two requests
                ([1, 0], [8, 5], [13, 3]),  # a decode step in the other batch order
                ([0, 1], [6, 9], [4, 14]),
            ]
        )
    )
    found = table.slices([(0, 4, 3), (1, 7, 3), (0, 3, 4), (1, 5, 5)])
    assert [_values(r) for r in found] == [[2, 3, 4], [12, 13, 14], [1, 2, 3, 4], [10, 11, 12, 13, 14]]


def test_a_recomputed_position_keeps_its_latest_capture() -> None:
    table = _RowTable(_capture([([2, 2], [0, 1], [1, 2]), ([2], [1], [7])]))  # position 1 again (preemption)
    assert _values(table.slices([(2, 0, 2)])[0]) == [1, 7]


def test_missing_positions_and_unknown_requests_give_none() -> None:
    table = _RowTable(_capture([([0, 0, 0, 1], [0, 1, 3, 0], [1, 2, 4, 9])]))
    gap, beyond, unknown, whole = table.slices([(0, 0, 4), (1, 0, 2), (5, 0, 1), (0, 0, 2)])
    assert gap is None  # position 2 was never captured
    assert beyond is None  # request 1 has one row, not two
    assert unknown is None
    assert _values(whole) == [1, 2]


def test_empty_requests_and_empty_captures() -> None:
    assert _values(_RowTable(_capture([([0], [0], [1])])).slices([(0, 0, 0)])[0]) == []
    empty = _RowTable(_capture([]))
    assert empty.slices([(0, 0, 1)]) == [None]
    assert empty.slices([(0, 0, 0)])[0] is not None
    assert empty.slices([]) == []
