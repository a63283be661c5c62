"""An HTTP client that signs every request with a key (workers, CLIs, validators), for one
deployment and the host of its base URL (`proofpool.core.auth.signed_request`)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any
from urllib.parse import urlencode

import httpx
from eth_account.signers.local import LocalAccount

from proofpool.core.auth.signed_request import Audience, request_target, sign_request
from proofpool.core.errors import ProofpoolError, ServiceUnavailable

log = logging.getLogger(__name__)

RESIGN_MAX_WAIT = 30
"""Most seconds to wait before signing a request again that the backend's nonce store could not
vouch for yet (`predates_nonce_store`: its Redis started empty moments ago). A longer
Retry-After means the request was not fresh, which waiting does not fix."""


class ApiRefused(ProofpoolError):
    """The backend answered 4xx/5xx; `status`, `error` (code) and `detail` from its JSON body,
    and `retry_after`: the seconds of its Retry-After header (a 429 has one), else None."""

    def __init__(self, status: int, error: str, detail: Any, retry_after: float | None = None) -> None:
        self.status, self.error, self.detail, self.retry_after = status, error, detail, retry_after
        super().__init__(f"backend refused ({status} {error}): {detail}")


class SignedClient:
    """`client.request("POST", "/v1/heartbeat", json={...})` -> decoded JSON.

    Requests are signed for the deployment (`chain_id`, `pool_contract`) the caller knows from
    its own chain connection, never from the backend's word, and for the host of `base_url`: a
    backend of another deployment or another host refuses them.
    """

    def __init__(
        self, base_url: str, account: LocalAccount, *, chain_id: int, pool_contract: str, timeout: float = 10.0
    ) -> None:
        self.account = account
        self.audience = Audience.for_base_url(base_url, chain_id=chain_id, pool_contract=pool_contract)
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)

    def request(self, method: str, path: str, json_body: Any = None, params: dict | None = None) -> Any:
        body = b"" if json_body is None else json.dumps(json_body, separators=(",", ":")).encode()
        full_path = path + ("?" + urlencode(params) if params else "")
        reply = self._send(method, full_path, body, json_body is not None)
        wait = _resign_wait(reply)
        if wait is not None:  # the backend's nonce store restarted moments ago: sign again, once
            log.info("backend's nonce store restarted; signing %s %s again in %d s", method, path, wait)
            time.sleep(wait)
            reply = self._send(method, full_path, body, json_body is not None)
        if reply.status_code >= 400:
            retry_after = _retry_after(reply)
            try:
                data = reply.json()
                raise ApiRefused(reply.status_code, data.get("error", "error"), data.get("detail"), retry_after)
            except ValueError:
                raise ApiRefused(reply.status_code, "error", reply.text[:200], retry_after) from None
        return reply.json() if reply.content else None

    def _send(self, method: str, full_path: str, body: bytes, is_json: bool) -> httpx.Response:
        """Build the request first, so the signature covers the target exactly as it is sent."""
        request = self._http.build_request(method, full_path, content=body)
        path, _, query = request.url.raw_path.partition(b"?")
        request.headers.update(sign_request(self.account, self.audience, method, request_target(path, query), body))
        if is_json:
            request.headers["Content-Type"] = "application/json"
        try:
            return self._http.send(request)
        except httpx.TransportError as exc:
            raise ServiceUnavailable(f"backend at {self._http.base_url} unreachable: {exc}") from exc

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SignedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _retry_after(reply: httpx.Response) -> float | None:
    """The Retry-After header in seconds (the backend sends delta-seconds), None if absent or not a
    non-negative number."""
    try:
        seconds = float(reply.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _resign_wait(reply: httpx.Response) -> int | None:
    """Seconds to wait before signing again, when the refusal is `predates_nonce_store` with a
    Retry-After a fresh request can be worth waiting for; else None."""
    if reply.status_code != 401:
        return None
    try:
        error = reply.json().get("error")
        wait = int(reply.headers.get("Retry-After", ""))
    except (ValueError, AttributeError):
        return None
    return wait if error == "predates_nonce_store" and 0 <= wait <= RESIGN_MAX_WAIT else None
