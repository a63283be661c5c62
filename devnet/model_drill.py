"""Cheat drills on a pool that runs a task environment on a Hugging Face model (a spec pool).

The cheats of `proofpool.devnet.adversary` need two things the market itself never does: the
answer a perfect policy writes (`edit-tokens`) and a model of the same shape with other weights
(`other-model`). The arithmetic environment has both built in; `ModelDrill` provides them for any
`proofpool.envs.tokenized.ModelEnvironment`:

- the reference answer is the task environment's `reference_completion`, tokenized with the pool's
  tokenizer (no special tokens added) and ended with the model's end-of-turn stop id;
- the other model is the base model's architecture and tokenizer with weights drawn from a seed,
  written next to the base model the first time a cheater asks for it (seconds, even for a
  135 M-parameter model: it is an initialization, not a training run).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from proofpool.core.environment import Progress
from proofpool.core.errors import ConfigError

if TYPE_CHECKING:
    from proofpool.envs.tokenized import ModelEnvironment, TokenizedTaskset

TOKENIZER_FILES: Final = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
    "vocab.json",
    "merges.txt",
)
"""What the variant copies from the base model besides the config: everything but the weights."""
COMPLETE_MARK: Final = "proofpool-variant.json"


class ModelDrill:
    """`proofpool.devnet.adversary.DrillEnvironment` of a model environment."""

    def __init__(self, environment: ModelEnvironment) -> None:
        self.environment = environment
        self.taskset: TokenizedTaskset = environment.taskset

    def reference_completion(self, problem_id: str) -> tuple[int, ...]:
        """The environment's reference answer for the problem as completion ids, ending with the
        model's end-of-turn id; `ConfigError` when the environment has no reference for it."""
        taskset = self.taskset
        text = taskset.environment.reference_completion(taskset.index(problem_id))
        if text is None:
            raise ConfigError(f"the {self.environment.name} environment has no reference answer for {problem_id}")
        ids = tuple(int(i) for i in taskset.tokenizer.encode(text, add_special_tokens=False))
        return (*ids, end_of_turn(taskset))

    def variant_model(self, seed: int, progress: Progress | None = None) -> Path:
        """The base model's architecture and tokenizer with weights initialized from `seed`."""
        base = self.environment.model_dir
        target = base.parent / f"{base.name}.variant-seed{seed}"
        if (target / COMPLETE_MARK).is_file():
            return target
        if progress is not None:
            progress(f"drawing a variant of {base.name} from seed {seed}")
        build_variant(base, target, seed)
        return target


def end_of_turn(taskset: TokenizedTaskset) -> int:
    """The stop id a reference answer ends with: the tokenizer's end-of-sequence token when it is a
    stop id (the chat's end of turn), else the smallest stop id."""
    eos = taskset.tokenizer.eos_token_id
    return int(eos) if eos is not None and int(eos) in taskset.stop_ids else min(taskset.stop_ids)


def copy_tokenizer(base: Path, target: Path) -> None:
    """Copy `base`'s tokenizer, chat template and generation config (`TOKENIZER_FILES`) into `target`."""
    for name in TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copy2(base / name, target / name)


def build_variant(base: Path, target: Path, seed: int) -> Path:
    """Write to `target` a model with `base`'s config and tokenizer files and weights drawn from
    `seed`, in `base`'s dtype; written to a scratch directory first, so a half-built variant is
    never used."""
    import json

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(base))
    dtype = getattr(config, "torch_dtype", None) or getattr(config, "dtype", None) or torch.float32
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
        model.to(dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype)))
        model.save_pretrained(scratch)
        copy_tokenizer(base, scratch)
        (scratch / COMPLETE_MARK).write_text(json.dumps({"base": str(base), "seed": seed}))
        if target.exists():
            shutil.rmtree(target)
        scratch.rename(target)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return target
