"""Chains the code treats differently."""

from __future__ import annotations

from typing import Final

DEVNET_CHAIN_ID: Final = 31337
"""anvil's chain id: the devnet, the only chain with a faucet, anvil's public keys and the
devnet's default credentials (`proofpool.infra.offdevnet` refuses them anywhere else)."""
