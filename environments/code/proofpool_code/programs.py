"""From a completion's text to the program the sandbox runs: the last fenced Python block, the
problem's prompt before it, its tests and a pass marker after it.

Pure text functions, no execution: the same completion gives the same program everywhere (apart
from the marker, which is random per run and only ever printed by the program's last line).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Final, Literal

Source = Literal["humaneval", "generated"]

_FENCE_OPEN: Final = re.compile(r"^(?P<indent>[ \t]*)```[ \t]*(?P<info>[^`\s]*)[^`]*$")
_FENCE_CLOSE: Final = re.compile(r"^[ \t]*```[ \t]*$")
PYTHON_INFOS: Final = frozenset({"", "python", "py", "python3"})
"""Fence labels taken as Python (an unlabelled fence is too); ```text and others are skipped."""

_FUTURE: Final = re.compile(r"^from[ \t]+__future__[ \t]+import[^\n]*$", re.MULTILINE)

MAX_PROGRAM_CHARS: Final = 1_000_000
"""A block longer than this is not run (no honest solution to these tasks comes near)."""


@dataclass(frozen=True)
class CodeTask:
    """One function-writing task: HumanEval's shape, which the generated tasks share."""

    source: Source
    source_id: str
    prompt: str
    """Imports, helpers and the signature with its docstring (a valid module on its own)."""
    test: str
    """Defines `check(candidate)`, which asserts on the candidate's results."""
    entry_point: str
    canonical_solution: str
    """The reference body: `prompt + canonical_solution` is a correct module."""
    family: str | None = None
    """For generated tasks, which kind of function it is."""

    def digest_fields(self) -> dict[str, str]:
        """What the data digest covers: all that decides a score."""
        return {
            "source": self.source,
            "source_id": self.source_id,
            "prompt": self.prompt,
            "test": self.test,
            "entry_point": self.entry_point,
        }


def extract_last_block(completion: str) -> str | None:
    """The content of the completion's last fenced Python block (```python, ```py or a bare
    ```), or None when there is none.

    Fences are read line by line, as Markdown does: an opening fence's indentation is removed
    from the lines of its block (up to that much), a block still open at the end of the text
    counts (the completion may have stopped at a closing fence used as stop sequence), and
    blocks labelled with another language are skipped.
    """
    blocks: list[str] = []
    current: list[str] | None = None
    info = indent = ""
    for line in completion.splitlines():
        if current is None:
            match = _FENCE_OPEN.match(line)
            if match:
                current, info, indent = [], match["info"].lower(), match["indent"]
        elif _FENCE_CLOSE.match(line):
            if info in PYTHON_INFOS:
                blocks.append("\n".join(current) + "\n")
            current = None
        else:
            current.append(line[len(indent) :] if line.startswith(indent) else line.lstrip(" \t"))
    if current is not None and info in PYTHON_INFOS and any(line.strip() for line in current):
        blocks.append("\n".join(current) + "\n")
    return blocks[-1] if blocks else None


def new_marker() -> str:
    """A fresh pass marker: the program prints it after `check` returns. A completion that exits
    early (`os._exit(0)`, `sys.exit()`) never prints it, and cannot guess it."""
    return f"proofpool-code-pass-{secrets.token_hex(16)}"


def assemble_program(task: CodeTask, block: str, marker: str) -> str:
    """The program for `block`: HumanEval's own convention, prompt + completion + tests +
    `check(entry_point)`, then the marker.

    The prompt always comes first. When the block is a body it completes the prompt's function;
    when it is a whole module with its own `def entry_point`, that definition replaces the
    prompt's (which only holds a docstring), and the prompt's imports and helper functions that
    the tests use (`poly` of HumanEval/32) are still there. `from __future__` imports of the block
    are moved to the top, where Python requires them.
    """
    futures = _FUTURE.findall(block)
    body = _FUTURE.sub("", block) if futures else block
    prompt = task.prompt if task.prompt.endswith("\n") else task.prompt + "\n"
    return "".join(
        (
            "".join(f"{line}\n" for line in futures),
            prompt,
            body,
            "\n\n",
            task.test,
            "\n\n",
            f"check({task.entry_point})\n",
            "import sys as _proofpool_sys\n",
            f'_proofpool_sys.stdout.write("\\n" + {marker!r} + "\\n")\n',
            "_proofpool_sys.stdout.flush()\n",
        )
    )
