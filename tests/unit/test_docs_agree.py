"""The docs agree with the code: every command, flag, variable, default and limit the README
and docs/ name is the code's, and every link between them resolves.

Each test reads the docs as text and the code as the program sees it (the real argparse
parser, the settings table `kiqbeat.settings.KNOBS`, the document fields table
`kiqbeat.document.fields.FIELDS`, the constants themselves), so a renamed flag, a changed
default or a moved bound fails here until the docs follow.
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
import yaml

from kiqbeat import settings
from kiqbeat.document.fields import FIELDS, Field
from kiqbeat.entrypoints.cli import _parser
from kiqbeat.settings import KNOBS, Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = (ROOT / "README.md", *sorted(DOCS.glob("*.md")))

# Flags of other tools that the docs show in their own command lines, by tool.
FOREIGN_FLAGS = {
    "pip": {"--require-hashes", "--no-deps", "--no-build-isolation"},
    "sam": {"--guided", "--parameter-overrides", "--env-vars", "--use-container", "--lint"},
    "docker": {"--build-arg"},
    "kubectl": {"--from-literal"},
    "redis-cli": {"--scan", "--pattern"},
    "kubernetes-validate": {"--strict"},
    "scripts/test": {"--server"},  # the server matrix's choice (scripts/matrix)
    # The benchmarks' own flags, as their parsers declare them.
    "bench/*.py": set(re.findall(r'add_argument\(\s*"(--[a-z][a-z0-9-]*)"', "".join(
        path.read_text(encoding="utf-8") for path in sorted(
            (Path(__file__).resolve().parents[2] / "bench").glob("*.py"))))),
    "aws": {"--stack-name", "--query", "--output", "--filter-pattern", "--queue-url",
            "--max-number-of-messages", "--visibility-timeout", "--attribute-names",
            "--message-attribute-names", "--function-name", "--name-prefix", "--max-items",
            "--cli-binary-format", "--payload",
            # ssm put-parameter, secretsmanager create-secret (docs/deploy.md's SAM steps)
            "--name", "--type", "--overwrite", "--tier", "--value", "--secret-string"},
}
# KIQBEAT_* names the docs use that are not kiqbeat's settings, with who reads them.
OTHER_VARIABLES = {
    "KIQBEAT_LONG": "tests/support/invariants.py: the long form of the fault suite",
    "KIQBEAT_TEST_CLOCK": "lib/kiqbeat/redis/clock.py: the test suite's clock (tests/conftest.py)",
    "KIQBEAT_URL": "docs/migration.md's Ruby example: the console's address, for KiqbeatClient",
    "KIQBEAT_TOKEN": "docs/migration.md's Ruby example: a console token, for KiqbeatClient",
}
# Lines a log or an error starts with, which read like a command in the docs' code spans.
MESSAGES = {"invocation", "operation", "OPERATION", "ACTION", "COMMAND"}


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


@cache
def commands() -> dict[tuple[str, ...], frozenset[str]]:
    """Every command of the real parser (`schedules put` is two words) and its options."""
    found: dict[tuple[str, ...], frozenset[str]] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for action in subcommands:
            for name, sub in action.choices.items():
                walk(sub, (*path, name))
        if path and not subcommands:
            found[path] = frozenset(o for a in parser._actions for o in a.option_strings
                                    if o not in ("-h", "--help"))

    walk(_parser(), ())
    return found


def code_spans(page_text: str) -> Iterator[str]:
    """The inline code spans and the lines of the fenced blocks of a page."""
    fenced = re.compile(r"^```([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
    for block in fenced.finditer(page_text):
        if block.group(1) in ("sh", "shell", "console", ""):
            yield from (line.split(" #", 1)[0] for line in block.group(2).splitlines())
    yield from re.findall(r"`([^`\n]+)`", fenced.sub("", page_text))


def kiqbeat_invocations(span: str) -> Iterator[tuple[str, list[str]]]:
    """(command words, the tokens after them) of each `kiqbeat COMMAND ...` in a span, up to
    a shell separator; `schedules put|update|remove` gives each action (`schedules calendar
    set|get` each verb)."""
    tokens = span.replace("\\|", " ").split()
    for i, token in enumerate(tokens):
        if token != "kiqbeat" or i + 1 >= len(tokens):
            continue
        before = tokens[:i]
        if not all(re.match(r"[A-Z_]+=", t) for t in before) and not (
                before and before[-1] in ("|", "&&", ";", "$(")):
            continue  # prose that names kiqbeat, not a command line
        rest: list[str] = []
        for later in tokens[i + 2:]:
            if later in ("|", "&&", ";", "#", ">", "kiqbeat") or later.startswith("#"):
                break
            rest.append(later)
        yield tokens[i + 1], rest


def doc_commands() -> Iterator[tuple[Path, tuple[str, ...], list[str]]]:
    """Each command line the docs show: (page, command path, the tokens after it)."""
    for page in PAGES:
        for span in code_spans(text(page)):
            for word, rest in kiqbeat_invocations(span):
                if (word == "schedules" and rest[:1] == ["calendar"] and len(rest) > 1
                        and not rest[1].startswith("-")):  # schedules calendar VERB
                    for verb in re.split(r"[|/]", rest[1]):
                        yield page, ("schedules", "calendar", verb), rest[2:]
                elif word == "schedules" and rest and not rest[0].startswith("-"):
                    for action in re.split(r"[|/]", rest[0]):
                        yield page, ("schedules", action), rest[1:]
                else:
                    yield page, (word,), rest


def test_every_command_the_docs_show_exists_with_the_flags_they_give_it() -> None:
    known = commands()
    wrong = []
    shown = list(doc_commands())
    assert len(shown) > 100  # the docs show that many command lines: all of them are read
    for page, path, rest in shown:
        if path[-1] in MESSAGES or path[0] in ("--help",):
            continue
        if path not in known and path != ("schedules",):
            wrong.append(f"{page.name}: kiqbeat {' '.join(path)} is no command")
            continue
        options = known.get(path, frozenset())
        for token in rest:
            flag = re.match(r"\[?(--?[a-z][a-z0-9-]*)", token)
            if flag and flag.group(1) not in options and path != ("schedules",):
                wrong.append(f"{page.name}: kiqbeat {' '.join(path)} has no {flag.group(1)}")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_every_flag_the_docs_name_is_kiqbeats_or_a_named_tools() -> None:
    ours = set().union(*commands().values()) | {k.flag for k in KNOBS} | {"--help"}
    theirs = set().union(*FOREIGN_FLAGS.values())
    unknown = {(page.name, flag) for page in PAGES
               for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text(page))
               if flag not in ours | theirs}
    assert not unknown, sorted(unknown)


def test_every_kiqbeat_variable_the_docs_name_is_read_by_the_code() -> None:
    from kiqbeat.web.auth import VARIABLES as WEB_VARIABLES

    ours = set(settings.VARIABLES) | {v for pair in WEB_VARIABLES.values() for v in pair}
    unknown = {(page.name, name) for page in PAGES
               for name in re.findall(r"\bKIQBEAT_[A-Z_]*[A-Z]\b", text(page))
               if name not in ours | set(OTHER_VARIABLES)}
    assert not unknown, sorted(unknown)
    long_form = (ROOT / "tests" / "support" / "invariants.py").read_text(encoding="utf-8")
    assert "KIQBEAT_LONG" in long_form


def table(page_text: str, heading: str) -> list[list[str]]:
    """The rows (cells without their backticks) of the first table under `heading`."""
    section = page_text.split(f"\n{heading}\n", 1)[1]
    rows = []
    for line in section.splitlines():
        if rows and not line.startswith("|"):
            break
        if line.startswith("|") and not re.match(r"\|\s*-", line):
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows[1:]


def settings_rows() -> dict[str, list[str]]:
    return {row[1].strip("`"): row
            for row in table(text(DOCS / "configuration.md"), "## Settings")}


def test_every_setting_is_in_the_configuration_table_under_its_flag_and_variable() -> None:
    rows = settings_rows()
    assert set(rows) == {k.variable for k in KNOBS}
    for knob in KNOBS:
        assert rows[knob.variable][0].strip("`") == knob.flag, knob.variable


@pytest.mark.parametrize("knob", KNOBS, ids=lambda k: k.variable)
def test_each_documented_setting_default_is_the_codes(knob: settings.Knob) -> None:
    documented = settings_rows()[knob.variable][2].strip("`")
    code = getattr(Settings(), knob.name)
    if documented == "—":
        assert code in (None, "", False), f"{knob.variable} defaults to {code!r} in the code"
    else:
        assert knob.parse(documented) == code


def field_rows() -> dict[str, list[str]]:
    return {row[0].strip("`"): row
            for row in table(text(DOCS / "configuration.md"), "## Document fields")}


def test_every_document_field_is_in_the_configuration_table_and_no_other() -> None:
    assert set(field_rows()) == {f.name for f in FIELDS}


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_each_documented_field_default_is_the_codes(field: Field) -> None:
    documented = field_rows()[field.name][2].strip("`")
    code = field.default
    if documented == "—":
        assert code in (None, "", ()), f"{field.name} defaults to {code!r} in the code"
        return
    value = field.check(yaml.safe_load(documented))
    assert (list(value) if isinstance(value, tuple) else value) == (
        list(code) if isinstance(code, tuple) else code)


def cli_sections() -> dict[tuple[str, ...], str]:
    """docs/cli.md's sections, by the command each heading names (### `kiqbeat X [Y]`)."""
    parts = re.split(r"^### `kiqbeat ([a-z -]+)`\n", text(DOCS / "cli.md"), flags=re.MULTILINE)
    return {tuple(parts[i].split()): parts[i + 1].split("\n## ", 1)[0]
            for i in range(1, len(parts), 2)}


def test_cli_reference_has_a_section_for_each_command_and_none_for_others() -> None:
    assert set(cli_sections()) == set(commands())


def test_cli_reference_names_every_flag_of_each_command() -> None:
    # Flags the page's introduction documents once for every command that has them.
    intro = text(DOCS / "cli.md").split("\n## ", 1)[0]
    shared = set(re.findall(r"`(--[a-z][a-z-]*)", intro))
    assert {k.flag for k in KNOBS if k.name not in ("tracing", "replay")} <= shared
    missing = [f"kiqbeat {' '.join(path)}: {option}"
               for path, section in cli_sections().items()
               for option in sorted(commands()[path] - shared)
               if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", section)]
    assert not missing, missing


def test_each_flag_default_the_cli_reference_gives_is_the_parsers() -> None:
    defaults: dict[tuple[str, ...], dict[str, object]] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
            for option in action.option_strings:
                defaults.setdefault(path, {})[option] = action.default

    walk(_parser(), ())
    checked = []
    for path, section in cli_sections().items():
        for option, documented in re.findall(
                r"`(--?[a-z][a-z-]*)[^`]*`[^`\n]*?\(default `([^`]+)`", section):
            checked.append(option)
            assert str(defaults[path][option]) in (documented, f"{documented}.0"), (path, option)
    assert len(checked) >= 6


def number(value: str) -> float:
    """The first number of a table cell or a sentence: '65,536 bytes (64 KiB)' → 65536;
    '64 KiB' → 65536; '40 s' → 40."""
    found = re.match(r"\s*([0-9][0-9,]*(?:\.[0-9]+)?)\s*(KiB|MiB)?", value)
    assert found, f"no number in {value!r}"
    scale = {"KiB": 1024, "MiB": 1024 * 1024, None: 1}[found.group(2)]
    return float(found.group(1).replace(",", "")) * scale


def constant(dotted: str) -> float:
    module, _, name = dotted.rpartition(".")
    return float(getattr(importlib.import_module(module), name))


def limit_rows() -> list[list[str]]:
    return table(text(DOCS / "design.md"), "## 11. Limits")


def test_design_limits_table_equals_the_codes_constants() -> None:
    rows = limit_rows()
    assert len(rows) > 30
    wrong = [f"{row[1]}: documented {row[2]}, code {constant(row[1].strip('`')):,.0f}"
             for row in rows if number(row[2]) != constant(row[1].strip("`"))]
    assert not wrong, wrong


def test_every_limits_constant_is_in_the_design_limits_table() -> None:
    from kiqbeat.core import limits

    listed = {row[1].strip("`") for row in limit_rows()}
    names = {f"kiqbeat.core.limits.{n}" for n in vars(limits) if n.isupper()}
    assert names <= listed, sorted(names - listed)


def test_each_value_the_docs_give_beside_a_constants_name_is_the_constants() -> None:
    """'64 KiB (`MAX_DEFINITION_BYTES`)' anywhere in the docs: the number is the code's."""
    by_name = {row[1].strip("`").rpartition(".")[2]: row[1].strip("`") for row in limit_rows()}
    wrong = []
    checked = 0
    for page in PAGES:
        pattern = r"([0-9][0-9,.]*\s*(?:KiB|MiB)?)[^0-9(`|]{0,40}\(`([A-Z][A-Z_]+)`"
        for value, name in re.findall(pattern, text(page)):
            if name in by_name:
                checked += 1
                if number(value) != constant(by_name[name]):
                    wrong.append(f"{page.name}: {value.strip()} for {name}")
    assert checked >= 10
    assert not wrong, wrong


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    plain = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return plain.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    body = re.sub(r"^```.*?^```", "", text(page), flags=re.MULTILINE | re.DOTALL)
    for heading in re.findall(r"^#{1,6} (.+)$", body, flags=re.MULTILINE):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def test_every_relative_link_in_the_readme_and_docs_resolves_to_a_file_and_anchor() -> None:
    broken = []
    for page in PAGES:
        body = re.sub(r"^```.*?^```", "", text(page), flags=re.MULTILINE | re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", body):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_every_design_citation_in_code_and_docs_names_a_section_of_docs_design() -> None:
    design = text(DOCS / "design.md")
    sections = dict(re.findall(r"^## (\d+)\. (.+)$", design, flags=re.MULTILINE))
    bodies = dict(zip(re.findall(r"^## (\d+)\.", design, flags=re.MULTILINE),
                      re.split(r"^## \d+\..*$", design, flags=re.MULTILINE)[1:], strict=True))
    wrong = []
    files = [p for folder in ("lib", "handler", "tests", "bench", "docs", "examples")
             for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md", ".lua", ".yaml")]
    for path in [*files, ROOT / "README.md"]:
        for cited, quoted in re.findall(r'DESIGN(?: §(\d+)(?:–\d+)?(?: "([^"]+)")?|:)',
                                        path.read_text(encoding="utf-8")):
            where = path.relative_to(ROOT)
            if not cited:
                wrong.append(f"{where}: DESIGN without a section number")
            elif cited not in sections:
                wrong.append(f"{where}: DESIGN §{cited} is no section of docs/design.md")
            elif quoted and quoted not in bodies[cited]:
                wrong.append(f'{where}: DESIGN §{cited} has no "{quoted}"')
    assert not wrong, wrong


def test_the_readme_gives_the_test_command_ci_runs() -> None:
    readme = text(ROOT / "README.md")
    assert "```sh\nscripts/setup && scripts/test\n```" in readme
    ci = [line for line in text(ROOT / ".ci" / "run").splitlines()
          if line and not line.startswith(("#", "set ", "cd ", "export "))]
    # Then the server matrix (Redis 8, Valkey 9, Redis 6.2), which the README names too.
    assert ci == ["bash scripts/setup", "bash scripts/test", "bash scripts/matrix"]
    assert "`scripts/matrix`" in readme


def test_the_readme_is_a_front_door_of_at_most_250_lines() -> None:
    assert len(text(ROOT / "README.md").splitlines()) <= 250


def template() -> dict[str, object]:
    """template.yaml read as YAML, CloudFormation's tags (`!Ref`, `!If`, ...) kept as text."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: suffix)
    loaded: dict[str, object] = yaml.load((ROOT / "template.yaml").read_text(), Loader=Loader)
    return loaded


def test_deploy_parameter_table_names_every_template_parameter() -> None:
    rows = table(text(DOCS / "deploy.md"), "Typical parameter overrides:")
    named = {name.strip("` ") for row in rows for name in row[0].split(",")}
    parameters = template()["Parameters"]
    assert isinstance(parameters, dict)
    assert set(parameters) <= named, sorted(set(parameters) - named)
    assert named <= set(parameters), sorted(named - set(parameters))


def test_deploy_environment_table_names_every_variable_the_function_sets() -> None:
    resources = template()["Resources"]
    assert isinstance(resources, dict)
    environment = resources["KiqbeatFunction"]["Properties"]["Environment"]["Variables"]
    rows = table(text(DOCS / "deploy.md"), "### The function's environment")
    named = {row[0].strip("`") for row in rows}
    assert named == set(environment), set(environment) ^ named
