"""deploy/observability/: the alert rules and their promtool unit tests, the scrape configs, and a Grafana
dashboard that reads only metrics docsum exports."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.prometheus import (
    CLUSTER_CONFIG,
    COMPOSE_CONFIG,
    DASHBOARD,
    OBSERVABILITY,
    RULE_TESTS,
    RULES,
    SCRAPE_SERIES,
    binary,
    config_with_static_pods,
    dashboard_panels,
    exported_names,
    load_yaml,
    metric_names,
    pod,
    rule_expressions,
)


def promtool(*args: str, cwd: Path = OBSERVABILITY) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), *args], cwd=cwd, capture_output=True, text=True)


def test_promtool_checks_the_rules() -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rule_expressions())} rules found" in done.stdout


def test_the_rules_pass_their_promtool_unit_tests() -> None:
    done = promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_tested_firing_and_not_firing_and_says_what_to_do() -> None:
    rules = [rule for group in load_yaml(RULES)["groups"] for rule in group["rules"]]
    cases = [case for test in load_yaml(RULE_TESTS)["tests"] for case in test["alert_rule_test"]]
    for rule in rules:
        name = rule["alert"]
        assert any(c["alertname"] == name and c.get("exp_alerts") for c in cases), f"{name} never tested firing"
        assert any(c["alertname"] == name and not c.get("exp_alerts") for c in cases), f"{name} never tested quiet"
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert len(rule["annotations"]["summary"]) > 10 and len(rule["annotations"]["description"]) > 100, name


def test_the_compose_config_passes_promtool() -> None:
    done = promtool("check", "config", str(COMPOSE_CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_cluster_config_passes_promtool_with_static_pods_in_place_of_kubernetes_discovery(tmp_path: Path) -> None:
    # Debian's Prometheus is built without Kubernetes discovery; everything else of the config is checked.
    jobs = load_yaml(CLUSTER_CONFIG)["scrape_configs"]
    assert [sd["role"] for job in jobs for sd in job["kubernetes_sd_configs"]] == ["pod"]
    config = config_with_static_pods([pod("10.0.0.7", "parser", 8081)])
    config["rule_files"] = [str(OBSERVABILITY / f) for f in config["rule_files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    done = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 1 rule files found" in done.stdout


def test_metric_names_finds_the_series_an_expression_reads() -> None:
    expr = (
        'sum by (service, le) (rate(docsum_handler_seconds_bucket{topic=~"a|b"}[$__rate_interval]))'
        ' / on (service) group_left (x) max(up{job="docsum"}) and docsum_tasks offset 5m > bool 0.5'
        " or deriv(sum(docsum_consumer_lag)[10m:1m])"
    )
    assert metric_names(expr) == {"docsum_handler_seconds_bucket", "up", "docsum_tasks", "docsum_consumer_lag"}


def test_the_exported_names_are_what_the_processes_serve() -> None:
    names = exported_names()
    assert {"docsum_messages_consumed_total", "docsum_consumer_lag", "docsum_handler_seconds_bucket"} <= names
    assert {"http_requests_total", "http_request_duration_seconds_bucket"} <= names
    assert "docsum_messages_consumed" not in names and "docsum_consumer_lag_total" not in names


def test_every_metric_the_rules_read_exists() -> None:
    known = exported_names() | SCRAPE_SERIES
    for name, expr in rule_expressions().items():
        used = metric_names(expr)
        assert used, name
        assert used <= known, f"{name} reads {sorted(used - known)}, which nothing exports"


def test_the_dashboard_is_grafana_json_reading_only_metrics_that_exist() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    assert [v["name"] for v in dashboard["templating"]["list"] if v["type"] == "datasource"] == ["datasource"]
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    known = exported_names() | SCRAPE_SERIES
    used: set[str] = set()
    for panel in dashboard_panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert 0 <= panel["gridPos"]["x"] and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            assert names <= known, f"{panel['title']} reads {sorted(names - known)}, which nothing exports"
            used |= names
    # Every metric of metrics.py is on the dashboard (as one of its series).
    from prometheus_client.metrics import MetricWrapperBase

    from docsum_shared import metrics

    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            family = next(iter(metric.describe())).name
            assert any(name == family or name.startswith(family + "_") for name in used), f"{family} not shown"


def test_promtool_parses_every_query_of_the_dashboard(tmp_path: Path) -> None:
    # Each query as a recording rule: promtool parses its PromQL (Grafana's $__rate_interval as 1m).
    queries = [t["expr"] for p in dashboard_panels() for t in p["targets"]]
    rules = [
        {"record": f"dashboard:query_{i}", "expr": q.replace("$__rate_interval", "1m")} for i, q in enumerate(queries)
    ]
    (tmp_path / "dashboard.rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = promtool("check", "rules", "dashboard.rules.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(queries)} rules found" in done.stdout
