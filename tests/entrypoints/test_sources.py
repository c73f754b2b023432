"""Configuration sources against moto in server mode: files, S3, SSM, AppConfig, Secrets Manager."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis

from kiqbeat.document.aws import DEFAULT_LIMITS, call_limits
from kiqbeat.document.sources import Sources
from kiqbeat.errors import ConfigError
from tests.support.aws import Moto, hanging_endpoint

# A fixture type of tests/entrypoints/conftest.py (no module imports a conftest).
AppConfigData = Any

SCHEDULE = """
schedules:
  heartbeat:
    cron: "* * * * *"
    class: HeartbeatWorker
"""
OTHER_SCHEDULE = SCHEDULE.replace("heartbeat", "pulse")
MALFORMED = "schedules:\n  heartbeat: [unclosed\n"


@pytest.fixture
def sources() -> Sources:
    """A new Sources (its own caches) for each test."""
    return Sources()


def names(config: Any) -> list[str]:
    return [s.name for s in config.schedules]


def client(service: str) -> Any:
    return boto3.session.Session().client(service)


def test_a_file_source_is_parsed_again_only_when_it_changes(
    tmp_path: Path, sources: Sources
) -> None:
    path = tmp_path / "schedule.yaml"
    path.write_text(SCHEDULE)
    first = sources.load_config(str(path))
    assert sources.load_config(str(path)) is first
    path.write_text(OTHER_SCHEDULE + "\n")
    assert names(sources.load_config(str(path))) == ["pulse"]


def test_a_missing_file_is_a_config_error_naming_it(tmp_path: Path, sources: Sources) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"nope\.yaml: schedule file not found"):
        sources.load_config(str(missing))


@pytest.mark.parametrize("source", ["http://example.com/s.yaml", "gs://bucket/key", "vault:x"])
def test_an_unknown_scheme_is_a_config_error_listing_the_valid_ones(
    source: str, sources: Sources
) -> None:
    with pytest.raises(ConfigError, match=r"unsupported schedule source scheme .*s3://BUCKET/KEY"):
        sources.load_config(source)


def test_an_ssm_parameter_is_loaded_including_secure_strings(aws: Moto, sources: Sources) -> None:
    ssm = client("ssm")
    ssm.put_parameter(Name="/kiqbeat/schedule", Value=SCHEDULE, Type="String")
    ssm.put_parameter(Name="/kiqbeat/secure", Value=OTHER_SCHEDULE, Type="SecureString")
    assert names(sources.load_config("ssm:/kiqbeat/schedule")) == ["heartbeat"]
    assert names(sources.load_config("ssm:/kiqbeat/secure")) == ["pulse"]


def test_an_s3_object_is_loaded(aws: Moto, sources: Sources) -> None:
    s3 = client("s3")
    s3.create_bucket(Bucket="ops-config")
    s3.put_object(Bucket="ops-config", Key="kiqbeat/schedule.yaml", Body=SCHEDULE.encode())
    assert names(sources.load_config("s3://ops-config/kiqbeat/schedule.yaml")) == ["heartbeat"]


def test_an_appconfig_profile_is_loaded_and_its_session_reused(
    aws: Moto, appconfig_server: AppConfigData, sources: Sources
) -> None:
    appconfig_server.documents[("shop", "prod", "kiqbeat")] = SCHEDULE.encode()
    assert names(sources.load_config("appconfig:shop/prod/kiqbeat", max_age_s=0)) == ["heartbeat"]
    appconfig_server.documents[("shop", "prod", "kiqbeat")] = OTHER_SCHEDULE.encode()
    assert names(sources.load_config("appconfig:shop/prod/kiqbeat", max_age_s=0)) == ["pulse"]
    # One session, then one poll per refresh with the token the previous poll returned.
    assert appconfig_server.calls == ["StartConfigurationSession", "GetLatestConfiguration",
                                      "GetLatestConfiguration"]


@pytest.mark.parametrize(("source", "setup"), [
    ("ssm:/kiqbeat/missing", lambda: None),
    ("s3://ops-config/missing.yaml", lambda: client("s3").create_bucket(Bucket="ops-config")),
    ("s3://no-such-bucket/schedule.yaml", lambda: None),
    ("appconfig:shop/prod/missing", lambda: None),
])
def test_a_missing_document_is_a_config_error_naming_the_source(
    aws: Moto, source: str, setup: Callable[[], object], sources: Sources
) -> None:
    setup()
    with pytest.raises(ConfigError, match="not found") as caught:
        sources.load_config(source)
    assert str(caught.value).startswith(f"{source}: ")


@pytest.mark.parametrize("store", ["ssm", "s3", "appconfig"])
def test_a_malformed_document_is_a_config_error_naming_the_source(
    aws: Moto, appconfig_server: AppConfigData, store: str, sources: Sources
) -> None:
    if store == "ssm":
        client("ssm").put_parameter(Name="/kiqbeat/schedule", Value=MALFORMED, Type="String")
        source = "ssm:/kiqbeat/schedule"
    elif store == "s3":
        client("s3").create_bucket(Bucket="ops-config")
        client("s3").put_object(Bucket="ops-config", Key="s.yaml", Body=MALFORMED.encode())
        source = "s3://ops-config/s.yaml"
    else:
        appconfig_server.documents[("shop", "prod", "kiqbeat")] = MALFORMED.encode()
        source = "appconfig:shop/prod/kiqbeat"
    with pytest.raises(ConfigError) as caught:
        sources.load_config(source)
    assert source in str(caught.value)


def _restricted_user(policy: dict[str, Any]) -> dict[str, str]:
    iam = client("iam")
    iam.create_user(UserName="kiqbeat")
    iam.put_user_policy(UserName="kiqbeat", PolicyName="kiqbeat", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="kiqbeat")["AccessKey"]
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}


def test_access_denied_by_iam_is_a_config_error_naming_the_source(
    aws: Moto, monkeypatch: pytest.MonkeyPatch, sources: Sources
) -> None:
    s3 = client("s3")
    s3.create_bucket(Bucket="ops-config")
    for key in ("kiqbeat/schedule.yaml", "payments/schedule.yaml"):
        s3.put_object(Bucket="ops-config", Key=key, Body=SCHEDULE.encode())
    client("ssm").put_parameter(Name="/kiqbeat/schedule", Value=SCHEDULE, Type="String")
    client("secretsmanager").create_secret(Name="payments/redis", SecretString="redis://x:6379")
    # moto evaluates S3 policies per object, other services per action only.
    keys = _restricted_user({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::ops-config/kiqbeat/*"}]})
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    aws.enforce_iam(True)

    # The same user, policy and server: the granted object loads, the rest is refused.
    assert names(sources.load_config("s3://ops-config/kiqbeat/schedule.yaml")) == ["heartbeat"]
    with pytest.raises(ConfigError,
                       match=r"^s3://ops-config/payments/schedule.yaml: missing or access denied"
                       ) as caught:
        sources.load_config("s3://ops-config/payments/schedule.yaml")
    assert "docs/deploy.md" in str(caught.value)
    with pytest.raises(ConfigError, match=r"^ssm:/kiqbeat/schedule: access denied"):
        sources.load_config("ssm:/kiqbeat/schedule")
    with pytest.raises(ConfigError, match=r"^secret payments/redis: access denied"):
        sources.redis_url({"KIQBEAT_REDIS_SECRET": "payments/redis"})


def test_an_s3_403_says_the_object_may_be_missing_and_how_to_tell(
    aws: Moto, monkeypatch: pytest.MonkeyPatch, sources: Sources
) -> None:
    # Without s3:ListBucket, S3 answers a missing key with 403 AccessDenied, exactly as it
    # answers a key the role may not read (moto answers 404 either way, so the 403 here
    # comes from a key outside the grant): the message must not claim which one it is.
    s3 = client("s3")
    s3.create_bucket(Bucket="ops-config")
    s3.put_object(Bucket="ops-config", Key="other/schedule.yaml", Body=SCHEDULE.encode())
    keys = _restricted_user({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::ops-config/kiqbeat/schedule.yaml"}]})
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    aws.enforce_iam(True)
    with pytest.raises(ConfigError) as caught:
        sources.load_config("s3://ops-config/other/schedule.yaml")
    message = str(caught.value)
    assert message.startswith("s3://ops-config/other/schedule.yaml: missing or access denied")
    assert "s3:ListBucket" in message and "s3:GetObject" in message


def test_missing_credentials_are_a_config_error(
    aws: Moto, monkeypatch: pytest.MonkeyPatch, sources: Sources
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ConfigError, match=r"^ssm:/kiqbeat/schedule: no AWS credentials"):
        sources.load_config("ssm:/kiqbeat/schedule")


def test_a_remote_document_is_cached_for_max_age_then_refreshed(
    aws: Moto, sources: Sources
) -> None:
    ssm = client("ssm")
    ssm.put_parameter(Name="/kiqbeat/schedule", Value=SCHEDULE, Type="String")
    first = sources.load_config("ssm:/kiqbeat/schedule", max_age_s=3600)
    ssm.put_parameter(Name="/kiqbeat/schedule", Value=OTHER_SCHEDULE, Type="String", Overwrite=True)
    assert sources.load_config("ssm:/kiqbeat/schedule", max_age_s=3600) is first
    assert names(sources.load_config("ssm:/kiqbeat/schedule", max_age_s=0)) == ["pulse"]


def test_an_unchanged_remote_document_is_not_parsed_again(aws: Moto, sources: Sources) -> None:
    client("ssm").put_parameter(Name="/kiqbeat/schedule", Value=SCHEDULE, Type="String")
    first = sources.load_config("ssm:/kiqbeat/schedule", max_age_s=0)
    assert sources.load_config("ssm:/kiqbeat/schedule", max_age_s=0) is first


def test_a_failed_refresh_after_max_age_fails_loudly(aws: Moto, sources: Sources) -> None:
    ssm = client("ssm")
    ssm.put_parameter(Name="/kiqbeat/schedule", Value=SCHEDULE, Type="String")
    sources.load_config("ssm:/kiqbeat/schedule", max_age_s=0)
    ssm.delete_parameter(Name="/kiqbeat/schedule")
    with pytest.raises(ConfigError, match="not found"):
        sources.load_config("ssm:/kiqbeat/schedule", max_age_s=0)


def test_a_bad_document_source_pushes_nothing(
    aws: Moto, redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    from kiqbeat.entrypoints.cli import main as cli_main

    client("ssm").put_parameter(Name="/kiqbeat/schedule", Value=MALFORMED, Type="String")
    for source in ("ssm:/kiqbeat/schedule", "ssm:/kiqbeat/missing"):
        assert cli_main(["run-once", "--config", source, "--redis-url", redis_url]) == 1
        assert source in capsys.readouterr().err
    assert redis_client.dbsize() == 0


# --- the Redis URL -------------------------------------------------------------------------

PASSWORD = "s3cr3t/p@ss:word"


def test_an_explicit_url_wins_over_redis_url(sources: Sources) -> None:
    env = {"KIQBEAT_REDIS_URL": "redis://a:6379", "REDIS_URL": "redis://b:6379"}
    assert sources.redis_url(env) == "redis://a:6379"
    assert sources.redis_url({"KIQBEAT_REDIS_URL": "", "REDIS_URL": "redis://b:6379"}) == (
        "redis://b:6379")


def test_no_url_at_all_is_a_config_error_naming_the_variables(sources: Sources) -> None:
    with pytest.raises(ConfigError, match=r"KIQBEAT_REDIS_URL.*KIQBEAT_REDIS_SECRET"):
        sources.redis_url({})


@pytest.mark.parametrize(("secret", "base", "expected"), [
    ("rediss://kiqbeat:pw@cache:6379/0", "", "rediss://kiqbeat:pw@cache:6379/0"),
    (json.dumps({"url": "redis://cache:6379/2"}), "", "redis://cache:6379/2"),
    (json.dumps({"host": "cache", "port": 6380, "username": "kiqbeat", "password": PASSWORD}), "",
     "rediss://kiqbeat:s3cr3t%2Fp%40ss%3Aword@cache:6380/0"),
    (json.dumps({"host": "cache", "tls": False, "db": 3}), "", "redis://cache:6379/3"),
    (PASSWORD, "rediss://kiqbeat@cache:6379/1", "rediss://kiqbeat:s3cr3t%2Fp%40ss%3Aword@cache:6379/1"),
    (json.dumps({"username": "beat", "password": "pw"}), "redis://cache:6379",
     "redis://beat:pw@cache:6379"),
])
def test_a_secret_gives_the_redis_url(
    aws: Moto, secret: str, base: str, expected: str, sources: Sources
) -> None:
    client("secretsmanager").create_secret(Name="kiqbeat/redis", SecretString=secret)
    env = {"KIQBEAT_REDIS_SECRET": "kiqbeat/redis", "KIQBEAT_REDIS_URL": base}
    url = sources.redis_url(env)
    assert url == expected
    if "@" in url:  # the password survives the URL round trip
        parsed = redis.connection.parse_url(url)
        assert parsed["password"] in (PASSWORD, "pw")


@pytest.mark.parametrize(("secret", "base", "message"), [
    ("{not json " + PASSWORD, "", "does not parse"),
    (json.dumps(["x"]), "", "not an object"),
    (json.dumps({"url": "http://" + PASSWORD}), "", "'url' is not a redis://"),
    (PASSWORD, "", "only a password: set KIQBEAT_REDIS_URL"),
    ("redis://u:" + PASSWORD + "@h:1", "redis://h:1", "both KIQBEAT_REDIS_URL and the secret"),
    (PASSWORD, "redis://u:old@h:1", "already holds a password"),
])
def test_a_bad_secret_is_a_config_error_that_never_shows_it(
    aws: Moto, secret: str, base: str, message: str, sources: Sources
) -> None:
    client("secretsmanager").create_secret(Name="kiqbeat/redis", SecretString=secret)
    with pytest.raises(ConfigError, match=message) as caught:
        sources.redis_url({"KIQBEAT_REDIS_SECRET": "kiqbeat/redis", "KIQBEAT_REDIS_URL": base})
    assert str(caught.value).startswith("secret kiqbeat/redis: ")
    assert PASSWORD not in str(caught.value) and PASSWORD not in repr(caught.value)


def test_a_missing_secret_is_a_config_error(aws: Moto, sources: Sources) -> None:
    with pytest.raises(ConfigError, match=r"^secret kiqbeat/nope: not found"):
        sources.redis_url({"KIQBEAT_REDIS_SECRET": "kiqbeat/nope"})


def test_a_secret_is_cached_for_max_age(aws: Moto, sources: Sources) -> None:
    sm = client("secretsmanager")
    sm.create_secret(Name="kiqbeat/redis", SecretString="redis://old:6379")
    env = {"KIQBEAT_REDIS_SECRET": "kiqbeat/redis"}
    assert sources.redis_url(env, max_age_s=3600) == "redis://old:6379"
    sm.put_secret_value(SecretId="kiqbeat/redis", SecretString="redis://new:6379")
    assert sources.redis_url(env, max_age_s=3600) == "redis://old:6379"
    assert sources.redis_url(env, max_age_s=0) == "redis://new:6379"


def test_file_sources_never_import_boto3(tmp_path: Path, sources: Sources) -> None:
    path = tmp_path / "schedule.yaml"
    path.write_text(SCHEDULE)
    code = ("import sys; from kiqbeat.document.sources import Sources; s = Sources(); "
            "s.load_config(sys.argv[1]); s.redis_url({'KIQBEAT_REDIS_URL': 'redis://h:1'}); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('boto3', 'botocore', 'aws_lambda_powertools')))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"


# --- AWS calls end before the invocation's deadline --------------------------------------


@pytest.mark.parametrize("left_s", [None, 40.0, 20.0, 19.9, 12.0, 7.0, 6.5, 3.0, 2.0, 1.99, 0.0,
                                    -5.0])
@pytest.mark.parametrize("calls", [1, 2])
def test_aws_calls_get_limits_that_end_before_the_deadline(left_s: float | None,
                                                           calls: int) -> None:
    limits = call_limits(left_s, calls)
    if left_s is None:
        assert limits == DEFAULT_LIMITS
    elif left_s / calls < 2.0:
        assert limits is None  # no call is started
    else:
        assert limits is not None
        assert calls * limits.worst_s <= left_s
        assert limits.connect_s >= 1 and limits.read_s >= 1
        if left_s >= calls * DEFAULT_LIMITS.worst_s:
            assert limits == DEFAULT_LIMITS  # plenty of time: retries and the usual timeouts


@pytest.mark.parametrize("store", ["ssm", "secret"])
def test_a_hanging_aws_endpoint_is_given_up_before_the_deadline(
    aws: Moto, store: str, sources: Sources, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hanging_endpoint() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SSM" if store == "ssm"
                           else "AWS_ENDPOINT_URL_SECRETS_MANAGER", url)
        started = time.monotonic()
        with pytest.raises(ConfigError, match="AWS unreachable"), sources.until(started + 3.5):
            if store == "ssm":
                sources.load_config("ssm:/kiqbeat/schedule")
            else:
                sources.redis_url({"KIQBEAT_REDIS_SECRET": "kiqbeat/redis"})
        assert time.monotonic() - started < 3.5


def test_no_aws_call_starts_when_the_deadline_is_too_close(
    aws: Moto, sources: Sources
) -> None:
    client("ssm").put_parameter(Name="/kiqbeat/schedule", Value=SCHEDULE, Type="String")
    with sources.until(time.monotonic() + 1.0), pytest.raises(
            ConfigError, match=r"^ssm:/kiqbeat/schedule: not calling AWS with 1\.0 s left"):
        sources.load_config("ssm:/kiqbeat/schedule")
    # Outside the deadline the same source loads, and a fresh cached document needs no call.
    assert names(sources.load_config("ssm:/kiqbeat/schedule")) == ["heartbeat"]
    with sources.until(time.monotonic()):
        assert names(sources.load_config("ssm:/kiqbeat/schedule")) == ["heartbeat"]
