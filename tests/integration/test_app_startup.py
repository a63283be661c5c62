"""Start-up of the backend app: the heap it built while starting is frozen out of the cyclic
garbage collector, so full collections stop pausing the event loop for 100+ ms (the heartbeat
p99 in `bench/heartbeat.py`)."""

from __future__ import annotations

import gc

from fastapi.testclient import TestClient
from proofpool.backend.app import create_app

from proofpool.infra.config import Settings


def test_startup_freezes_the_heap_it_built(api_settings: Settings) -> None:
    gc.unfreeze()  # an earlier test's app may have frozen this process's heap already
    assert gc.get_freeze_count() == 0
    with TestClient(create_app(api_settings)) as client:
        frozen = gc.get_freeze_count()
        assert client.get("/v1/nodes/0x" + "00" * 20).status_code == 404  # the app serves after freezing
    # everything imported and built by then: web3, pydantic models, the pools (far over 10,000 objects)
    assert frozen > 10_000
