"""Finding the answer in a completion: the text inside its last `<answer>...</answer>` pair.

Written with two `str.rfind` calls rather than reasoning-gym's `extract_answer` regex: that one
scans to the end of the text once per `<answer>` it sees, so a completion of a million opening tags
takes quadratic time, and the completion is written by whoever earns the reward. This is linear,
never raises for any text, and takes the innermost pair when tags nest or an opening tag is left
unclosed (`<answer>a <answer>b</answer>` gives `b`; `<answer>a</answer> </answer>` gives `a`).
"""

from __future__ import annotations

from typing import Final

OPEN_TAG: Final = "<answer>"
CLOSE_TAG: Final = "</answer>"


def extract_answer(completion: str) -> str | None:
    """The stripped text of the last complete `<answer>...</answer>` pair, or None if there is none.

    The last `<answer>` that still has a `</answer>` after it opens the pair, and the first
    `</answer>` after that closes it: linear in the text, whatever tags it holds.
    """
    last_close = completion.rfind(CLOSE_TAG)
    if last_close < 0:
        return None
    start = completion.rfind(OPEN_TAG, 0, last_close)
    if start < 0:
        return None
    body = start + len(OPEN_TAG)
    end = completion.find(CLOSE_TAG, body)
    return completion[body:end].strip()
