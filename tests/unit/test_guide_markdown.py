"""How the guide test reads commands and their documented output out of Markdown."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.guides.markdown import guide_commands, normalized, output_pattern

GUIDE = """# A guide

## 1. Keys

```bash
# prose before any command is not output
proofpool keys new a.json   # a trailing comment is the shell's
proofpool keys show a.json
# 0x...

proofpool pool create --key a.json \\
    --fund 10 --start
# pool ... created
# funded with 10 POOL
```

<!-- guide: skip (needs a GPU) -->
```bash
torchrun --nproc-per-node 8 train.py
```

## 2. Elsewhere

```python
import sys
# a comment in the code
print(sys.version_info.major)
# 3
```

```sh
echo done
```
"""


@pytest.fixture
def guide(tmp_path: Path) -> Path:
    path = tmp_path / "docs" / "guide.md"
    path.parent.mkdir()
    path.write_text(GUIDE)
    return path


def test_commands_in_order_with_continuations_sections_and_lines(guide: Path) -> None:
    commands = guide_commands(guide, guide.parent.parent)
    assert [c.text for c in commands] == [
        "proofpool keys new a.json   # a trailing comment is the shell's",
        "proofpool keys show a.json",
        "proofpool pool create --key a.json --fund 10 --start",
        "cat > guide_snippet.py <<'PYTHON'\nimport sys\n# a comment in the code\nprint(sys.version_info.major)\n"
        "PYTHON\npython guide_snippet.py",
        "echo done",
    ]
    assert [c.section for c in commands] == ["1. Keys", "1. Keys", "1. Keys", "2. Elsewhere", "2. Elsewhere"]
    assert [c.where for c in commands][:3] == ["docs/guide.md:7", "docs/guide.md:8", "docs/guide.md:11"]


def test_comments_right_after_a_command_are_its_output(guide: Path) -> None:
    commands = guide_commands(guide, guide.parent.parent)
    assert commands[0].expected == ()
    assert commands[1].expected == ("0x...",)
    assert commands[2].expected == ("pool ... created", "funded with 10 POOL")
    assert commands[3].expected == ("3",)  # a python block's closing comments
    assert commands[4].expected == ()


def test_an_unclosed_block_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.md"
    path.write_text("# x\n\n```bash\nls\n")
    with pytest.raises(ValueError, match="unclosed code block at line 3"):
        guide_commands(path, tmp_path)


def test_output_patterns_take_wildcards_and_any_spacing() -> None:
    printed = normalized("\x1b[1mpool 7 created\x1b[0m\n  budget      10 POOL\n")
    assert output_pattern("pool ... created").search(printed)
    assert output_pattern("budget 10 POOL").search(printed)
    assert output_pattern("budget … POOL").search(printed)
    assert not output_pattern("budget 11 POOL").search(printed)
    assert not output_pattern("pool 7 (created)").search(printed)  # parentheses are literal
