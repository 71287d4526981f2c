"""The kopf handlers: they wire the pure decision and status functions to the Kubernetes API.

Each EmbeddingJob gets one kopf daemon, so a job is never reconciled by two tasks at once. A
reconcile first looks at what the watches already delivered: the job as kopf's daemon sees it
(a body kept up to date by the job watch), its pods from the `job_pods` index (a pod watch),
and its trainer's progress from a followed log (`log_follower`). It asks
`decisions.next_action` what to do and `status.desired_status` what the status becomes; when
that is nothing (no child to create or delete, no status to change, no Event), the reconcile
ends there without a request. Otherwise it reads the job and its pods afresh from the API,
decides again and acts on that: the watch caches may lag behind the operator's own last
writes, and a decision that writes must never rest on them (a pod just created and not yet in
the index would look vanished). Actions are applied in the order `decisions` prescribes:
children before status for CREATE, status before deletions otherwise.

The daemon then sleeps until a watch event of the job or of one of its pods, or its trainer's
log, wakes it, or until `action.requeue_after`; a job with pods still working is also looked
at every `RESYNC_SECONDS` (from the caches: free unless something changed), and a finished or
suspended job costs nothing between events. Nothing is remembered between reconciles but the
job's status.

The API is reached through one shared `kubernetes_asyncio` client (`api.KubeApi`), with the
credentials of the latest login (`connection`), which kopf's own watches use too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import aiohttp
import kopf

from tessera.training.allocator import release_freed_memory

from . import metrics
from .api import KubeApi
from .children import children
from .connection import CredentialsError, Login, connection_info, load_login
from .crd import GROUP, PLURAL
from .decisions import Action, ActionKind, next_action, progress_pod
from .events import (
    EVENT_NAME_PREFIX,
    REPORTING_COMPONENT,
    events_path,
    job_event,
    log_action,
    reporting_instance,
)
from .job import JobView, view_job
from .labels import LABEL_JOB, job_selector
from .log_follower import LogFollower
from .peering import LIFETIME
from .pods import ObservedPod, observe_pod
from .progress import TrainingProgress
from .spec import API_VERSION
from .status import desired_status, status_patch

VERSION = API_VERSION.split("/")[1]
RESYNC_SECONDS = 10.0
OLD_CLIENT_GRACE_SECONDS = 60.0
TRIM_SECONDS = 30.0  # an old client, replaced at a new login, is closed after this
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}

_log = logging.getLogger(__name__)
_login: list[Login] = []  # the latest login; kopf logs in again on 401 and at expiry
_client: list[KubeApi] = []  # the shared client of the latest login


@kopf.on.login()
async def login(logger: kopf.Logger, **_: Any) -> kopf.ConnectionInfo:
    """Load the credentials (see `connection`); kept for the reconciles' API calls."""
    try:
        found = await load_login()
    except CredentialsError as error:
        raise kopf.PermanentError(str(error)) from None
    _login[:] = [found]
    if _client:  # the next call makes a client with the new credentials
        old = _client.pop()
        asyncio.get_running_loop().call_later(
            OLD_CLIENT_GRACE_SECONDS, lambda: asyncio.ensure_future(old.close()))
    logger.info(f"logged in to {found.configuration.host} with the {found.source}")
    return connection_info(found)


def shared_api() -> KubeApi:
    """The one client of the latest login (made at its first use)."""
    if not _client:
        _client.append(KubeApi(_login[0].configuration))
    return _client[0]


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
    # --- issue 31 (5): Tessera's own finalizer name (`crd.FINALIZER`; uninstalling is in
    # docs/kubernetes.md), and kopf's per-call success lines at debug, so that the log at
    # normal verbosity is what the operator did (`events.log_action`).
    from .crd import FINALIZER
    from .events import quiet_routine_successes
    settings.persistence.finalizer = FINALIZER
    quiet_routine_successes()
    # --- end of issue 31 (5)
    memo.wakeups = {}  # (namespace, name) -> the asyncio.Event that wakes the job's daemon


@kopf.on.startup()
async def trim_memory(memo: kopf.Memo, **_: Any) -> None:
    """Hand the heap's free memory back every `TRIM_SECONDS`: a burst of events (a thousand
    jobs listed at start-up, a fleet applied at once) leaves free pages scattered in the heap,
    which the process would otherwise hold as long as it runs."""
    async def trim() -> None:
        while True:
            await asyncio.sleep(TRIM_SECONDS)
            release_freed_memory()

    memo.trimming = asyncio.get_running_loop().create_task(trim(), name="trim memory")


@kopf.on.cleanup()
async def close_client(memo: kopf.Memo, **_: Any) -> None:
    if getattr(memo, "trimming", None) is not None:
        memo.trimming.cancel()
    for api in _client:
        await api.close()


def _job_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def _wakeup(memo: kopf.Memo, namespace: str, name: str) -> asyncio.Event:
    return memo.wakeups.setdefault((namespace, name), asyncio.Event())


# The handlers' `type: ignore`: kopf's callback types allow a None `namespace` (for
# cluster-scoped kinds); EmbeddingJobs and pods are namespaced, so ours take a str.
@kopf.index("", "v1", "pods", labels={LABEL_JOB: kopf.PRESENT})  # type: ignore[arg-type]
async def job_pods(namespace: str, labels: Mapping[str, str], body: kopf.Body,
                   **_: Any) -> dict[tuple[str, str], ObservedPod]:
    """The pods of each job, as the pod watch last saw them. (This handler and the two
    below are coroutines: kopf runs plain functions in a thread pool, whose threads each
    kept an allocator arena of their own, a quarter of the operator's memory at 1,000 jobs.)"""
    return {(namespace, labels[LABEL_JOB]): observe_pod(body)}


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=1.0)  # type: ignore[arg-type]
async def run_job(name: str, namespace: str, **kwargs: Any) -> None:
    try:
        await reconcile_forever(name, namespace, **kwargs)
    finally:  # also when kopf cancels the daemon of a deleted job
        metrics.forget(namespace, name)
        _wakeups_of(kwargs.get("memo")).pop((namespace, name), None)


def _wakeups_of(memo: kopf.Memo | None) -> dict[tuple[str, str], asyncio.Event]:
    return getattr(memo, "wakeups", {}) if memo is not None else {}


async def reconcile_forever(name: str, namespace: str, memo: kopf.Memo,
                            stopped: kopf.DaemonStopped, logger: kopf.Logger, body: kopf.Body,
                            job_pods: kopf.Index[tuple[str, str], ObservedPod],
                            **_: Any) -> None:
    """Reconcile the job whenever something about it changes (see the module docstring)."""
    wakeup = _wakeup(memo, namespace, name)
    trainer_log = TrainerLog(namespace, wakeup.set)
    try:
        while not stopped:
            wakeup.clear()  # before reading, so a change during the reconcile wakes the next
            try:
                with metrics.timed_reconcile():
                    delay = await reconcile(
                        shared_api(), namespace, name, trainer_log,
                        cached=(dict(body), list(job_pods.get((namespace, name), []))))
            except (kopf.TemporaryError, aiohttp.ClientError) as problem:
                logger.warning(f"reconcile failed, retrying: {problem}")
                delay = 5.0
            try:
                await asyncio.wait_for(wakeup.wait(), None if delay is None
                                       else max(delay, 0.5))
            except asyncio.TimeoutError:
                pass
    finally:
        await trainer_log.stop()


@kopf.on.event(GROUP, VERSION, PLURAL)  # type: ignore[arg-type]
async def job_changed(name: str, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    _wakeup(memo, namespace, name).set()


@kopf.on.event("", "v1", "pods", labels={LABEL_JOB: kopf.PRESENT})  # type: ignore[arg-type]
async def pod_changed(labels: Mapping[str, str], namespace: str, memo: kopf.Memo,
                      **_: Any) -> None:
    _wakeup(memo, namespace, labels[LABEL_JOB]).set()


class TrainerLog:
    """The followed log of a job's progress pod, restarted when that pod changes."""

    def __init__(self, namespace: str, wake: Callable[[], None]) -> None:
        self.namespace = namespace
        self.wake = wake
        self.follower: LogFollower | None = None

    async def progress(self, pod: ObservedPod | None) -> TrainingProgress | None:
        """What `pod` said so far (None: no pod to read, or nothing read yet)."""
        if pod is None:
            await self.stop()
            return None
        if self.follower is None or not self.follower.follows(pod.name, pod.uid):
            await self.stop()
            self.follower = LogFollower(shared_api, self.namespace, pod.name, pod.uid,
                                        self.wake)
            if not pod.finished:
                self.follower.start()
        if pod.finished:
            await self.follower.read_to_the_end()
        return self.follower.reported()

    async def caught_up(self) -> TrainingProgress | None:
        """The progress with the log read now, not as far as the stream has handed it over."""
        if self.follower is None:
            return None
        await self.follower.catch_up()
        return self.follower.reported()

    async def stop(self) -> None:
        if self.follower is not None:
            await self.follower.stop()
            self.follower = None


@dataclass(frozen=True)
class Step:
    """One decision and what applying it would write."""

    job: Mapping[str, Any]
    view: JobView
    pods: list[ObservedPod]
    action: Action
    status: dict[str, Any]
    patch: dict[str, Any] | None
    event: Mapping[str, Any] | None

    @property
    def writes(self) -> bool:
        return bool(self.action.kind not in (ActionKind.WAIT, ActionKind.HOLD)
                    or self.action.delete_pods or self.patch or self.event)

    @property
    def next_look(self) -> float | None:
        """Seconds until the job must be looked at again (None: at its next event)."""
        working = any(pod.active for pod in self.pods)
        looks = [delay for delay in (self.action.requeue_after,
                                     RESYNC_SECONDS if working else None) if delay is not None]
        return min(looks, default=None)


async def _decide(job: Mapping[str, Any], pods: list[ObservedPod],
                  trainer_log: TrainerLog) -> Step:
    view = view_job(job)
    trainer = progress_pod(view, pods)
    progress = await trainer_log.progress(
        next((pod for pod in pods if pod.name == trainer and pod.run == view.run), None))
    now = datetime.now(timezone.utc)
    action = next_action(view, pods, now, progress)
    if action.kind is ActionKind.NEW_RUN:
        # The new run starts from the last commit: one the stream has not handed over yet
        # would otherwise be missed, and the run would start from the previous init_path.
        progress = await trainer_log.caught_up()
        action = next_action(view, pods, now, progress)
    status = desired_status(view, pods, progress, action, now)
    return Step(job, view, pods, action, status, status_patch(view.status, status),
                job_event(job["metadata"], action, now, reporting_instance()))


async def reconcile(api: KubeApi, namespace: str, name: str, trainer_log: TrainerLog, *,
                    cached: tuple[Mapping[str, Any], list[ObservedPod]] | None = None
                    ) -> float | None:
    """One observe-decide-act step; returns when to look again (None: at the next event).
    `cached`: the job and its pods as the watches last saw them, to decide without a request
    when nothing is to be done."""
    if cached is not None and cached[0].get("metadata"):
        step = await _decide(*cached, trainer_log)
        if not step.writes:
            metrics.reconciled(namespace, name, step.status["phase"], step.action)
            return step.next_look
    job = await api.call("GET", _job_path(namespace, name), ok=(404,))
    if job is None:
        metrics.forget(namespace, name)
        await trainer_log.stop()
        return None
    listed = await api.call("GET", f"/api/v1/namespaces/{namespace}/pods",
                            params={"labelSelector": job_selector(name)})
    step = await _decide(job, [observe_pod(pod) for pod in listed.get("items") or []],
                         trainer_log)
    await _apply(api, namespace, name, step)
    metrics.reconciled(namespace, name, step.status["phase"], step.action)
    return step.next_look


async def _apply(api: KubeApi, namespace: str, name: str, step: Step) -> None:
    action, view = step.action, step.view
    if action.kind is ActionKind.CREATE and action.plan is not None and view.spec is not None:
        for manifest in children(view.ref, view.spec, action.plan):
            await _create(api, namespace, manifest)
    if step.patch:
        await api.call("PATCH", _job_path(namespace, name) + "/status", {"status": step.patch},
                       headers=MERGE_PATCH)
    if action.status_first:
        for pod in action.delete_pods:
            await api.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod}", ok=(404,))
    if step.event is not None:
        log_action(step.job["metadata"], action)  # Events expire after an hour; logs stay
        await _post_event(api, namespace, step.event)
    if action.kind is ActionKind.DELETE_JOB:
        await api.call("DELETE", _job_path(namespace, name), ok=(404,))


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
