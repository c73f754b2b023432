"""template.yaml: linters pass, the Handler imports, its variables are those the code reads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

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
    assert set(app.VARIABLES) <= environ.read
    assert environ.read - set(app.VARIABLES) == {"REDIS_URL"}  # the last-resort address
    # The rest are Powertools' own names, read by Powertools itself.
    assert {constants.SERVICE_NAME_ENV, constants.METRICS_NAMESPACE_ENV,
            constants.POWERTOOLS_LOG_LEVEL_ENV} == set(app.POWERTOOLS_VARIABLES)


def test_the_trigger_is_an_every_minute_cron_schedule_that_gives_up_fast(
    function: dict[str, Any],
) -> None:
    from handler import app

    (event,) = function["Events"].values()
    props = event["Properties"]
    assert event["Type"] == "ScheduleV2"
    assert props["ScheduleExpression"] == "cron(* * * * ? *)"
    assert props["ScheduleExpressionTimezone"] == "UTC"
    assert props["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert props["RetryPolicy"]["MaximumRetryAttempts"] <= 1
    assert props["RetryPolicy"]["MaximumEventAgeInSeconds"] == 60
    assert "DeadLetterConfig" in props
    # The Input the handler receives, once Scheduler fills in its placeholders.
    filled = (props["Input"].replace("<aws.scheduler.scheduled-time>", "2026-03-08T07:00:00Z")
              .replace("<aws.scheduler.execution-id>", "e-1")
              .replace("<aws.scheduler.attempt-number>", "2"))
    fired = app.trigger(json.loads(filled))
    assert (fired.kind, fired.correlation_id, fired.attempt) == ("scheduler", "e-1", 2)
    assert fired.scheduled_time is not None and fired.scheduled_time.minute == 0

    invoke = function["EventInvokeConfig"]
    assert invoke["MaximumRetryAttempts"] == 0
    assert invoke["MaximumEventAgeInSeconds"] == 60
    assert invoke["DestinationConfig"]["OnFailure"]["Type"] == "SQS"


def test_the_function_is_arm64_python311_and_times_out_well_under_a_minute(
    function: dict[str, Any],
) -> None:
    assert function["Runtime"] == "python3.11"
    assert function["Architectures"] == ["arm64"]
    assert function["Timeout"] <= 30


def _statements(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, Mapping):
        if "Effect" in node and "Action" in node:
            yield dict(node)
        for value in node.values():
            yield from _statements(value)
    elif isinstance(node, list):
        for value in node:
            yield from _statements(value)


def test_the_role_reads_only_named_resources(template: dict[str, Any]) -> None:
    role = template["Resources"]["FunctionRole"]["Properties"]
    statements = list(_statements(role["Policies"]))
    assert {s["Sid"] for s in statements} >= {
        "ReadScheduleParameter", "ReadScheduleObject", "ReadScheduleProfile", "ReadRedisSecret"}
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [
            statement["Action"]]
        assert all("*" not in a for a in actions), statement
        assert not any(re.search(r":(Put|Delete|Create|Update)", a) for a in actions
                       if not a.startswith(("logs:", "xray:", "sqs:"))), statement
        # Only X-Ray's write calls have no resource-level permissions.
        assert statement["Resource"] != "*" or statement["Sid"] == "WriteTraces", statement


def test_the_alarms_watch_errors_and_missed_ticks(template: dict[str, Any]) -> None:
    alarms = {r["Properties"]["MetricName"]: r["Properties"]
              for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert alarms["Errors"]["Namespace"] == "AWS/Lambda"
    assert alarms["TicksMissed"]["Namespace"] == {"Ref": "MetricsNamespace"}
    assert alarms["TicksMissed"]["Dimensions"] == [{"Name": "service",
                                                   "Value": {"Ref": "ServiceName"}}]


def _requirement_names(lines: list[str]) -> set[str]:
    names = set()
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(re.split(r"[\[<>=~! ;]", line, maxsplit=1)[0].lower().replace("_", "-"))
    return names


def test_the_function_requirements_match_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _requirement_names(project["dependencies"] + project["optional-dependencies"]["aws"])
    shipped = _requirement_names((ROOT / "handler" / "requirements.txt").read_text().splitlines())
    # boto3 is left out on purpose: the Lambda Python runtime ships it.
    assert shipped == wanted - {"boto3"}


@pytest.mark.skipif(os.environ.get("KIQBEAT_SKIP_SAM_BUILD") == "1",
                    reason="KIQBEAT_SKIP_SAM_BUILD=1 (sam build needs PyPI)")
def test_sam_build_works_without_a_container(tmp_path: Path) -> None:
    build = tmp_path / "build"
    done = subprocess.run([str(SAM), "build", "--template-file", str(TEMPLATE), "--build-dir",
                           str(build), "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=540, env=sam_env(tmp_path),
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (build / "KiqbeatFunction" / "app.py").exists()
    assert (build / "KiqbeatFunction" / "aws_lambda_powertools").is_dir()
    assert (build / "KiqbeatLibrary" / "python" / "kiqbeat" / "redis" / "lua" / "push.lua").exists()
