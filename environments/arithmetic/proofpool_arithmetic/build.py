"""Build the devnet policy: a seeded tiny Llama saved in a directory vLLM can load.

The devnet cannot download a model, so it makes one: `init_model` draws the weights of a
`transformers.LlamaForCausalLM` from a seed and saves them with the tokenizer as a Hugging Face
model directory (safetensors + config.json + generation_config.json + tokenizer files). The
same directory serves vLLM on workers, plain PyTorch on validators and the trainer.

Weights are stored in bf16, the dtype vLLM runs and the proofs commit to: a validator that
recomputes in fp32 then upcasts the very same weights instead of using fp32 weights the worker
never had. A small JSON manifest (`proofpool-model.json`) records the settings the directory
was built and warmed with, so callers can tell whether it already is what they want.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from proofpool_arithmetic.tokenizer import BOS_ID, EOS_ID, MAX_LENGTH, PAD_ID, VOCAB, VOCAB_SIZE, save_tokenizer

if TYPE_CHECKING:
    from transformers import LlamaConfig, LlamaForCausalLM

MANIFEST_NAME: Final = "proofpool-model.json"
BUILD_VERSION: Final = 1
"""Bump when the builder or warm-up changes what a given set of settings produces."""


@dataclass(frozen=True)
class ModelSpec:
    """Everything that determines the initial weights of the devnet model."""

    seed: int = 0
    """Seed of the weight initialization: a different seed is a different model."""
    hidden: int = 128
    """Width of the residual stream (also the width of the TOPLOC activations)."""
    layers: int = 4
    """Number of decoder layers."""
    heads: int = 4
    """Attention heads; hidden / heads must be a head size vLLM's CPU backend supports (>= 32)."""
    intermediate: int | None = None
    """MLP width; None means 4 x hidden."""
    max_positions: int = MAX_LENGTH
    """Longest sequence (prompt + completion) the model serves."""

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}")

    def llama_config(self) -> LlamaConfig:
        """The `LlamaConfig` of this spec, with the devnet tokenizer's special ids."""
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=VOCAB_SIZE,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate or 4 * self.hidden,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.heads,
            max_position_embeddings=self.max_positions,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            bos_token_id=BOS_ID,
            eos_token_id=EOS_ID,
            pad_token_id=PAD_ID,
            dtype="bfloat16",
        )


@dataclass(frozen=True)
class ModelManifest:
    """What a model directory holds: its spec, and the warm-up settings if it was warmed."""

    spec: ModelSpec
    warmup: dict[str, Any] | None = None
    """`asdict` of the warm-up settings applied to the freshly initialized weights, if any."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Figures measured after the last build step (loss, accuracy), for people, not for logic."""
    build_version: int = BUILD_VERSION
    vocab: tuple[str, ...] = VOCAB

    def to_json(self) -> str:
        """Stable JSON (sorted keys) so equal manifests serialize equally."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ModelManifest:
        """Parse a manifest written by `to_json`."""
        raw = json.loads(text)
        return cls(
            spec=ModelSpec(**raw["spec"]),
            warmup=raw.get("warmup"),
            metrics=raw.get("metrics", {}),
            build_version=raw.get("build_version", 0),
            vocab=tuple(raw.get("vocab", ())),
        )


def settings_digest(*parts: object) -> str:
    """sha256 hex of the canonical JSON of `parts` (dataclasses as dicts) plus build version + vocab."""
    payload: list[object] = [BUILD_VERSION, list(VOCAB)]
    for part in parts:
        payload.append(asdict(part) if is_dataclass(part) and not isinstance(part, type) else part)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def read_manifest(path: Path) -> ModelManifest | None:
    """The manifest of the model in `path`, or None if there is none (or it cannot be read)."""
    try:
        return ModelManifest.from_json((path / MANIFEST_NAME).read_text())
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def create_model(spec: ModelSpec) -> LlamaForCausalLM:
    """A freshly initialized fp32 model for `spec`, drawn from `spec.seed`.

    The global torch RNG is forked, so building a model neither depends on nor disturbs the
    caller's random state. Weights are rounded to bf16 right away: the saved model (bf16) and
    this in-memory one are then the same function.
    """
    import torch
    from transformers import LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = LlamaForCausalLM(spec.llama_config())
    model = model.to(torch.bfloat16).to(torch.float32)
    model.generation_config.pad_token_id = PAD_ID
    return model


def save_model(model: LlamaForCausalLM, path: Path, manifest: ModelManifest) -> Path:
    """Save `model` (as bf16 safetensors), the tokenizer and `manifest` into `path`."""
    import torch

    path.mkdir(parents=True, exist_ok=True)
    dtype = next(model.parameters()).dtype
    model.to(torch.bfloat16)  # in place: nn.Module.to converts the module itself
    model.config.dtype = torch.bfloat16
    try:
        model.save_pretrained(str(path), safe_serialization=True)
    finally:
        model.to(dtype)  # hand the caller's model back in its own dtype
    save_tokenizer(path)
    (path / MANIFEST_NAME).write_text(manifest.to_json())
    return path


def init_model(
    path: Path,
    seed: int = 0,
    hidden: int = 128,
    layers: int = 4,
    heads: int = 4,
    intermediate: int | None = None,
    max_positions: int = MAX_LENGTH,
) -> Path:
    """Initialize a seeded devnet model and save it (untrained) into `path`."""
    spec = ModelSpec(
        seed=seed,
        hidden=hidden,
        layers=layers,
        heads=heads,
        intermediate=intermediate,
        max_positions=max_positions,
    )
    return save_model(create_model(spec), Path(path), ModelManifest(spec=spec))
