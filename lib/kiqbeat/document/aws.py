"""Calls to AWS for the document sources: bounded in time, their errors said plainly.

Every call is bounded: `call_limits` gives botocore timeouts and attempts that end within
the time left (the Lambda's invocation deadline), or no call at all; outside a deadline the
defaults below apply. `aws_errors` turns boto3's and Powertools' errors into a ConfigError
naming the source and what to do (a missing object, a missing permission, no credentials).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kiqbeat.errors import ConfigError

# botocore.config.Config: botocore is imported only when an AWS source is used.
BotoConfig = Any

# AWS calls give up fast, as Redis calls do: the invocation has well under a minute.
AWS_CONNECT_TIMEOUT_S = 2.0
AWS_READ_TIMEOUT_S = 5.0
AWS_MAX_ATTEMPTS = 2
# The longest botocore's standard retry mode waits before a second attempt: a jittered
# backoff of at most 1 s, plus up to 5 s more when the service sends x-amz-retry-after.
AWS_RETRY_WAIT_S = 6.0
# With less time than this per call before the deadline, no AWS call is started.
AWS_MIN_CALL_S = 2.0

_NOT_FOUND = {"ParameterNotFound", "NoSuchKey", "NoSuchBucket", "ResourceNotFoundException",
              "404", "NotFound"}
_DENIED = {"AccessDenied", "AccessDeniedException", "UnrecognizedClientException",
           "InvalidClientTokenId", "ExpiredTokenException", "403", "Forbidden"}



@dataclass(frozen=True)
class CallLimits:
    """botocore's timeouts and attempts for one AWS call, and the longest it can then take."""

    connect_s: float
    read_s: float
    attempts: int

    @property
    def worst_s(self) -> float:
        """Every attempt timing out on connect and on read, with the longest retry wait."""
        return (self.attempts * (self.connect_s + self.read_s)
                + (self.attempts - 1) * AWS_RETRY_WAIT_S)


DEFAULT_LIMITS = CallLimits(AWS_CONNECT_TIMEOUT_S, AWS_READ_TIMEOUT_S, AWS_MAX_ATTEMPTS)


def call_limits(left_s: float | None, calls: int = 1) -> CallLimits | None:
    """Limits under which `calls` AWS calls in a row end within `left_s` seconds.

    None when that leaves less than AWS_MIN_CALL_S per call. Tighter limits are whole
    seconds with one attempt, so warm processes reuse a handful of clients at most.
    """
    if left_s is None:
        return DEFAULT_LIMITS
    per_call_s = left_s / calls
    if DEFAULT_LIMITS.worst_s <= per_call_s:
        return DEFAULT_LIMITS
    if per_call_s < AWS_MIN_CALL_S:
        return None
    whole_s = math.floor(per_call_s)
    connect_s = min(AWS_CONNECT_TIMEOUT_S, float(whole_s // 2))
    return CallLimits(connect_s, min(AWS_READ_TIMEOUT_S, whole_s - connect_s), 1)


def boto_config(limits: CallLimits) -> BotoConfig:
    from botocore.config import Config  # type: ignore[import-untyped, unused-ignore]

    return Config(connect_timeout=limits.connect_s, read_timeout=limits.read_s,
                  retries={"total_max_attempts": limits.attempts, "mode": "standard"})


@contextmanager
def aws_errors(source: str) -> Iterator[None]:
    """Turn boto3 and Powertools errors into a ConfigError naming the source and the cause."""
    try:
        yield
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(_describe(exc, s3=source.startswith("s3://")), source=source) from exc


def _describe(exc: BaseException, *, s3: bool = False) -> str:
    # Powertools wraps the boto3 error in GetParameterError, chained implicitly.
    cause: BaseException | None = exc
    while cause is not None:
        response = getattr(cause, "response", None)
        if isinstance(response, dict) and "Error" in response:
            code = str(response["Error"].get("Code", ""))
            message = str(response["Error"].get("Message", "")) or code
            # Some endpoints (moto, S3 proxies) put an XML error body in the message.
            inner = re.search(r"<Message>(.*?)</Message>", message, re.S)
            message = inner.group(1) if inner else message
            inner_code = re.search(r"<Code>(.*?)</Code>", str(response["Error"].get("Message")))
            code = inner_code.group(1) if inner_code and code.isdigit() else code
            if code in _NOT_FOUND:
                return f"not found ({code}: {message})"
            if code in _DENIED and s3:
                # S3 answers 403, not 404, for a missing key to whoever may not list the
                # bucket: the two cannot be told apart here.
                return (f"missing or access denied ({code}: {message}); check that the object "
                        "exists, and grant the function's role s3:GetObject on it (and "
                        "s3:ListBucket on its bucket for a plain 'not found' when it is "
                        "missing; docs/deploy.md lists the permissions)")
            if code in _DENIED:
                return (f"access denied ({code}: {message}); grant the function's role read "
                        "access to exactly this resource (docs/deploy.md lists the permissions)")
            return f"{code}: {message}"
        name = type(cause).__name__
        if name in ("NoCredentialsError", "PartialCredentialsError"):
            return ("no AWS credentials: run with an IAM role, or set AWS_PROFILE or "
                    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
        if name == "NoRegionError":
            return "no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION)"
        if name in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
                    "ConnectionClosedError"):
            return f"AWS unreachable ({cause})"
        cause = cause.__cause__ or cause.__context__
    return f"{type(exc).__name__}: {exc}"
