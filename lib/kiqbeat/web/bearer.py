"""The bearer-token check of the API and /metrics: the token matched in constant time
(auth.py), a wrong one counted by the throttle (throttle.py), an address over its bound
refused before any comparison."""

from __future__ import annotations

import math
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse

from kiqbeat.web.auth import Principal
from kiqbeat.web.throttle import Throttle


@dataclass(frozen=True)
class Refusal:
    """Why a request's bearer token was not taken: its status, message, Retry-After."""

    status: int
    message: str
    retry_after_s: int | None = None

    def answer(self) -> JSONResponse:
        """As the API answers it (api.py's error form)."""
        response = JSONResponse({"error": self.message, "problems": [self.message]},
                                status_code=self.status)
        if self.retry_after_s is not None:
            response.headers["Retry-After"] = str(self.retry_after_s)
        return response


def authenticate(request: Request) -> Principal | Refusal:
    """The principal of the request's bearer token, or its refusal: 401 without a valid
    token, 429 while its address is throttled (a wrong token counts against it)."""
    auth = request.app.state.auth
    header = request.headers.get("authorization", "")
    if auth.anonymous:
        principal: Principal | None = auth.bearer(header)
        assert principal is not None
        return principal
    unauthorized = Refusal(401, "a valid bearer token is required (Authorization: Bearer "
                                "TOKEN)")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return unauthorized  # no token presented: nothing guessed
    throttle: Throttle = request.app.state.throttle
    address = request.client.host if request.client else "unknown"
    if wait_s := throttle.wait_s(address):
        return Refusal(429, "too many wrong tokens from this address: try again in "
                            f"{math.ceil(wait_s)} s", math.ceil(wait_s))
    principal = auth.match(value.strip())
    if principal is None:
        throttle.failed(address)
        return unauthorized
    return principal
