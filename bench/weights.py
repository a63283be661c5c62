"""Weight changes the detection benches make a cheater's model with."""

from __future__ import annotations

import torch


def int8_round_trip(model: torch.nn.Module) -> None:
    """Every linear layer of `model` quantized to int8 per output channel (symmetric, absmax) and
    dequantized, in place: the cheap copy a node might serve instead of the published weights."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                w = module.weight
                step = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127
                w.copy_((w / step).round().clamp(-127, 127) * step)
