"""The backend's memory of used nonces (Redis), and the rule that keeps it sound when Redis
loses keys.

A nonce is remembered for `TimeWindow.nonce_ttl` seconds: as long as its request's timestamp
can pass the window check. That alone is not enough: a Redis that was flushed, restarted
without persistence or failed over to a replica has forgotten nonces whose requests are still
inside the window, so a captured request could be replayed. Hence an epoch: the key
`proofpool:nonce-epoch` holds the server time (unix seconds) since which the store is complete.
The backend creates it at start-up when it is missing, and every claim re-creates it (as "now")
when it has vanished: losing the nonces loses the epoch with them, so its absence is the evidence.

The rule: a request timestamped before `epoch + max_ahead` is refused. A request the store
accepted before the loss was accepted at some server time s < epoch with timestamp
t <= s + max_ahead < epoch + max_ahead, so it cannot pass again; a request timestamped at or
after `epoch + max_ahead` cannot have been accepted before the epoch, so if its nonce was used,
the store holds it. The refusal is 401 `predates_nonce_store` with a Retry-After header: a
client whose request was fresh (signed in the `max_ahead` s after a first start or a loss) signs
it again after that many seconds and gets through (`proofpool.infra.http.signed_client` does); a
replayed request cannot be signed again.

Requirements (docs/api-nodes.md): Redis must not evict keys (`maxmemory-policy noeviction`, its
default), since an evicted nonce is forgotten without the epoch going with it; and the clocks of
the backend hosts sharing one Redis must agree (NTP), since the epoch is written in one host's
time and compared in another's.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from redis import exceptions as redis_errors
from redis.asyncio import Redis

from proofpool.core.auth.signed_request import AuthError, SignedHeaders, TimeWindow
from proofpool.core.errors import ServiceUnavailable

log = logging.getLogger(__name__)

EPOCH_KEY = "proofpool:nonce-epoch"
"""Unix seconds (server clock) since which every used nonce is in the store; no expiry."""
NONCE_KEY_PREFIX = "nonce:"

CLAIM_LUA = """
local epoch = tonumber(redis.call('GET', KEYS[1]))
local created = 0
if not epoch then
  epoch = tonumber(ARGV[1])
  redis.call('SET', KEYS[1], ARGV[1])
  created = 1
end
if tonumber(ARGV[2]) < epoch + tonumber(ARGV[3]) then
  return {0, tostring(epoch), created}
end
if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[4]) then
  return {2, tostring(epoch), created}
end
local tag = ''
if ARGV[5] and ARGV[5] ~= '' then
  tag = redis.call('GET', KEYS[3])
  if not tag then
    tag = ARGV[5]
    redis.call('SET', KEYS[3], tag, 'EX', ARGV[6])
  end
end
if ARGV[7] and ARGV[7] ~= '' then
  redis.call('ZADD', KEYS[4], ARGV[7], ARGV[8])
end
return {1, tostring(epoch), created, tag}
"""
"""KEYS: epoch, nonce, tag, sorted set. ARGV: now, timestamp, max_ahead, ttl, new tag, tag ttl,
score, member. Returns {outcome, epoch, created[, tag]}: outcome 0 = predates the epoch, 1 = fresh
(now recorded), 2 = replayed; created = 1 when the epoch had vanished and was set to now. Only for
a fresh nonce, and only when asked (a non-empty new tag; a non-empty score): reads the tag key,
setting it to the new tag when it is missing, and adds the member to the sorted set. One script, so
the epoch check and the nonce write are atomic, and a heartbeat's nonce, context tag and liveness
cost one round trip (`proofpool.backend.orchestrator.heartbeat`)."""
PREDATES, FRESH, REPLAYED = 0, 1, 2


@dataclass(frozen=True)
class Alongside:
    """What one claim also does once the nonce proved fresh, in the same round trip: read the tag
    at `tag_key` (set to `new_tag` for `tag_ttl` s when missing) and, when `zadd_key` is set, add
    `member` with `score` to that sorted set. Neither happens for a refused request."""

    tag_key: str
    new_tag: str
    tag_ttl: int
    zadd_key: str | None = None
    member: str = ""
    score: float = 0.0


class NonceStore:
    """Used nonces of signed requests in Redis, with the epoch rule of this module."""

    def __init__(self, redis: Redis, window: TimeWindow) -> None:
        self.redis, self.window = redis, window
        self._claim = redis.register_script(CLAIM_LUA)

    async def open(self, now: float) -> float:
        """Start-up: record the epoch if Redis has none (first start, or the keys were lost while
        no backend ran); returns the epoch. Warns when Redis may evict nonces."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(EPOCH_KEY, repr(now), nx=True)
            pipe.get(EPOCH_KEY)
            created, value = await pipe.execute()
        epoch = float(value)
        if created:
            log.warning(
                "nonce store epoch set to now: signed requests timestamped before %d are refused "
                "(first start, or Redis lost its keys)",
                math.ceil(epoch + self.window.max_ahead),
            )
        await self._warn_if_evicting()
        return epoch

    async def claim(self, signed: SignedHeaders, now: float, alongside: Alongside | None = None) -> bytes | None:
        """Record the request's nonce as used; `AuthError` if it was used before or if its
        timestamp predates what the store can vouch for (with the seconds to wait before signing
        again as `retry_after`: counted from the request's own timestamp, so a client whose clock
        lags the server's still waits long enough). With `alongside`, also does what it asks once
        the nonce is fresh and returns the tag (None without)."""
        key = f"{NONCE_KEY_PREFIX}{signed.address}:{signed.nonce}"
        keys = [EPOCH_KEY, key]
        args: list[str | int | float] = [repr(now), signed.timestamp, self.window.max_ahead, self.window.nonce_ttl]
        if alongside is not None:
            keys += [alongside.tag_key, alongside.zadd_key or alongside.tag_key]
            args += [alongside.new_tag, alongside.tag_ttl]
            args += [repr(alongside.score), alongside.member] if alongside.zadd_key else ["", ""]
        try:
            outcome, epoch_text, created, *tag = await self._claim(keys=keys, args=args)
        except (redis_errors.RedisError, OSError) as exc:
            raise ServiceUnavailable(f"Redis unreachable for the nonce store: {exc.__class__.__name__}") from exc
        if int(created):
            log.warning("nonce store epoch was missing (Redis lost its keys): set to now, %.0f", now)
        if int(outcome) == FRESH:
            return tag[0] if alongside is not None else None
        if int(outcome) == REPLAYED:
            raise AuthError("replayed_nonce", "this nonce was used before")
        valid_from = math.ceil(float(epoch_text) + self.window.max_ahead)
        raise AuthError(
            "predates_nonce_store",
            f"timestamp {signed.timestamp} is before {valid_from}, since when the nonce store can tell a replay "
            "(the backend's Redis started empty or lost its keys); sign the request again",
            retry_after=max(0, valid_from - signed.timestamp),
        )

    async def _warn_if_evicting(self) -> None:
        """Log a warning when Redis would evict keys under memory pressure: an evicted nonce makes
        a replay possible. CONFIG may be disabled (managed Redis): then say nothing."""
        try:
            policy = (await self.redis.config_get("maxmemory-policy")).get("maxmemory-policy")
        except (redis_errors.RedisError, OSError):
            return
        if isinstance(policy, bytes):
            policy = policy.decode()
        if policy and policy != "noeviction":
            log.warning(
                "Redis maxmemory-policy is %s: nonces may be evicted and signed requests replayed; "
                "use noeviction for the backend's Redis",
                policy,
            )
