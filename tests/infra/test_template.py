"""template.yaml: linters pass, the Handler imports, its variables are those the code reads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.infra.cfn import Stack, actions, statements, translate

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SAM = ROOT / ".tools" / "sam" / "bin" / "sam"


class _CfnLoader(yaml.SafeLoader):
    """YAML loader that keeps CloudFormation short-form tags (!Ref, !If, ...) as {tag: value}."""


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {suffix: value}


_CfnLoader.add_multi_constructor("!", _tag)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(TEMPLATE.read_text(), Loader=_CfnLoader)
    return loaded


@pytest.fixture(scope="module")
def function(template: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = template["Resources"]["KiqbeatFunction"]["Properties"]
    return props


def tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    assert exe.exists(), f"{name} is missing: run scripts/setup"
    return str(exe)


def sam_env(tmp_path: Path) -> dict[str, str]:
    return os.environ | {"SAM_CLI_TELEMETRY": "0", "HOME": str(tmp_path),
                         "AWS_DEFAULT_REGION": "us-east-1"}


def test_cfn_lint_passes() -> None:
    done = subprocess.run([tool("cfn-lint"), str(TEMPLATE)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_sam_validate_lint_passes(tmp_path: Path) -> None:
    assert SAM.exists(), "the SAM CLI is missing: run scripts/setup"
    done = subprocess.run([str(SAM), "validate", "--lint", "--region", "us-east-1",
                           "--template-file", str(TEMPLATE)], capture_output=True, text=True,
                          timeout=180, env=sam_env(tmp_path), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_handler_path_imports_as_lambda_lays_it_out(
    template: dict[str, Any], function: dict[str, Any]
) -> None:
    # Lambda puts CodeUri at /var/task and each layer's python/ dir on sys.path; the
    # layer's ContentUri becomes python/. Import the Handler that way, in a fresh process.
    module, attribute = function["Handler"].rsplit(".", 1)
    code_dir = ROOT / function["CodeUri"]
    layer = template["Resources"]["KiqbeatLibrary"]["Properties"]
    layer_dir = ROOT / layer["ContentUri"]
    probe = (f"import sys; sys.path[:0] = [{str(code_dir)!r}, {str(layer_dir)!r}]; "
             f"import {module}; assert callable({module}.{attribute}); "
             f"import kiqbeat; print(kiqbeat.__file__)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env |= {"POWERTOOLS_SERVICE_NAME": "kiqbeat", "POWERTOOLS_METRICS_NAMESPACE": "Kiqbeat"}
    done = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True,
                          timeout=60, env=env, cwd=code_dir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(layer_dir))


def test_the_template_sets_exactly_the_variables_the_code_reads(function: dict[str, Any]) -> None:
    from aws_lambda_powertools.shared import constants
    from handler import app

    from kiqbeat.engine import Engine

    set_by_template = set(function["Environment"]["Variables"])
    assert set_by_template == set(app.ENVIRONMENT)

    class Recording(dict[str, str]):
        def __init__(self, values: dict[str, str]) -> None:
            super().__init__(values)
            self.read: set[str] = set()

        def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
            self.read.add(key)
            return super().get(key, default)

        def __getitem__(self, key: str) -> str:
            self.read.add(key)
            return super().__getitem__(key)

    environ = Recording({name: "" for name in set_by_template} |
                        {"KIQBEAT_CONFIG": "schedule.yaml", "KIQBEAT_REDIS_URL": "redis://h:1"})
    engine = Engine.from_environ(environ)
    engine.sources.redis_url(engine.settings.redis_environ())
    # Every knob, the shard count every invocation's shard must have included.
    assert set(app.VARIABLES) <= environ.read
    assert "KIQBEAT_SHARD_COUNT" in app.VARIABLES
    assert environ.read - set(app.VARIABLES) == {"REDIS_URL"}  # the last-resort address
    # The rest are Powertools' own names, read by Powertools itself.
    assert {constants.SERVICE_NAME_ENV, constants.METRICS_NAMESPACE_ENV,
            constants.POWERTOOLS_LOG_LEVEL_ENV} == set(app.POWERTOOLS_VARIABLES)


def test_the_function_gives_up_fast_on_failed_invocations(function: dict[str, Any]) -> None:
    # Scheduler already retries once; a late retry is pointless (the next minute catches up).
    invoke = function["EventInvokeConfig"]
    assert invoke["MaximumRetryAttempts"] == 0
    assert invoke["MaximumEventAgeInSeconds"] == 60
    assert invoke["DestinationConfig"]["OnFailure"]["Type"] == "SQS"
    assert "Events" not in function  # the schedules are the template's own resources


def test_the_function_is_arm64_python313_and_times_out_well_under_a_minute(
    template: dict[str, Any], function: dict[str, Any],
) -> None:
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    # python3.13 runs on Amazon Linux 2023; python3.11 ran on Amazon Linux 2.
    assert function["Runtime"] == "python3.13"
    runtimes = PROVIDER_SCHEMA_MANAGER.get_resource_schema(
        "us-east-1", "AWS::Lambda::Function").schema["properties"]["Runtime"]["enum"]
    assert function["Runtime"] in runtimes
    layer = template["Resources"]["KiqbeatLibrary"]
    assert layer["Properties"]["CompatibleRuntimes"] == [function["Runtime"]]
    assert layer["Metadata"]["BuildMethod"] == function["Runtime"]
    assert function["Architectures"] == ["arm64"]
    assert layer["Properties"]["CompatibleArchitectures"] == function["Architectures"]
    assert function["Timeout"] <= 30


# --- the template as CloudFormation receives it, for given parameters -------------------------

@pytest.fixture(scope="module")
def translated() -> dict[str, Any]:
    """template.yaml after SAM's transform (what `sam deploy` submits)."""
    return translate(TEMPLATE.read_text())


def _registry_schema(resource_type: str) -> dict[str, Any]:
    """CloudFormation's own schema of a resource type (as shipped with cfn-lint)."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    schema: dict[str, Any] = PROVIDER_SCHEMA_MANAGER.get_resource_schema(
        "us-east-1", resource_type).schema
    return schema


def _only(resources: dict[str, dict[str, Any]], resource_type: str) -> dict[str, Any]:
    (found,) = [r["Properties"] for r in resources.values() if r["Type"] == resource_type]
    return found


@pytest.mark.parametrize("level", ["DEBUG", "INFO", "WARNING", "ERROR"])
def test_lambda_and_powertools_both_log_at_the_level_the_parameter_names(
    translated: dict[str, Any], level: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import logging

    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.shared import constants

    assert level in translated["Parameters"]["LogLevel"]["AllowedValues"]
    function = _only(Stack(translated, {"LogLevel": level}).resources(),
                     "AWS::Lambda::Function")
    # With JSON logs Lambda filters application logs at ApplicationLogLevel (INFO if unset),
    # and passes it to the code as AWS_LAMBDA_LOG_LEVEL.
    lambda_level = function["LoggingConfig"]["ApplicationLogLevel"]
    allowed = _registry_schema("AWS::Lambda::Function")["definitions"]["LoggingConfig"][
        "properties"]["ApplicationLogLevel"]["enum"]
    assert lambda_level in allowed
    powertools_level = function["Environment"]["Variables"]["POWERTOOLS_LOG_LEVEL"]
    assert powertools_level == level
    assert constants.LAMBDA_ADVANCED_LOGGING_LEVELS[lambda_level] == level

    # Powertools under that environment: the named level, and no warning that the two
    # disagree (warnings are errors in this suite).
    monkeypatch.setenv("AWS_LAMBDA_LOG_LEVEL", lambda_level)
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", powertools_level)
    logger = Logger(service=f"level-probe-{level.lower()}")
    assert logger.log_level == logging.getLevelName(level)


@pytest.mark.parametrize("stack_name", ["k", "kiqbeat-prod", "a" * 52, "A" + "-x1" * 42 + "b"])
def test_the_schedule_name_fits_eventbridge_scheduler_for_any_stack_name(
    translated: dict[str, Any], stack_name: str,
) -> None:
    assert 1 <= len(stack_name) <= 128  # CloudFormation's limit on stack names
    stack = Stack(translated, stack_name=stack_name)
    schedule = _only(stack.resources(), "AWS::Scheduler::Schedule")
    rule = _registry_schema("AWS::Scheduler::Schedule")["properties"]["Name"]
    assert rule["maxLength"] == 64
    assert len(schedule["Name"]) <= rule["maxLength"]
    assert re.fullmatch(rule["pattern"], schedule["Name"])
    assert stack_name in schedule["Description"]  # where to find it from the console
    # Two stacks never collide, whatever their names; nor do the shards of one.
    other = Stack(translated, stack_name=stack_name, stack_id=stack.stack_id.replace(
        "6a1ce3d0", "0b2f94e1"))
    assert _only(other.resources(), "AWS::Scheduler::Schedule")["Name"] != schedule["Name"]
    eight = _schedules(Stack(translated, {"ShardCount": "8"}, stack_name=stack_name))
    assert len({s["Name"] for s in eight.values()}) == 8
    assert all(len(s["Name"]) <= rule["maxLength"] and re.fullmatch(rule["pattern"], s["Name"])
               for s in eight.values())
    # Not the name of the one schedule SAM made before (kiqbeat-UUID): CloudFormation
    # creates the new schedules before it deletes that one.
    assert schedule["Name"] != "kiqbeat-" + stack.stack_id.rsplit("/", 1)[1]


def _schedules(stack: Stack) -> dict[str, dict[str, Any]]:
    return {name: r["Properties"] for name, r in stack.resources().items()
            if r["Type"] == "AWS::Scheduler::Schedule"}


def _fired(schedule: dict[str, Any]) -> Any:
    """The event the handler receives from a schedule, once Scheduler fills in its Input."""
    filled = (schedule["Target"]["Input"]
              .replace("<aws.scheduler.scheduled-time>", "2026-03-08T07:00:00Z")
              .replace("<aws.scheduler.execution-id>", "e-1")
              .replace("<aws.scheduler.attempt-number>", "2"))
    return json.loads(filled)


@pytest.mark.parametrize("count", range(1, 9))
def test_shard_count_n_makes_n_every_minute_schedules_each_naming_its_shard(
    translated: dict[str, Any], count: int,
) -> None:
    from handler import app

    from kiqbeat.settings import Settings

    stack = Stack(translated, {"ShardCount": str(count)})
    schedules = _schedules(stack)
    assert len(schedules) == count
    events = [_fired(s) for s in schedules.values()]
    assert sorted(e["shard"] for e in events) == [f"{i}/{count}" for i in range(count)]
    # What the handler then runs: each shard once, and all of them under the function's N.
    variables = _only(stack.resources(), "AWS::Lambda::Function")["Environment"]["Variables"]
    settings = Settings.load(variables)
    assert settings.shard_count == count
    shards = {settings.shard_to_run(app.event_shard(e), by="the event") for e in events}
    assert shards == ({None} if count == 1 else {(i, count) for i in range(count)})
    for event in events:
        fired = app.trigger(event)
        assert (fired.kind, fired.correlation_id, fired.attempt) == ("scheduler", "e-1", 2)
        assert fired.scheduled_time is not None and fired.scheduled_time.minute == 0
    names = [s["Name"] for s in schedules.values()]
    assert len(set(names)) == count


def test_three_shards_are_three_schedules_for_0_1_and_2_of_3(translated: dict[str, Any]) -> None:
    schedules = _schedules(Stack(translated, {"ShardCount": "3"}))
    assert {name: _fired(s)["shard"] for name, s in schedules.items()} == {
        "Shard0Schedule": "0/3", "Shard1Schedule": "1/3", "Shard2Schedule": "2/3"}
    assert [s["Name"][-2:] for s in schedules.values()] == ["-0", "-1", "-2"]


def test_every_schedule_fires_each_minute_in_utc_and_gives_up_fast(
    translated: dict[str, Any],
) -> None:
    schedules = list(_schedules(Stack(translated, {"ShardCount": "8"})).values())
    first = schedules[0]
    assert first["ScheduleExpression"] == "cron(* * * * ? *)"  # not rate(): its phase drifts
    assert first["ScheduleExpressionTimezone"] == "UTC"
    assert first["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert first["State"] == "ENABLED"
    target = first["Target"]
    assert target["Arn"] == "<KiqbeatFunction.Arn>"
    assert target["RoleArn"] == "<SchedulerRole.Arn>"
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 1, "MaximumEventAgeInSeconds": 60}
    assert target["DeadLetterConfig"] == {"Arn": "<FailureQueue.Arn>"}
    # The others are the same schedule but for the shard in their input, name, description.
    for index, schedule in enumerate(schedules):
        expected = json.loads(json.dumps(first).replace('"0/8', f'"{index}/8')
                              .replace("shard 0 of", f"shard {index} of"))
        expected["Name"] = first["Name"].removesuffix("-0") + f"-{index}"
        assert schedule == expected


def test_the_schedules_role_may_only_invoke_the_function_and_fill_the_failure_queue(
    translated: dict[str, Any],
) -> None:
    resources = Stack(translated, {"ShardCount": "3"}).resources()
    role = resources["SchedulerRole"]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Action"] == "sts:AssumeRole"
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": "123456789012"}}
    granted = {(a, s["Resource"]) for s in statements(resources["SchedulerRole"])
               for a in actions(s) if s["Effect"] == "Allow"}
    assert granted == {("lambda:InvokeFunction", "<KiqbeatFunction.Arn>"),
                       ("sqs:SendMessage", "<FailureQueue.Arn>")}
    assert "ManagedPolicyArns" not in role
    assert {r["Type"] for r in resources.values()} >= {"AWS::Scheduler::Schedule"}
    roles = [n for n, r in resources.items() if r["Type"] == "AWS::IAM::Role"]
    assert sorted(roles) == ["FunctionRole", "SchedulerRole"]  # none left behind by SAM


def test_shard_count_takes_only_1_to_8_written_plainly(translated: dict[str, Any]) -> None:
    # Listed, not a range: the conditions compare the value as text, and "03" (in range)
    # would make 8 schedules of shards I/03.
    spec = translated["Parameters"]["ShardCount"]
    assert spec["Type"] == "Number"
    assert [str(v) for v in spec["AllowedValues"]] == [str(n) for n in range(1, 9)]
    assert str(spec["Default"]) == "1"


SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kiqbeat/redis-AbCdEf"


@pytest.mark.parametrize(("parameters", "refused"), [
    ({}, None),
    ({"SubnetIds": "subnet-0a1b2c3d,subnet-4e5f6a7b", "SecurityGroupIds": "sg-0123abcd"}, None),
    ({"SubnetIds": "subnet-0a1b2c3d"}, "SubnetIds needs SecurityGroupIds"),
    ({"SubnetIds": "subnet-0a1b2c3d,", "SecurityGroupIds": "sg-0123abcd"}, "empty entry"),
    ({"SecurityGroupIds": "sg-0123abcd"}, "without SubnetIds"),
    ({"AppConfigApplicationId": "abc1234", "AppConfigEnvironmentId": "def5678",
      "AppConfigProfileId": "ghi9012"}, None),
    ({"AppConfigProfileId": "ghi9012"}, "needs AppConfigApplicationId, AppConfigEnvironmentId"),
    ({"AppConfigApplicationId": "abc1234", "AppConfigProfileId": "ghi9012"}, "AppConfig"),
    ({"AppConfigApplicationId": "abc1234", "AppConfigEnvironmentId": "def5678"}, "AppConfig"),
    ({"ScheduleS3Bucket": "ops-config", "ScheduleS3Key": "kiqbeat/schedule.yaml"}, None),
    ({"ScheduleS3Bucket": "ops-config"}, "go together"),
    ({"ScheduleS3Key": "kiqbeat/schedule.yaml"}, "go together"),
    ({"ScheduleSsmParameter": "/kiqbeat/schedule", "ScheduleS3Bucket": "ops-config",
      "ScheduleS3Key": "s.yaml"}, "at most one"),
    ({"ScheduleSsmParameter": "/kiqbeat/schedule", "AppConfigApplicationId": "abc1234",
      "AppConfigEnvironmentId": "def5678", "AppConfigProfileId": "ghi9012"}, "at most one"),
])
def test_rules_refuse_parameter_combinations_that_would_deploy_and_then_fail(
    translated: dict[str, Any], parameters: dict[str, str], refused: str | None,
) -> None:
    failures = Stack(translated, parameters).rule_failures()
    if refused is None:
        assert failures == []
    else:
        assert any(refused in f for f in failures), failures


@pytest.mark.parametrize(("parameter", "value", "accepted"), [
    ("RedisSecretArn", "", True),
    ("RedisSecretArn", SECRET_ARN, True),
    ("RedisSecretArn", "arn:aws-cn:secretsmanager:cn-north-1:123456789012:secret:r-AbCdEf", True),
    ("RedisSecretArn", "kiqbeat/redis", False),  # a name: the role's grant would not match
    ("RedisSecretArn", SECRET_ARN[:-7], False),  # a partial ARN, without the 6 characters
    ("RedisSecretArn", "arn:aws:ssm:eu-west-1:123456789012:parameter/kiqbeat", False),
    ("SubnetIds", "subnet-0a1b2c3d", True),
    ("SubnetIds", "subnet-0a1b2c3d4e5f6a7b8,subnet-4e5f6a7b", True),
    ("SubnetIds", "subnet-0a1b2c3d, subnet-4e5f6a7b", False),  # a space in a value
    ("SubnetIds", "sg-0123abcd", False),
    ("SecurityGroupIds", "sg-0123abcd", True),
    ("SecurityGroupIds", "default", False),
    ("AppConfigProfileId", "ghi9012", True),
    ("AppConfigProfileId", "Schedule Profile", False),  # a name: the IAM ARN needs the ID
    ("ScheduleS3Bucket", "ops-config", True),
    ("ScheduleS3Bucket", "Ops_Config", False),
    ("ScheduleS3Bucket", "ops-config/kiqbeat", False),
    ("ScheduleS3Key", "kiqbeat/schedule.yaml", True),
    ("ScheduleS3Key", "kiqbeat/*", False),  # would widen s3:GetObject to every key
    ("ScheduleS3Key", "${aws:username}.yaml", False),  # an IAM policy variable
    ("ScheduleSsmParameter", "/kiqbeat/schedule", True),
    ("ScheduleSsmParameter", "kiqbeat/schedule", False),
    ("PowertoolsLayerArn", "arn:aws-cn:lambda:cn-north-1:498634801083:layer:P:25", True),
    ("PowertoolsLayerArn", "AWSLambdaPowertoolsPythonV3-python313-arm64", False),
    ("History", "", True),  # kiqbeat's default
    ("History", "0", True),
    ("History", "1000", True),
    ("History", "1001", False),  # more than kiqbeat keeps
    ("History", "3.0", False),  # a Number parameter would pass it through
])
def test_allowed_patterns_accept_good_values_and_refuse_bad_ones(
    translated: dict[str, Any], parameter: str, value: str, accepted: bool,
) -> None:
    assert "AllowedPattern" in translated["Parameters"][parameter]
    failures = Stack(translated, {parameter: value}).pattern_failures()
    assert (failures == []) is accepted, failures


VPC = {"SubnetIds": "subnet-0a1b2c3d,subnet-4e5f6a7b", "SecurityGroupIds": "sg-0123abcd"}
EVERY_SOURCE = [{"ScheduleSsmParameter": "/kiqbeat/schedule"},
                {"ScheduleS3Bucket": "ops-config", "ScheduleS3Key": "kiqbeat/schedule.yaml"},
                {"AppConfigApplicationId": "abc1234", "AppConfigEnvironmentId": "def5678",
                 "AppConfigProfileId": "ghi9012"}]


@pytest.mark.parametrize("source", EVERY_SOURCE, ids=["ssm", "s3", "appconfig"])
@pytest.mark.parametrize("vpc", [{}, VPC], ids=["no-vpc", "vpc"])
def test_the_role_reads_only_named_resources(
    translated: dict[str, Any], source: dict[str, str], vpc: dict[str, str],
) -> None:
    parameters = source | vpc | {"RedisSecretArn": SECRET_ARN, "EnableTracing": "true"}
    stack = Stack(translated, parameters)
    assert stack.rule_failures() == [] and stack.pattern_failures() == []
    roles = {n: r for n, r in stack.resources().items() if r["Type"] == "AWS::IAM::Role"}
    role = roles["FunctionRole"]
    assert "ManagedPolicyArns" not in role["Properties"]  # no AWS-managed logs:* on *
    found = statements(role)
    by_sid = {s["Sid"]: s for s in found}
    assert len(by_sid) == len(found)
    assert by_sid["ReadRedisSecret"]["Resource"] == SECRET_ARN
    for statement in found:
        assert statement["Effect"] == "Allow"
        assert all("*" not in a for a in actions(statement)), statement
        writes = [a for a in actions(statement) if re.search(r":(Put|Delete|Create|Update|Assign|"
                                                               r"Unassign)", a)]
        assert set(writes) <= {"logs:CreateLogStream", "logs:PutLogEvents",
                               "xray:PutTraceSegments", "xray:PutTelemetryRecords",
                               "ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface",
                               "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"}
        if statement["Resource"] == "*":
            # Only calls without resource-level permissions: X-Ray writes, EC2 describes.
            assert statement["Sid"] in ("WriteTraces", "DescribeVpcNetwork"), statement
            assert all(a.startswith(("xray:", "ec2:Describe")) for a in actions(statement))
    logs = [s for s in found if any(a.startswith("logs:") for a in actions(s))]
    assert [s["Resource"] for s in logs] == ["<FunctionLogGroup.Arn>"]
    assert {a for s in found for a in actions(s) if a.startswith("logs:")} == {
        "logs:CreateLogStream", "logs:PutLogEvents"}


def test_in_a_vpc_the_role_manages_only_network_interfaces(translated: dict[str, Any]) -> None:
    # The actions Lambda documents for VPC access (those of AWSLambdaVPCAccessExecutionRole
    # v3 without its logs:*), and nothing of EC2 outside a VPC.
    wanted = {"ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces",
              "ec2:DescribeSubnets", "ec2:DeleteNetworkInterface",
              "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"}
    role = Stack(translated, VPC).resources()["FunctionRole"]
    ec2 = [s for s in statements(role) if actions(s)[0].startswith("ec2:")]
    assert {a for s in ec2 for a in actions(s)} == wanted
    eni = "arn:aws:ec2:us-east-1:123456789012:network-interface/*"
    for statement in ec2:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [
            statement["Resource"]]
        if statement["Sid"] != "DescribeVpcNetwork":
            assert eni in resources
            assert all(r.startswith("arn:aws:ec2:us-east-1:") for r in resources)
    no_vpc = Stack(translated).resources()["FunctionRole"]
    assert not [s for s in statements(no_vpc) if actions(s)[0].startswith("ec2:")]
    function = _only(Stack(translated, VPC).resources(), "AWS::Lambda::Function")
    assert function["VpcConfig"] == {"SubnetIds": ["subnet-0a1b2c3d", "subnet-4e5f6a7b"],
                                     "SecurityGroupIds": ["sg-0123abcd"]}


def test_the_s3_source_may_tell_a_missing_key_and_list_nothing_else(
    translated: dict[str, Any],
) -> None:
    stack = Stack(translated, EVERY_SOURCE[1])
    function = _only(stack.resources(), "AWS::Lambda::Function")
    assert function["Environment"]["Variables"]["KIQBEAT_CONFIG"] == (
        "s3://ops-config/kiqbeat/schedule.yaml")
    by_sid = {s["Sid"]: s for s in statements(stack.resources()["FunctionRole"])}
    assert by_sid["ReadScheduleObject"]["Action"] == "s3:GetObject"
    assert by_sid["ReadScheduleObject"]["Resource"] == (
        "arn:aws:s3:::ops-config/kiqbeat/schedule.yaml")
    # S3 answers a missing key with 404 only to whoever may list the bucket; with 403 else.
    listing = by_sid["TellMissingScheduleObject"]
    assert listing["Action"] == "s3:ListBucket"
    assert listing["Resource"] == "arn:aws:s3:::ops-config"
    assert listing["Condition"] == {"StringEquals": {"s3:prefix": "kiqbeat/schedule.yaml"}}


def test_the_alarms_watch_errors_missed_ticks_and_the_failure_queue(
    translated: dict[str, Any],
) -> None:
    alarms = {r["Properties"]["MetricName"]: r["Properties"]
              for r in Stack(translated).resources().values()
              if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert alarms["Errors"]["Namespace"] == "AWS/Lambda"
    assert alarms["TicksMissed"]["Namespace"] == "Kiqbeat"
    assert alarms["TicksMissed"]["Dimensions"] == [{"Name": "service", "Value": "kiqbeat"}]
    # Anything in the failure queue: a delivery Scheduler gave up on, or a failed invocation.
    depth = alarms["ApproximateNumberOfMessagesVisible"]
    assert depth["Namespace"] == "AWS/SQS"
    assert depth["Dimensions"] == [{"Name": "QueueName", "Value": "<FailureQueue.QueueName>"}]
    assert (depth["Threshold"], depth["ComparisonOperator"]) == (
        1, "GreaterThanOrEqualToThreshold")
    # Lambda could not even write to that queue.
    delivery = alarms["DestinationDeliveryFailures"]
    assert delivery["Namespace"] == "AWS/Lambda"
    assert delivery["Dimensions"] == [{"Name": "FunctionName", "Value": "<KiqbeatFunction>"}]
    assert (delivery["Statistic"], delivery["Threshold"]) == ("Sum", 1)
    # Any tick recorded as missed (older than the window, or skipped by catch_up) within
    # 5 minutes: the record kiqbeat backfill pushes from.
    recorded = alarms["MissedRecorded"]
    assert recorded["Namespace"] == "Kiqbeat"
    assert recorded["Dimensions"] == [{"Name": "service", "Value": "kiqbeat"}]
    assert (recorded["Statistic"], recorded["Period"], recorded["EvaluationPeriods"]) == (
        "Sum", 300, 1)
    assert (recorded["Threshold"], recorded["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    for alarm in (depth, delivery, recorded):
        assert alarm["TreatMissingData"] == "notBreaching"
    # Silence: fewer invocations a minute than there are schedules, for 5 minutes in a row;
    # with 3 shards one silent shard leaves 2 a minute, which the alarm sees.
    for count in ("1", "3"):
        silence = {r["Properties"]["MetricName"]: r["Properties"]
                   for r in Stack(translated, {"ShardCount": count}).resources().values()
                   if r["Type"] == "AWS::CloudWatch::Alarm"}["Invocations"]
        assert silence["Dimensions"] == [{"Name": "FunctionName", "Value": "<KiqbeatFunction>"}]
        assert (silence["Statistic"], silence["Period"]) == ("Sum", 60)
        assert (silence["Threshold"], silence["ComparisonOperator"]) == (
            count, "LessThanThreshold")
        assert silence["EvaluationPeriods"] == 5
        assert silence["TreatMissingData"] == "breaching"
    topic = "arn:aws:sns:us-east-1:123456789012:ops"
    with_topic = Stack(translated, {"AlarmTopicArn": topic}).resources()
    assert all(r["Properties"]["AlarmActions"] == [topic] for r in with_topic.values()
               if r["Type"] == "AWS::CloudWatch::Alarm")


def test_every_alarm_points_to_its_section_of_the_runbook(translated: dict[str, Any]) -> None:
    runbook = (ROOT / "docs" / "operations.md").read_text()
    headings = set(re.findall(r"^### (\w+)$", runbook, re.MULTILINE))
    alarms = {n: r for n, r in Stack(translated).resources().items()
              if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert len(alarms) >= 6
    for name, alarm in alarms.items():
        # The notification carries the description: it says where to read what to do.
        assert alarm["Properties"]["AlarmDescription"].endswith(
            f"Runbook: docs/operations.md#{name.lower()}"), name
        assert name in headings, f"docs/operations.md has no section ### {name}"


# --- the dashboard: the numbers the handler emits, beside Lambda's own ------------------------

def emitted_metrics(tmp_path: Path, redis_url: str, environ: dict[str, str]
                    ) -> set[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """(namespace, metric, dimensions) of every EMF metric the handler prints when run, as
    `kiqbeat invoke` runs it, on each shard's scheduled event, then on each example event of
    events/, by a function running two shards with the packaged schedule document."""
    scheduled = json.loads((ROOT / "events" / "scheduler.json").read_text())
    shards = [tmp_path / f"shard-{i}.json" for i in range(2)]
    for index, path in enumerate(shards):
        path.write_text(json.dumps(scheduled | {"shard": f"{index}/2"}))
    # A sharded deployment splits the store once, before its first invocation.
    reindex = tmp_path / "reindex.json"
    reindex.write_text(json.dumps({"kiqbeat": "reindex", "shards": 2}))
    shards.insert(0, reindex)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIQBEAT_", "POWERTOOLS_"))}
    env |= environ | {"KIQBEAT_CONFIG": str(ROOT / "handler" / "schedule.yaml"),
                      "KIQBEAT_REDIS_URL": redis_url,
                      "KIQBEAT_SHARD_COUNT": "2"}
    found = set()
    for event in [*shards, *sorted((ROOT / "events").glob("*.json"))]:
        done = subprocess.run([tool("kiqbeat"), "invoke", "--event", str(event)],
                              capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
        # The example scheduled events name no shard: this function refuses them (a
        # failure, counted).
        assert done.returncode == 0 or "name one in the event" in done.stderr, done.stderr
        for line in done.stderr.splitlines():
            if '"_aws"' not in line:
                continue
            doc = json.loads(line)
            for directive in doc["_aws"]["CloudWatchMetrics"]:
                for dimensions in directive["Dimensions"]:
                    named = tuple(sorted((d, doc[d]) for d in dimensions))
                    found |= {(directive["Namespace"], m["Name"], named)
                              for m in directive["Metrics"]}
    return found


def charted(body: dict[str, Any]) -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """(namespace, metric, dimensions) of every line of the dashboard's metric widgets."""
    lines = []
    for widget in body["widgets"]:
        if widget["type"] == "metric":
            for line in widget["properties"]["metrics"]:
                fields = line[:-1] if isinstance(line[-1], dict) else line
                namespace, metric, *dimensions = fields
                lines.append((namespace, metric,
                              tuple(sorted(zip(dimensions[::2], dimensions[1::2], strict=True)))))
    return lines


def dashboard(stack: Stack) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(
        _only(stack.resources(), "AWS::CloudWatch::Dashboard")["DashboardBody"])
    return body


def test_the_dashboard_charts_exactly_the_metrics_the_handler_emits(
    translated: dict[str, Any], tmp_path: Path, redis_url: str,
) -> None:
    # Names other than the defaults, set as template.yaml sets them: the dashboard follows.
    names = {"MetricsNamespace": "Ops/Kiqbeat", "ServiceName": "beat-eu"}
    emitted = emitted_metrics(tmp_path, redis_url, {
        "POWERTOOLS_METRICS_NAMESPACE": names["MetricsNamespace"],
        "POWERTOOLS_SERVICE_NAME": names["ServiceName"]})
    # Powertools' own cold-start count carries the function's name: not charted.
    kiqbeats = {m for m in emitted if m[1] != "ColdStart"}
    assert {m[1] for m in kiqbeats} >= {"TicksPushed", "InvocationsFailed", "Backfilled"}
    lines = charted(dashboard(Stack(translated, names | {"ShardCount": "2"})))
    ours = [line for line in lines if line[0] == names["MetricsNamespace"]]
    assert set(ours) == kiqbeats
    assert len(ours) == len(kiqbeats)
    # The rest are the function's and the failure queue's own metrics.
    function = (("FunctionName", "<KiqbeatFunction>"),)
    assert {line for line in lines if line[0] != names["MetricsNamespace"]} == {
        ("AWS/Lambda", metric, function)
        for metric in ("Invocations", "Errors", "Throttles", "Duration")} | {
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible",
         (("QueueName", "<FailureQueue.QueueName>"),))}


def test_the_dashboard_marks_the_timeout_the_shard_count_and_every_alarm(
    translated: dict[str, Any], function: dict[str, Any],
) -> None:
    stack = Stack(translated, {"ShardCount": "3"})
    body = dashboard(stack)
    marks = {mark["label"]: mark["value"] for widget in body["widgets"]
             for mark in widget["properties"].get("annotations", {}).get("horizontal", [])}
    assert marks == {"timeout": function["Timeout"] * 1000,
                     "expected invocations (ShardCount)": 3}
    alarms = {n for n, r in stack.resources().items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    (shown_alarms,) = [w["properties"]["alarms"] for w in body["widgets"] if w["type"] == "alarm"]
    assert sorted(shown_alarms) == sorted(f"<{name}.Arn>" for name in alarms)
    assert {w["properties"]["region"] for w in body["widgets"] if w["type"] == "metric"} == {
        "us-east-1"}
    # Dashboards are global: two Regions' stacks of one name must not share one.
    name = _only(stack.resources(), "AWS::CloudWatch::Dashboard")["DashboardName"]
    assert name == "kiqbeat-kiqbeat-us-east-1"


# --- what the function ships ----------------------------------------------------------------

# The AWS SDK and what only it needs: the Lambda runtime provides them, in versions that
# match each other; a packaged copy of any one would sit beside the runtime's boto3.
RUNTIME_SDK = {"boto3", "botocore", "s3transfer", "urllib3", "python-dateutil", "jmespath",
               "six"}


def _requirements() -> dict[str, tuple[str, list[str]]]:
    """handler/requirements.txt: name -> (exact version, hashes)."""
    text = (ROOT / "handler" / "requirements.txt").read_text().replace("\\\n", " ")
    found = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][0-9A-Za-z.+!-]*)((\s+--hash=sha256:"
                             r"[0-9a-f]{64})+)", line)
        assert match, f"not pinned with hashes: {line!r}"
        found[match.group(1).lower().replace("_", "-")] = (
            match.group(2), re.findall(r"sha256:([0-9a-f]{64})", match.group(3)))
    return found


def test_the_function_requirements_are_pyprojects_pinned_with_hashes() -> None:
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    shipped = _requirements()
    wanted = {Requirement(r).name.lower(): Requirement(r) for r in project["dependencies"]}
    assert set(shipped) == set(wanted)
    for name, (version, hashes) in shipped.items():
        assert version in wanted[name].specifier
        assert len(set(hashes)) == len(hashes) >= 1
    # The [aws] extra comes from elsewhere: Powertools from its layer, boto3 from the runtime.
    aws = {Requirement(r).name.lower() for r in project["optional-dependencies"]["aws"]}
    assert aws == {"aws-lambda-powertools", "boto3"}
    assert not aws & set(shipped)
    assert not RUNTIME_SDK & set(shipped)


def test_powertools_comes_from_its_public_layer_for_this_runtime_and_architecture(
    translated: dict[str, Any],
) -> None:
    function = _only(Stack(translated).resources(), "AWS::Lambda::Function")
    arns = [layer for layer in function["Layers"] if layer.startswith("arn:")]
    runtime = function["Runtime"].replace(".", "")  # python3.13 -> python313
    (architecture,) = function["Architectures"]
    assert arns == [f"arn:aws:lambda:us-east-1:017000801446:layer:"
                    f"AWSLambdaPowertoolsPythonV3-{runtime}-{architecture}:25"]
    other = "arn:aws-cn:lambda:cn-north-1:498634801083:layer:Powertools:25"
    overridden = _only(Stack(translated, {"PowertoolsLayerArn": other}).resources(),
                       "AWS::Lambda::Function")
    assert [layer for layer in overridden["Layers"] if layer.startswith("arn:")] == [other]


def python313() -> str | None:
    """A directory holding a python3.13 that runs (sam build looks for one on PATH)."""
    import shutil

    candidates = [shutil.which("python3.13")]
    pyenv = shutil.which("pyenv")
    if pyenv:  # a pyenv shim runs only for selected versions; the interpreter itself does
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30)
        candidates += sorted(str(p) for p in Path(root.stdout.strip()).glob(
            "versions/3.13*/bin/python3.13"))
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-c", "import sys; assert sys.version_info"
                                         "[:2] == (3, 13)"], capture_output=True,
                                        timeout=30).returncode == 0:
            return str(Path(candidate).parent)
    return None


@pytest.mark.skipif(os.environ.get("KIQBEAT_SKIP_SAM_BUILD") == "1",
                    reason="KIQBEAT_SKIP_SAM_BUILD=1 (sam build needs PyPI)")
def test_sam_build_works_without_a_container(tmp_path: Path) -> None:
    interpreter = python313()
    if interpreter is None:
        pytest.skip("sam build for the python3.13 runtime needs a python3.13 on PATH (Debian 12 "
                    "has none: install one with pyenv, uv or from python.org)")
    build = tmp_path / "build"
    env = sam_env(tmp_path)
    env["PATH"] = f"{interpreter}{os.pathsep}{env['PATH']}"
    done = subprocess.run([str(SAM), "build", "--template-file", str(TEMPLATE), "--build-dir",
                           str(build), "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=540, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    function = build / "KiqbeatFunction"
    assert (function / "app.py").exists()
    assert (function / "redis").is_dir() and (function / "yaml").is_dir()
    # Built for the runtime's Python and architecture.
    assert list(function.glob("yaml/_yaml.cpython-313-aarch64-linux-gnu.so"))
    packaged = {p.name.lower() for p in function.iterdir()}
    assert not packaged & {"boto3", "botocore", "urllib3", "dateutil", "s3transfer",
                           "aws_lambda_powertools", "aws_xray_sdk"}
    assert (build / "KiqbeatLibrary" / "python" / "kiqbeat" / "redis" / "lua" / "push.lua").exists()
