"""Which pools a validator judges and an indexer dispatches validation tasks for.

Creating a pool is free and permissionless, and a pool's manager publishes its checkpoints: a
validator that served every pool could be made to download any pool's files and load any
checkpoint, evicting the models of the pools it is there for. So validators and the indexer's
dispatch serve an allowlist, of pool ids or of pool managers. With neither, every pool is served
on the devnet chain only; anywhere else that is a configuration error, said at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from eth_utils import to_checksum_address

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.networks import DEVNET_CHAIN_ID


@dataclass(frozen=True)
class ServedPools:
    """An allowlist of pools (by id) and of pool managers (by address); `everything` serves all."""

    pool_ids: frozenset[int] = frozenset()
    managers: frozenset[str] = frozenset()
    everything: bool = False

    @classmethod
    def configure(cls, pool_ids: Iterable[int], managers: Iterable[str], chain_id: int) -> ServedPools:
        """The allowlist of `Settings.served_pools` / `served_managers` on `chain_id`."""
        ids = frozenset(int(p) for p in pool_ids)
        owners = frozenset(to_checksum_address(m) for m in managers)
        if ids or owners:
            return cls(ids, owners)
        if chain_id == DEVNET_CHAIN_ID:
            return cls(everything=True)
        raise ConfigError(
            f"chain {chain_id} is not the devnet: say which pools to serve with PROOFPOOL_SERVED_POOLS "
            "(pool ids) or PROOFPOOL_SERVED_MANAGERS (pool manager addresses), comma-separated; pools "
            "are permissionless, and serving every pool lets anyone make this process download theirs"
        )

    def allows(self, pool_id: int, manager_of: Callable[[int], str | None]) -> bool:
        """Whether pool `pool_id` is served. `manager_of` gives a pool's manager (None when not known
        yet); it is asked only when the pool id alone does not decide, so a validator judging a pool
        served by id (or on the devnet) makes no lookup."""
        if self.everything or pool_id in self.pool_ids:
            return True
        if not self.managers:
            return False
        manager = manager_of(pool_id)
        return manager is not None and to_checksum_address(manager) in self.managers

    def describe(self) -> str:
        """For start-up lines: what is served."""
        if self.everything:
            return "every pool (devnet)"
        parts = []
        if self.pool_ids:
            parts.append("pools " + ", ".join(str(p) for p in sorted(self.pool_ids)))
        if self.managers:
            parts.append("pools managed by " + ", ".join(sorted(self.managers)))
        return " and ".join(parts)
