"""The Helm chart's objects for the operator's identity on a real API server: its
ServiceAccount and RBAC (rendered by Helm's SDK), without the CRDs and the Deployment, which
the tests replace with the CRD from `crds/` and the operator's own process, and without what
belongs to the Deployment's replicas or to `helm test` (the PodDisruptionBudget, policy/v1,
which the v1.20 test server lacks; the test hook's Pod, which the test kubelet would run)."""

from __future__ import annotations

import functools
from typing import Any

import helm_python as helm
import yaml
from e2e.cluster import REPO

CHART = REPO / "helm" / "tessera"


@functools.cache
def _rendered(namespace: str, release: str, cluster_wide: bool) -> tuple[dict[str, Any], ...]:
    values = None if cluster_wide else {"rbac": {"namespaces": [namespace]}}
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values=values, name=release, namespace=namespace,
                                is_install=True)
    return tuple(document for name, text in sorted(rendered.items()) if name.endswith(".yaml")
                 for document in yaml.safe_load_all(text)
                 if document and document["kind"] not in ("Deployment", "PodDisruptionBudget")
                 and "helm.sh/hook" not in (document["metadata"].get("annotations") or {}))


def chart_objects(namespace: str, release: str, cluster_wide: bool) -> list[dict[str, Any]]:
    """The chart's ServiceAccount and RBAC: a ClusterRole (`cluster_wide`) or a Role in
    `namespace`."""
    return [dict(document) for document in _rendered(namespace, release, cluster_wide)]


def operator_user(namespace: str, release: str, cluster_wide: bool) -> str:
    """The user name of the chart's service account, which RBAC bindings to it match (also
    as the common name of a client certificate)."""
    (account,) = [o for o in _rendered(namespace, release, cluster_wide)
                  if o["kind"] == "ServiceAccount"]
    return f"system:serviceaccount:{namespace}:{account['metadata']['name']}"
