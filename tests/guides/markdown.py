"""The commands of a guide, read from its Markdown as a reader would copy them.

A guide's ```bash and ```python blocks are its commands, in order. Inside a bash block:

- a line ending in `\\` continues on the next line (joined as the shell would);
- a full-line comment directly after a command is that command's documented output: the test
  looks for it in what the command printed, `...` (or `…`) matching anything;
- a full-line comment before any command of the block is prose, not output;
- `# ...` after a command on the same line is the shell's own comment.

A python block is one command: the block saved as a file and run with `python` (a script, as
multiprocessing needs of a main module); the full-line comments that end it are its documented
output.

A block the test cannot run on one machine (a second trainer under torchrun, a model directory the
reader brings) is marked `<!-- guide: skip (why) -->` on the line before its fence, which readers
of the rendered page do not see. ```sql, ```ini and other blocks are never run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SKIP_MARK = "<!-- guide: skip"
_FENCE = re.compile(r"^```(\S*)\s*$")
_WILDCARD = re.compile(r"\\\.\\\.\\\.|…")


@dataclass(frozen=True)
class Command:
    """One command of a guide, with where it is written and what it is documented to print."""

    doc: str
    line: int
    section: str
    text: str
    expected: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def guide_commands(path: Path, root: Path) -> list[Command]:
    """Every runnable command of the guide at `path`, in order (`root`: what `doc` is relative to)."""
    doc = str(path.relative_to(root))
    commands: list[Command] = []
    section = ""
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("#") and not line.startswith("#!"):
            section = line.lstrip("#").strip()
        fence = _FENCE.match(line)
        if fence is None:
            index += 1
            continue
        end = _closing_fence(lines, index)
        if fence.group(1) in ("bash", "sh") and not _skipped(lines, index):
            commands.extend(_block_commands(doc, section, lines, index + 1, end))
        elif fence.group(1) == "python" and not _skipped(lines, index):
            commands.append(_python_command(doc, section, lines, index + 1, end))
        index = end + 1
    return commands


def _closing_fence(lines: list[str], start: int) -> int:
    for index in range(start + 1, len(lines)):
        if lines[index].startswith("```"):
            return index
    raise ValueError(f"unclosed code block at line {start + 1}")


def _skipped(lines: list[str], fence: int) -> bool:
    previous = next((lines[i] for i in range(fence - 1, -1, -1) if lines[i].strip()), "")
    return previous.strip().startswith(SKIP_MARK)


def _block_commands(doc: str, section: str, lines: list[str], start: int, end: int) -> list[Command]:
    commands: list[Command] = []
    index = start
    while index < end:
        stripped = lines[index].strip()
        if not stripped:
            index += 1
            continue
        if stripped.startswith("#"):
            if commands and _follows_command(lines, index, commands[-1]):
                last = commands[-1]
                output = stripped.lstrip("#").strip()
                commands[-1] = Command(last.doc, last.line, last.section, last.text, (*last.expected, output))
            index += 1
            continue
        first = index
        parts = [lines[index].rstrip()]
        while parts[-1].endswith("\\") and index + 1 < end:
            index += 1
            parts[-1] = parts[-1][:-1].rstrip()
            parts.append(lines[index].strip())
        commands.append(Command(doc, first + 1, section, " ".join(parts), ()))
        index += 1
    return commands


def _python_command(doc: str, section: str, lines: list[str], start: int, end: int) -> Command:
    code = lines[start:end]
    output: list[str] = []
    while code and (code[-1].startswith("# ") or not code[-1].strip()):
        if code[-1].strip():
            output.insert(0, code[-1][2:].strip())
        code.pop()
    script = "\n".join(code)
    text = f"cat > guide_snippet.py <<'PYTHON'\n{script}\nPYTHON\npython guide_snippet.py"
    return Command(doc, start + 1, section, text, tuple(output))


def _follows_command(lines: list[str], index: int, last: Command) -> bool:
    """True if the comment at `index` comes right after `last` (or after its other output lines),
    with no blank line in between."""
    previous = index - 1
    while previous >= 0 and lines[previous].strip().startswith("#"):
        previous -= 1
    return previous >= last.line - 1 and bool(lines[previous].strip())


def output_pattern(expected: str) -> re.Pattern[str]:
    """The regex a documented output line stands for: literal text, `...`/`…` matching anything,
    runs of spaces matching any spacing (tables are laid out to the terminal's width)."""
    escaped = re.escape(" ".join(expected.split()))
    return re.compile(_WILDCARD.sub(".*?", escaped).replace(r"\ ", r"\s+"))


def normalized(output: str) -> str:
    """Printed text as `output_pattern` matches it: colours removed, whitespace runs made one space."""
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)
    return " ".join(plain.split())
