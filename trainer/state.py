"""The trainer's resumable state: weights, optimizer, step and the files already used.

Written atomically after every published checkpoint (temporary file, fsync, rename), so a
trainer killed at any point restarts from the last step it published and never trains twice
on the same file.
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
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / STATE_FILE
    staging = path.with_suffix(".partial")
    payload = {"step": state.step, "model": state.model, "optimizer": state.optimizer, "seen": sorted(state.seen)}
    with open(staging, "wb") as handle:
        torch.save(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)
    return path


def load_state(state_dir: Path) -> TrainerState | None:
    """The saved state, or None for a fresh start."""
    path = state_dir / STATE_FILE
    if not path.is_file():
        return None
    payload = torch.load(path, map_location="cpu", weights_only=False)
    return TrainerState(payload["step"], payload["model"], payload["optimizer"], set(payload["seen"]))
