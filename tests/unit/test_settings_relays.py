"""`PROOFPOOL_CHECKPOINT_RELAYS`: comma-separated relay base URLs in the environment, checked when
the settings are read, so a typo stops a worker or validator at start-up."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proofpool.infra.config import Settings


def test_relays_default_to_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROOFPOOL_CHECKPOINT_RELAYS", raising=False)
    assert Settings().checkpoint_relays == ()


def test_relays_are_split_trimmed_and_normalized(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROOFPOOL_CHECKPOINT_RELAYS", " http://10.0.0.5:8790/, https://relay.example ,,")
    assert Settings().checkpoint_relays == ("http://10.0.0.5:8790", "https://relay.example")


@pytest.mark.parametrize("value", ["ftp://10.0.0.5", "10.0.0.5:8790", "http://relay?x=1"])
def test_a_malformed_relay_url_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PROOFPOOL_CHECKPOINT_RELAYS", f"http://ok:1,{value}")
    with pytest.raises(ValidationError, match="not an http or https base URL"):
        Settings()
