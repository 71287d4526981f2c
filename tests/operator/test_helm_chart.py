"""The Helm chart: lints, renders valid Kubernetes objects, grants the operator only what it
needs (cluster-wide or per listed namespace), peers its replicas through kopf's peering
object, and ships the repository's CRDs unchanged.

Helm's own Go SDK does the linting and rendering (through helm-python-sdk, offline);
kubernetes-validate checks every rendered object against Kubernetes' published schemas.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "tessera"
KUBERNETES_VERSION = "1.30"
RELEASE, NAMESPACE = "tessera", "tessera-system"
NAMESPACED = {"rbac": {"namespaces": ["team-a", "team-b"]}}
MONITORS = {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
PROMETHEUS_OPERATOR = "monitoring.coreos.com/v1"  # CRDs: not in Kubernetes' own schemas
WARNING = 2  # lint message severities: 1 info, 2 warning, 3 error
PEERING_API = "kopf.dev/v1"
# chart-testing's convention: each ci/*-values.yaml is a case the chart must lint and install.
CI_VALUES = {path.stem: yaml.safe_load(path.read_text())
             for path in sorted((CHART / "ci").glob("*-values.yaml"))}


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The objects `helm install` would create (CRDs aside), in template order."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values=values, name=RELEASE, namespace=NAMESPACE,
                                is_install=True)
    return [document for name, text in sorted(rendered.items()) if name.endswith(".yaml")
            for document in yaml.safe_load_all(text) if document]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = of_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("values", [None, NAMESPACED, *CI_VALUES.values()],
                         ids=["cluster-wide", "namespaced", *CI_VALUES])
def test_chart_lints_without_warnings(values):
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBERNETES_VERSION}.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= WARNING] == []


@pytest.mark.parametrize("values", [None, NAMESPACED, {"rbac": {"create": False}}, MONITORS,
                                    *CI_VALUES.values()],
                         ids=["cluster-wide", "namespaced", "no-rbac", "monitors", *CI_VALUES])
def test_every_rendered_object_is_valid_kubernetes(values):
    objects = render(values)
    assert of_kind(objects, "Deployment") and of_kind(objects, "ServiceAccount")
    for obj in objects:
        if obj["apiVersion"] not in (PEERING_API, PROMETHEUS_OPERATOR):
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_on_a_gpu_cluster_the_operator_stays_off_the_gpu_nodes():
    (deployment,) = of_kind(render(CI_VALUES["gpu-cluster-values"]), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    off_gpu_nodes = {"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}
    assert terms and all(off_gpu_nodes in term["matchExpressions"] for term in terms)
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert "nvidia.com/gpu" not in json.dumps(pod.get("tolerations", []))
    assert "nvidia.com/gpu" not in json.dumps(operator_container(render())["resources"])


def test_cluster_wide_install_binds_one_cluster_role_and_watches_all_namespaces():
    objects = render()
    operator_roles = [role for role in of_kind(objects, "ClusterRole")
                      if role["metadata"]["name"] == RELEASE]
    (binding,) = of_kind(objects, "ClusterRoleBinding")
    assert len(operator_roles) == 1 and not of_kind(objects, "Role")
    assert binding["roleRef"]["name"] == RELEASE
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RELEASE,
                                    "namespace": NAMESPACE}]
    args = operator_container(objects)["args"]
    assert "--all-namespaces" in args and not any(a.startswith("--namespace") for a in args)


def test_namespaced_install_has_a_role_per_namespace_and_nothing_cluster_wide_for_the_operator():
    objects = render(NAMESPACED)
    roles, bindings = of_kind(objects, "Role"), of_kind(objects, "RoleBinding")
    assert [role["metadata"]["namespace"] for role in roles] == ["team-a", "team-b"]
    assert [binding["metadata"]["namespace"] for binding in bindings] == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["subjects"][0]["namespace"] == NAMESPACE
    assert not of_kind(objects, "ClusterRoleBinding")
    # The only cluster roles left are the aggregated ones for people, bound to no one here.
    for role in of_kind(objects, "ClusterRole"):
        assert role["metadata"]["name"] in (f"{RELEASE}-edit", f"{RELEASE}-view")
    args = operator_container(objects)["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert "--all-namespaces" not in args


def test_rbac_create_false_renders_no_rbac():
    objects = render({"rbac": {"create": False}})
    kinds = {obj["kind"] for obj in objects}
    assert kinds == {"Deployment", "ServiceAccount", "ClusterKopfPeering", "Service",
                     "PodDisruptionBudget", "Pod"}  # the Pod: `helm test`'s


def operator_rules(objects: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs, over the operator's own roles."""
    granted: dict[tuple[str, str], set[str]] = {}
    for role in of_kind(objects, "ClusterRole") + of_kind(objects, "Role"):
        if role["metadata"]["name"] != RELEASE:
            continue
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


@pytest.mark.parametrize("values", [None, NAMESPACED], ids=["cluster-wide", "namespaced"])
def test_operator_gets_least_privilege(values):
    granted = operator_rules(render(values))
    assert set(granted) == {
        ("tessera.dev", "embeddingjobs"), ("tessera.dev", "embeddingjobs/status"),
        ("", "pods"), ("", "pods/log"), ("", "services"), ("", "configmaps"),
        ("networking.k8s.io", "networkpolicies"), ("", "events"), ("events.k8s.io", "events"),
        ("kopf.dev", "kopfpeerings" if values else "clusterkopfpeerings")}
    assert granted[("", "pods/log")] == {"get"}
    assert granted[("tessera.dev", "embeddingjobs")] == {"get", "list", "watch", "patch", "delete"}
    assert granted[("", "events")] == {"create", "patch"}
    assert granted[("kopf.dev", "kopfpeerings" if values else "clusterkopfpeerings")] == {
        "get", "list", "watch", "patch"}
    assert all("*" not in verbs and "escalate" not in verbs and "bind" not in verbs
               for verbs in granted.values())


def test_operator_runs_non_root_read_only_without_capabilities():
    objects = render()
    (deployment,) = of_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = operator_container(objects)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}



def test_operator_command_and_liveness_probe_agree():
    container = operator_container(render({"operator": {"livenessPort": 9090,
                                                        "verbosity": "debug"}}))
    assert container["command"] == ["python", "-m", "tessera_operator"]
    assert container["args"][0] == "--peering=tessera"
    assert "--liveness=http://0.0.0.0:9090/healthz" in container["args"]
    assert "--debug" in container["args"] and "--log-format=json" in container["args"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"health": 9090, "metrics": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}


@pytest.mark.parametrize("values", [None, MONITORS], ids=["plain", "monitors"])
def test_operator_metrics_are_served_behind_a_service(values):
    objects = render(values)
    container = operator_container(objects)
    assert "--metrics-port=8081" in container["args"]
    (service,) = of_kind(objects, "Service")
    (deployment,) = of_kind(objects, "Deployment")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8081,
                                         "targetPort": "metrics", "protocol": "TCP"}]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    monitors = [obj for obj in objects if obj["apiVersion"] == PROMETHEUS_OPERATOR]
    assert [obj["kind"] for obj in monitors] == ([] if values is None
                                                 else ["ServiceMonitor", "PodMonitor"])


@pytest.mark.parametrize("values", [MONITORS, {**MONITORS, **NAMESPACED}],
                         ids=["cluster-wide", "namespaced"])
def test_monitors_scrape_the_operator_and_the_pods_of_every_served_namespace(values):
    objects = render(values)
    (service_monitor,) = of_kind(objects, "ServiceMonitor")
    (pod_monitor,) = of_kind(objects, "PodMonitor")
    (service,) = of_kind(objects, "Service")
    assert service_monitor["metadata"]["labels"]["release"] == "prom"
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    assert service_monitor["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s"}]
    # The operator labels every pod it creates so (tessera_operator.labels.job_labels).
    assert pod_monitor["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/managed-by": "tessera-operator"}}
    assert pod_monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics",
                                                           "interval": "30s"}]
    namespaces = (values.get("rbac") or {}).get("namespaces")
    assert pod_monitor["spec"]["namespaceSelector"] == (
        {"matchNames": namespaces} if namespaces else {"any": True})


def test_metrics_and_liveness_ports_must_differ():
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmRenderError, match="must differ"):
        chart.render(values={"metrics": {"port": 8080}}, name=RELEASE, namespace=NAMESPACE)


@pytest.mark.parametrize("values", [None, NAMESPACED], ids=["cluster-wide", "namespaced"])
def test_two_replicas_peer_through_a_peering_object_in_each_watched_scope(values):
    objects = render(values)
    (deployment,) = of_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    # New replicas start as standbys (younger), so a rolling update never stops the active
    # one before a successor is up.
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1,
                                                               "maxUnavailable": 0}
    container = operator_container(objects)
    assert "--standalone" not in container["args"]
    assert "--peering=tessera" in container["args"]
    (pod_id,) = [env for env in container["env"] if env["name"] == "POD_ID"]
    assert pod_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    peerings = [obj for obj in objects if obj["apiVersion"] == PEERING_API]
    if values:
        assert [(p["kind"], p["metadata"]["name"], p["metadata"]["namespace"])
                for p in peerings] == [("KopfPeering", RELEASE, "team-a"),
                                       ("KopfPeering", RELEASE, "team-b")]
    else:
        assert [(p["kind"], p["metadata"]["name"]) for p in peerings] == [
            ("ClusterKopfPeering", RELEASE)]
    one = operator_container(render({**(values or {}), "replicas": 1}))
    assert one["args"] == container["args"]  # one replica peers too: it acts alone


def test_image_tag_defaults_to_app_version():
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert operator_container(render())["image"] == f"tessera-operator:{chart_yaml['appVersion']}"
    custom = {"image": {"repository": "registry.example.com/tessera-operator", "tag": "1.2.3"}}
    assert operator_container(render(custom))["image"] == (
        "registry.example.com/tessera-operator:1.2.3")


@pytest.mark.parametrize(("values", "message"), [
    ({"replicaCount": 2}, "additional properties 'replicaCount' not allowed"),
    ({"replicas": 0}, "minimum"),
    ({"operator": {"logFormat": "xml"}}, "value must be one of"),
    ({"image": {"pullPolicy": "Sometimes"}}, "value must be one of"),
    ({"rbac": {"namespaces": ["Team_A"]}}, "does not match pattern"),
    ({"rbac": {"create": "yes"}}, "got string, want boolean"),
    ({"podDisruptionBudget": {"maxUnavailable": 0}}, "minimum"),
    ({"topologySpread": {"whenUnsatisfiable": "Never"}}, "value must be one of"),
    ({"tests": {"command": "true"}}, "additional properties 'command' not allowed"),
])
def test_values_schema_rejects_malformed_values(values, message):
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError, match=re.escape(
            message)):
        chart.render(values=values, name=RELEASE, namespace=NAMESPACE)


def test_values_schema_declares_every_default_value():
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())

    def undeclared(values: dict[str, Any], node: dict[str, Any], path: str) -> list[str]:
        if node.get("additionalProperties") is not False:
            return []  # a free-form map (labels, security contexts)
        missing = [f"{path}{key}" for key in values if key not in node["properties"]]
        return missing + [name for key, value in values.items() if isinstance(value, dict)
                          and key in node["properties"]
                          for name in undeclared(value, node["properties"][key], f"{key}.")]

    assert undeclared(defaults, schema, "") == []


def test_every_value_is_documented():
    # helm-docs' convention: a value is documented by a `# --` comment right above it, which
    # covers what is nested in it (a default that is a Kubernetes object); a section (a key
    # whose value is a block of documented values) needs a comment of any kind.
    undocumented, ancestors, comment = [], [], []
    for line in (CHART / "values.yaml").read_text().splitlines():
        key = re.match(r"^(\s*)([A-Za-z]\w*):(.*)$", line)
        if key:
            indent = len(key.group(1))
            ancestors = [(depth, covers) for depth, covers in ancestors if depth < indent]
            value_doc = bool(comment) and comment[0].startswith("# --")
            section_doc = bool(comment) and not key.group(3).strip()
            covered = any(covers for _, covers in ancestors)
            if not (value_doc or section_doc or covered):
                undocumented.append(key.group(2))
            ancestors.append((indent, value_doc or covered))
        # The comment block right above the next key (a blank line detaches it).
        comment = [*comment, line.strip()] if line.lstrip().startswith("#") else []
    assert undocumented == []


def test_chart_crds_equal_the_repositorys():
    chart_crds = {path.name: path.read_text() for path in (CHART / "crds").glob("*.yaml")}
    repo_crds = {path.name: path.read_text() for path in (REPO / "crds").glob("*.yaml")}
    assert chart_crds == repo_crds and chart_crds
    with helm.Chart.load(CHART) as chart:
        assert sorted(crd["filename"] for crd in chart.crds) == [
            "tessera/crds/embeddingjob.yaml", "tessera/crds/kopf-peering.yaml"]


# --- high availability, `helm test`, the README and the chart's metadata -----------------------

def spread_and_budget(values: dict[str, Any] | None) -> tuple[list[dict[str, Any]],
                                                                list[dict[str, Any]]]:
    objects = render(values)
    (deployment,) = of_kind(objects, "Deployment")
    constraints = deployment["spec"]["template"]["spec"].get("topologySpreadConstraints", [])
    return constraints, of_kind(objects, "PodDisruptionBudget")


def test_two_replicas_are_spread_and_drained_one_at_a_time():
    constraints, (budget,) = spread_and_budget(None)
    (deployment,) = of_kind(render(), "Deployment")
    selector = deployment["spec"]["selector"]
    assert [c["topologyKey"] for c in constraints] == ["kubernetes.io/hostname",
                                                       "topology.kubernetes.io/zone"]
    for constraint in constraints:
        assert (constraint["maxSkew"], constraint["whenUnsatisfiable"]) == (1, "ScheduleAnyway")
        assert constraint["labelSelector"] == selector
    assert budget["spec"] == {"maxUnavailable": 1, "selector": selector}
    assert budget["apiVersion"] == "policy/v1"


@pytest.mark.parametrize(("values", "keys", "budget"), [
    ({"replicas": 1}, [], False),
    ({"replicas": 3, "podDisruptionBudget": {"enabled": False}}, [
        "kubernetes.io/hostname", "topology.kubernetes.io/zone"], False),
    ({"topologySpread": {"topologyKeys": []}}, [], True),
    ({"topologySpread": {"topologyKeys": ["kubernetes.io/hostname"],
                         "whenUnsatisfiable": "DoNotSchedule"}},
     ["kubernetes.io/hostname"], True),
], ids=["one-replica", "no-budget", "no-spread", "a-rule"])
def test_spread_and_budget_follow_the_values(values, keys, budget):
    constraints, budgets = spread_and_budget(values)
    assert [c["topologyKey"] for c in constraints] == keys
    assert len(budgets) == int(budget)
    wanted = (values.get("topologySpread") or {}).get("whenUnsatisfiable", "ScheduleAnyway")
    assert all(c["whenUnsatisfiable"] == wanted for c in constraints)
    for obj in render(values):
        if obj["apiVersion"] not in (PEERING_API, PROMETHEUS_OPERATOR):
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_helm_test_reads_the_operators_metrics_with_the_least_privilege():
    from tessera_operator.metrics import RECONCILE_SECONDS

    objects = render({"metrics": {"port": 9100}})
    hooks = [o for o in objects if "helm.sh/hook" in o["metadata"].get("annotations", {})]
    (pod,) = hooks
    assert pod["kind"] == "Pod" and pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (service,) = of_kind(objects, "Service")
    (budget,) = of_kind(objects, "PodDisruptionBudget")
    labels = pod["metadata"]["labels"]
    # Neither the metrics Service nor the budget may count the test pod as an operator.
    assert not service["spec"]["selector"].items() <= labels.items()
    assert not budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
    assert spec["restartPolicy"] == "Never" and spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {"allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    assert container["image"] == operator_container(objects)["image"]
    script = container["command"][-1]
    assert f"http://{service['metadata']['name']}.{NAMESPACE}.svc:9100/metrics" in script
    assert RECONCILE_SECONDS._name in script  # a metric the operator serves from its start
    compile(script, "helm-test", "exec")
    custom = render({"tests": {"image": "python:3.11-slim"}})
    (pod,) = [o for o in custom if o["kind"] == "Pod"]
    assert pod["spec"]["containers"][0]["image"] == "python:3.11-slim"


def test_chart_readme_is_generated_from_the_values(monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("chart_readme", REPO / "helm" /
                                                  "chart_readme.py")
    assert spec is not None and spec.loader is not None
    chart_readme = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "chart_readme", chart_readme)  # for its dataclass
    spec.loader.exec_module(chart_readme)
    committed = (CHART / "README.md").read_text()
    assert committed == chart_readme.readme(), (
        "helm/tessera/README.md is stale: run python helm/chart_readme.py")
    values = chart_readme.documented_values((CHART / "values.yaml").read_text())
    keys = [value.key for value in values]
    assert {"replicas", "image.repository", "podDisruptionBudget.maxUnavailable",
            "topologySpread.whenUnsatisfiable", "tests.image", "podSecurityContext"} <= set(keys)
    assert not any(key.startswith("podSecurityContext.") for key in keys)  # one row, whole
    assert all(value.description for value in values)
    for key in keys:
        assert f"| `{key}` |" in committed


def test_chart_yaml_says_where_the_project_is():
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    urls = [chart_yaml["home"], chart_yaml["icon"], *chart_yaml["sources"],
            *(m["url"] for m in chart_yaml["maintainers"])]
    assert all(url.startswith("https://") for url in urls)
    # The icon is the docs site's (home), from docs/assets.
    assert chart_yaml["icon"].startswith(chart_yaml["home"])
    assert (REPO / "docs" / chart_yaml["icon"].removeprefix(chart_yaml["home"])).exists()
    assert chart_yaml["kubeVersion"] and chart_yaml["keywords"]


def test_notes_tell_how_to_uninstall():
    from tessera_operator.crd import CRD_NAME, FINALIZER

    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values=None, name=RELEASE, namespace=NAMESPACE,
                                is_install=True)
    notes = rendered["tessera/templates/NOTES.txt"]
    assert FINALIZER in notes and f"kubectl delete crd {CRD_NAME}" in notes
    assert "kubectl delete embeddingjobs --all --all-namespaces" in notes
    assert f"helm uninstall {RELEASE} -n {NAMESPACE}" in notes
    assert f"helm test {RELEASE}" in notes
    assert notes.index("kubectl delete embeddingjobs") < notes.index("helm uninstall")
