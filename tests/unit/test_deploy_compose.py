"""docker-compose.yml and deploy/Dockerfile, checked without a Docker engine.

The compose file is resolved as `docker compose config` resolves it — by compose-go, the library the compose
plugin is built on (scripts/compose-config, built into .run/tools by `make test`): interpolation, the
compose-spec schema, dependencies. Then whatever it names must exist: entry points, settings.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy_support import (
    DEPLOY,
    ROOT,
    clean_env,
    entry_point_exists,
    python_module_of,
    require_tool,
    run,
    setting_env_names,
)

SERVICES = ("gateway", "parser", "chunker", "summarizer", "merger")
INSTALL = "scripts/compose-config/install.sh"


def resolve(path: Path, **env: str) -> dict[str, Any]:
    tool = require_tool("compose-config", INSTALL)
    result = run([tool, str(path)], env={**clean_env(), **env})
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


# The gateway's keys have no default in the compose file: whoever runs it gives them.
KEYS = {"DOCSUM_API_KEYS": "local=" + "k" * 32}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return resolve(ROOT / "docker-compose.yml", **KEYS)


def test_compose_ships_no_api_key() -> None:
    tool = require_tool("compose-config", INSTALL)
    refused = run([tool, str(ROOT / "docker-compose.yml")], env=clean_env())
    assert refused.returncode != 0
    assert "DOCSUM_API_KEYS" in refused.stderr, refused.stderr


def test_the_resolver_refuses_a_broken_file(tmp_path: Path) -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace("condition: service_completed_successfully", "condition: service_finished"))
    tool = require_tool("compose-config", INSTALL)
    assert run([tool, str(broken)], env={**clean_env(), **KEYS}).returncode != 0
    many = {**clean_env(), **KEYS, "PARSER_REPLICAS": "many"}
    assert run([tool, str(ROOT / "docker-compose.yml")], env=many).returncode != 0


def test_every_service_gets_the_shared_settings(compose: dict[str, Any]) -> None:
    services = compose["services"]
    shared = services["parser"]["environment"]
    assert {"DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS", "DOCSUM_LLM_MODEL", "DOCSUM_HEALTH_PORT"} <= set(shared)
    for name in (*SERVICES, "migrate"):
        assert shared.items() <= services[name]["environment"].items(), name
    assert "DOCSUM_API_KEYS" in services["gateway"]["environment"]
    assert services["gateway"]["environment"]["DOCSUM_HEALTH_HOST"] == "0.0.0.0"


def test_every_environment_variable_is_a_setting(compose: dict[str, Any]) -> None:
    known = setting_env_names()
    for name in (*SERVICES, "migrate"):
        assert set(compose["services"][name]["environment"]) - known == set(), name


def test_every_command_is_an_entry_point(compose: dict[str, Any]) -> None:
    commands = {name: compose["services"][name]["command"] for name in (*SERVICES, "migrate")}
    for name, command in commands.items():
        module = python_module_of(command)
        assert module is not None and entry_point_exists(module), (name, command)
    assert python_module_of(commands["migrate"]) == "docsum_shared.migrations"
    assert {python_module_of(commands[s]) for s in SERVICES} == {f"docsum_{s}" for s in SERVICES}


def test_start_order_health_and_replicas(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    kafka = services["kafka"]
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft
    # the data survives a restart: the log dirs are the mounted volume
    assert any(v["target"] == kafka["environment"]["KAFKA_LOG_DIRS"] for v in kafka["volumes"])
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in SERVICES:
        service = services[name]
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert service["healthcheck"]["test"], name
        assert "/readyz" in " ".join(service["healthcheck"]["test"])
        assert service["read_only"] is True and "/tmp" in service["tmpfs"]
    for name in ("postgres", "kafka"):
        assert services[name]["healthcheck"]["test"]
    scaled = resolve(ROOT / "docker-compose.yml", **KEYS, SUMMARIZER_REPLICAS="3", PARSER_REPLICAS="2")["services"]
    assert scaled["summarizer"]["deploy"]["replicas"] == 3 and scaled["parser"]["deploy"]["replicas"] == 2
    assert scaled["merger"]["deploy"]["replicas"] == 1


# --- the Dockerfile -------------------------------------------------------------------------------------

DOCKERFILE = (DEPLOY / "Dockerfile").read_text()


def _instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def test_the_image_is_built_from_the_lock_in_stages() -> None:
    instructions = _instructions()
    stages = [rest for keyword, rest in instructions if keyword == "FROM"]
    assert len(stages) >= 2 and any(" AS builder" in s for s in stages)
    syncs = [rest for keyword, rest in instructions if keyword == "RUN" and "uv sync" in rest]
    assert syncs and all("--locked" in s and "--no-dev" in s for s in syncs)
    runtime = DOCKERFILE[DOCKERFILE.index("AS runtime") :]
    assert "uv" not in re.sub(r"#.*", "", runtime).split("COPY --from=builder")[0]  # no build tool in the runtime
    assert "COPY --from=builder /app/.venv /app/.venv" in runtime


def test_the_image_runs_as_a_user_with_a_healthcheck() -> None:
    instructions = _instructions()
    (user,) = [rest for keyword, rest in instructions if keyword == "USER"]
    assert user.split(":")[0] not in ("0", "root")
    (healthcheck,) = [rest for keyword, rest in instructions if keyword == "HEALTHCHECK"]
    assert "/readyz" in healthcheck and "DOCSUM_HEALTH_PORT" in healthcheck


def test_the_images_settings_and_command_are_real() -> None:
    instructions = _instructions()
    env_names = set()
    for keyword, rest in instructions:
        if keyword == "ENV":
            env_names |= set(re.findall(r"([A-Z_][A-Z0-9_]*)=", rest))
    ours = {n for n in env_names if n.startswith("DOCSUM_")}
    assert ours and ours <= setting_env_names()
    (cmd,) = [rest for keyword, rest in instructions if keyword == "CMD"]
    module = python_module_of(yaml.safe_load(cmd))
    assert module is not None and entry_point_exists(module)
    # the services the comments promise, and the packages the build installs: those, and the shared package
    # for its tracing extra
    packages = set(re.findall(r"--package (docsum-[a-z]+)", DOCKERFILE))
    assert packages == {f"docsum-{s}" for s in SERVICES} | {"docsum-shared"}
    assert "--package docsum-shared --extra otel" in DOCKERFILE


def test_docker_compose_itself_agrees_where_its_plugin_is_installed() -> None:
    docker = shutil.which("docker")
    if docker is None or run([docker, "compose", "version"]).returncode != 0:
        pytest.skip("no `docker compose` plugin on this machine: compose-config (compose-go) resolved the file above")
    result = run([docker, "compose", "-f", "docker-compose.yml", "config", "--quiet"], env=clean_env())
    assert result.returncode == 0, result.stderr
