"""The kopf handlers: they wire the pure decision and status functions to the Kubernetes API.

Each EmbeddingJob gets one kopf daemon, so a job is never reconciled by two tasks at once. A
reconcile reads everything afresh from the API (the job, its pods listed by label, the log tail
of its first trainer), asks `decisions.next_action` what to do and `status.desired_status`
what the status becomes, and applies both in the order `decisions` prescribes: children before
status for CREATE, status before deletions otherwise. The daemon then sleeps until a watch
event of the job or of one of its pods wakes it, until `action.requeue_after`, or for at most
`RECONCILE_INTERVAL` seconds. Nothing is remembered between reconciles but the job's status.

The API is reached through `kubernetes_asyncio` (`api.KubeApi`), with the credentials of the
latest login (`connection`), which kopf's own watches use too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import aiohttp
import kopf

from . import metrics
from .api import KubeApi
from .children import children
from .connection import CredentialsError, Login, connection_info, load_login
from .crd import GROUP, PLURAL
from .decisions import ActionKind, next_action, progress_pod
from .events import (
    EVENT_NAME_PREFIX,
    REPORTING_COMPONENT,
    events_path,
    job_event,
    reporting_instance,
)
from .job import view_job
from .labels import LABEL_JOB, job_selector
from .peering import LIFETIME
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
_login: list[Login] = []  # the latest login; kopf logs in again on 401 and at expiry


@kopf.on.login()
async def login(logger: kopf.Logger, **_: Any) -> kopf.ConnectionInfo:
    """Load the credentials (see `connection`); kept for the reconciles' API calls."""
    try:
        found = await load_login()
    except CredentialsError as error:
        raise kopf.PermanentError(str(error)) from None
    _login[:] = [found]
    logger.info(f"logged in to {found.configuration.host} with the {found.source}")
    return connection_info(found)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # The chart installs the CRD and names the namespaces: no cluster-wide scans of
    # namespaces and CRDs, which the operator's least-privilege RBAC does not allow.
    settings.scanning.disabled = True
    settings.peering.lifetime = LIFETIME  # with --peering: how soon a standby takes over
    # The operator posts its Events itself (`events`); any kopf posts carry the same name.
    settings.posting.reporting_component = REPORTING_COMPONENT
    settings.posting.reporting_instance = reporting_instance()
    settings.posting.event_name_prefix = EVENT_NAME_PREFIX
    memo.wakeups = {}  # (namespace, name) -> the asyncio.Event that wakes the job's daemon


def _job_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def _wakeup(memo: kopf.Memo, namespace: str, name: str) -> asyncio.Event:
    return memo.wakeups.setdefault((namespace, name), asyncio.Event())


# The handlers' `type: ignore`: kopf's callback types allow a None `namespace` (for
# cluster-scoped kinds); EmbeddingJobs and pods are namespaced, so ours take a str.
@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=1.0)  # type: ignore[arg-type]
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
                async with KubeApi(_login[0].configuration) as api:
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


@kopf.on.event(GROUP, VERSION, PLURAL)  # type: ignore[arg-type]
def job_changed(name: str, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    _wakeup(memo, namespace, name).set()


@kopf.on.event("", "v1", "pods", labels={LABEL_JOB: kopf.PRESENT})  # type: ignore[arg-type]
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
    event = job_event(job["metadata"], action, now, reporting_instance())
    if event is not None:
        await _post_event(api, namespace, event)
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


async def _post_event(api: KubeApi, namespace: str, event: Mapping[str, Any]) -> None:
    """Post an Event; one that cannot be posted is logged, never fails the reconcile (Events
    are for people; the status already says what happened)."""
    try:
        await api.call("POST", events_path(namespace), event)
    except (kopf.TemporaryError, aiohttp.ClientError) as problem:
        _log.warning("posting the %s Event of %s/%s failed: %s", event["reason"], namespace,
                     event["involvedObject"]["name"], problem)


async def _create(api: KubeApi, namespace: str, manifest: Mapping[str, Any]) -> None:
    """Create a child; one that exists is kept, except the ConfigMap, whose data (the run's
    config) is patched to this run's."""
    created = await api.create(namespace, manifest)
    if not created and manifest["kind"] == "ConfigMap":
        await api.patch_config_map(namespace, manifest["metadata"]["name"],
                                   {"metadata": {"labels": manifest["metadata"].get("labels", {})},
                                    "data": manifest["data"]})
