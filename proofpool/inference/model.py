"""Load any Hugging Face causal LM directory for recomputation (validators) and training.

The directory is whatever a pool's environment or a published checkpoint holds: weights,
`config.json` and tokenizer files; the model class comes from its config (`AutoModelForCausalLM`),
so nothing here knows which model a pool runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from proofpool.core.errors import ProofpoolError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

Precision = Literal["bf16", "fp32"]


class ModelNotFound(ProofpoolError):
    """A directory does not hold a model (no config.json)."""


def torch_dtype(precision: Precision) -> torch.dtype:
    """The torch dtype of a precision name."""
    import torch

    return {"bf16": torch.bfloat16, "fp32": torch.float32}[precision]


def load_model(path: Path, precision: Precision = "fp32") -> PreTrainedModel:
    """Load the causal LM saved in `path` in eval mode, in the given precision."""
    from transformers import AutoModelForCausalLM

    if not (Path(path) / "config.json").is_file():
        raise ModelNotFound(f"no model in {path} (config.json missing)")
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype(precision))
    return model.eval()
