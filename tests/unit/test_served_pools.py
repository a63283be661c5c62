"""The allowlist of pools validators and the indexer serve."""

from __future__ import annotations

import pytest

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.networks import DEVNET_CHAIN_ID
from proofpool.infra.served import ServedPools

MANAGER = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"


def test_pools_by_id_or_by_manager() -> None:
    served = ServedPools.configure([3], [MANAGER.lower()], chain_id=1)
    managers = {7: MANAGER, 9: "0x" + "11" * 20}
    assert served.allows(3, managers.get)
    assert served.allows(7, managers.get)
    assert not served.allows(9, managers.get)
    assert not served.allows(8, managers.get)  # manager not known (yet): not served
    assert served.describe() == f"pools 3 and pools managed by {MANAGER}"


def test_no_list_serves_everything_on_the_devnet_only() -> None:
    devnet = ServedPools.configure([], [], chain_id=DEVNET_CHAIN_ID)
    assert devnet.allows(123, {}.get) and devnet.describe() == "every pool (devnet)"
    with pytest.raises(ConfigError, match="PROOFPOOL_SERVED_POOLS"):
        ServedPools.configure([], [], chain_id=1)
