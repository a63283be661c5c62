"""Load any supported Hugging Face causal LM directory for recomputation (validators) and training.

The directory is whatever a pool's environment or a published checkpoint holds: weights,
`config.json` and tokenizer files; the model class comes from its config (`AutoModelForCausalLM`),
so nothing here knows which model a pool runs.

Which architectures a pool may run is an allowlist, not "whatever loads": TOPLOC commits to the
final norm's output and the sampling check to the logits computed from it, so every role must find
the same two modules in its engine (vLLM on workers, transformers on validators), and the
architecture must compute logits as a plain projection of that state (no soft-capping, no scaling
that one engine applies and the other does not). The decoder families listed here share that
layout (`model.norm`, then `lm_head`) in both engines; adding one means checking it in both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from proofpool.core.errors import ProofpoolError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

Precision = Literal["bf16", "fp32"]


SUPPORTED_ARCHITECTURES: Final = frozenset(
    {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}
)
"""`config.json` architectures every role can run and check (see the module docstring)."""


class ModelNotFound(ProofpoolError):
    """A directory does not hold a model (no config.json)."""


class UnsupportedArchitecture(ProofpoolError):
    """A model's architecture is not on the allowlist (`SUPPORTED_ARCHITECTURES`)."""


def model_config(path: Path) -> dict[str, Any]:
    """The parsed `config.json` of a model directory (`ModelNotFound` if there is none or it is not JSON)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        raise ModelNotFound(f"no model in {path} (config.json missing)")
    try:
        parsed = json.loads(config.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelNotFound(f"{config} is not a JSON model config: {exc}") from exc
    if not isinstance(parsed, dict):
        raise ModelNotFound(f"{config} is not a JSON object")
    return parsed


def check_architecture(path: Path) -> str:
    """The model's architecture name, if the allowlist has it; else `UnsupportedArchitecture`."""
    architectures = model_config(path).get("architectures") or []
    if len(architectures) != 1 or architectures[0] not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedArchitecture(
            f"model in {path} has architecture {architectures or 'unknown'}; proofpool runs "
            f"{', '.join(sorted(SUPPORTED_ARCHITECTURES))} (their final norm and logits are checked the "
            f"same way in vLLM and transformers)"
        )
    return str(architectures[0])


def torch_dtype(precision: Precision) -> torch.dtype:
    """The torch dtype of a precision name."""
    import torch

    return {"bf16": torch.bfloat16, "fp32": torch.float32}[precision]


def load_model(path: Path, precision: Precision = "fp32") -> PreTrainedModel:
    """Load the causal LM saved in `path` in eval mode, in the given precision."""
    from transformers import AutoModelForCausalLM

    check_architecture(path)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype(precision))
    return model.eval()


def decoder_and_head(model: PreTrainedModel) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The decoder stack (its output is the final norm's) and the output projection of a causal LM.

    Through transformers' own accessors (`get_decoder`, `get_output_embeddings`), not attribute
    names, so the recomputation does not depend on how an architecture names its modules.
    """
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    if decoder is None or head is None:
        raise UnsupportedArchitecture(f"{type(model).__name__} exposes no decoder or no output embeddings")
    return decoder, head
