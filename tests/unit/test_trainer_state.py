"""The trainer's state file holds plain data only and is loaded with `weights_only=True`: loading
it runs no code, whatever was written into the state directory."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from proofpool.trainer.config import GrpoConfig
from proofpool.trainer.state import STATE_FILE, TrainerState, load_state, save_state
from proofpool.trainer.step import make_optimizer
from proofpool_arithmetic.build import ModelSpec, create_model

TINY = ModelSpec(seed=5, hidden=32, layers=1, heads=1)


def _trained_state() -> TrainerState:
    """State after one real AdamW step, so the optimizer state has moments and step counters."""
    model = create_model(TINY)
    optimizer = make_optimizer(model, GrpoConfig())
    model(input_ids=torch.tensor([[1, 5, 6]])).logits.sum().backward()
    optimizer.step()
    return TrainerState(3, model.state_dict(), optimizer.state_dict(), {b"\x01" * 32, b"\x02" * 32})


def test_saved_state_loads_with_weights_only_and_resumes(tmp_path: Path) -> None:
    state = _trained_state()
    path = save_state(tmp_path, state)
    raw = torch.load(path, weights_only=True)  # what any reader may do: plain data only
    assert raw["seen"] == ["0x" + "01" * 32, "0x" + "02" * 32]
    loaded = load_state(tmp_path)
    assert loaded is not None and loaded.step == 3 and loaded.seen == state.seen
    model = create_model(TINY)
    model.load_state_dict(loaded.model)
    optimizer = make_optimizer(model, GrpoConfig())
    optimizer.load_state_dict(loaded.optimizer)  # AdamW takes it back as it was saved
    assert optimizer.state_dict()["state"][0]["step"] == state.optimizer["state"][0]["step"]


def test_state_written_by_an_older_trainer_still_loads(tmp_path: Path) -> None:
    """Older trainers saved work keys as raw bytes (and were loaded with weights_only=False)."""
    state = _trained_state()
    old = {"step": 3, "model": state.model, "optimizer": state.optimizer, "seen": sorted(state.seen)}
    torch.save(old, tmp_path / STATE_FILE)
    loaded = load_state(tmp_path)
    assert loaded is not None and loaded.seen == state.seen and loaded.step == 3


class _RunsCode:
    """A pickle that calls a function when loaded: what weights_only=False would execute."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (_leave_marker, (str(self.marker),))


def _leave_marker(path: str) -> None:
    Path(path).write_text("code ran while loading the trainer state")


def test_a_state_file_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    state = _trained_state()
    payload = {"step": 3, "model": state.model, "optimizer": state.optimizer, "seen": [_RunsCode(marker)]}
    torch.save(payload, tmp_path / STATE_FILE)
    with pytest.raises(pickle.UnpicklingError):
        load_state(tmp_path)
    assert not marker.exists()
