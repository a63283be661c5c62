"""Validator-side inference: recompute activations and logits, and judge one sample."""
