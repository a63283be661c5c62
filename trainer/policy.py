"""The policy being trained: the model and its optimizer, whole in one process or FSDP-sharded
across the ranks of `torch.distributed`.

Publishing, pruning and the resumable state want the whole model and a plain optimizer state
dict; FSDP holds a shard of each on every rank. So under FSDP rank 0 keeps a *mirror*: an
unsharded copy of the model with its own AdamW, refreshed from the shards after each step
(`sync`, a collective). Everything downstream (`publish_checkpoint`, `save_state`) reads the
mirror and is the single-process code unchanged, and the saved state has the single-process
format, so a trainer can be restarted with or without torchrun. In one process the mirror is
the trained model itself and `sync` does nothing: single-process behaviour is what it was.

Rank 0 starts from a model it loaded (and the saved state it applied); the other ranks build the
same architecture from its config and receive the weights and optimizer state from rank 0
(`broadcast_from_rank0`), so they never touch the chain, the store or the state directory.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from proofpool.trainer.batch import BehaviorKey
from proofpool.trainer.config import GrpoConfig
from proofpool.trainer.step import StepMetrics, grpo_step, make_optimizer
from proofpool.trainer.world import SINGLE, World, shard_model

from proofpool.core.rollout import RolloutSample

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel


@dataclass(frozen=True)
class Blueprint:
    """What ranks > 0 need from rank 0 to build their shard: the architecture, and whether an
    optimizer state follows the weights (a fresh run, or one whose steps all dropped every group,
    has none)."""

    config: PretrainedConfig
    has_optimizer_state: bool


@dataclass
class Policy:
    """What one rank trains, plus (rank 0) the whole model that gets published and saved."""

    world: World
    model: torch.nn.Module
    """Trained by `grpo_step`: the mirror itself in one process, this rank's FSDP shard otherwise."""
    optimizer: torch.optim.Optimizer
    mirror: PreTrainedModel | None
    """Rank 0: the whole model with the weights of the last `sync`; None on other ranks."""
    mirror_optimizer: torch.optim.Optimizer | None

    @classmethod
    def whole(cls, model: PreTrainedModel, cfg: GrpoConfig, optimizer_state: dict[str, Any] | None) -> Policy:
        """The single-process policy: `model` (weights already loaded) trained in place, with AdamW
        restored from `optimizer_state` (the saved state) when there is one."""
        optimizer = make_optimizer(model, cfg)
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
        model.train()
        return cls(SINGLE, model, optimizer, model, optimizer)

    def blueprint(self) -> Blueprint:
        """What rank 0 broadcasts before `shard`, for the other ranks' `follow`."""
        return Blueprint(self.whole_model.config, bool(self.optimizer.state))

    def shard(self, world: World, cfg: GrpoConfig) -> Policy:
        """Rank 0: this whole policy spread over `world` with FSDP, the whole model kept as the
        mirror (collective: the other ranks call `follow` at the same time). Itself in one process."""
        if world.size == 1:
            return self
        whole = self.whole_model
        sharded = shard_model(copy.deepcopy(whole), world)
        optimizer = make_optimizer(sharded, cfg)
        _receive_weights(sharded, optimizer, whole.state_dict(), _fqn_optimizer_state(whole, self.optimizer))
        return Policy(world, sharded, optimizer, whole, self.optimizer)

    @classmethod
    def follow(cls, world: World, blueprint: Blueprint, cfg: GrpoConfig) -> Policy:
        """Ranks > 0: the architecture of rank 0's model, weights (and the optimizer state when
        there is one) broadcast from rank 0 by the matching `shard`."""
        from transformers import AutoModelForCausalLM

        blank = AutoModelForCausalLM.from_config(blueprint.config).to(torch.float32)  # weights overwritten below
        model = shard_model(blank, world)
        model.train()
        optimizer = make_optimizer(model, cfg)
        _receive_weights(model, optimizer, {}, {} if blueprint.has_optimizer_state else None)
        return cls(world, model, optimizer, None, None)

    def step(
        self,
        rows: Sequence[RolloutSample],
        cfg: GrpoConfig,
        behavior: Mapping[BehaviorKey, Sequence[float]] | None = None,
    ) -> StepMetrics:
        """One GRPO step on `rows` (every rank passes the same rows; each trains its share)."""
        return grpo_step(self.model, self.optimizer, rows, cfg, world=self.world, behavior=behavior)  # type: ignore[arg-type]

    def sync(self) -> None:
        """Make rank 0's mirror hold the trained weights and optimizer state (collective)."""
        if self.world.size == 1:
            return
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
            set_optimizer_state_dict,
        )

        gather = StateDictOptions(full_state_dict=True, cpu_offload=True)  # whole tensors, on rank 0 only
        weights = get_model_state_dict(self.model, options=gather)
        optimizer_state = get_optimizer_state_dict(self.model, self.optimizer, options=gather)
        if self.mirror is None or self.mirror_optimizer is None:
            return
        self.mirror.load_state_dict(weights)
        set_optimizer_state_dict(
            self.mirror, self.mirror_optimizer, optimizer_state, options=StateDictOptions(full_state_dict=True)
        )

    @property
    def whole_model(self) -> PreTrainedModel:
        """The whole model as of the last `sync`, what gets published (rank 0 only)."""
        if self.mirror is None:
            raise RuntimeError("only rank 0 holds the whole model")
        return self.mirror

    def state_dicts(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """(weights, optimizer state) of the mirror in the single-process format (rank 0 only)."""
        if self.mirror is None or self.mirror_optimizer is None:
            raise RuntimeError("only rank 0 holds the whole model")
        return self.mirror.state_dict(), self.mirror_optimizer.state_dict()


def _fqn_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
    """The optimizer state keyed by parameter name (what FSDP loads), None when it is empty."""
    if not optimizer.state:
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))


def _receive_weights(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    weights: dict[str, torch.Tensor],
    optimizer_state: dict[str, Any] | None,
) -> None:
    """Rank 0's whole weights (and optimizer state, unless None) into every rank's shards (collective)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, weights, options=options)
    if optimizer_state is not None:
        set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)
