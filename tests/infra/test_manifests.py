"""infra/: the manifests validate strictly; the image command works without a container."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "infra" / "k8s"
DOCKERFILE = ROOT / "infra" / "Dockerfile"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
MANIFESTS = sorted(K8S.glob("*.yaml"))
# Shapes to copy, never applied as they are (they hold placeholders).
EXAMPLES = sorted(K8S.glob("*.example.yaml"))


def validator() -> str:
    exe = Path(sys.executable).with_name("kubernetes-validate")
    assert exe.exists(), "kubernetes-validate is missing: run scripts/setup"
    return str(exe)


def documents(name: str, folder: Path = K8S) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all((folder / name).read_text())}


def pod_spec(name: str, folder: Path = K8S) -> dict[str, Any]:
    doc = documents(name, folder)
    if "CronJob" in doc:
        spec: dict[str, Any] = doc["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    else:
        spec = doc["Deployment"]["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_manifest_passes_kubernetes_validate_strict(manifest: Path) -> None:
    done = subprocess.run([validator(), "--strict", str(manifest)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_strict_validation_rejects_an_unknown_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((K8S / "cronjob.yaml").read_text().replace(
        "concurrencyPolicy: Allow", "concurrencyPolicy: Allow\n  concurency: 1"))
    done = subprocess.run([validator(), "--strict", str(bad)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0


def kubernetes_steps() -> list[str]:
    """The shell lines of docs/deploy.md's Kubernetes section, in order, comments dropped."""
    section = DEPLOY_DOC.read_text().split("\n## Kubernetes\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    lines = [line.split("   #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def applied_manifests() -> list[Path]:
    """The files the documented steps `kubectl apply -f`, in order."""
    return [ROOT / m for line in kubernetes_steps()
            for m in re.findall(r"^kubectl apply -f (\S+)", line)]


def test_no_manifest_the_documented_steps_apply_defines_a_secret() -> None:
    """Applying them after `kubectl create secret` (or again, later) never replaces the
    Secret holding the real Redis URL; only the example file defines one."""
    applied = applied_manifests()
    assert {p.name for p in applied} >= {"config.yaml", "cronjob.yaml"}
    for manifest in [*applied, *(set(MANIFESTS) - set(EXAMPLES))]:
        kinds = [d["kind"] for d in yaml.safe_load_all(manifest.read_text()) if d]
        assert "Secret" not in kinds, f"{manifest.name} defines a Secret"
    assert not set(applied) & set(EXAMPLES)


def test_the_documented_steps_create_the_secret_the_pods_read_before_applying_them() -> None:
    steps = kubernetes_steps()
    creates = [i for i, line in enumerate(steps) if line.startswith("kubectl create secret")]
    first_apply = min(i for i, line in enumerate(steps) if line.startswith("kubectl apply -f"))
    assert creates and max(creates) < first_apply
    created = dict(re.findall(r"kubectl create secret generic (\S+) --from-literal=(\w+)=",
                              steps[i])[0] for i in creates)
    # The loop's metrics token: mounted where KIQBEAT_WEB_READ_TOKEN_FILE reads it, and
    # what podmonitor.yaml presents.
    (loop,) = pod_spec("deployment.yaml")["containers"]
    volumes = {v["name"]: v for v in pod_spec("deployment.yaml")["volumes"]}
    token_file = {e["name"]: e for e in loop["env"]}["KIQBEAT_WEB_READ_TOKEN_FILE"]["value"]
    (mount,) = [m for m in loop["volumeMounts"]
                if Path(token_file).parent == Path(m["mountPath"])]
    secret = volumes[mount["name"]]["secret"]["secretName"]
    assert created[secret] == Path(token_file).name
    monitor = documents("podmonitor.yaml")["PodMonitor"]["spec"]["podMetricsEndpoints"]
    assert {(e["authorization"]["credentials"]["name"], e["authorization"]["credentials"]["key"])
            for e in monitor} == {(secret, created[secret])}
    (name, key), = [(n, k) for n, k in created.items() if n != secret]
    for manifest in ("cronjob.yaml", "deployment.yaml"):
        (container,) = pod_spec(manifest)["containers"]
        env = {e["name"]: e for e in container["env"]}
        ref = env["KIQBEAT_REDIS_URL"]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == (name, key)
    (example,) = [p for p in EXAMPLES if p.name == "secret.example.yaml"]
    secret = yaml.safe_load(example.read_text())
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == name
    assert set(secret["stringData"]) == {key}


def test_the_documented_image_step_run_verbatim_points_every_workload_at_the_image(
    tmp_path: Path,
) -> None:
    """One image serves every role, and the documented step sets it in every manifest that
    names one (the console's too)."""
    (step,) = [line for line in kubernetes_steps() if line.startswith("sed ")]
    (tmp_path / "infra").mkdir()
    copied = tmp_path / "infra" / "k8s"
    copied.mkdir()
    for manifest in MANIFESTS:
        (copied / manifest.name).write_text(manifest.read_text())
    subprocess.run(["sh", "-c", step], cwd=tmp_path, check=True, timeout=30)
    image = re.findall(r"image: (\S+)", step.split("|")[2])[0]
    named = {m.name: re.findall(r"^\s*image: (\S+)", (copied / m.name).read_text(), re.M)
             for m in MANIFESTS}
    assert {"cronjob.yaml", "deployment.yaml", "console.yaml"} <= {n for n, i in named.items() if i}
    assert {i for images in named.values() for i in images} == {image}


def test_the_cronjob_runs_every_minute_overlapping_and_never_retries() -> None:
    cron = documents("cronjob.yaml")["CronJob"]["spec"]
    assert cron["schedule"] == "*/1 * * * *"
    assert cron["concurrencyPolicy"] == "Allow"
    assert 10 <= cron["startingDeadlineSeconds"] < 60
    assert "timeZone" not in cron
    job = cron["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0
    assert job["activeDeadlineSeconds"] <= 120
    assert job["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("shards", [1, 4])
def test_the_cronjob_runs_one_pod_per_shard_each_with_its_own_shard(
    shards: int, tmp_path: Path
) -> None:
    """An Indexed Job: pod I gets KIQBEAT_SHARD=I/N, which kiqbeat reads; N set in the
    places marked SHARDS gives N disjoint shards covering every schedule."""
    from kiqbeat.redis.definitions import shard_of
    from kiqbeat.settings import Settings

    text = (K8S / "cronjob.yaml").read_text()
    assert text.count("# SHARDS") == 3
    text = text.replace("completions: 1  # SHARDS", f"completions: {shards}  # SHARDS")
    text = text.replace("parallelism: 1  # SHARDS", f"parallelism: {shards}  # SHARDS")
    text = text.replace('"$(KIQBEAT_SHARD_INDEX)/1"', f'"$(KIQBEAT_SHARD_INDEX)/{shards}"')
    changed = tmp_path / "cronjob.yaml"
    changed.write_text(text)
    done = subprocess.run([validator(), "--strict", str(changed)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    job = yaml.safe_load(text)["spec"]["jobTemplate"]["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["completions"] == job["parallelism"] == shards
    env = {e["name"]: e for e in job["template"]["spec"]["containers"][0]["env"]}
    assert env["KIQBEAT_SHARD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']")
    names = [f"schedule-{i}" for i in range(200)]
    covered: list[str] = []
    for index in range(shards):  # what Kubernetes expands $(KIQBEAT_SHARD_INDEX) to
        value = env["KIQBEAT_SHARD"]["value"].replace("$(KIQBEAT_SHARD_INDEX)", str(index))
        shard = Settings.load({"KIQBEAT_SHARD": value}).shard
        assert shard == (index, shards)
        covered += [n for n in names if shard_of(n, shards) == index]
    assert sorted(covered) == sorted(names)


@pytest.mark.parametrize("manifest", ["cronjob.yaml", "deployment.yaml"])
def test_pods_run_non_root_on_a_read_only_root_with_redis_from_a_secret(manifest: str) -> None:
    spec = pod_spec(manifest)
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["KIQBEAT_REDIS_URL"]["valueFrom"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    config_path = container["args"][container["args"].index("--config") + 1]
    assert Path(config_path).parent == Path(mounts["schedule"])
    assert volumes["schedule"]["configMap"]["name"] == "kiqbeat-schedule"
    assert mounts["tmp"] == "/tmp"


def _local_pod(manifest: str, tmp_path: Path, redis_url: str, token: str,
               ) -> tuple[list[str], dict[str, str], dict[str, int]]:
    """A manifest's container as a local command: the same args and file variables, each
    mounted file written under tmp_path (the schedule from config.yaml; every token file
    holding `token`), each container port replaced by a free one; (command, env, ports)."""
    from tests.support.ports import free_port

    (container,) = pod_spec(manifest)["containers"]
    local = {p["containerPort"]: free_port() for p in container.get("ports", [])}
    schedule_text = documents("config.yaml")["ConfigMap"]["data"]["schedule.yaml"]

    def moved(value: str) -> str:
        if value.startswith("/etc/"):
            path = tmp_path / value.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(schedule_text if value.endswith("schedule.yaml") else token + "\n")
            return str(path)
        return str(local.get(int(value), value)) if value.isdigit() else value

    command = [str(Path(sys.executable).with_name("kiqbeat")),
               *[moved(a) for a in container["args"]]]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KIQBEAT_REDIS_URL": redis_url}
    env |= {k: v for k in ("PYTHONPATH",) if (v := os.environ.get(k))}  # a worktree's code
    env |= {e["name"]: moved(e["value"]) for e in container["env"] if "value" in e}
    ports = {p["name"]: local[p["containerPort"]] for p in container.get("ports", [])}
    return command, env, ports


def _get(url: str, token: str | None) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_deployment_runs_the_loop_logging_each_invocation_and_serving_metrics(
    tmp_path: Path, redis_url: str,
) -> None:
    """deployment.yaml's container, run as is: one JSON line per invocation on stdout, and
    the invocations' metrics on its `metrics` port for the token podmonitor.yaml presents."""
    from kiqbeat.core.report import REPORT_METRICS

    token = "t" * 8 + "0123456789abcdef"
    command, env, ports = _local_pod("deployment.yaml", tmp_path, redis_url, token)
    assert command[1] == "run"
    loop = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    try:
        assert loop.stdout is not None
        first = loop.stdout.readline()  # the loop invokes once as it starts
        url = f"http://127.0.0.1:{ports['metrics']}/metrics"
        status, text = _get(url, token)
        assert status == 200 and "kiqbeat_invocation_duration_seconds_count 1.0" in text
        assert _get(url, None)[0] == 401
    finally:
        loop.terminate()  # SIGTERM: it stops cleanly
        out, err = loop.communicate(timeout=60)
    assert loop.returncode == 0, err
    report = json.loads(first)
    assert report["new_schedules"] == 1
    # The pod's log carries every number the Lambda sends as a metric, under the same field,
    # one line per invocation and nothing else on stdout.
    assert {m.field for m in REPORT_METRICS} <= set(report)
    assert all(json.loads(line) for line in out.splitlines())


def test_the_console_runs_from_the_same_image_with_its_tokens(
    tmp_path: Path, redis_url: str,
) -> None:
    """console.yaml's container, run as is (its args and token files): it serves."""
    import time

    token = "c" * 8 + "0123456789abcdef"
    command, env, ports = _local_pod("console.yaml", tmp_path, redis_url, token)
    assert command[1] == "web"
    web = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if _get(f"http://127.0.0.1:{ports['http']}/healthz", None)[0] == 200:
                    break
            except OSError:
                pass
            assert web.poll() is None and time.monotonic() < deadline, "the console did not serve"
            time.sleep(0.2)
        status, text = _get(f"http://127.0.0.1:{ports['http']}/metrics", token)
        assert status == 200 and "kiqbeat_schedules " in text
    finally:
        web.terminate()
        web.communicate(timeout=60)


def _dockerfile() -> dict[str, list[str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"\s*([A-Z]+)\s+(.*)", line)
        if match:
            found.setdefault(match.group(1), []).append(match.group(2).strip())
    return found


def _exec_form(text: str) -> list[str]:
    parsed = yaml.safe_load(text)
    assert isinstance(parsed, list), f"use the exec form: {text}"
    return [str(p) for p in parsed]


def test_the_image_is_python313_slim_pinned_by_digest() -> None:
    text = DOCKERFILE.read_text()
    recipe = _dockerfile()
    bases = [base.split()[0] for base in recipe["FROM"]]
    # Every stage on one base, by digest; the digest is a build argument declared before the
    # first FROM with no default, so a build without it stops instead of floating.
    assert bases == ["python:3.13-slim@${PYTHON_DIGEST}"] * 2
    assert "PYTHON_DIGEST" in recipe["ARG"]
    assert text.index("ARG PYTHON_DIGEST\n") < text.index("FROM ")
    # How to get one is written down next to it.
    assert re.search(r"#\s+(docker buildx imagetools inspect|crane digest) python:3\.13-slim",
                     text)


def test_the_image_compiles_the_standard_librarys_bytecode() -> None:
    """The base image ships its standard library without bytecode (docker-library/python
    deletes every .pyc) and kiqbeat's writes none at run time (PYTHONDONTWRITEBYTECODE, a
    read-only root): its last stage compiles the standard library, where the interpreter
    itself says it is, and kiqbeat's venv, else each minute's run-once compiles every module
    it imports (3x its CPU, bench/cold.py --startup)."""
    last_stage = DOCKERFILE.read_text().replace("\\\n", " ").rpartition("\nFROM ")[2]
    runs = re.findall(r"^RUN (.*)$", last_stage, re.MULTILINE)
    compiles = [r for r in runs if "python -m compileall" in r]
    assert compiles, runs
    assert "sysconfig.get_path(\"stdlib\")" in compiles[0] and "/opt/kiqbeat" in compiles[0]
    assert "|| true" not in compiles[0]  # a module that cannot compile stops the build


def _requirement_names(lock: Path) -> set[str]:
    return {re.split(r"[=;\s]", line, maxsplit=1)[0].lower().replace("_", "-")
            for line in lock.read_text().splitlines() if re.match(r"[A-Za-z0-9]", line)}


def test_the_image_installs_the_dependencies_pinned_with_hashes() -> None:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    assert 'pip install --require-hashes --no-deps -r "$lock"' in text
    assert "pip install --no-deps ." in text
    # Nothing else is resolved at build time: every `pip install` is from a lock or --no-deps.
    installs = re.findall(r"pip install ([^&]*)", text)
    assert installs and all("--require-hashes" in i or "--no-deps" in i for i in installs), installs


def test_the_image_locks_exist_and_the_default_one_covers_every_role() -> None:
    """Each lock the recipe copies exists; LOCK chooses among exactly those; the default
    (`image`) holds every dependency of kiqbeat and of the extras its roles need (web: the
    console; aws: the AWS sources), the `base` one kiqbeat's own."""
    recipe = _dockerfile()
    copied: dict[str, str] = {}  # LOCK value -> the lock file it installs
    for line in recipe["COPY"]:
        if match := re.fullmatch(r"(\S+) \./requirements-(\w+)\.txt", line):
            copied[match.group(2)] = match.group(1)
    assert set(copied) == {"image", "base"}
    for source in copied.values():
        assert (ROOT / source).is_file(), source
    assert "ARG LOCK=image" in DOCKERFILE.read_text()
    (choices,) = re.findall(r'case "\$LOCK" in ([\w|]+)\)', DOCKERFILE.read_text())
    assert set(choices.split("|")) == set(copied)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[<>=\[;\s]", r, maxsplit=1)[0].lower() for r in requirements}

    base = names(project["dependencies"])
    optional = project["optional-dependencies"]
    extras = names(optional["web"] + optional["aws"])
    assert base | extras <= _requirement_names(ROOT / copied["image"])
    assert base <= _requirement_names(ROOT / copied["base"])


def test_the_image_is_slim_non_root_and_writes_no_bytecode() -> None:
    recipe = _dockerfile()
    assert all(base.startswith("python:3.13-slim@") for base in recipe["FROM"])
    user = recipe["USER"][-1].split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert any("PYTHONDONTWRITEBYTECODE=1" in env for env in recipe["ENV"])
    command = _exec_form(recipe["ENTRYPOINT"][-1]) + _exec_form(recipe["CMD"][-1])
    assert command == ["kiqbeat", "run-once", "--json", "--config", "/etc/kiqbeat/schedule.yaml"]
    (container,) = pod_spec("cronjob.yaml")["containers"]
    assert container["args"] == command[1:]


def test_the_image_command_works_outside_a_container(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    recipe = _dockerfile()
    command = _exec_form(recipe["ENTRYPOINT"][-1]) + _exec_form(recipe["CMD"][-1])
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(documents("config.yaml")["ConfigMap"]["data"]["schedule.yaml"])
    command = [str(schedule) if part == "/etc/kiqbeat/schedule.yaml" else part for part in command]
    command[0] = str(Path(sys.executable).with_name(command[0]))
    # The image's environment, with HOME somewhere kiqbeat must not need to write.
    env = {"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
           "HOME": str(tmp_path / "no-home"), "KIQBEAT_REDIS_URL": redis_url}
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, f"{shlex.join(command)}\n{done.stdout}{done.stderr}"
    report = json.loads(done.stdout)
    assert report["new_schedules"] == 1
    assert redis_client.dbsize() > 0  # kiqbeat recorded the schedule as first seen
    # The pod's log carries every number the Lambda sends as a metric, under the same field.
    from kiqbeat.core.report import REPORT_METRICS

    assert {m.field for m in REPORT_METRICS} <= set(report)
    assert not (tmp_path / "no-home").exists()
