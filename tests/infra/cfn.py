"""template.yaml as CloudFormation would see it: SAM's own translation, then parameters applied.

`translate` runs the SAM translator that ships with the SAM CLI (.tools/sam), so the tests
look at the AWS::Scheduler::Schedule, AWS::Lambda::Function and roles SAM really emits.
`render` resolves the intrinsic functions the template uses for one set of parameter
values and pseudo parameters (a stack name, a stack ID), and drops what a false condition
removes. `rule_failures` evaluates the template's Rules as CloudFormation does before it
changes anything. Both cover only the functions this template uses, and fail loudly on
any other.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SAM_PYTHON = ROOT / ".tools" / "sam" / "bin" / "python"
REGION = "us-east-1"
ACCOUNT = "123456789012"

_TRANSLATE = """
import json, sys
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

class NoManagedPolicies:
    def load(self):
        return {}

template = yaml_parse(sys.stdin.read())
for resource in template["Resources"].values():
    for key in ("CodeUri", "ContentUri"):  # what `sam package` puts there
        if key in resource.get("Properties", {}):
            resource["Properties"][key] = "s3://packaged/" + key
print(json.dumps(transform(template, {}, NoManagedPolicies())))
"""


def translate(template_text: str) -> dict[str, Any]:
    """The plain CloudFormation template SAM makes of `template_text`."""
    assert SAM_PYTHON.exists(), "the SAM CLI is missing: run scripts/setup"
    env = os.environ | {"AWS_DEFAULT_REGION": REGION, "SAM_CLI_TELEMETRY": "0"}
    done = subprocess.run([str(SAM_PYTHON), "-c", _TRANSLATE], input=template_text,
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    translated: dict[str, Any] = json.loads(done.stdout)
    return translated


@dataclass
class Stack:
    """Parameter values (defaults filled in) and pseudo parameters of one imagined stack."""

    template: dict[str, Any]
    parameters: dict[str, str] = field(default_factory=dict)
    stack_name: str = "kiqbeat"
    stack_id: str = ""

    def __post_init__(self) -> None:
        declared = self.template["Parameters"]
        unknown = set(self.parameters) - set(declared)
        assert not unknown, f"no such parameters: {unknown}"
        values = {name: str(spec.get("Default", "")) for name, spec in declared.items()}
        self.values = values | self.parameters
        self.stack_id = self.stack_id or (
            f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{self.stack_name}/"
            "6a1ce3d0-4b1a-11ef-9f6e-0affd1c3f4a5")

    def ref(self, name: str) -> Any:
        pseudo = {"AWS::StackName": self.stack_name, "AWS::StackId": self.stack_id,
                  "AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::Partition": "aws",
                  "AWS::URLSuffix": "amazonaws.com"}
        if name in pseudo:
            return pseudo[name]
        if name in self.values:
            if self.template["Parameters"][name]["Type"] == "CommaDelimitedList":
                return self.values[name].split(",")
            return self.values[name]
        resource = self.template.get("Resources", {}).get(name, {})
        if resource.get("Type") == "AWS::SNS::Topic":  # Ref gives the topic's ARN
            return f"arn:aws:sns:{REGION}:{ACCOUNT}:{self.stack_name}-{name}-1A2B3C4D5E6F"
        return f"<{name}>"  # a resource: its physical ID is not known before deploying

    def condition(self, name: str) -> bool:
        return bool(self.resolve(self.template["Conditions"][name]))

    def resolve(self, node: Any) -> Any:
        """`node` with every intrinsic function applied; `NO_VALUE` where one removes it."""
        if isinstance(node, list):
            return [v for v in (self.resolve(item) for item in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            if key == "Ref" or key.startswith("Fn::") or key == "Condition":
                return self._function(key, arg)
        resolved = {k: self.resolve(v) for k, v in node.items()}
        return {k: v for k, v in resolved.items() if v is not NO_VALUE}

    def _function(self, key: str, arg: Any) -> Any:
        if key == "Ref":
            return NO_VALUE if arg == "AWS::NoValue" else self.ref(arg)
        if key == "Condition":
            return self.condition(arg)
        if key == "Fn::If":
            name, then, otherwise = arg
            return self.resolve(then if self.condition(name) else otherwise)
        if key == "Fn::Sub":
            text, extra = (arg, {}) if isinstance(arg, str) else arg
            names = {k: self.resolve(v) for k, v in extra.items()}
            return re.sub(r"\$\{([^}!]+)\}",
                          lambda m: str(names[m.group(1)] if m.group(1) in names
                                        else self.ref(m.group(1))), text)
        if key == "Fn::GetAtt":
            target = arg if isinstance(arg, list) else arg.split(".", 1)
            return f"<{target[0]}.{target[1]}>"
        args = self.resolve(arg)
        if key == "Fn::Join":
            return args[0].join(args[1])
        if key == "Fn::Split":
            return args[1].split(args[0])
        if key == "Fn::Select":
            return args[1][int(args[0])]
        if key == "Fn::FindInMap":
            return self.template["Mappings"][args[0]][args[1]][args[2]]
        if key == "Fn::Equals":
            return args[0] == args[1]
        if key == "Fn::Not":
            return not args[0]
        if key == "Fn::And":
            return all(args)
        if key == "Fn::Or":
            return any(args)
        # Rule functions (the Rules section only).
        if key == "Fn::Contains":
            return args[1] in args[0]
        if key == "Fn::EachMemberEquals":
            return all(member == args[1] for member in args[0])
        raise AssertionError(f"the test renderer does not know {key}")

    def resources(self) -> dict[str, dict[str, Any]]:
        """The resources this stack would have, with their properties resolved."""
        found = {}
        for name, resource in self.template["Resources"].items():
            if "Condition" in resource and not self.condition(resource["Condition"]):
                continue
            found[name] = {"Type": resource["Type"],
                           "Properties": self.resolve(resource.get("Properties", {}))}
        return found

    def rule_failures(self) -> list[str]:
        """The AssertDescription of every rule assertion these parameters break."""
        failures = []
        for rule in self.template.get("Rules", {}).values():
            if "RuleCondition" in rule and not self.resolve(rule["RuleCondition"]):
                continue
            failures += [a["AssertDescription"] for a in rule["Assertions"]
                         if not self.resolve(a["Assert"])]
        return failures

    def pattern_failures(self) -> list[str]:
        """Parameters whose value (or, for a list, one of its values) breaks AllowedPattern.

        CloudFormation matches the pattern against the whole value, and against each value
        of a CommaDelimitedList.
        """
        failures = []
        for name, spec in self.template["Parameters"].items():
            pattern = spec.get("AllowedPattern")
            if pattern is None:
                continue
            value = self.values[name]
            values = value.split(",") if spec["Type"] == "CommaDelimitedList" else [value]
            if not all(re.fullmatch(pattern, v) for v in values):
                failures.append(name)
        return failures


class _NoValue:
    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE: Any = _NoValue()


def statements(role: dict[str, Any]) -> list[dict[str, Any]]:
    """Every statement of a rendered AWS::IAM::Role's inline policies."""
    return [s for policy in role["Properties"].get("Policies", [])
            for s in policy["PolicyDocument"]["Statement"]]


def actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return action if isinstance(action, list) else [action]
