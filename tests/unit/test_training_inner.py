"""Training pools' adapter on a tiny Llama (no services): the dataset file, the inner phase that
workers run and validators replay, and the outer step with the checkpoint it writes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from proofpool.devnet.tiny_model import train_tokenizer
from safetensors.torch import save
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from proofpool.core.diloco.outer import average, clip_global_norm, outer_step
from proofpool.core.diloco.spec import (
    CodecSpec,
    DilocoData,
    DilocoModel,
    DilocoSpec,
    InnerSpec,
    OuterSpec,
    ReplaySpec,
    RoundSpec,
)
from proofpool.core.diloco.update_file import UpdateMeta, encode_update, read_update
from proofpool.training.dataset import (
    DatasetError,
    dataset_bytes,
    dataset_spec,
    load_dataset,
    pack_texts,
    parse_dataset,
    write_dataset,
)
from proofpool.training.inner import InnerResult, TrainJob, eval_loss, load_model, parameter_shapes, run_inner
from proofpool.training.rounds import (
    MOMENTUM_FILE,
    ROUND_FILE,
    RoundError,
    RoundRecord,
    outer_round,
    read_momentum,
    read_round_record,
    read_weights,
    write_round_checkpoint,
)

SEQ_LEN = 32
VOCAB = 256
NODES = ("0x" + "11" * 20, "0x" + "22" * 20)
BASE = "ab" * 32


def tiny_llama(directory: Path, seed: int = 0, **overrides: object) -> Path:
    """The brief's tiny Llama (hidden 32, 2 layers, vocab 256, tied embeddings), fp32 safetensors."""
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        **overrides,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("llama") / "model")


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    """64 rows of random ids: for determinism and comparison tests."""
    return torch.randint(0, VOCAB, (64, SEQ_LEN), generator=torch.Generator().manual_seed(7), dtype=torch.int32)


@pytest.fixture(scope="module")
def repetitive() -> torch.Tensor:
    """64 rows that each count up by one from their own start (mod 16): a pattern 20 steps learn."""
    starts = torch.arange(64).unsqueeze(1)
    return ((starts + torch.arange(SEQ_LEN)) % 16 + 10).to(torch.int32)


def job(model_dir: Path, tokens: torch.Tensor, rows: list[int], inner: InnerSpec, node: str = NODES[0]) -> TrainJob:
    return TrainJob(pool_id=1, round=0, node=node, checkpoint_dir=model_dir, tokens=tokens, rows=rows, inner=inner)


INNER = InnerSpec(steps=3, batch_size=4, lr=1e-3, warmup_steps=1, weight_decay=0.01, grad_clip=1.0)


# --- dataset ---


def test_pack_texts_encodes_each_text_with_eos_and_cuts_full_rows() -> None:
    raw = train_tokenizer(["alpha beta gamma", "delta epsilon"], 300)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>")
    texts = ["alpha beta gamma delta", "epsilon alpha", "gamma gamma beta"] * 5
    rows = pack_texts(texts, tokenizer, 8)
    stream = [i for text in texts for i in [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]]
    assert rows.dtype == torch.int32 and rows.shape == (len(stream) // 8, 8)
    assert rows.flatten().tolist() == stream[: rows.numel()]
    assert (rows == tokenizer.eos_token_id).sum() >= len(texts) - 1  # every text ends in eos (tail may be cut)

    with pytest.raises(DatasetError, match="empty"):
        pack_texts(["alpha"], tokenizer, 4096)
    with pytest.raises(DatasetError, match="bad_tokens"):
        pack_texts(texts, tokenizer, 1)
    with pytest.raises(DatasetError, match="no_eos"):
        pack_texts(texts, PreTrainedTokenizerFast(tokenizer_object=raw), 8)


def test_a_dataset_file_round_trips_and_is_named_by_its_bytes(tokens: torch.Tensor, tmp_path: Path) -> None:
    path = tmp_path / "data.safetensors"
    sha = write_dataset(tokens, path, name="random")
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    assert write_dataset(tokens.long(), tmp_path / "again.safetensors", name="random") == sha  # same tokens, same bytes
    assert write_dataset(tokens, tmp_path / "other.safetensors", name="other") != sha
    loaded = load_dataset(path, sha, vocab_size=VOCAB)
    assert loaded.dtype == torch.int32 and torch.equal(loaded, tokens)
    assert load_dataset(path).shape == (64, SEQ_LEN)
    data = dataset_spec(path, eval_sequences=8)
    assert (data.sha256, data.sequences, data.seq_len, data.eval_sequences, data.name, data.uri) == (
        sha,
        64,
        SEQ_LEN,
        8,
        "random",
        None,
    )


def _meta(**changes: object) -> dict[str, str]:
    meta = {"kind": "diloco-dataset", "name": "", "sequences": 4, "seq_len": 8, **changes}
    return {"proofpool": json.dumps(meta)}


ROWS = torch.zeros((4, 8), dtype=torch.int32)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not a safetensors file at all", "not_safetensors"),
        (dataset_bytes(ROWS)[:-5], "not_safetensors"),
        ((10**9).to_bytes(8, "little") + b"{}", "not_safetensors"),
        (save({"tokens": ROWS}), "bad_metadata"),
        (save({"tokens": ROWS}, metadata={"proofpool": "{not json"}), "bad_metadata"),
        (save({"tokens": ROWS}, metadata=_meta(kind="rollouts")), "bad_metadata"),
        (save({"tokens": ROWS}, metadata=_meta(extra=1)), "bad_metadata"),
        (save({"tokens": ROWS}, metadata=_meta(sequences=-4)), "bad_metadata"),
        (save({"tokens": ROWS, "more": ROWS.clone()}, metadata=_meta()), "wrong_tensors"),
        (save({"rows": ROWS}, metadata=_meta()), "wrong_tensors"),
        (save({"tokens": ROWS.long()}, metadata=_meta()), "wrong_dtype"),
        (save({"tokens": ROWS.float()}, metadata=_meta()), "wrong_dtype"),
        (save({"tokens": ROWS}, metadata=_meta(sequences=5)), "wrong_shape"),
        (save({"tokens": ROWS - 1}, metadata=_meta()), "token_out_of_range"),
        (save({"tokens": ROWS + VOCAB}, metadata=_meta()), "token_out_of_range"),
    ],
)
def test_a_malformed_dataset_is_refused_with_its_reason(data: bytes, reason: str) -> None:
    with pytest.raises(DatasetError) as raised:
        parse_dataset(data, vocab_size=VOCAB)
    assert raised.value.reason == reason, raised.value


def test_a_dataset_file_is_checked_against_its_hash(tokens: torch.Tensor, tmp_path: Path) -> None:
    path = tmp_path / "data.safetensors"
    sha = write_dataset(tokens, path)
    with pytest.raises(DatasetError) as raised:
        load_dataset(path, "0" * 64)
    assert raised.value.reason == "sha256_mismatch"
    with pytest.raises(DatasetError) as raised:
        load_dataset(tmp_path / "absent.safetensors", sha)
    assert raised.value.reason == "missing"
    with pytest.raises(DatasetError) as raised:
        write_dataset(tokens.float(), tmp_path / "floats.safetensors")
    assert raised.value.reason == "wrong_dtype"
    with pytest.raises(DatasetError) as raised:
        write_dataset(tokens[0], tmp_path / "flat.safetensors")
    assert raised.value.reason == "wrong_shape"


# --- inner phase ---


def test_load_model_trains_in_fp32_with_eager_attention_and_no_dropout(tmp_path: Path) -> None:
    directory = tiny_llama(tmp_path / "dropout", attention_dropout=0.3)
    model = load_model(directory)
    assert model.training and model.config.attention_dropout == 0.0
    assert model.config._attn_implementation == "eager"
    assert all(p.dtype == torch.float32 for p in model.parameters())
    shapes = parameter_shapes(model)
    assert "lm_head.weight" not in shapes and shapes["model.embed_tokens.weight"] == (VOCAB, 32)  # tied: once
    ids = torch.randint(0, VOCAB, (2, SEQ_LEN))
    first, second = model(input_ids=ids, labels=ids).loss, model(input_ids=ids, labels=ids).loss
    assert torch.equal(first, second)  # train mode, yet nothing random


def test_two_inner_runs_give_bitwise_equal_pseudo_gradients(model_dir: Path, tokens: torch.Tensor) -> None:
    rows = list(range(12))
    first, second = run_inner(job(model_dir, tokens, rows, INNER)), run_inner(job(model_dir, tokens, rows, INNER))
    assert isinstance(first, InnerResult) and first.tokens == 3 * 4 * SEQ_LEN
    assert len(first.losses) == 3 and first.losses == second.losses
    assert first.pseudo_gradient.keys() == parameter_shapes(load_model(model_dir)).keys()
    for name, delta in first.pseudo_gradient.items():
        assert delta.dtype == torch.float32
        assert torch.equal(delta, second.pseudo_gradient[name]), name
    assert any(bool(delta.abs().sum() > 0) for delta in first.pseudo_gradient.values())


def test_other_rows_give_another_pseudo_gradient(model_dir: Path, tokens: torch.Tensor) -> None:
    mine = run_inner(job(model_dir, tokens, list(range(12)), INNER))
    other = run_inner(job(model_dir, tokens, list(range(12, 24)), INNER))
    reordered = run_inner(job(model_dir, tokens, [*range(4, 12), *range(4)], INNER))  # same rows, other batches
    for result in (other, reordered):
        distance = sum(float((result.pseudo_gradient[n] - d).norm()) for n, d in mine.pseudo_gradient.items())
        assert distance > 1e-4
    assert other.losses[0] != mine.losses[0]


def test_losses_fall_over_twenty_steps_on_a_repetitive_dataset(model_dir: Path, repetitive: torch.Tensor) -> None:
    inner = InnerSpec(steps=20, batch_size=4, lr=1e-2, warmup_steps=2)
    rows = [(7 * i) % 64 for i in range(80)]
    result = run_inner(job(model_dir, repetitive, rows, inner))
    assert len(result.losses) == 20
    assert sum(result.losses[-3:]) / 3 < 0.6 * sum(result.losses[:3]) / 3, result.losses


def test_eval_loss_is_the_mean_token_loss_and_falls_after_training(model_dir: Path, repetitive: torch.Tensor) -> None:
    rows = list(range(56, 64))
    model = load_model(model_dir)
    ids = repetitive[rows].long()
    with torch.no_grad():
        expected = float(model(input_ids=ids, labels=ids).loss)
    assert eval_loss(model_dir, repetitive, rows) == pytest.approx(expected, rel=1e-6)
    assert eval_loss(model, repetitive, rows, batch_size=3) == pytest.approx(expected, rel=1e-5)
    assert model.training  # the caller's mode is kept

    inner = InnerSpec(steps=20, batch_size=4, lr=1e-2, warmup_steps=2)
    result = run_inner(job(model_dir, repetitive, [(7 * i) % 56 for i in range(80)], inner))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.sub_(result.pseudo_gradient[name])  # theta_end = theta_start - delta
    assert eval_loss(model, repetitive, rows) < 0.6 * expected
    with pytest.raises(ValueError):
        eval_loss(model, repetitive, [])


def test_an_inconsistent_job_is_refused_before_training(model_dir: Path, tokens: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="rows for 3 steps"):
        run_inner(job(model_dir, tokens, list(range(11)), INNER))
    with pytest.raises(ValueError, match="outside"):
        run_inner(job(model_dir, tokens, [*range(11), 64], INNER))


# --- outer step and round checkpoints ---


def _update(result: InnerResult, node: str, round: int = 0) -> bytes:
    meta = UpdateMeta(
        pool_id=1,
        node=node,
        round=round,
        base_manifest_sha256=BASE,
        spec_sha256="cd" * 32,
        codec="int8",
        block_size=0,
        inner_steps=len(result.losses),
        tokens=result.tokens,
        losses=tuple(result.losses),
    )
    return encode_update(result.pseudo_gradient, meta)


def _spec(outer: OuterSpec) -> DilocoSpec:
    return DilocoSpec(
        model=DilocoModel("LlamaForCausalLM", VOCAB),
        dataset=DilocoData("ef" * 32, 64, SEQ_LEN, 8),
        inner=INNER,
        outer=outer,
        codec=CodecSpec(),
        round=RoundSpec(deadline_seconds=60, min_contributors=1),
        validation=ReplaySpec(),
    )


def test_outer_round_is_the_core_outer_step_and_its_checkpoint_round_trips(
    model_dir: Path, tokens: torch.Tensor, tmp_path: Path
) -> None:
    results = [
        run_inner(job(model_dir, tokens, list(range(12 * i, 12 * (i + 1))), INNER, n)) for i, n in enumerate(NODES)
    ]
    files = [_update(result, node) for result, node in zip(results, NODES, strict=True)]
    updates = [(hashlib.sha256(data).hexdigest(), read_update(data)) for data in files]
    spec = _spec(OuterSpec(lr=0.7, momentum=0.9, nesterov=True, clip_norm=0.0))
    weights, momentum, record = outer_round(model_dir, list(reversed(updates)), spec, 1, 0, "0x" + BASE.upper())

    ordered = sorted(updates, key=lambda item: item[0])
    assert record.included == tuple(key for key, _ in ordered)
    assert record.contributors == tuple(u.meta.node for _, u in ordered)
    assert (record.pool_id, record.round, record.version, record.previous_manifest_sha256) == (1, 0, 1, BASE)
    averaged, norm = clip_global_norm(average([u.dequantized() for _, u in ordered]), 0.0)
    expected_w, expected_m = outer_step(read_weights(model_dir), None, averaged, spec.outer)
    assert record.delta_norm == norm and record.outer == spec.outer
    assert all(torch.equal(weights[n], expected_w[n]) and torch.equal(momentum[n], expected_m[n]) for n in weights)

    v1 = tmp_path / "v1"
    write_round_checkpoint(model_dir, weights, momentum, record, v1)
    assert (v1 / MOMENTUM_FILE).is_file() and (v1 / ROUND_FILE).is_file()
    assert (v1 / "config.json").read_bytes() == (model_dir / "config.json").read_bytes()
    assert all(torch.equal(t, weights[n]) and t.dtype == torch.float32 for n, t in read_weights(v1).items())
    stored = read_momentum(v1)
    assert stored is not None and all(torch.equal(stored[n], momentum[n]) for n in momentum)
    assert read_round_record(v1) == record
    assert read_momentum(model_dir) is None and read_round_record(model_dir) is None

    # round 1 starts from v1's momentum: mu * m + delta, not delta alone
    data = _update(results[0], NODES[0], round=1)
    later = read_update(data)
    _, momentum_2, _ = outer_round(v1, [(hashlib.sha256(data).hexdigest(), later)], spec, 1, 1, BASE)
    for name, value in momentum.items():
        assert torch.allclose(momentum_2[name], 0.9 * value + later.dequantized()[name], atol=1e-6), name

    with pytest.raises(RoundError, match="not empty"):
        write_round_checkpoint(model_dir, weights, momentum, record, v1)
    with pytest.raises(RoundError, match="parameters missing"):
        write_round_checkpoint(model_dir, dict(list(weights.items())[1:]), momentum, record, tmp_path / "v1b")
    with pytest.raises(RoundError, match="twice"):
        outer_round(model_dir, [updates[0], updates[0]], spec, 1, 0, BASE)
    with pytest.raises(RoundError, match="not pool 2"):
        outer_round(model_dir, updates, spec, 2, 0, BASE)
    with pytest.raises(RoundError, match="no update"):
        outer_round(model_dir, [], spec, 1, 0, BASE)


def test_a_round_record_refuses_anything_but_its_own_shape() -> None:
    record = RoundRecord(1, 0, 1, BASE, ("01" * 32, "02" * 32), NODES, OuterSpec(), 1.5)
    assert RoundRecord.from_json(record.to_bytes()) == record
    for change in (
        {"version": 2},
        {"included": ["02" * 32, "01" * 32]},
        {"contributors": [NODES[0]]},
        {"extra": 1},
        {"kind": "other"},
        {"outer": {"lr": 0.7}},
        {"pool_id": "1"},
    ):
        with pytest.raises(RoundError):
            RoundRecord.from_json({**record.to_json(), **change})
    with pytest.raises(RoundError, match="not JSON"):
        RoundRecord.from_json(b"{")
