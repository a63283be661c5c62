"""Where the reference TOPLOC vectors are: `shared/toploc-vectors/` beside the repository (as in
CI), or `$PROOFPOOL_TOPLOC_VECTORS`."""

from __future__ import annotations

import os
from pathlib import Path

VECTOR_DIR = Path(
    os.environ.get("PROOFPOOL_TOPLOC_VECTORS", Path(__file__).resolve().parents[2] / "shared" / "toploc-vectors")
)
VECTOR_FILES = sorted(VECTOR_DIR.glob("*.json"))
