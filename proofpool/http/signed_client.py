"""An HTTP client that signs every request with a key (workers, CLIs, validators)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import httpx
from eth_account.signers.local import LocalAccount

from proofpool.auth.signed_request import sign_request
from proofpool.errors import ProofpoolError, ServiceUnavailable


class ApiRefused(ProofpoolError):
    """The backend answered 4xx/5xx; `status`, `error` (code) and `detail` from its JSON body."""

    def __init__(self, status: int, error: str, detail: Any) -> None:
        self.status, self.error, self.detail = status, error, detail
        super().__init__(f"backend refused ({status} {error}): {detail}")


class SignedClient:
    """`client.request("POST", "/v1/heartbeat", json={...})` -> decoded JSON."""

    def __init__(self, base_url: str, account: LocalAccount, timeout: float = 10.0) -> None:
        self.account = account
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)

    def request(self, method: str, path: str, json_body: Any = None, params: dict | None = None) -> Any:
        body = b"" if json_body is None else json.dumps(json_body, separators=(",", ":")).encode()
        full_path = path + ("?" + urlencode(params) if params else "")
        headers = sign_request(self.account, method, full_path, body)
        if json_body is not None:
            headers["Content-Type"] = "application/json"
        try:
            reply = self._http.request(method, full_path, content=body, headers=headers)
        except httpx.TransportError as exc:
            raise ServiceUnavailable(f"backend at {self._http.base_url} unreachable: {exc}") from exc
        if reply.status_code >= 400:
            try:
                data = reply.json()
                raise ApiRefused(reply.status_code, data.get("error", "error"), data.get("detail"))
            except ValueError:
                raise ApiRefused(reply.status_code, "error", reply.text[:200]) from None
        return reply.json() if reply.content else None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SignedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
