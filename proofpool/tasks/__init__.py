"""Verifiable tasks: problem generators and the reward functions validators recompute."""
