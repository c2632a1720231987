"""Static checks of the operator artifacts: Dockerfile, compose, Kubernetes, Prometheus, Grafana."""

import itertools
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.config import parse_config
from gateway.demo import demo_backends

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
PROMTOOL = Path("/usr/bin/promtool")

DASHBOARD_METRICS = [
    "gateway_requests_total",
    "gateway_request_duration_seconds_bucket",
    "gateway_time_to_first_token_seconds_bucket",
    "gateway_overhead_seconds_bucket",
    "gateway_inflight_requests",
    "gateway_upstream_healthy",
    "gateway_tokens_total",
    "gateway_upstream_errors_total",
]


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    joined: list[str] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    assert not pending, "Dockerfile ends with a line continuation"
    out = []
    for line in joined:
        instruction, _, args = line.partition(" ")
        out.append((instruction.upper(), args.strip()))
    return out


def _instructions(name: str) -> list[str]:
    return [args for instruction, args in _dockerfile() if instruction == name]


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"expected exec (JSON) form, got {args!r}"
    return value


def _k8s(name: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((K8S / name).read_text()) if d is not None]
    assert docs, f"{name} has no documents"
    return docs


def _one(name: str, kind: str) -> dict[str, Any]:
    found = [d for d in _k8s(name) if d.get("kind") == kind]
    assert len(found) == 1, f"{name}: expected one {kind}, found {len(found)}"
    return found[0]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if not PROMTOOL.exists():
        pytest.fail(
            f"{PROMTOOL} not found: install the Debian package 'prometheus' "
            "(.ci/provision, which make test runs, installs it; this check is never skipped)"
        )
    return subprocess.run(
        [str(PROMTOOL), *args], cwd=ROOT, capture_output=True, text=True, timeout=30
    )


# --- docker-compose.yml --------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_compose_services_have_build_or_image() -> None:
    services = _compose()["services"]
    assert {"gateway", "demo-backends", "prometheus", "grafana"} <= set(services)
    for name, service in services.items():
        assert service.get("build") or service.get("image"), f"{name} has neither build nor image"


def test_compose_bind_mounts_exist() -> None:
    mounts = 0
    for name, service in _compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            if source.startswith((".", "/")):
                mounts += 1
                assert (ROOT / source).exists(), f"{name} mounts missing path {source}"
    assert mounts > 0


def test_compose_gateway_uses_compose_config() -> None:
    services = _compose()["services"]
    mounts = {
        target: source
        for source, target, *_ in (v.split(":") for v in services["gateway"]["volumes"])
    }
    assert mounts["/etc/chat-gateway/config.yaml"] == "./config/compose.yaml"
    command = services["demo-backends"]["command"]
    if isinstance(command, str):
        command = shlex.split(command)
    assert command[0] == "demo-backends"


def test_compose_config_routes_reference_upstreams() -> None:
    config = yaml.safe_load((ROOT / "config" / "compose.yaml").read_text())
    _check_gateway_config(config)


def test_compose_upstreams_are_their_dialects_demo_backends() -> None:
    """Each upstream of the compose config is the demo backend of its dialect (``demo-backends``
    serves one per registered dialect, on the port and path the registry gives it)."""
    config = yaml.safe_load((ROOT / "config" / "compose.yaml").read_text())
    backends = demo_backends()
    for name, upstream in config["upstreams"].items():
        url = urlsplit(upstream["url"])
        assert url.hostname == "demo-backends", name
        assert (url.port, url.path) == backends[upstream["dialect"]], name


def _check_gateway_config(config: Any) -> None:
    assert isinstance(config, dict)
    assert config["upstreams"], "no upstreams"
    assert config["routes"], "no routes"
    for route in config["routes"]:
        assert route["upstream"] in config["upstreams"], f"unknown upstream in {route}"


# --- Dockerfile ----------------------------------------------------------------------------------


def test_dockerfile_copies_only_what_the_repo_has() -> None:
    copies = _instructions("COPY")
    assert copies
    for args in copies:
        *sources, _dest = shlex.split(args)
        if sources[0].startswith("--from="):
            continue  # from an earlier stage of the build, not from the repo
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repo"


def test_dockerfile_writes_the_demo_config_where_it_serves_from() -> None:
    """The image's default config is the demo config as the installed gateway prints it, written
    at build time to the path ``CMD`` serves (nothing to keep in step by hand)."""
    served = _exec_form(_instructions("CMD")[-1])[2]
    wanted = f"chat-gateway demo --print-config > {served}"
    runs = _instructions("RUN")
    assert any(wanted in " ".join(run.split()) for run in runs), runs
    install = next(i for i, run in enumerate(runs) if "pip install" in run)
    assert install < next(i for i, run in enumerate(runs) if wanted in " ".join(run.split()))


def test_dockerfile_base_and_entrypoint() -> None:
    assert _instructions("FROM")[0].startswith("python:3.11-slim")
    assert _exec_form(_instructions("ENTRYPOINT")[-1]) == ["chat-gateway"]
    cmd = _exec_form(_instructions("CMD")[-1])
    assert cmd[:3] == ["serve", "--config", "/etc/chat-gateway/config.yaml"]
    assert "8080" in _instructions("EXPOSE")[-1].split()


def test_dockerfile_healthcheck_hits_healthz() -> None:
    (healthcheck,) = _instructions("HEALTHCHECK")
    assert "/healthz" in healthcheck
    assert "urllib" in healthcheck, "python:3.11-slim has no curl"


def test_dockerfile_runs_as_non_root() -> None:
    users = _instructions("USER")
    assert users, "no USER instruction"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}


# --- Kubernetes ----------------------------------------------------------------------------------


def test_k8s_manifests_parse() -> None:
    for path in sorted(K8S.glob("*.yaml")):
        for doc in _k8s(path.name):
            assert {"apiVersion", "kind", "metadata"} <= set(doc), path.name


def test_k8s_deployment_probes_and_config() -> None:
    deployment = _one("deployment.yaml", "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["args"][:3] == ["serve", "--config", "/etc/chat-gateway/config.yaml"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True

    configmap = _one("configmap.yaml", "ConfigMap")
    config_volumes = [v for v in pod["volumes"] if "configMap" in v]
    assert [v["configMap"]["name"] for v in config_volumes] == [configmap["metadata"]["name"]]
    secret = _one("secret.yaml", "Secret")
    secret_refs = [e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e]
    assert secret_refs == [secret["metadata"]["name"]]


def test_k8s_configmap_embeds_gateway_config() -> None:
    configmap = _one("configmap.yaml", "ConfigMap")
    text = configmap["data"]["config.yaml"]
    _check_gateway_config(yaml.safe_load(text))
    assert "${OPENAI_API_KEY}" in text
    assert "OPENAI_API_KEY" in _one("secret.yaml", "Secret")["stringData"]


def test_k8s_service_monitor_scrapes_metrics() -> None:
    monitor = _one("servicemonitor.yaml", "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "http"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    ports = _one("service.yaml", "Service")["spec"]["ports"]
    assert "http" in {p["name"] for p in ports}


# --- Grafana -------------------------------------------------------------------------------------


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for panel in panels:
        out.append(panel)
        out.extend(_panels(panel.get("panels", [])))
    return out


def test_dashboard_covers_metrics() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "gateway-dashboard.json").read_text())
    assert dashboard["schemaVersion"] == 39
    exprs = " ".join(
        target.get("expr", "")
        for panel in _panels(dashboard["panels"])
        for target in panel.get("targets", [])
    )
    missing = [m for m in DASHBOARD_METRICS if not re.search(rf"\b{m}\b", exprs)]
    assert not missing, f"dashboard has no panel for {missing}"
    ids = [panel["id"] for panel in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "duplicate panel ids"


def test_grafana_provisioning_parses() -> None:
    provisioning = DEPLOY / "grafana" / "provisioning"
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    (datasource,) = datasources["datasources"]
    assert datasource["uid"] == "prometheus"
    providers = yaml.safe_load((provisioning / "dashboards" / "gateway.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


# --- Prometheus ----------------------------------------------------------------------------------


def test_promtool_check_rules() -> None:
    result = _promtool("check", "rules", "deploy/prometheus/alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_thresholds_are_bucket_bounds() -> None:
    """A quantile compared with a threshold between two bucket bounds is interpolated: the
    alert would fire at a value the histogram cannot tell from its neighbours."""
    from gateway.metrics import Metrics

    metrics = Metrics()
    # a labelled histogram shows its buckets once it has a child
    metrics.ttft.labels("/r", "u").observe(0)
    metrics.overhead.labels("/r").observe(0)
    metrics.request_duration.labels("/r", "d", "u", "d", "true").observe(0)
    metrics.upstream_duration.labels("u").observe(0)
    bounds: dict[str, set[float]] = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name.endswith("_bucket") and s.labels["le"] != "+Inf":
                bounds.setdefault(s.name, set()).add(float(s.labels["le"]))
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    checked = 0
    for rule in rules["groups"][0]["rules"]:
        found = re.search(r"histogram_quantile\(.*?(\w+_bucket)\b.*\)\s*>\s*([\d.]+)",
                          rule["expr"], re.S)
        if found:
            name, threshold = found.group(1), float(found.group(2))
            assert threshold in bounds[name], (rule["alert"], threshold, sorted(bounds[name]))
            checked += 1
    assert checked >= 2


def test_latency_buckets_resolve_within_a_factor_of_two() -> None:
    from gateway.metrics import LATENCY_BUCKETS

    assert list(LATENCY_BUCKETS) == sorted(set(LATENCY_BUCKETS))
    assert LATENCY_BUCKETS[0] <= 0.005 and LATENCY_BUCKETS[-1] >= 120
    for low, high in itertools.pairwise(LATENCY_BUCKETS):
        assert high <= 2 * low, (low, high)


def test_promtool_check_config() -> None:
    result = _promtool("check", "config", "deploy/prometheus/prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_example_configs_validate() -> None:
    """Every config shipped in the repo, and the one the image writes, passes the gateway's own
    validation."""
    configmap = yaml.safe_load((ROOT / "deploy/kubernetes/configmap.yaml").read_text())
    embedded = yaml.safe_load(configmap["data"]["config.yaml"])
    parse_config(embedded, env={"OPENAI_API_KEY": "sk-test"})
    parse_config(yaml.safe_load((ROOT / "config/compose.yaml").read_text()), env={})
    # what the image's build step runs, here from a directory without the repo
    script = Path(sys.executable).parent / "chat-gateway"
    assert script.exists(), "install the project (pip install -e .) for its console script"
    image = subprocess.run([str(script), "demo", "--print-config"], capture_output=True,
                           text=True, timeout=30, cwd="/", check=False)
    assert image.returncode == 0, image.stderr
    config = parse_config(yaml.safe_load(image.stdout), env={})
    assert config.routes and config.upstreams
