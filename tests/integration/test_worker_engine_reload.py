"""A worker loads a new checkpoint of its model into the running vLLM engine (`EngineSlot`,
`InferenceEngine.reload`) and generates exactly what a new engine on that checkpoint would: the
same tokens and the same hidden states (what its TOPLOC proofs commit to), bit for bit."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from proofpool.worker.engine import EngineConfig, GenerationRequest, InferenceEngine
from proofpool.worker.models import EngineSlot
from proofpool.worker.sampler import SamplerSettings
from proofpool_arithmetic.cache import ensure_devnet_model
from safetensors.torch import load_file, save_file

CONFIG = EngineConfig(max_model_len=64, max_num_seqs=32)
REQUESTS = [
    GenerationRequest((1, 2 + i % 5, 3, 4), SamplerSettings(7, i, 1.0), max_tokens=12, stop_ids=frozenset({2}))
    for i in range(16)
]

Output = list[tuple[tuple[int, ...], torch.Tensor]]


def generate(engine: InferenceEngine) -> Output:
    return [(g.completion_tokens, g.hidden_states) for g in engine.generate(REQUESTS)]


def identical(a: Output, b: Output) -> bool:
    return all(x[0] == y[0] and torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True))


def next_checkpoint(base: Path, target: Path, seed: int) -> Path:
    """`base` with every weight moved a little: what a trainer step publishes."""
    shutil.copytree(base, target)
    noise = torch.Generator().manual_seed(seed)
    weights = load_file(str(base / "model.safetensors"))
    moved = {k: (v.float() + 0.05 * torch.randn(v.shape, generator=noise)).to(v.dtype) for k, v in weights.items()}
    save_file(moved, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("checkpoints")
    base = ensure_devnet_model(progress=None)
    yield base, next_checkpoint(base, root / "v1", seed=1)


def test_a_reloaded_engine_generates_what_a_new_engine_does(checkpoints: tuple[Path, Path]) -> None:
    v0, v1 = checkpoints
    slot = EngineSlot(CONFIG)
    try:
        engine = slot.get(v0)
        on_v0 = generate(engine)
        assert slot.get(v1) is engine  # the same engine, new weights
        on_v1 = generate(engine)
        assert slot.get(v0) is engine
        assert identical(generate(engine), on_v0)  # back to v0: v0's output again
    finally:
        slot.close()
    assert not identical(on_v0, on_v1)  # the weights did change what it generates
    with InferenceEngine(v1, CONFIG) as fresh:
        assert identical(generate(fresh), on_v1)


def test_another_model_gets_a_new_engine(checkpoints: tuple[Path, Path], tmp_path: Path) -> None:
    v0, _ = checkpoints
    other = shutil.copytree(v0, tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-6}))
    slot = EngineSlot(CONFIG)
    try:
        engine = slot.get(v0)
        assert slot.get(other) is not engine
    finally:
        slot.close()


def test_with_reload_in_place_off_every_checkpoint_gets_a_new_engine(checkpoints: tuple[Path, Path]) -> None:
    v0, v1 = checkpoints
    slot = EngineSlot(dataclasses.replace(CONFIG, reload_in_place=False))
    try:
        engine = slot.get(v0)
        assert slot.get(v1) is not engine
    finally:
        slot.close()
