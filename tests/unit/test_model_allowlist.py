"""Which models every role can run and check: the architecture allowlist, and the modules found
through transformers' accessors rather than attribute names (decoder, head, FSDP blocks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from proofpool.devnet.tiny_model import build_tiny_qwen3
from proofpool.trainer.world import unsplit_blocks
from proofpool_arithmetic.cache import ensure_devnet_model

from proofpool.inference.model import (
    ModelNotFound,
    UnsupportedArchitecture,
    check_architecture,
    decoder_and_head,
    load_model,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3(tmp_path_factory.mktemp("qwen"))


def test_allowlisted_architectures_load_and_expose_decoder_head_and_blocks(qwen: Path) -> None:
    for path, architecture, block in [
        (qwen, "Qwen3ForCausalLM", "Qwen3DecoderLayer"),
        (ensure_devnet_model(progress=None), "LlamaForCausalLM", "LlamaDecoderLayer"),
    ]:
        assert check_architecture(path) == architecture
        model = load_model(path, "fp32")
        decoder, head = decoder_and_head(model)
        assert head.weight.shape[0] == model.config.vocab_size
        blocks = unsplit_blocks(model)
        assert len(blocks) == model.config.num_hidden_layers and {type(b).__name__ for b in blocks} == {block}
        assert all(any(b is layer for layer in decoder.modules()) for b in blocks)


@pytest.mark.parametrize("architectures", [["GPT2LMHeadModel"], ["Gemma2ForCausalLM"], [], None, ["A", "B"]])
def test_other_architectures_are_refused_with_the_allowlist(tmp_path: Path, architectures: list[str] | None) -> None:
    config = {"model_type": "x"} if architectures is None else {"architectures": architectures}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedArchitecture, match="Qwen3ForCausalLM"):
        check_architecture(tmp_path)
    with pytest.raises(UnsupportedArchitecture):
        load_model(tmp_path)


def test_a_directory_without_a_readable_config_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match=r"config\.json missing"):
        check_architecture(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelNotFound, match="not a JSON model config"):
        check_architecture(tmp_path)


def test_fsdp_needs_blocks_the_model_names() -> None:
    import torch

    with pytest.raises(ValueError, match="_no_split_modules"):
        unsplit_blocks(torch.nn.Linear(2, 2))
