"""deploy/helm/llm-rca and deploy/kubernetes: `helm lint` passes, `helm template` and `kubectl
kustomize` render, kubectl decodes every workload into its typed API object without a cluster, and
both renderings have what a production install needs (probes, requests, non-root, secrets from
secretKeyRef, a migrate Job, the Service Alertmanager calls)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from rca.config import Settings
from tests.helpers.deploy import DEPLOY, load_yaml, tool

K8S = DEPLOY / "kubernetes"
CHART = DEPLOY / "helm" / "llm-rca"
NAMESPACE = "llm-rca"
SECRET_SETTINGS = {
    "RCA_DATABASE_URL",
    "RCA_BROKER_URL",
    "RCA_WEBHOOK_TOKEN",
    "RCA_API_TOKENS",
    "RCA_LLM_API_KEY",
    "RCA_SLACK_WEBHOOK_URL",
    "RCA_SLACK_BOT_TOKEN",
}


def kubectl(*args: str, stdin: str | None = None) -> str:
    """kubectl that can never reach a cluster: no kubeconfig, a server on a closed loopback port."""
    argv = [tool("kubectl"), "--server=http://127.0.0.1:9", "--request-timeout=2s", *args]
    env = os.environ | {"KUBECONFIG": os.devnull}
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr}"
    return proc.stdout


def helm(*args: str) -> str:
    proc = subprocess.run(
        [tool("helm"), *args], capture_output=True, text=True, timeout=120, env=os.environ | {"KUBECONFIG": os.devnull}
    )
    assert proc.returncode == 0, f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def helm_template(*sets: str) -> list[dict]:
    out = helm("template", "rca", str(CHART), "--namespace", NAMESPACE, *(f"--set={s}" for s in sets))
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="module", params=["helm", "kustomize"])
def rendered(request: pytest.FixtureRequest) -> list[dict]:
    if request.param == "helm":
        return helm_template()
    return [doc for doc in yaml.safe_load_all(kubectl("kustomize", str(K8S))) if doc]


def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def pod_specs(objects: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects if o["kind"] in {"Deployment", "Job"}}


def test_kustomize_renders_every_resource_into_the_namespace(rendered: list[dict]) -> None:
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in rendered)
    assert kinds == [
        ("ConfigMap", "llm-rca-config"),
        ("Deployment", "rca-api"),
        ("Deployment", "rca-worker"),
        ("Job", "rca-migrate"),
        ("Service", "rca-api"),
        ("Service", "rca-worker"),
        ("ServiceAccount", "llm-rca"),
    ]
    assert {o["metadata"]["namespace"] for o in rendered} == {NAMESPACE}


def test_kubectl_decodes_every_workload_into_its_typed_object(rendered: list[dict]) -> None:
    """`set env --local` decodes Deployments and Jobs into the typed API structs (a wrong field
    type fails) and rewrites them, all without a cluster."""
    workloads = [o for o in rendered if o["kind"] in {"Deployment", "Job"}]
    out = kubectl(
        "set", "env", "--local", "-f", "-", "-o", "yaml", "RCA_RENDER_CHECK=1", stdin=yaml.safe_dump_all(workloads)
    )
    decoded = [doc for doc in yaml.safe_load_all(out) if doc]

    def names(objects: list[dict]) -> list[tuple[str, str]]:
        return [(o["kind"], o["metadata"]["name"]) for o in objects]

    assert names(decoded) == names(workloads)
    assert all(
        any(e["name"] == "RCA_RENDER_CHECK" for e in c["env"])
        for o in decoded
        for c in o["spec"]["template"]["spec"]["containers"]
    )
    everything = kubectl(
        "label", "--local", "-f", "-", "-o", "yaml", "rca-render-check=1", stdin=yaml.safe_dump_all(rendered)
    )
    assert everything.count("rca-render-check") == len(rendered)


def test_kubectl_refuses_a_workload_with_a_wrong_field_type(rendered: list[dict]) -> None:
    """The decode above can fail: a string where an int32 belongs is refused."""
    api = dict(by_kind(rendered, "Deployment")["rca-api"])
    api["spec"] = dict(api["spec"], replicas="two")
    proc = subprocess.run(
        [tool("kubectl"), "--server=http://127.0.0.1:9", "set", "env", "--local", "-f", "-", "-o", "yaml", "A=1"],
        input=yaml.safe_dump(api),
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"KUBECONFIG": os.devnull},
    )
    assert proc.returncode != 0 and "replicas" in proc.stderr


def test_api_probes_healthz_and_readyz_on_its_http_port(rendered: list[dict]) -> None:
    api = pod_specs(rendered)["rca-api"]["containers"][0]
    assert api["command"] == ["rca", "serve"]
    ports = {p["name"]: p["containerPort"] for p in api["ports"]}
    assert ports == {"http": 8080}
    assert api["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert api["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    env = {e["name"]: e.get("value") for e in api["env"]}
    assert env["RCA_HOST"] == "0.0.0.0" and env["RCA_PORT"] == "8080"


def test_worker_and_migrate_run_the_right_commands(rendered: list[dict]) -> None:
    specs = pod_specs(rendered)
    worker = specs["rca-worker"]["containers"][0]
    assert worker["command"] == ["rca", "worker"]
    assert {p["name"]: p["containerPort"] for p in worker["ports"]} == {"metrics": 9808}
    assert worker["livenessProbe"]["tcpSocket"]["port"] == "metrics"
    env = {e["name"]: e.get("value") for e in worker["env"]}  # the probes and Prometheus reach it on the pod IP
    assert env["RCA_WORKER_METRICS_HOST"] == "0.0.0.0" and env["RCA_WORKER_METRICS_PORT"] == "9808"
    migrate = by_kind(rendered, "Job")["rca-migrate"]
    assert migrate["spec"]["template"]["spec"]["containers"][0]["command"] == ["rca", "migrate"]
    assert migrate["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"


@pytest.mark.parametrize("name", ["rca-api", "rca-worker", "rca-migrate"])
def test_pods_run_as_non_root_with_requests_and_secrets_from_secret_key_refs(rendered: list[dict], name: str) -> None:
    spec = pod_specs(rendered)[name]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert isinstance(spec["securityContext"]["runAsUser"], int) and spec["securityContext"]["runAsUser"] > 0
    assert spec["automountServiceAccountToken"] is False
    # The migrate hook may run before the release's ServiceAccount exists: the default one then.
    assert spec.get("serviceAccountName", "default" if name == "rca-migrate" else None) in {"llm-rca", "default"}
    mounted = {v["name"] for v in spec["volumes"]}
    known = {f"RCA_{field.upper()}" for field in Settings.model_fields}
    for container in spec["containers"]:
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), container["name"]
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False and security["capabilities"]["drop"] == ["ALL"]
        assert security["readOnlyRootFilesystem"] is True
        assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/tmp", "/data"}
        assert {m["name"] for m in container["volumeMounts"]} <= mounted
        assert container["image"].startswith("llm-serving-rca")
        for env in container["env"]:
            assert env["name"] in known, f"{env['name']} is not a setting"
            if env["name"] in SECRET_SETTINGS:
                ref = env["valueFrom"]["secretKeyRef"]
                assert ref["name"] == "llm-rca" and "value" not in env, env["name"]
        config_maps = {ref["configMapRef"]["name"] for ref in container.get("envFrom", [])}
        assert config_maps == {"llm-rca-config"} or name == "rca-migrate"
    assert {"RCA_DATABASE_URL"} <= {e["name"] for c in spec["containers"] for e in c["env"]}


def test_configmap_holds_only_known_non_secret_settings(rendered: list[dict]) -> None:
    data = by_kind(rendered, "ConfigMap")["llm-rca-config"]["data"]
    known = {f"RCA_{field.upper()}" for field in Settings.model_fields}
    assert set(data) <= known - SECRET_SETTINGS


def test_services_select_their_pods_and_match_the_alertmanager_receiver(rendered: list[dict]) -> None:
    deployments = by_kind(rendered, "Deployment")
    services = by_kind(rendered, "Service")
    for name, service in services.items():
        labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items(), name
        assert deployments[name]["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
    assert services["rca-api"]["spec"]["ports"][0]["port"] == 8080
    receiver = load_yaml(DEPLOY / "alertmanager" / "rca-route.yml")["receivers"][0]
    assert receiver["webhook_configs"][0]["url"] == "http://rca-api:8080/api/v1/alertmanager"
    scrape = {j["job_name"]: j for j in load_yaml(DEPLOY / "prometheus" / "scrape.yml")["scrape_configs"]}
    assert scrape["rca-worker"]["static_configs"][0]["targets"] == ["rca-worker:9808"]
    assert services["rca-worker"]["spec"]["ports"][0]["port"] == 9808


def test_kustomization_lists_every_manifest_in_the_folder() -> None:
    listed = set(load_yaml(K8S / "kustomization.yaml")["resources"])
    assert listed == {p.name for p in Path(K8S).glob("*.yaml") if p.name != "kustomization.yaml"}


def test_helm_chart_passes_strict_lint() -> None:
    helm("lint", "--strict", str(CHART))


def test_helm_migrate_job_is_a_pre_install_and_pre_upgrade_hook() -> None:
    job = by_kind(helm_template(), "Job")["rca-migrate"]
    annotations = job["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]


def test_helm_values_reach_every_workload() -> None:
    objects = helm_template(
        "image.tag=1.2.3", "existingSecret=rca-prod", "settings.RCA_LLM_MODEL=qwen", "api.replicas=3"
    )
    specs = pod_specs(objects)
    assert {c["image"] for s in specs.values() for c in s["containers"]} == {"llm-serving-rca:1.2.3"}
    refs = {
        e["valueFrom"]["secretKeyRef"]["name"]
        for s in specs.values()
        for c in s["containers"]
        for e in c["env"]
        if "valueFrom" in e
    }
    assert refs == {"rca-prod"}
    assert by_kind(objects, "ConfigMap")["llm-rca-config"]["data"]["RCA_LLM_MODEL"] == "qwen"
    assert by_kind(objects, "Deployment")["rca-api"]["spec"]["replicas"] == 3
