"""Where the reference TOPLOC vectors are: `tests/data/toploc-vectors/` (copied from the reference
library's output, so the suite reads nothing outside the repository)."""

from __future__ import annotations

from pathlib import Path

VECTOR_DIR = Path(__file__).resolve().parent / "data" / "toploc-vectors"
VECTOR_FILES = sorted(VECTOR_DIR.glob("*.json"))
