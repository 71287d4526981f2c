"""From a pod object to a `Sandbox`: what a kubelet resolves before it starts a container.

The container's environment (literal values, Secret and ConfigMap keys, the downward API),
its volumes (ConfigMap and Secret files, emptyDirs on disk or in memory), a hosts file that
maps the pod's and the Services' names to pod addresses, and the securityContext (user,
group, read-only root filesystem, runAsNonRoot). What cannot be resolved raises
`ContainerConfigError`, which the kubelet reports as `CreateContainerConfigError`.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from e2e.kube_objects import labels_match
from e2e.pod_sandbox import Mount, Sandbox

# Reads an object (or a list) from the API by URL path; None when it does not exist.
ApiRead = Callable[[str], Awaitable["dict[str, Any] | None"]]
# The node's own environment: the image's PATH is the running Python's.
NODE_PATH = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
# What a non-root container user must be able to reach: the interpreter and the package.
ENVIRONMENT_PATHS = (Path(sys.prefix), Path(sys.base_prefix), Path(__file__).resolve().parents[2])
CLUSTER_DOMAIN = "svc.cluster.local"


class ContainerConfigError(Exception):
    """The pod refers to something that is not there or that this kubelet cannot do."""


async def prepare(pod: dict[str, Any], ip: str, addresses: Callable[[dict[str, Any]], str],
                  read: ApiRead, stage: Path, node_env: Mapping[str, str]) -> Sandbox:
    """The sandbox of the pod's (only) container; `addresses` gives any pod its address."""
    spec = pod["spec"]
    container = spec["containers"][0]
    namespace = pod["metadata"]["namespace"]
    security = {**(spec.get("securityContext") or {}), **(container.get("securityContext")
                                                          or {})}
    uid, gid = security.get("runAsUser"), security.get("runAsGroup")
    if security.get("runAsNonRoot") and not uid:
        raise ContainerConfigError("container has runAsNonRoot and image will run as root")
    env = {"PATH": NODE_PATH, "HOSTNAME": _hostname(pod), **node_env,
           **await _environment(pod, container, ip, read)}
    hosts = stage / "hosts"
    hosts.write_text(await _hosts(pod, ip, addresses, read))
    hosts.chmod(0o644)
    return Sandbox(
        argv=[*container.get("command", []), *container.get("args", [])],
        env=env, hostname=_hostname(pod), hosts_file=hosts, stage=stage,
        mounts=await _mounts(container, spec.get("volumes") or [], namespace, read, stage),
        uid=uid, gid=gid, read_only_root=bool(security.get("readOnlyRootFilesystem")),
        reachable=ENVIRONMENT_PATHS)


def _hostname(pod: dict[str, Any]) -> str:
    return pod["spec"].get("hostname") or pod["metadata"]["name"]


# --- environment ------------------------------------------------------------------------------

async def _environment(pod: dict[str, Any], container: dict[str, Any], ip: str,
                       read: ApiRead) -> dict[str, str]:
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, reference in (("secrets", source.get("secretRef")),
                                ("configmaps", source.get("configMapRef"))):
            if reference is not None:
                data = await _data(read, namespace, kind, reference["name"],
                                   reference.get("optional", False))
                env.update({prefix + key: value for key, value in data.items()})
    for variable in container.get("env") or []:
        value = await _value(pod, variable, ip, read)
        if value is not None:
            env[variable["name"]] = value
    return env


async def _value(pod: dict[str, Any], variable: dict[str, Any], ip: str,
                 read: ApiRead) -> str | None:
    if "valueFrom" not in variable:
        return str(variable.get("value", ""))
    source = variable["valueFrom"]
    namespace = pod["metadata"]["namespace"]
    for kind, field in (("secrets", "secretKeyRef"), ("configmaps", "configMapKeyRef")):
        if field in source:
            reference = source[field]
            optional = reference.get("optional", False)
            data = await _data(read, namespace, kind, reference["name"], optional)
            if reference["key"] not in data and not optional:
                raise ContainerConfigError(f"couldn't find key {reference['key']} in "
                                           f"{kind[:-1]} {namespace}/{reference['name']}")
            return data.get(reference["key"])
    if "fieldRef" in source:
        return _downward(pod, source["fieldRef"]["fieldPath"], ip)
    raise ContainerConfigError(f"unsupported env source {sorted(source)}")


async def _data(read: ApiRead, namespace: str, kind: str, name: str,
                optional: bool) -> dict[str, str]:
    """A Secret's (decoded) or a ConfigMap's data."""
    obj = await read(f"/api/v1/namespaces/{namespace}/{kind}/{name}")
    if obj is None:
        if optional:
            return {}
        raise ContainerConfigError(f"{kind[:-1]} \"{name}\" not found")
    data = obj.get("data") or {}
    if kind == "secrets":
        return {key: base64.b64decode(value).decode() for key, value in data.items()}
    return dict(data)


def _downward(pod: dict[str, Any], path: str, ip: str) -> str:
    metadata = pod["metadata"]
    for prefix, mapping in (("metadata.labels", "labels"),
                            ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['"):
            return (metadata.get(mapping) or {}).get(path[len(prefix) + 2:-2], "")
    values = {"metadata.name": metadata["name"], "metadata.namespace": metadata["namespace"],
              "metadata.uid": metadata["uid"], "spec.nodeName": pod["spec"].get("nodeName"),
              "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
              "status.podIP": ip, "status.podIPs": ip, "status.hostIP": "127.0.0.1"}
    if path not in values:
        raise ContainerConfigError(f"unsupported fieldPath {path!r}")
    return str(values[path] or "")


# --- volumes ----------------------------------------------------------------------------------

async def _mounts(container: dict[str, Any], volumes: list[dict[str, Any]], namespace: str,
                  read: ApiRead, stage: Path) -> list[Mount]:
    by_name = {volume["name"]: volume for volume in volumes}
    mounts = []
    for mount in container.get("volumeMounts") or []:
        volume = by_name.get(mount["name"])
        if volume is None:
            raise ContainerConfigError(f"volume {mount['name']!r} is not defined")
        if mount.get("subPath"):
            raise ContainerConfigError("subPath mounts are not supported")
        read_only = bool(mount.get("readOnly"))
        if "emptyDir" in volume and volume["emptyDir"].get("medium") == "Memory":
            mounts.append(Mount(mount["mountPath"]))
            continue
        source = stage / "volumes" / volume["name"]
        source.mkdir(parents=True, exist_ok=True)
        if "emptyDir" in volume:
            source.chmod(0o1777)
        else:
            await _write_files(volume, namespace, read, source)
            read_only = True  # ConfigMap and Secret volumes are always read-only
        mounts.append(Mount(mount["mountPath"], source, read_only))
    return mounts


async def _write_files(volume: dict[str, Any], namespace: str, read: ApiRead,
                       directory: Path) -> None:
    if "configMap" in volume:
        source, kind, name = volume["configMap"], "configmaps", volume["configMap"]["name"]
    elif "secret" in volume:
        source, kind, name = volume["secret"], "secrets", volume["secret"]["secretName"]
    else:
        raise ContainerConfigError(f"unsupported volume type {sorted(volume)}")
    data = await _data(read, namespace, kind, name, source.get("optional", False))
    items = source.get("items") or [{"key": key, "path": key} for key in data]
    for item in items:
        if item["key"] not in data:
            raise ContainerConfigError(f"{kind[:-1]} {name} has no key {item['key']!r}")
        path = directory / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data[item["key"]])
        path.chmod(item.get("mode", source.get("defaultMode", 0o644)) | 0o444)
    directory.chmod(0o755)


# --- names ------------------------------------------------------------------------------------

async def _hosts(pod: dict[str, Any], ip: str, addresses: Callable[[dict[str, Any]], str],
                 read: ApiRead) -> str:
    """`/etc/hosts`: the pod, each Service (to the address of a pod it selects) and, for a
    headless Service, each of its pods by `hostname.subdomain`."""
    namespace = pod["metadata"]["namespace"]
    lines = ["127.0.0.1\tlocalhost", f"{ip}\t{' '.join(_own_names(pod))}"]
    services = (await read(f"/api/v1/namespaces/{namespace}/services") or {}).get("items", [])
    pods = [other for other in (await read(f"/api/v1/namespaces/{namespace}/pods")
                                or {}).get("items", [])
            if not other["metadata"].get("deletionTimestamp")]
    for service in services:
        name = service["metadata"]["name"]
        selector = service["spec"].get("selector") or {}
        backends = [other for other in pods if selector and labels_match(
            other["metadata"].get("labels") or {},
            ",".join(f"{key}={value}" for key, value in selector.items()))]
        if backends:
            lines.append(f"{addresses(backends[0])}\t{' '.join(_names(name, namespace))}")
        for other in backends:
            if other["spec"].get("subdomain") == name and other["spec"].get("hostname"):
                host = f"{other['spec']['hostname']}.{name}"
                lines.append(f"{addresses(other)}\t{' '.join(_names(host, namespace))}")
    return "\n".join(lines) + "\n"


def _own_names(pod: dict[str, Any]) -> list[str]:
    hostname, subdomain = _hostname(pod), pod["spec"].get("subdomain")
    names = [hostname]
    if subdomain:
        names = _names(f"{hostname}.{subdomain}", pod["metadata"]["namespace"]) + names
    return names


def _names(name: str, namespace: str) -> list[str]:
    return [f"{name}.{namespace}.{CLUSTER_DOMAIN}", f"{name}.{namespace}.svc",
            f"{name}.{namespace}", name]
