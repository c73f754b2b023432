"""Where alert events go: a webhook (`KIQBEAT_ALERT_WEBHOOK`) and an SNS topic
(`KIQBEAT_ALERT_SNS_TOPIC`). Each sink's `send` delivers one event within
`limits.ALERT_TIMEOUT_S` or raises `AlertDeliveryError`; it never retries (the outbox does,
at the next invocation). boto3 is imported only by the SNS sink, when it first sends.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Protocol

from kiqbeat.alerts.events import KEY_HEADER, SIGNATURE_HEADER, AlertEvent, signature
from kiqbeat.core.limits import ALERT_TIMEOUT_S
from kiqbeat.errors import KiqbeatError


class AlertDeliveryError(KiqbeatError):
    """A sink did not take an event (it stays in the outbox for the next invocation)."""


class Sink(Protocol):
    """One destination of alert events: its consumer group's name and how to send one."""

    @property
    def name(self) -> str:
        """The outbox consumer group that tracks what this sink acknowledged."""
        ...

    def send(self, event: AlertEvent) -> None:
        """Deliver one event, or raise AlertDeliveryError."""
        ...


@dataclass(frozen=True)
class Webhook:
    """POSTs each event's JSON body to `url`, signed with `secret` when one is set; a 2xx
    reply acknowledges it."""

    url: str = field(repr=False)  # a Slack webhook's URL is itself a secret
    secret: str = field(default="", repr=False)
    timeout_s: float = ALERT_TIMEOUT_S
    name: str = "webhook"

    def send(self, event: AlertEvent) -> None:
        """POST the event (raises AlertDeliveryError on a timeout or a non-2xx reply)."""
        body = event.encoded()
        headers = {"Content-Type": "application/json", "User-Agent": "kiqbeat",
                   KEY_HEADER: event.key}
        if self.secret:
            headers[SIGNATURE_HEADER] = signature(self.secret, body)
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                status = reply.status
        except urllib.error.HTTPError as exc:
            raise AlertDeliveryError(f"the alert webhook answered {exc.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AlertDeliveryError(f"the alert webhook could not be reached: "
                                     f"{type(reason).__name__}") from None
        if not 200 <= status < 300:
            raise AlertDeliveryError(f"the alert webhook answered {status}")


@dataclass
class Sns:
    """Publishes each event's JSON body to an SNS topic (its `text` as the subject line's
    source), with the idempotency key as a message attribute."""

    topic_arn: str
    endpoint_url: str | None = None  # AWS_ENDPOINT_URL (a test's moto server) when set
    timeout_s: float = ALERT_TIMEOUT_S
    name: str = "sns"
    _client: Any = field(default=None, repr=False)

    def send(self, event: AlertEvent) -> None:
        """Publish the event (raises AlertDeliveryError when SNS refuses or is unreachable)."""
        import boto3  # only where AWS is used
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        if self._client is None:
            self._client = boto3.client(
                "sns", endpoint_url=self.endpoint_url, config=Config(
                    connect_timeout=self.timeout_s, read_timeout=self.timeout_s,
                    retries={"max_attempts": 1}))
        try:
            self._client.publish(
                TopicArn=self.topic_arn, Message=event.encoded().decode(),
                Subject=f"kiqbeat: {event.event}"[:100],
                MessageAttributes={"key": {"DataType": "String", "StringValue": event.key},
                                   "event": {"DataType": "String",
                                             "StringValue": event.event}})
        except (BotoCoreError, ClientError) as exc:
            raise AlertDeliveryError(f"SNS did not take the alert: {type(exc).__name__}"
                                     ) from None
