"""The Lambda function's alerts go to the SNS topic the SAM template gives it
(KIQBEAT_ALERT_SNS_TOPIC), through moto in server mode: a schedule pushing into a queue no
worker reads is `silent` once, published once with its idempotency key; boto3 is imported
only when an event is published."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import redis
from handler import app

from tests.support.aws import Context, Moto
from tests.support.clock import advance_clock

SCHEDULE = """
schedules:
  unread:
    every: 1s
    class: UnreadWorker
    queue: nobody_reads
    expect_success_within: 2s
"""


@pytest.fixture
def topic(aws: Moto, tmp_path: Path, redis_url: str,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """An SNS topic with an SQS queue subscribed, and the function's environment naming it."""
    sns, sqs = boto3.client("sns"), boto3.client("sqs")
    arn = sns.create_topic(Name="kiqbeat-alerts")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="alerts-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=queue_arn,
                  Attributes={"RawMessageDelivery": "true"})
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(SCHEDULE)
    for name in app.ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KIQBEAT_CONFIG", str(schedule))
    monkeypatch.setenv("KIQBEAT_REDIS_URL", redis_url)
    monkeypatch.setenv("KIQBEAT_ALERT_SNS_TOPIC", arn)
    app.forget_warm()
    yield arn, queue_url
    app.forget_warm()


def test_the_function_publishes_a_silent_schedule_once_to_its_topic(
        topic: tuple[str, str], redis_client: redis.Redis) -> None:
    _arn, queue_url = topic
    events = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        result = app.lambda_handler({}, Context())
        events += result["alert_events"]
        if events and result["alerts_delivered"]:
            break
        advance_clock(redis_client, 0.5)
    for _ in range(3):  # more invocations decide nothing more
        events += app.lambda_handler({}, Context())["alert_events"]
    assert events == 1
    messages = boto3.client("sqs").receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10,
                                                   WaitTimeSeconds=1).get("Messages", [])
    bodies = [json.loads(m["Body"]) for m in messages]
    assert [(b["schedule"], b["event"]) for b in bodies] == [("unread", "silent")]
    assert bodies[0]["key"].startswith("unread|silent|")


def test_the_invocation_path_does_not_import_boto3_without_a_topic() -> None:
    code = ("import sys, kiqbeat.engine, kiqbeat.alerts.step; "
            "print('boto3' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
