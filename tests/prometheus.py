"""deploy/observability/ as the tests read it: Debian's Prometheus and promtool, the PromQL of the alert
rules and of the dashboard with the metric names it uses, every name docsum exports, and the cluster
scrape config turned into one with static targets (Debian's build has no Kubernetes discovery).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OBSERVABILITY = ROOT / "deploy" / "observability"
RULES = OBSERVABILITY / "alerts.yml"
RULE_TESTS = OBSERVABILITY / "alerts.test.yml"
CLUSTER_CONFIG = OBSERVABILITY / "prometheus.yml"
COMPOSE_CONFIG = OBSERVABILITY / "prometheus.compose.yml"
DASHBOARD = OBSERVABILITY / "grafana" / "docsum.json"

# Series Prometheus itself writes for every target.
SCRAPE_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_series_added"}
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
}
_NOT_METRICS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


@cache
def binary(name: str) -> str:
    """The path of `prometheus` or `promtool`, installed by the project's script when missing."""
    return subprocess.run(
        [str(ROOT / "scripts" / "prometheus.sh"), "bin", name], check=True, capture_output=True, text=True
    ).stdout.strip()


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def rule_expressions() -> dict[str, str]:
    """alert name -> its expression."""
    return {rule["alert"]: rule["expr"] for group in load_yaml(RULES)["groups"] for rule in group["rules"]}


def dashboard_panels() -> list[dict[str, Any]]:
    """Every panel of the dashboard that queries (rows left out)."""
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p.get("type") != "row"]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: what is left once strings, label matchers, ranges,
    grouping clauses, functions and keywords are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w$.])[A-Za-z_:][\w:]*", text):
        called = text[match.end() :].lstrip().startswith("(")
        if not called and match.group().lower() not in _NOT_METRICS:
            names.add(match.group())
    return names


def _exposed(families: Any) -> set[str]:
    return {family.name + suffix for family in families for suffix in _SUFFIXES[family.type]}


@cache
def exported_names() -> frozenset[str]:
    """Every series name a docsum process exposes: shared/docsum_shared/metrics.py's metrics, and the
    gateway's HTTP metrics as prometheus-fastapi-instrumentator makes them (asked of the library itself,
    on an app of its own with a registry of its own)."""
    from fastapi import FastAPI
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics import MetricWrapperBase
    from prometheus_fastapi_instrumentator import Instrumentator
    from starlette.testclient import TestClient

    from docsum_shared import metrics

    ours = _exposed(f for m in vars(metrics).values() if isinstance(m, MetricWrapperBase) for f in m.describe())
    registry = CollectorRegistry()
    app = FastAPI()
    app.get("/ping")(lambda: "pong")
    Instrumentator(registry=registry).instrument(app)
    with TestClient(app) as client:
        client.get("/ping")
    return frozenset(ours | _exposed(registry.collect()))


def config_with_static_pods(pods: list[dict[str, str]], *, scrape_interval: str | None = None) -> dict[str, Any]:
    """prometheus.yml with its Kubernetes pod discovery replaced by static targets that carry the labels
    the discovery would give: each pod a dict of `__address__` and `__meta_kubernetes_*` labels. The
    relabelling that follows is the cluster config's own."""
    config = copy.deepcopy(load_yaml(CLUSTER_CONFIG))
    for job in config["scrape_configs"]:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = [
                {"targets": [pod["__address__"]], "labels": {k: v for k, v in pod.items() if k != "__address__"}}
                for pod in pods
            ]
            if scrape_interval:
                job["scrape_interval"] = scrape_interval
    if scrape_interval:
        config["global"] = {**config.get("global", {}), "scrape_interval": scrape_interval}
    return config


def pod(address: str, app: str, port: int | None, *, part_of: str = "docsum", scrape: str = "true") -> dict[str, str]:
    """A pod as Kubernetes pod discovery describes it (the labels prometheus.yml's relabelling reads)."""
    labels = {
        "__address__": address,
        "__meta_kubernetes_namespace": "docsum",
        "__meta_kubernetes_pod_name": f"{app}-0",
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": app,
        "__meta_kubernetes_pod_label_app_kubernetes_io_part_of": part_of,
        "__meta_kubernetes_pod_annotation_prometheus_io_scrape": scrape,
    }
    if port is not None:
        labels["__meta_kubernetes_pod_annotation_prometheus_io_port"] = str(port)
    return labels
