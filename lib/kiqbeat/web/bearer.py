"""The token check of the API, /metrics and the sign-in form: the token matched in constant
time (auth.py), a wrong one counted by the throttle (throttle.py), an address over its bound
refused before any comparison."""

from __future__ import annotations

import math
from dataclasses import dataclass

from starlette.requests import Request

from kiqbeat.web.auth import Principal
from kiqbeat.web.throttle import Throttle

UNAUTHORIZED = "a valid bearer token is required (Authorization: Bearer TOKEN)"


@dataclass(frozen=True)
class Refusal:
    """Why a request's bearer token was not taken: its status, message, Retry-After."""

    status: int
    message: str
    retry_after_s: int | None = None

    @property
    def headers(self) -> dict[str, str]:
        """Its answer's headers, whichever form the answer takes (Retry-After for a 429)."""
        return {"Retry-After": str(self.retry_after_s)} if self.retry_after_s else {}


def authenticate(request: Request) -> Principal | Refusal:
    """The principal of the request's bearer token, or its refusal: 401 without a valid
    token, 429 while its address is throttled (a wrong token counts against it)."""
    auth = request.app.state.auth
    header = request.headers.get("authorization", "")
    if auth.anonymous:
        principal: Principal | None = auth.bearer(header)
        assert principal is not None
        return principal
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return Refusal(401, UNAUTHORIZED)  # no token presented: nothing guessed
    return admit(request, value.strip())


def admit(request: Request, presented: str) -> Principal | Refusal:
    """The principal of a presented token (a bearer token, the sign-in form's), or its
    refusal: 429 while the client's address is throttled, before any comparison (the
    address is the client's, or with --proxy-headers the one the trusted proxy names); 401
    for a wrong token, which counts against the address."""
    throttle: Throttle = request.app.state.throttle
    address = request.client.host if request.client else "unknown"
    if wait_s := throttle.wait_s(address):
        return Refusal(429, "too many wrong tokens from this address: try again in "
                            f"{math.ceil(wait_s)} s", math.ceil(wait_s))
    principal: Principal | None = request.app.state.auth.match(presented)
    if principal is None:
        throttle.failed(address)
        return Refusal(401, UNAUTHORIZED)
    return principal
