"""The kopf handlers: they wire the pure decision and status functions to the Kubernetes API.

Each EmbeddingJob gets one kopf daemon, so a job is never reconciled by two tasks at once. A
reconcile reads everything afresh from the API (the job, its pods listed by label, the log tail
of its first trainer), asks `decisions.next_action` what to do and `status.desired_status`
what the status becomes, and applies both in the order `decisions` prescribes: children before
status for CREATE, status before deletions otherwise. The daemon then sleeps until a watch
event of the job or of one of its pods wakes it, until `action.requeue_after`, or for at most
`RECONCILE_INTERVAL` seconds. Nothing is remembered between reconciles but the job's status.

The API is reached with the credentials kopf logs in with (a service account in the cluster,
a kubeconfig outside it); only `aiohttp`, which kopf itself uses, is needed.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import aiohttp
import kopf

from . import metrics
from .children import children
from .crd import GROUP, KIND, PLURAL
from .decisions import ActionKind, next_action, progress_pod
from .job import view_job
from .labels import LABEL_JOB, job_selector
from .pods import observe_pod
from .progress import TrainingProgress, log_read_failure, parse_progress
from .spec import API_VERSION
from .status import desired_status, status_patch

VERSION = API_VERSION.split("/")[1]
RECONCILE_INTERVAL = 10.0
LOG_TAIL_LINES = 200
LOG_READ_SECONDS = 10.0  # a log read that takes longer is given up until the next reconcile
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}

_log = logging.getLogger(__name__)
_connection: list[kopf.ConnectionInfo] = []  # the latest login; kopf re-logs in on 401


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account first, then a kubeconfig; kept for the API calls below."""
    info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    if info is not None:
        _connection[:] = [info]
    return info


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # The chart installs the CRD and names the namespaces: no cluster-wide scans of
    # namespaces and CRDs, which the operator's least-privilege RBAC does not allow.
    settings.scanning.disabled = True
    memo.wakeups = {}  # (namespace, name) -> the asyncio.Event that wakes the job's daemon


class ApiError(kopf.TemporaryError):
    """An error status from the API server (`status` says which)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message, delay=5)
        self.status = status


class KubeApi:
    """The few API calls a reconcile makes, over one aiohttp session."""

    def __init__(self, info: kopf.ConnectionInfo) -> None:
        self.server = info.server.rstrip("/")
        headers = {"Accept": "application/json"}
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        auth = aiohttp.BasicAuth(info.username, info.password or "") if info.username else None
        self.session = aiohttp.ClientSession(headers=headers, auth=auth,
                                             connector=aiohttp.TCPConnector(ssl=_ssl(info)))

    async def __aenter__(self) -> KubeApi:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.session.close()

    async def call(self, method: str, path: str, body: Any = None, *,
                   params: Mapping[str, str] | None = None,
                   headers: Mapping[str, str] | None = None, ok: tuple[int, ...] = ()) -> Any:
        """The JSON (or text) answer; None for a status listed in `ok` (404, 409...)."""
        async with self.session.request(method, self.server + path, json=body, params=params,
                                        headers=headers) as response:
            if response.status in ok:
                return None
            if response.status >= 400:
                raise ApiError(response.status,
                               f"{method} {path}: {response.status} {await response.text()}")
            if response.content_type == "application/json":
                return await response.json()
            return await response.text()


def _ssl(info: kopf.ConnectionInfo) -> ssl.SSLContext | bool:
    if info.insecure:
        return False
    context = ssl.create_default_context(cafile=info.ca_path, cadata=(
        info.ca_data.decode() if info.ca_data else None))
    if info.certificate_path and info.private_key_path:
        context.load_cert_chain(info.certificate_path, info.private_key_path)
    return context


def _collection(namespace: str, manifest: Mapping[str, Any]) -> str:
    """The URL path where objects like `manifest` are created."""
    version = manifest["apiVersion"]
    root = "/api/v1" if version == "v1" else f"/apis/{version}"
    kind = manifest["kind"].lower()
    plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
    return f"{root}/namespaces/{namespace}/{plural}"


def _job_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def _wakeup(memo: kopf.Memo, namespace: str, name: str) -> asyncio.Event:
    return memo.wakeups.setdefault((namespace, name), asyncio.Event())


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=1.0)
async def run_job(name: str, namespace: str, **kwargs: Any) -> None:
    try:
        await reconcile_forever(name, namespace, **kwargs)
    finally:  # also when kopf cancels the daemon of a deleted job
        metrics.forget(namespace, name)


async def reconcile_forever(name: str, namespace: str, memo: kopf.Memo,
                            stopped: kopf.DaemonStopped, logger: kopf.Logger,
                            **_: Any) -> None:
    """Reconcile the job whenever something about it changes, and every so often anyway."""
    wakeup = _wakeup(memo, namespace, name)
    while not stopped:
        wakeup.clear()  # before reading, so a change during the reconcile wakes the next one
        try:
            with metrics.timed_reconcile():
                async with KubeApi(_connection[0]) as api:
                    delay = await reconcile(api, namespace, name)
        except (kopf.TemporaryError, aiohttp.ClientError) as problem:
            logger.warning(f"reconcile failed, retrying: {problem}")
            delay = 5.0
        timeout = RECONCILE_INTERVAL if delay is None else min(max(delay, 0.5),
                                                                RECONCILE_INTERVAL)
        try:
            await asyncio.wait_for(wakeup.wait(), timeout)
        except asyncio.TimeoutError:
            pass


@kopf.on.event(GROUP, VERSION, PLURAL)
def job_changed(name: str, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    _wakeup(memo, namespace, name).set()


@kopf.on.event("", "v1", "pods", labels={LABEL_JOB: kopf.PRESENT})
def pod_changed(labels: Mapping[str, str], namespace: str, memo: kopf.Memo, **_: Any) -> None:
    _wakeup(memo, namespace, labels[LABEL_JOB]).set()


async def reconcile(api: KubeApi, namespace: str, name: str) -> float | None:
    """One observe-decide-act step; returns when to look again (None: on the usual tick)."""
    job = await api.call("GET", _job_path(namespace, name), ok=(404,))
    if job is None:
        metrics.forget(namespace, name)
        return None
    view = view_job(job)
    listed = await api.call("GET", f"/api/v1/namespaces/{namespace}/pods",
                            params={"labelSelector": job_selector(name)})
    pods = [observe_pod(pod) for pod in listed.get("items") or []]
    progress = await _trainer_progress(api, namespace, progress_pod(view, pods))
    now = datetime.now(timezone.utc)
    action = next_action(view, pods, now, progress)
    status = desired_status(view, pods, progress, action, now)
    if action.kind is ActionKind.CREATE and action.plan is not None and view.spec is not None:
        for manifest in children(view.ref, view.spec, action.plan):
            await _create(api, namespace, manifest)
    patch = status_patch(view.status, status)
    if patch:
        await api.call("PATCH", _job_path(namespace, name) + "/status", {"status": patch},
                       headers=MERGE_PATCH)
    if action.status_first:
        for pod in action.delete_pods:
            await api.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod}", ok=(404,))
    if action.event_type:
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": job["metadata"]}
        kopf.event(body, type=action.event_type, reason=action.reason or action.kind.value,
                   message=action.message)
    if action.kind is ActionKind.DELETE_JOB:
        await api.call("DELETE", _job_path(namespace, name), ok=(404,))
    metrics.reconciled(namespace, name, status["phase"], action)
    return action.requeue_after


async def _trainer_progress(api: KubeApi, namespace: str,
                            trainer: str | None) -> TrainingProgress | None:
    """What the log tail of `trainer` says (None: nothing to read, or no log yet). Reading
    it never fails the reconcile: the phase, restarts, deadlines and TTLs must follow the
    pods whatever the API server's route to the kubelet does, so a failed read becomes a
    progress that says why it is unavailable."""
    if trainer is None:
        return None
    try:
        text = await asyncio.wait_for(api.call(
            "GET", f"/api/v1/namespaces/{namespace}/pods/{trainer}/log",
            params={"tailLines": str(LOG_TAIL_LINES)}, ok=(400, 404)), LOG_READ_SECONDS)
    except asyncio.TimeoutError:
        why = log_read_failure(None, f"no answer in {LOG_READ_SECONDS:.0f} s")
        metrics.progress_read_failed(None, "timeout")
    except Exception as problem:  # whatever went wrong, the lifecycle goes on without it
        why = log_read_failure(getattr(problem, "status", None), type(problem).__name__)
        metrics.progress_read_failed(getattr(problem, "status", None), type(problem).__name__)
        _log.warning("reading the log of %s/%s failed: %s", namespace, trainer, problem)
    else:
        return None if text is None else parse_progress(str(text).splitlines())
    return TrainingProgress.unreadable(why)


async def _create(api: KubeApi, namespace: str, manifest: Mapping[str, Any]) -> None:
    """Create a child; one that exists is kept, except the ConfigMap, whose data (the run's
    config) is patched to this run's."""
    collection = _collection(namespace, manifest)
    created = await api.call("POST", collection, manifest, ok=(409,))
    if created is None and manifest["kind"] == "ConfigMap":
        await api.call("PATCH", f"{collection}/{manifest['metadata']['name']}",
                       {"metadata": {"labels": manifest["metadata"].get("labels", {})},
                        "data": manifest["data"]}, headers=MERGE_PATCH)
