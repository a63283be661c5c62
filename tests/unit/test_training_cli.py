"""`proofpool training dataset` and `proofpool training spec` on a tiny Llama with a byte-level BPE
tokenizer trained here, and `proofpool pool create --spec` dispatching a training pool's spec to
`diloco://<sha256>` with that sha256 as its `specSha256` (the chain and the object store stood in
for: tests/integration/test_training_pool_create.py runs it against real ones)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from proofpool.cli.main import app
from proofpool.devnet.tiny_model import train_tokenizer
from typer.testing import CliRunner

from proofpool.core.diloco.spec import parse_diloco_spec
from proofpool.core.errors import ProofpoolError
from proofpool.core.spec import NO_SPEC, SpecError, canonical_json
from proofpool.envs import check_spec_commitment, spec_commitment
from proofpool.envs.spec import SpecMismatch
from proofpool.training.dataset import DatasetError, load_dataset, pack_texts, write_dataset

pytestmark = pytest.mark.timeout(120)

TEXTS = {
    "corpus/a.txt": "def add(a, b):\n    return a + b\n" * 6,
    "corpus/deep/b.txt": "The quick brown fox jumps over the lazy dog. " * 8,
    "corpus/deep/c.txt": "for i in range(10):\n    print(i * i)\n" * 5,
    "notes.md": "# Notes\nTraining pools run DiLoCo on a shared dataset.\n" * 4,
}
SEQ_LEN = 16


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama (hidden 32, 2 layers) with a byte-level BPE tokenizer of about 300 tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    directory = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(TEXTS.values(), 300), eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.save_pretrained(directory)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("texts")
    for name, text in TEXTS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def run(*args: str) -> str:
    """`proofpool *args`, which must succeed; its standard output."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return result.stdout


def refused(*args: str) -> ProofpoolError:
    """`proofpool *args`, which must end with a one-line `ProofpoolError`."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert isinstance(result.exception, ProofpoolError), f"{result.output}\n{result.exception!r}"
    return result.exception


def make_dataset(model: Path, corpus: Path, out: Path) -> str:
    """The sha256 `training dataset` prints for the whole corpus."""
    output = run(
        "training", "dataset", "--model", model, "--files", f"{corpus}/corpus/**/*.txt",
        "--files", corpus / "notes.md", "--seq-len", SEQ_LEN, "--out", out, "--name", "tiny-corpus",
    )  # fmt: skip
    return output.strip().splitlines()[-1]


# --------------------------------------------------------------------------- training dataset


def test_dataset_packs_every_file_in_path_order_with_the_models_tokenizer(
    model: Path, corpus: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    out = tmp_path / "data.safetensors"
    printed = make_dataset(model, corpus, out)

    assert printed == hashlib.sha256(out.read_bytes()).hexdigest()
    tokens = load_dataset(out, printed)
    ordered = [TEXTS[name] for name in sorted(TEXTS, key=lambda name: str(corpus / name))]
    expected = pack_texts(ordered, AutoTokenizer.from_pretrained(str(model)), SEQ_LEN)
    assert tokens.shape[1] == SEQ_LEN and tokens.shape[0] > 8
    assert torch.equal(tokens, expected)
    assert make_dataset(model, corpus, tmp_path / "again.safetensors") == printed  # same inputs, same bytes


def test_dataset_reports_its_rows_and_progress(model: Path, corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "data.safetensors"
    output = run(
        "training", "dataset", "--model", model, "--files", f"{corpus}/**/*", "--seq-len", SEQ_LEN, "--out", out
    )
    rows = load_dataset(out).shape[0]
    assert f"tokenizing {len(TEXTS)} files" in output
    assert f"{len(TEXTS)}/{len(TEXTS)} files tokenized" in output
    assert f"{rows:,} rows of {SEQ_LEN} tokens" in output


def test_dataset_refuses_a_pattern_that_names_no_file(model: Path, corpus: Path, tmp_path: Path) -> None:
    args = ["--model", model, "--seq-len", SEQ_LEN, "--out", tmp_path / "d.safetensors"]
    error = refused("training", "dataset", "--files", corpus / "notes.md", "--files", f"{corpus}/*.rst", *args)
    assert "names no file" in str(error) and "*.rst" in str(error)
    assert not (tmp_path / "d.safetensors").exists()


def test_dataset_refuses_a_file_that_is_not_text(model: Path, tmp_path: Path) -> None:
    (tmp_path / "blob.txt").write_bytes(b"\xff\xfe\x00binary")
    args = ["--seq-len", SEQ_LEN, "--out", tmp_path / "d.safetensors"]
    error = refused("training", "dataset", "--model", model, "--files", tmp_path / "blob.txt", *args)
    assert "is not UTF-8 text" in str(error)


def test_dataset_too_short_for_one_row_is_refused(model: Path, tmp_path: Path) -> None:
    (tmp_path / "short.txt").write_text("hi")
    args = ["--seq-len", 64, "--out", tmp_path / "d.safetensors"]
    error = refused("training", "dataset", "--model", model, "--files", tmp_path / "short.txt", *args)
    assert isinstance(error, DatasetError) and error.reason == "empty"


# --------------------------------------------------------------------------- training spec


@pytest.fixture(scope="module")
def dataset(model: Path, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dataset") / "data.safetensors"
    make_dataset(model, corpus, out)
    return out


def test_spec_with_defaults_describes_the_model_and_dataset(model: Path, dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "spec.json"
    printed = run("training", "spec", "--model", model, "--dataset", dataset, "--out", out).strip().splitlines()[-1]

    spec = parse_diloco_spec(out.read_bytes())
    assert out.read_bytes() == canonical_json(spec.to_json())  # written canonical: its hash is the printed one
    assert printed == spec.sha256() == hashlib.sha256(out.read_bytes()).hexdigest()
    config = json.loads((model / "config.json").read_text())
    assert (spec.model.architecture, spec.model.vocab_size) == ("LlamaForCausalLM", config["vocab_size"])
    assert (spec.model.uri, spec.model.manifest_sha256, spec.dataset.uri) == (None, None, None)
    rows = load_dataset(dataset).shape[0]
    assert spec.dataset.sha256 == hashlib.sha256(dataset.read_bytes()).hexdigest()
    assert (spec.dataset.sequences, spec.dataset.seq_len, spec.dataset.name) == (rows, SEQ_LEN, "tiny-corpus")
    assert spec.dataset.eval_sequences == max(1, rows // 20)
    assert (spec.inner.steps, spec.inner.batch_size, spec.inner.lr) == (20, 8, 1e-3)
    assert (spec.outer.lr, spec.outer.momentum, spec.outer.nesterov) == (0.7, 0.9, True)
    assert (spec.codec.name, spec.codec.block_size) == ("int8", 0)
    assert (spec.round.deadline_seconds, spec.round.min_contributors) == (600, 1)
    assert (spec.validation.sample_rate, spec.validation.tolerance) == (1.0, 0.05)


def test_spec_options_reach_the_spec(model: Path, dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "spec.json"
    run(
        "training", "spec", "--model", model, "--dataset", dataset, "--out", out,
        "--steps", 7, "--batch-size", 3, "--inner-lr", 0.002, "--warmup", 2, "--weight-decay", 0.1,
        "--grad-clip", 1.5, "--outer-lr", 0.5, "--momentum", 0.8, "--no-nesterov", "--clip-norm", 4,
        "--codec", "int8", "--block-size", 1024, "--deadline", 120, "--min-contributors", 2,
        "--sample-rate", 0.25, "--tolerance", 0.1, "--eval-sequences", 3,
    )  # fmt: skip
    spec = parse_diloco_spec(out.read_bytes())
    inner = spec.inner
    assert (inner.steps, inner.batch_size, inner.lr, inner.warmup_steps) == (7, 3, 0.002, 2)
    assert (inner.weight_decay, inner.grad_clip) == (0.1, 1.5)
    assert (spec.outer.lr, spec.outer.momentum, spec.outer.nesterov, spec.outer.clip_norm) == (0.5, 0.8, False, 4.0)
    assert (spec.codec.name, spec.codec.block_size) == ("int8", 1024)
    assert (spec.round.deadline_seconds, spec.round.min_contributors) == (120, 2)
    assert (spec.validation.sample_rate, spec.validation.tolerance, spec.dataset.eval_sequences) == (0.25, 0.1, 3)
    assert spec.work_units == 7 * 3 * SEQ_LEN


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--tolerance", "0"], "tolerance must be above 0"),
        (["--codec", "int4"], "codec.name must be one of"),
        (["--codec", "fp32", "--block-size", "64"], "block_size must be 0 for the fp32 codec"),
        (["--momentum", "1"], "momentum must be below 1"),
        (["--eval-sequences", "100000"], "eval_sequences must be in 0.."),
    ],
)
def test_spec_out_of_bounds_is_refused_and_nothing_written(
    model: Path, dataset: Path, tmp_path: Path, options: list[str], words: str
) -> None:
    out = tmp_path / "spec.json"
    error = refused("training", "spec", "--model", model, "--dataset", dataset, "--out", out, *options)
    assert isinstance(error, SpecError) and words in str(error)
    assert not out.exists()


def test_spec_refuses_a_dataset_the_models_vocabulary_cannot_embed(model: Path, tmp_path: Path) -> None:
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    foreign = tmp_path / "foreign.safetensors"
    write_dataset(torch.full((4, SEQ_LEN), vocab, dtype=torch.int32), foreign)
    error = refused("training", "spec", "--model", model, "--dataset", foreign, "--out", tmp_path / "s.json")
    assert isinstance(error, DatasetError) and error.reason == "token_out_of_range"


# --------------------------------------------------------------------------- pool create --spec


SHA = hashlib.sha256(b"a training spec").hexdigest()


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> list:
    """The `PoolParams` `pool create` sends, with the chain and the publication stood in for."""
    import proofpool.cli.pool as pool_cli

    sent: list = []
    client = SimpleNamespace(
        address="0x" + "11" * 20, pool=SimpleNamespace(create_pool=lambda params: sent.append(params) or (9, {}))
    )
    monkeypatch.setattr(pool_cli, "signer_client", lambda _key, _rpc: client)
    monkeypatch.setattr(pool_cli, "report_tx", lambda *_args: None)
    monkeypatch.setattr(pool_cli, "_publish_diloco_spec", lambda _data, _model, _dataset: f"diloco://{SHA}")
    monkeypatch.setattr(pool_cli, "_publish_spec", lambda *_args: pytest.fail("an RL spec was published"))
    return sent


@pytest.fixture
def spec_file(model: Path, dataset: Path, tmp_path: Path) -> Path:
    out = tmp_path / "diloco.json"
    run("training", "spec", "--model", model, "--dataset", dataset, "--out", out)
    return out


def test_pool_create_commits_a_training_spec_as_diloco_uri_and_spec_sha256(
    created: list, spec_file: Path, model: Path, dataset: Path
) -> None:
    run("pool", "create", "--spec", spec_file, "--model", model, "--dataset", dataset)
    [params] = created
    assert (params.model_uri, params.spec_sha256) == (f"diloco://{SHA}", bytes.fromhex(SHA))
    check_spec_commitment(params.model_uri, params.spec_sha256)


@pytest.mark.parametrize(
    ("drop", "add", "words"),
    [
        ("--dataset", [], "needs --dataset"),
        ("--model", [], "--spec needs --model"),
        (None, ["--indices", "indices.json"], "names no index list"),
    ],
)
def test_pool_create_with_a_training_spec_needs_its_model_and_dataset_only(
    created: list, spec_file: Path, model: Path, dataset: Path, drop: str | None, add: list[str], words: str
) -> None:
    options = {"--spec": spec_file, "--model": model, "--dataset": dataset}
    args = [str(part) for name, value in options.items() if name != drop for part in (name, value)]
    result = CliRunner().invoke(app, ["pool", "create", *args, *add])
    assert result.exit_code == 2 and words in " ".join(result.output.split()), result.output
    assert created == []


def test_pool_create_refuses_a_dataset_with_an_rl_spec(
    created: list, model: Path, dataset: Path, tmp_path: Path
) -> None:
    rl_spec = tmp_path / "rl.json"
    rl_spec.write_text(json.dumps({"spec_version": 1}))  # no "kind": an RL pool's spec
    result = CliRunner().invoke(
        app, ["pool", "create", "--spec", str(rl_spec), "--model", str(model), "--dataset", str(dataset)]
    )
    assert result.exit_code == 2 and "--dataset goes with a training pool's spec only" in result.output
    assert created == []


# --------------------------------------------------------------------------- the spec commitment


def test_a_diloco_uri_commits_to_the_hash_it_names() -> None:
    assert spec_commitment(f"diloco://{SHA}") == bytes.fromhex(SHA)
    assert spec_commitment(f"DILOCO://{SHA.upper()}") == bytes.fromhex(SHA)
    check_spec_commitment(f"diloco://{SHA}", bytes.fromhex(SHA))


@pytest.mark.parametrize(
    ("uri", "on_chain", "words"),
    [
        (f"diloco://{SHA}", NO_SPEC, "no spec (specSha256 is zero)"),
        (f"diloco://{SHA}", b"\x01" * 32, "specSha256 0x" + "01" * 32),
        ("devnet://m", bytes.fromhex(SHA), "names no spec"),
    ],
)
def test_a_training_pool_whose_commitments_disagree_is_refused(uri: str, on_chain: bytes, words: str) -> None:
    with pytest.raises(SpecMismatch, match="refused, nobody works for or judges this pool") as mismatch:
        check_spec_commitment(uri, on_chain)
    assert words in str(mismatch.value)


def test_a_malformed_diloco_uri_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="not a training pool URI"):
        spec_commitment("diloco://abc")
