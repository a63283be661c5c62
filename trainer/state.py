"""The trainer's resumable state: weights, optimizer, step and the files already used.

Written atomically after every published checkpoint (temporary file, fsync, rename), so a
trainer killed at any point restarts from the last step it published and never trains twice
on the same file.

Loaded with `torch.load(..., weights_only=True)`: the state directory is the trainer's own, but a
pickle that may run code is one file swap away from running someone else's. So the file holds
only tensors, dicts, lists, tuples, strings and numbers (work keys as 0x-hex strings). Files
written before that stored work keys as bytes, which the restricted unpickler also reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

STATE_FILE = "trainer-state.pt"


@dataclass
class TrainerState:
    step: int
    """The next step to run; the model is checkpoint version `step` (published after step - 1)."""
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    seen: set[bytes] = field(default_factory=set)
    """Work keys of the files already trained on."""


def save_state(state_dir: Path, state: TrainerState) -> Path:
    """Write `state` atomically; returns the file's path."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / STATE_FILE
    staging = path.with_suffix(".partial")
    payload = {
        "step": int(state.step),
        "model": state.model,
        "optimizer": state.optimizer,
        "seen": ["0x" + key.hex() for key in sorted(state.seen)],
    }
    with open(staging, "wb") as handle:
        torch.save(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)
    return path


def load_state(state_dir: Path) -> TrainerState | None:
    """The saved state, or None for a fresh start.

    Raises:
        pickle.UnpicklingError: the file holds anything but plain data (see the module docstring).
    """
    path = state_dir / STATE_FILE
    if not path.is_file():
        return None
    payload = torch.load(path, map_location="cpu", weights_only=True)
    seen = {_key(k) for k in payload["seen"]}
    return TrainerState(int(payload["step"]), payload["model"], payload["optimizer"], seen)


def _key(saved: str | bytes) -> bytes:
    """A work key as saved: 0x-hex now, raw bytes in files of older trainers."""
    return bytes.fromhex(saved.removeprefix("0x")) if isinstance(saved, str) else bytes(saved)
