"""The devnet tokenizer, model builder, warm-up cache and validator prefill (no vLLM, a few seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from proofpool_arithmetic.build import (
    MANIFEST_NAME,
    ModelSpec,
    create_model,
    init_model,
    read_manifest,
    settings_digest,
)
from proofpool_arithmetic.cache import CACHE_ENV, devnet_model_path, ensure_devnet_model, model_cache_dir
from proofpool_arithmetic.task import Problem
from proofpool_arithmetic.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    VOCAB,
    VOCAB_SIZE,
    decode_tokens,
    encode_text,
    save_tokenizer,
)
from proofpool_arithmetic.warmup import WarmupSpec, warmup

from proofpool.inference.model import ModelNotFound, load_model
from proofpool.inference.prefill import prefill, prefill_batch

TINY = ModelSpec(seed=0, hidden=64, layers=2, heads=2)
"""Smaller than the devnet default so the unit tests stay fast."""


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-model")
    return init_model(path, seed=TINY.seed, hidden=TINY.hidden, layers=TINY.layers, heads=TINY.heads)


def test_vocab_is_small_and_has_the_specials() -> None:
    assert VOCAB_SIZE == len(VOCAB) < 64
    assert (VOCAB[PAD_ID], VOCAB[BOS_ID], VOCAB[EOS_ID]) == ("<pad>", "<bos>", "<eos>")
    assert set("0123456789+=") <= set(VOCAB)


def test_saved_tokenizer_loads_in_transformers_and_agrees_with_the_pure_helpers(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    save_tokenizer(tmp_path)
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= {
        p.name for p in tmp_path.iterdir()
    }
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (PAD_ID, BOS_ID, EOS_ID)
    assert len(tok) == VOCAB_SIZE
    assert tok("12+34=").input_ids == encode_text("12+34=", add_bos=True)
    ids = encode_text("46")
    assert tok.decode([BOS_ID, *ids, EOS_ID], skip_special_tokens=True) == decode_tokens(ids) == "46"


def test_init_model_is_seeded_and_saved_as_a_loadable_hf_directory(tiny_model_dir: Path) -> None:
    names = {p.name for p in tiny_model_dir.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", MANIFEST_NAME} <= names
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and config["vocab_size"] == VOCAB_SIZE
    assert config["eos_token_id"] == EOS_ID and config["dtype"] == "bfloat16"
    loaded = load_model(tiny_model_dir, "fp32")
    fresh = create_model(TINY)
    for (name, a), (_, b) in zip(loaded.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert torch.equal(a, b), name  # the saved bf16 weights are exactly the in-memory ones
    other = create_model(ModelSpec(seed=1, hidden=64, layers=2, heads=2))
    assert not torch.equal(other.model.embed_tokens.weight, fresh.model.embed_tokens.weight)


def test_building_a_model_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    create_model(TINY)
    assert torch.equal(torch.rand(3), expected)


def test_load_model_refuses_an_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        load_model(tmp_path)


def test_settings_digest_changes_with_any_setting() -> None:
    base = settings_digest(ModelSpec(), WarmupSpec())
    assert base == settings_digest(ModelSpec(), WarmupSpec())
    assert base != settings_digest(ModelSpec(seed=1), WarmupSpec())
    assert base != settings_digest(ModelSpec(), WarmupSpec(steps=1))


def test_prefill_rows_are_the_states_that_produced_each_completion_token(tiny_model_dir: Path) -> None:
    model = load_model(tiny_model_dir, "fp32")
    prompt, completion = Problem(12, 30).prompt_tokens(), [*encode_text("42"), EOS_ID]
    rec = prefill(model, prompt, completion)
    assert rec.hidden_states.shape == (3, TINY.hidden) and rec.logits.shape == (3, VOCAB_SIZE)
    assert rec.logits.dtype == torch.float32
    with torch.no_grad():
        full = model(input_ids=torch.tensor([prompt + completion]), output_hidden_states=True)
    p = len(prompt)
    torch.testing.assert_close(rec.logits, full.logits[0, p - 1 : p + 2].float())
    torch.testing.assert_close(rec.hidden_states, full.hidden_states[-1][0, p - 1 : p + 2])


def test_batched_prefill_matches_single_prefill(tiny_model_dir: Path) -> None:
    model = load_model(tiny_model_dir, "bf16")
    samples = [
        (Problem(a, b).prompt_tokens(), [*encode_text(str(a + b)), EOS_ID]) for a, b in [(1, 2), (45, 67), (9, 90)]
    ]
    batched = prefill_batch(model, samples, max_batch_tokens=20)  # forces two batches
    for (prompt, completion), rec in zip(samples, batched, strict=True):
        single = prefill(model, prompt, completion)
        assert rec.hidden_states.dtype == torch.bfloat16
        torch.testing.assert_close(rec.hidden_states.float(), single.hidden_states.float(), atol=0.05, rtol=0.02)
        torch.testing.assert_close(rec.logits, single.logits, atol=0.1, rtol=0.02)


def test_prefill_refuses_out_of_vocab_tokens(tiny_model_dir: Path) -> None:
    model = load_model(tiny_model_dir, "fp32")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        prefill(model, [BOS_ID], [VOCAB_SIZE])


def test_warmup_learns_and_is_cached_by_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    assert model_cache_dir() == tmp_path / "cache"
    spec = WarmupSpec(steps=30, batch_size=32, lr=3e-3)
    lines: list[str] = []
    path = ensure_devnet_model(TINY, spec, progress=lines.append)
    assert path == devnet_model_path(TINY, spec) and path.parent == tmp_path / "cache"
    manifest = read_manifest(path)
    assert manifest is not None and manifest.warmup is not None and manifest.spec == TINY
    assert manifest.metrics["final_loss"] < 2.0  # from ~2.8 (uniform over 16 tokens)
    assert any("warm-up step 30/30" in line for line in lines)
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    again: list[str] = []
    assert ensure_devnet_model(TINY, spec, progress=again.append) == path
    assert again == [] and (path / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt
    warmup(path, spec, progress=again.append)
    assert "already warmed up" in again[0]
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no staging leftovers


def test_warmup_is_deterministic(tmp_path: Path) -> None:
    spec = WarmupSpec(steps=5, batch_size=8)
    dirs = [init_model(tmp_path / str(i), seed=0, hidden=64, layers=2, heads=2) for i in range(2)]
    for d in dirs:
        warmup(d, spec, progress=None)
    a, b = (load_model(d) for d in dirs)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_the_arithmetic_cli_inits_warms_up_and_locates_a_model(tmp_path: Path) -> None:
    from proofpool_arithmetic.cli import app
    from typer.testing import CliRunner

    runner = CliRunner()
    model_dir = tmp_path / "m"
    result = runner.invoke(
        app, ["init", str(model_dir), "--seed", "2", "--hidden", "64", "--layers", "1", "--heads", "2"]
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["warmup", str(model_dir), "--steps", "2", "--batch-size", "4"])
    assert result.exit_code == 0, result.output
    manifest = read_manifest(model_dir)
    assert manifest is not None and manifest.spec.seed == 2 and manifest.warmup is not None
    result = runner.invoke(app, ["path", "--json", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["ready"] is False and payload["path"].startswith(str(tmp_path / "cache"))
