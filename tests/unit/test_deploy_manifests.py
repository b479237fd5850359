"""The Kubernetes manifests (deploy/k8s): rendered by kustomize, valid, and consistent with the code.

Each overlay is rendered with `kubectl kustomize` (offline); every core object is validated strictly
against the Kubernetes 1.33 schemas (kubernetes-validate), the KEDA ScaledObjects against KEDA's CRD models
(npm @kubernetes-models/keda, installed by scripts/keda-validate/install.sh) plus a check for unknown keys,
and the Strimzi KafkaTopics against a minimal schema from Strimzi's documentation. Then what the manifests
name is checked against the code: settings, topics and partitions, consumer groups, probe paths, entry points.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import secrets
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from docsum_gateway.settings import ConfigError, GatewaySettings, load_settings
from docsum_shared.events import Topic
from docsum_shared.kafka import DLQ_SUFFIX, topic_partitions
from docsum_shared.settings import LLMSettings, S, Settings
from docsum_summarizer.repository import work_to_do_sql
from docsum_summarizer.settings import SummarizerSettings
from tests.unit.deploy_support import (
    DEPLOY,
    ROOT,
    SERVICE_SETTINGS,
    clean_env,
    entry_point_exists,
    gateway_api_paths,
    health_paths_served,
    python_module_of,
    require_tool,
    run,
    setting_env_names,
)

OVERLAYS = ("dev", "prod", "plain")
K8S_VERSION = "1.33.0"
CRD_KINDS = {"ScaledObject", "KafkaTopic"}
CONSUMERS = ("parser", "chunker", "summarizer", "merger")


def _generator() -> Any:
    """deploy/generate.py as a module (a fresh one each time: a test may change its BASE)."""
    spec = importlib.util.spec_from_file_location("deploy_generate", DEPLOY / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    kubectl = require_tool("kubectl", "the image's kubectl (Debian: apt-get install kubectl)")
    result = run([kubectl, "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay)])
    assert result.returncode == 0, result.stderr
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def of_kind(overlay: str, kind: str) -> list[dict[str, Any]]:
    return [d for d in rendered(overlay) if d["kind"] == kind]


def config(overlay: str) -> dict[str, str]:
    (configmap,) = of_kind(overlay, "ConfigMap")
    return dict(configmap["data"])


def overlay_settings(overlay: str, model: type[S]) -> S:
    """The settings of `model` the services of this overlay run with (its ConfigMap; secrets do not matter here)."""
    data = {k: v for k, v in config(overlay).items() if v != ""}
    keep = clean_env()
    old = os.environ.copy()
    try:
        os.environ.clear()
        os.environ.update({**keep, **data})
        return model()
    finally:
        os.environ.clear()
        os.environ.update(old)


def pod_specs(overlay: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (d["metadata"]["name"], d["spec"]["template"]["spec"])
        for d in rendered(overlay)
        if d["kind"] in ("Deployment", "Job")
    ]


# --- generated files ------------------------------------------------------------------------------------


def test_generated_manifests_are_current() -> None:
    result = run([str(ROOT / ".venv" / "bin" / "python"), "deploy/generate.py", "--check"], env=clean_env())
    assert result.returncode == 0, result.stderr


def test_generator_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    generate = _generator()
    generate.BASE = tmp_path
    for name, content in generate.render(LLMSettings()).items():
        (tmp_path / name).write_text(content)
    assert generate.main(["--check"]) == 0
    (tmp_path / "topics.yaml").write_text(
        (tmp_path / "topics.yaml").read_text().replace("partitions: 12", "partitions: 3")
    )
    assert generate.main(["--check"]) == 1


def test_generator_follows_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    generate = _generator()
    for name in ("DOCSUM_TOPIC_PARTITIONS", "DOCSUM_CHUNK_TOPIC_PARTITIONS", "DOCSUM_LLM_MAX_INFLIGHT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCSUM_CHUNK_TOPIC_PARTITIONS", "24")
    monkeypatch.setenv("DOCSUM_LLM_MAX_INFLIGHT", "16")
    objects = {o["metadata"]["name"]: o for o in yaml.safe_load_all(generate.render()["scaledobjects.yaml"]) if o}
    summarizer = objects["docsum-summarizer"]["spec"]
    assert summarizer["maxReplicaCount"] == 24
    assert summarizer["triggers"][0]["metadata"]["lagThreshold"] == "32"


# --- rendering and schemas ------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_core_objects_are_valid_kubernetes(overlay: str) -> None:
    core = [d for d in rendered(overlay) if d["kind"] not in CRD_KINDS]
    assert {d["kind"] for d in core} >= {"Deployment", "Job", "ConfigMap", "Secret", "Service", "Ingress"}
    for document in core:
        try:
            kubernetes_validate.validate(document, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{overlay}: {document['kind']}/{document['metadata']['name']}: {exc.message} at {list(exc.path)}"
            )


def test_the_kubernetes_validator_rejects_an_unknown_field() -> None:
    (deployment, *_) = of_kind("prod", "Deployment")
    bad = copy.deepcopy(deployment)
    bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {"path": "/readyz"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def _keda_validate(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    node = require_tool("node", "Node.js (Debian: apt-get install nodejs npm)")
    script = ROOT / ".run" / "keda-validate" / "validate.mjs"
    if not (ROOT / ".run" / "keda-validate" / "node_modules" / "@kubernetes-models" / "keda").exists():
        pytest.fail("the KEDA models are not installed: run scripts/keda-validate/install.sh (make test does)")
    result = run([node, str(script)], input=json.dumps(objects))
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return {line["name"]: line["errors"] for line in lines}


# What KEDA's ScaledObject and its kafka and postgresql triggers take (keda.sh docs, v2.x): anything else
# is a typo the models let through.
SCALED_OBJECT_SPEC_KEYS = {
    "scaleTargetRef",
    "pollingInterval",
    "cooldownPeriod",
    "initialCooldownPeriod",
    "idleReplicaCount",
    "minReplicaCount",
    "maxReplicaCount",
    "fallback",
    "advanced",
    "triggers",
}
KAFKA_TRIGGER_KEYS = {"type", "metadata", "name", "authenticationRef", "useCachedMetrics", "metricType"}
KAFKA_METADATA_KEYS = {
    "bootstrapServers",
    "consumerGroup",
    "topic",
    "partitionLimitation",
    "lagThreshold",
    "activationLagThreshold",
    "offsetResetPolicy",
    "allowIdleConsumers",
    "excludePersistentLag",
    "scaleToZeroOnInvalidOffset",
    "limitToPartitionsWithLag",
    "ensureEvenDistributionOfPartitions",
    "version",
    "sasl",
    "tls",
}
POSTGRESQL_METADATA_KEYS = {
    "connectionFromEnv",
    "query",
    "targetQueryValue",
    "activationTargetQueryValue",
    "host",
    "port",
    "userName",
    "passwordFromEnv",
    "dbName",
    "sslmode",
}
METADATA_KEYS = {"kafka": KAFKA_METADATA_KEYS, "postgresql": POSTGRESQL_METADATA_KEYS}


def _unknown_keda_keys(obj: dict[str, Any]) -> list[str]:
    unknown = [f"spec.{k}" for k in obj["spec"] if k not in SCALED_OBJECT_SPEC_KEYS]
    for i, trigger in enumerate(obj["spec"].get("triggers", [])):
        unknown += [f"triggers[{i}].{k}" for k in trigger if k not in KAFKA_TRIGGER_KEYS]
        known = METADATA_KEYS.get(trigger.get("type", ""), set())
        unknown += [f"triggers[{i}].metadata.{k}" for k in trigger.get("metadata", {}) if k not in known]
    return unknown


@pytest.mark.parametrize("overlay", ("dev", "prod"))
def test_scaled_objects_are_valid_keda(overlay: str) -> None:
    objects = of_kind(overlay, "ScaledObject")
    assert sorted(o["metadata"]["name"] for o in objects) == sorted(f"docsum-{s}" for s in CONSUMERS)
    assert _keda_validate(objects) == {o["metadata"]["name"]: [] for o in objects}
    for obj in objects:
        assert _unknown_keda_keys(obj) == [], obj["metadata"]["name"]


def test_the_keda_checks_reject_wrong_types_missing_fields_and_unknown_keys() -> None:
    (good, *_) = of_kind("prod", "ScaledObject")
    wrong_type = copy.deepcopy(good)
    wrong_type["metadata"]["name"] = "wrong-type"
    wrong_type["spec"]["maxReplicaCount"] = "six"
    missing = copy.deepcopy(good)
    missing["metadata"]["name"] = "missing"
    del missing["spec"]["scaleTargetRef"]
    not_string = copy.deepcopy(good)
    not_string["metadata"]["name"] = "not-string"
    not_string["spec"]["triggers"][0]["metadata"]["lagThreshold"] = 8
    errors = _keda_validate([wrong_type, missing, not_string])
    assert all(errors[name] for name in ("wrong-type", "missing", "not-string")), errors
    typo = copy.deepcopy(good)
    typo["spec"]["maxReplicas"] = 3
    typo["spec"]["triggers"][0]["metadata"]["lagTreshold"] = "5"
    assert _unknown_keda_keys(typo) == ["spec.maxReplicas", "triggers[0].metadata.lagTreshold"]


KAFKA_TOPIC_SCHEMA = json.loads((DEPLOY / "k8s" / "kafkatopic.schema.json").read_text())


@pytest.mark.parametrize("overlay", ("dev", "prod"))
def test_kafka_topics_are_valid_strimzi(overlay: str) -> None:
    topics = of_kind(overlay, "KafkaTopic")
    assert topics
    for topic in topics:
        jsonschema.validate(topic, KAFKA_TOPIC_SCHEMA)


@pytest.mark.parametrize(
    "path, value",
    [
        (("spec", "partitions"), 0),
        (("spec", "replicas"), "3"),
        (("spec", "config"), ["retention.ms"]),
        (("spec", "replica"), 1),
    ],
)
def test_the_kafka_topic_schema_rejects_a_bad_topic(path: tuple[str, str], value: Any) -> None:
    (topic, *_) = of_kind("prod", "KafkaTopic")
    bad = copy.deepcopy(topic)
    bad[path[0]][path[1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, KAFKA_TOPIC_SCHEMA)
    unlabelled = copy.deepcopy(topic)
    del unlabelled["metadata"]["labels"]["strimzi.io/cluster"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(unlabelled, KAFKA_TOPIC_SCHEMA)


# --- consistent with the code ---------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_environment_variable_is_a_setting(overlay: str) -> None:
    known = setting_env_names()
    (secret,) = of_kind(overlay, "Secret")
    named = set(config(overlay)) | set(secret.get("stringData", {})) | set(secret.get("data", {}))
    for _, spec in pod_specs(overlay):
        for container in spec["containers"]:
            named |= {e["name"] for e in container.get("env", [])}
    assert named - known == set()
    # and each service's settings load: a value of the wrong type would stop that service at start
    for model in SERVICE_SETTINGS.values():
        overlay_settings(overlay, model)


def _gateway_settings(env: dict[str, str]) -> tuple[Any, dict[str, str]]:
    old = os.environ.copy()
    try:
        os.environ.clear()
        os.environ.update({**clean_env(), **{k: v for k, v in env.items() if v != ""}})
        return load_settings()  # a ConfigError names the setting that would stop it
    finally:
        os.environ.clear()
        os.environ.update(old)


def _filled(secret: dict[str, str], *keep: str) -> dict[str, str]:
    """The Secret as an operator fills it: each placeholder replaced by a random value (but those in keep)."""
    return {
        name: value if name in keep else re.sub(r"CHANGE-ME[\w-]*", lambda _: secrets.token_urlsafe(32), value)
        for name, value in secret.items()
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateway_starts_with_the_configmap_and_a_filled_secret(overlay: str) -> None:
    (secret,) = of_kind(overlay, "Secret")
    settings, api_keys = _gateway_settings({**config(overlay), **_filled(secret["stringData"])})
    assert api_keys and settings.health_port == 8081 and settings.health_host == "0.0.0.0"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateway_refuses_each_shipped_placeholder(overlay: str) -> None:
    """Deployed without editing docsum-secrets, the gateway would take a key and a ticket secret that anyone
    who read the repository knows: each placeholder left alone stops it, naming that setting."""
    (secret,) = of_kind(overlay, "Secret")
    placeholders = [name for name, value in secret["stringData"].items() if "CHANGE-ME" in value]
    assert {"DOCSUM_API_KEYS", "DOCSUM_WS_TICKET_SECRET", "DATABASE_URL"} <= set(placeholders)
    for name in placeholders:
        with pytest.raises(ConfigError) as refused:
            _gateway_settings({**config(overlay), **_filled(secret["stringData"], name)})
        assert refused.value.setting == name
        assert "CHANGE-ME" in refused.value.message and "CHANGE-ME-" not in refused.value.message  # no value


def test_the_gateway_process_refuses_the_shipped_secret_in_one_line() -> None:
    (secret,) = of_kind("prod", "Secret")
    env = {**clean_env(), **{k: v for k, v in {**config("prod"), **secret["stringData"]}.items() if v != ""}}
    done = subprocess.run([sys.executable, "-m", "docsum_gateway"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    (line,) = done.stderr.splitlines()
    assert line.startswith("docsum-gateway: bad setting ") and "placeholder" in line, line
    assert "CHANGE-ME-to" not in line  # the value itself is never printed


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_are_placeholders(overlay: str) -> None:
    (secret,) = of_kind(overlay, "Secret")
    for name, value in secret["stringData"].items():
        assert value == "" or "CHANGE-ME" in value, name


@pytest.mark.parametrize("overlay", ("dev", "prod"))
def test_kafka_topics_are_the_pipelines_topics_with_their_partitions(overlay: str) -> None:
    settings = overlay_settings(overlay, Settings)
    wanted = topic_partitions(settings)
    topics = {t["spec"]["topicName"]: t["spec"]["partitions"] for t in of_kind(overlay, "KafkaTopic")}
    assert topics == wanted
    assert {settings.topic(t) for t in Topic} | {settings.topic(t) + DLQ_SUFFIX for t in Topic} == set(topics)


@pytest.mark.parametrize("overlay", ("dev", "prod"))
def test_keda_watches_each_consumer_groups_topics_within_their_partitions(overlay: str) -> None:
    settings = overlay_settings(overlay, Settings)
    partitions = topic_partitions(settings)
    consumed = _generator().consumed_topics()
    for obj in of_kind(overlay, "ScaledObject"):
        service = obj["metadata"]["name"].removeprefix("docsum-")
        spec = obj["spec"]
        assert spec["scaleTargetRef"]["name"] == obj["metadata"]["name"]
        assert {d["metadata"]["name"] for d in of_kind(overlay, "Deployment")} >= {spec["scaleTargetRef"]["name"]}
        triggers = [t for t in spec["triggers"] if t["type"] == "kafka"]
        assert {t["metadata"]["topic"] for t in triggers} == {settings.topic(t) for t in consumed[service]}
        for trigger in triggers:
            meta = trigger["metadata"]
            assert meta["consumerGroup"] == settings.group(service)
            assert meta["bootstrapServers"] == settings.kafka_bootstrap_servers
            assert meta["allowIdleConsumers"] == "false"
            assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"] <= partitions[meta["topic"]]
    (summarizer,) = [o for o in of_kind(overlay, "ScaledObject") if o["metadata"]["name"] == "docsum-summarizer"]
    llm_max_inflight = overlay_settings(overlay, SummarizerSettings).llm_max_inflight
    assert summarizer["spec"]["triggers"][0]["metadata"]["lagThreshold"] == str(2 * llm_max_inflight)
    # Its chunks wait in PostgreSQL for their turn, announced on Kafka only once admitted: no lag counts
    # them, so it also scales on the work there (the query: test_admission_repository), at the same threshold.
    assert [t["type"] for t in summarizer["spec"]["triggers"]].count("postgresql") == 1
    (ready,) = [t["metadata"] for t in summarizer["spec"]["triggers"] if t["type"] == "postgresql"]
    assert ready["query"] == work_to_do_sql(settings.deployment)
    assert ready["targetQueryValue"] == str(2 * llm_max_inflight)
    # The URL is the summarizer's own: KEDA reads the variable from the container it scales.
    assert ready["connectionFromEnv"] == "DATABASE_URL"
    (deployment,) = [d for d in of_kind(overlay, "Deployment") if d["metadata"]["name"] == "docsum-summarizer"]
    secret_names = {s["secretRef"]["name"] for c in deployment["spec"]["template"]["spec"]["containers"]
               for s in c.get("envFrom", []) if "secretRef" in s}  # fmt: skip
    (secret,) = [d for d in of_kind(overlay, "Secret") if d["metadata"]["name"] in secret_names]
    assert "DATABASE_URL" in secret["stringData"]
    for service in set(CONSUMERS) - {"summarizer"}:  # their work is all on Kafka
        (obj,) = [o for o in of_kind(overlay, "ScaledObject") if o["metadata"]["name"] == f"docsum-{service}"]
        assert {t["type"] for t in obj["spec"]["triggers"]} == {"kafka"}


def test_without_operators_the_replicas_are_fixed_within_the_partitions() -> None:
    assert not [d for d in rendered("plain") if d["kind"] in CRD_KINDS]
    settings = overlay_settings("plain", Settings)
    partitions = topic_partitions(settings)
    consumed = _generator().consumed_topics()
    for deployment in of_kind("plain", "Deployment"):
        service = deployment["metadata"]["name"].removeprefix("docsum-")
        assert deployment["spec"]["replicas"] >= 1
        if service in consumed:
            assert deployment["spec"]["replicas"] <= min(partitions[settings.topic(t)] for t in consumed[service])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_ask_paths_the_services_serve(overlay: str) -> None:
    served = {path for path, status in health_paths_served().items() if status != 404}
    api = gateway_api_paths()
    settings = overlay_settings(overlay, GatewaySettings)
    for name, spec in pod_specs(overlay):
        for container in spec["containers"]:
            ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if probe not in container:
                    assert name == "docsum-migrate", f"{name} has no {probe}"
                    continue
                get = container[probe]["httpGet"]
                port = ports[get["port"]]
                if port == settings.health_port:
                    assert get["path"] in served, (name, probe)
                else:
                    assert port == settings.gateway_port and get["path"] in api, (name, probe)
            if name != "docsum-migrate":
                assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
                assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_run_our_entry_points_non_root_read_only_and_drain(overlay: str) -> None:
    settings = overlay_settings(overlay, Settings)
    for name, spec in pod_specs(overlay):
        assert spec["securityContext"]["runAsNonRoot"] is True
        tmp_volumes = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for container in spec["containers"]:
            module = python_module_of(container["command"])
            assert module is not None and entry_point_exists(module), (name, container["command"])
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert {m["mountPath"]: m["name"] for m in container["volumeMounts"]}["/tmp"] in tmp_volumes
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
        if name != "docsum-migrate":
            assert spec["terminationGracePeriodSeconds"] > settings.drain_timeout_s + 5, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_deployment_has_a_disruption_budget(overlay: str) -> None:
    budgets = {
        tuple(sorted(b["spec"]["selector"]["matchLabels"].items())) for b in of_kind(overlay, "PodDisruptionBudget")
    }
    deployments = of_kind(overlay, "Deployment")
    assert sorted(d["metadata"]["name"].removeprefix("docsum-") for d in deployments) == sorted((*CONSUMERS, "gateway"))
    for deployment in deployments:
        assert tuple(sorted(deployment["spec"]["selector"]["matchLabels"].items())) in budgets


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateway_is_reachable_with_long_lived_streams(overlay: str) -> None:
    (ingress,) = of_kind(overlay, "Ingress")
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600"
    assert annotations["nginx.ingress.kubernetes.io/proxy-send-timeout"] == "3600"
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    (service,) = of_kind(overlay, "Service")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]
    (gateway,) = [d for d in of_kind(overlay, "Deployment") if d["metadata"]["name"] == "docsum-gateway"]
    assert service["spec"]["selector"].items() <= gateway["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in gateway["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports[service["spec"]["ports"][0]["targetPort"]] == overlay_settings(overlay, GatewaySettings).gateway_port
