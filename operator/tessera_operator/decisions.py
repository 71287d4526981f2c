"""What the reconciler must do next for a job, decided from the job and its observed pods.

`next_action` is a pure function of (job, pods, now, progress) and returns one `Action`;
`progress` is what the current run's trainer reported, whose committed checkpoint version may
be newer than the one the status recorded. The rules are looked at in order, and the first
that applies decides:

1. an invalid spec fails the job at once (no pods, a message naming the field);
2. a finished job whose `ttlSecondsAfterFinished` has passed is deleted;
3. a job that never ran starts its first run (unless suspended);
4. a changed training config starts a new run from the last checkpoint; changed pods (image,
   resources, scheduling, storage) restart the run; an edit that lifts the cause of a
   failure (a now valid spec, a higher backoffLimit, a later deadline) retries;
5. pods of an earlier run are deleted, and nothing new is created until they are gone (the
   new pods reuse their names);
6. a finished job only has its leftover pods deleted;
7. `suspend` deletes the pods; lifting it resumes from the checkpoint;
8. a run past `activeDeadlineSeconds` fails;
9. a run whose pods are not created yet gets them (after the back-off delay of a restart);
10. a failed, vanished or terminating pod restarts the run (exit code 65, bad input, fails
    the job at once; `backoffLimit` restarts at most, with exponential back-off); a pod that
    someone else is deleting is as good as gone, even while its grace period lasts; a pod
    that exited 75 on the checkpoint lease of one of the job's own pods (an earlier one that
    stopped without releasing it) holds the restart until that lease expires, not charged;
11. trainers that all succeeded make the job succeed;
12. otherwise: wait.

Handlers apply an action in this order: when `action.status_first`, write the status
(`status.desired_status`) and then delete what `delete_pods` lists (so a crash in between
leaves a status that already knows the new run, and the leftovers are stale pods the next
reconcile deletes); for CREATE, create the children first and write the status after (so a
crash in between leaves pods a second CREATE finds, rather than a status claiming pods that
do not exist).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from tessera.errors import EXIT_BAD_INPUT
from tessera.vocabulary import Role

from . import conditions as cond
from .job import JobView
from .labels import expected_pods, is_pod_name, pod_name
from .pods import FAILED, PENDING, SUCCEEDED, ObservedPod
from .progress import TrainingProgress
from .redaction import redact
from .run_config import RunPlan, first_plan, restarted_plan, retraining_plan
from .spec import EmbeddingJobSpec

BACKOFF_BASE_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 360.0
STALE_POD_POLL_SECONDS = 5.0


class ActionKind(str, Enum):
    WAIT = "Wait"            # nothing to create; delete `delete_pods` if any
    CREATE = "Create"        # create the missing children of `plan`'s run
    RESTART = "Restart"      # delete the pods; `plan` is the next run (same checkpoint)
    RESUME = "Resume"        # suspension lifted; `plan` is the next run (same checkpoint)
    NEW_RUN = "NewRun"       # config changed; `plan` is the next run (new checkpoint dir)
    SUSPEND = "Suspend"      # delete the pods
    HOLD = "Hold"            # a restart waits (for a predecessor's lease); the pods stay
    FAIL = "Fail"            # delete the active pods; the job failed
    SUCCEED = "Succeed"      # delete the active pods (servers); the job succeeded
    DELETE_JOB = "DeleteJob"  # ttlSecondsAfterFinished passed; the children go with it


@dataclass(frozen=True)
class Action:
    """One step of reconciliation, and what it means for the status and the Events."""

    kind: ActionKind
    reason: str = ""
    message: str = ""
    plan: RunPlan | None = None
    delete_pods: tuple[str, ...] = ()
    requeue_after: float | None = None

    @property
    def status_first(self) -> bool:
        return self.kind is not ActionKind.CREATE

    @property
    def counts_against_backoff(self) -> bool:
        return self.kind is ActionKind.RESTART and self.reason in cond.FAILURE_REASONS

    @property
    def event_type(self) -> str | None:
        """The type of the Event to post (None: nothing happened worth one)."""
        if self.kind in (ActionKind.WAIT, ActionKind.HOLD):
            return None
        warning = self.kind is ActionKind.FAIL or self.counts_against_backoff
        return "Warning" if warning else "Normal"


@dataclass(frozen=True)
class Situation:
    """The inputs of a decision, with the views of them that several rules need."""

    job: JobView
    spec: EmbeddingJobSpec
    pods: Sequence[ObservedPod]
    now: datetime
    progress: TrainingProgress | None = None

    @property
    def checkpoint_version(self) -> int | None:
        """The current run's last committed checkpoint, as freshly as it is known."""
        reported = self.progress.checkpoint_version if self.progress else None
        return reported if reported is not None else self.job.checkpoint_version

    @property
    def current(self) -> list[ObservedPod]:
        return [pod for pod in self.pods if pod.run == self.job.run]

    @property
    def stale(self) -> list[ObservedPod]:
        return [pod for pod in self.pods if pod.run != self.job.run]

    def deletable(self, pods: Sequence[ObservedPod], *, active_only: bool = False) -> tuple[
            str, ...]:
        return tuple(sorted(pod.name for pod in pods
                            if not pod.deleting and (pod.active or not active_only)))

    def seconds_until(self, start: datetime | None, seconds: int | None) -> float | None:
        if start is None or seconds is None:
            return None
        return (start + timedelta(seconds=seconds) - self.now).total_seconds()


def next_action(job: JobView, pods: Sequence[ObservedPod], now: datetime,
                progress: TrainingProgress | None = None) -> Action:
    """The one thing to do now (see the module docstring for the rules and their order);
    `progress` must come from a trainer of the job's current run."""
    if job.spec is None:
        action = _invalid_spec(job, pods)
    else:
        situation = Situation(job, job.spec, pods, now, progress)
        action = next((found for rule in _RULES if (found := rule(situation)) is not None),
                      None) or _keep_waiting(situation)
    return dataclasses.replace(action, message=redact(action.message))


def _invalid_spec(job: JobView, pods: Sequence[ObservedPod]) -> Action:
    failed = cond.find(job.conditions, cond.FAILED) or {}
    doomed = tuple(sorted(pod.name for pod in pods if pod.active))
    reported = failed.get("status") == "True" and failed.get("reason") == cond.INVALID_SPEC \
        and failed.get("message") == redact(job.spec_error or "")
    if reported and not doomed:
        return Action(ActionKind.WAIT)
    return Action(ActionKind.FAIL, cond.INVALID_SPEC, job.spec_error or "", delete_pods=doomed)


def _expired(s: Situation) -> Action | None:
    ttl = s.spec.run_policy.ttl_seconds_after_finished
    left = s.seconds_until(s.job.completion_time, ttl)
    if s.job.finished and left is not None and left <= 0:
        return Action(ActionKind.DELETE_JOB, cond.TTL_EXPIRED,
                      f"deleting the job {ttl} s after it finished (its checkpoints stay)")
    return None


def _first_run(s: Situation) -> Action | None:
    if s.job.run != 0:
        return None
    if s.spec.run_policy.suspend:
        return Action(ActionKind.WAIT)
    plan = first_plan(s.spec)
    return Action(ActionKind.CREATE, cond.PODS_CREATED, _created_message(s, plan), plan)


def _spec_change(s: Situation) -> Action | None:
    plan = s.job.plan
    if plan is None:
        return None
    everything = s.deletable(s.pods)
    if s.spec.config_fingerprint() != s.job.run_record.get("configHash"):
        new_plan = retraining_plan(s.spec, plan, s.checkpoint_version, s.job.generation)
        start = f"checkpoint version {s.checkpoint_version} of {plan.checkpoint_path}" \
            if s.checkpoint_version else (new_plan.init_path or "scratch")
        return Action(ActionKind.NEW_RUN, cond.NEW_RUN,
                      f"the training config changed (generation {s.job.generation}): run "
                      f"{new_plan.number} trains from {start} into {new_plan.checkpoint_path}",
                      new_plan, everything)
    succeeded = cond.is_true(s.job.conditions, cond.SUCCEEDED)
    if s.spec.pods_fingerprint() != s.job.run_record.get("podsHash") and not succeeded:
        return Action(ActionKind.RESTART, cond.SPEC_CHANGED,
                      "the pods' spec changed: restarting them from the last checkpoint",
                      restarted_plan(plan), everything)
    lifted = _lifted_failure(s)
    if lifted is not None:
        return Action(ActionKind.RESTART, cond.SPEC_FIXED, lifted, restarted_plan(plan),
                      everything)
    return None


def _lifted_failure(s: Situation) -> str | None:
    """Why an edited spec no longer fails the job (None: it still does, or it did not fail)."""
    if not s.job.spec_edited or not cond.is_true(s.job.conditions, cond.FAILED):
        return None
    reason = cond.reason_of(s.job.conditions, cond.FAILED)
    policy = s.spec.run_policy
    if reason == cond.INVALID_SPEC:
        return "the spec is valid again: resuming from the last checkpoint"
    if reason == cond.BACKOFF_LIMIT_EXCEEDED and s.job.restarts < policy.backoff_limit:
        return f"backoffLimit raised to {policy.backoff_limit}: resuming from the last checkpoint"
    left = s.seconds_until(s.job.start_time, policy.active_deadline_seconds)
    if reason == cond.DEADLINE_EXCEEDED and (left is None or left > 0):
        return "activeDeadlineSeconds extended: resuming from the last checkpoint"
    return None


def _stale_pods(s: Situation) -> Action | None:
    if not s.stale:
        return None
    return Action(ActionKind.WAIT, delete_pods=s.deletable(s.stale),
                  requeue_after=STALE_POD_POLL_SECONDS)


def _finished(s: Situation) -> Action | None:
    if not s.job.finished:
        return None
    left = s.seconds_until(s.job.completion_time, s.spec.run_policy.ttl_seconds_after_finished)
    return Action(ActionKind.WAIT, delete_pods=s.deletable(s.current, active_only=True),
                  requeue_after=left)


def _suspension(s: Situation) -> Action | None:
    suspended = cond.is_true(s.job.conditions, cond.SUSPENDED)
    if s.spec.run_policy.suspend:
        doomed = s.deletable(s.current)
        if not doomed:
            return Action(ActionKind.WAIT)
        return Action(ActionKind.SUSPEND, cond.JOB_SUSPENDED,
                      "suspended: the pods are deleted; lifting suspend resumes from the last "
                      "checkpoint", delete_pods=doomed)
    if suspended and s.job.plan is not None:
        return Action(ActionKind.RESUME, cond.JOB_RESUMED,
                      "resumed: new pods continue from the last checkpoint",
                      restarted_plan(s.job.plan))
    return None


def _deadline(s: Situation) -> Action | None:
    deadline = s.spec.run_policy.active_deadline_seconds
    left = s.seconds_until(s.job.start_time, deadline)
    if left is None or left > 0:
        return None
    return Action(ActionKind.FAIL, cond.DEADLINE_EXCEEDED,
                  f"the run took longer than activeDeadlineSeconds ({deadline} s)",
                  delete_pods=s.deletable(s.current, active_only=True))


def _creation(s: Situation) -> Action | None:
    if s.job.pods_created or s.job.plan is None:
        return None
    wait = _backoff_left(s)
    if wait > 0:
        return Action(ActionKind.WAIT, requeue_after=wait)
    return Action(ActionKind.CREATE, cond.PODS_CREATED, _created_message(s, s.job.plan),
                  s.job.plan)


def restart_delay(restarts: int) -> float:
    """Seconds between a failure restart and its new pods: 10, 20, 40... at most 6 minutes."""
    if restarts <= 0:
        return 0.0
    return min(BACKOFF_BASE_SECONDS * 2 ** (restarts - 1), BACKOFF_MAX_SECONDS)


def _backoff_left(s: Situation) -> float:
    if cond.reason_of(s.job.conditions, cond.RESTARTING) not in cond.FAILURE_REASONS or \
            not cond.is_true(s.job.conditions, cond.RESTARTING):
        return 0.0
    # Created went False when the failed pods were deleted: that is when the restart began.
    began = cond.transition_time(s.job.conditions, cond.CREATED)
    left = s.seconds_until(began, 0)
    return 0.0 if left is None else max(left + restart_delay(s.job.restarts), 0.0)


def _pod_failure(s: Situation) -> Action | None:
    broken = _first_broken_pod(s)
    if broken is None:
        return None
    pod, reason, explanation = broken
    if pod.exit_code == EXIT_BAD_INPUT:
        return Action(ActionKind.FAIL, cond.BAD_INPUT, f"bad input, not retried: {explanation}",
                      delete_pods=s.deletable(s.current, active_only=True))
    handover = _predecessor_lease(s, pod)
    if handover is not None:
        return handover
    limit = s.spec.run_policy.backoff_limit
    if s.job.restarts >= limit:
        return Action(ActionKind.FAIL, cond.BACKOFF_LIMIT_EXCEEDED,
                      f"{explanation}; backoffLimit ({limit}) reached",
                      delete_pods=s.deletable(s.current, active_only=True))
    restarts = s.job.restarts + 1
    return Action(ActionKind.RESTART, reason,
                  f"{explanation}; restart {restarts} of {limit} in "
                  f"{restart_delay(restarts):.0f} s, from the last checkpoint",
                  restarted_plan(s.job.plan) if s.job.plan else None, s.deletable(s.current))


def _predecessor_lease(s: Situation, pod: ObservedPod) -> Action | None:
    """A pod that found the checkpoint lease held by one of the job's own pods waits for it to
    expire, and then restarts, not charged: the holder can only be an earlier pod (a run
    starts once the previous run's pods are gone) that stopped without releasing it,
    SIGKILLed after its grace period or lost with its node, so the wait is the job's own
    hand-over, not a failure."""
    wait = pod.lease_wait
    if wait is None or not is_pod_name(s.job.ref.name, wait.holder):
        return None
    found = (f"{pod.name} found the checkpoint lease still held by {wait.holder}, an earlier "
             "pod of this job that stopped without releasing it")
    left = (wait.expires - s.now).total_seconds()
    if left > 0:
        return Action(ActionKind.HOLD, cond.PREDECESSOR_LEASE,
                      f"{found}; restarting when it expires at {cond.format_time(wait.expires)}"
                      " (not counted against backoffLimit)", requeue_after=left)
    return Action(ActionKind.RESTART, cond.PREDECESSOR_LEASE,
                  f"{found}; it has expired: restarting from the last checkpoint (not counted "
                  "against backoffLimit)",
                  restarted_plan(s.job.plan) if s.job.plan else None, s.deletable(s.current))


def _first_broken_pod(s: Situation) -> tuple[ObservedPod, str, str] | None:
    """The first expected pod that will not finish its part, the reason and why."""
    by_name = {pod.name: pod for pod in s.current}
    for name, (role, _) in expected_pods(s.job.ref.name, s.spec).items():
        pod = by_name.get(name)
        if pod is None:
            return (ObservedPod(name, role, s.job.run, "Vanished"), cond.POD_VANISHED,
                    f"{name} disappeared")
        if pod.phase == FAILED:
            return pod, cond.POD_FAILED, pod.explanation()
        if pod.deleting and not pod.finished:
            # The operator deletes current pods only when it ends or replaces the run, which
            # earlier rules handle; so someone else is deleting this one.
            return pod, cond.POD_DELETED, f"{name} is being deleted"
    return None


def _success(s: Situation) -> Action | None:
    trainers = [pod for pod in s.current if pod.role is Role.TRAINER]
    if len(trainers) < s.spec.trainers.replicas or \
            any(pod.phase != SUCCEEDED for pod in trainers):
        return None
    version = s.checkpoint_version
    where = s.job.plan.checkpoint_path if s.job.plan else s.spec.config.checkpoint_path
    saved = f"checkpoint version {version} in {where}" if version else f"checkpoints in {where}"
    return Action(ActionKind.SUCCEED, cond.TRAINING_FINISHED, f"training finished: {saved}",
                  delete_pods=s.deletable(s.current, active_only=True))


def progress_pod(job: JobView, pods: Sequence[ObservedPod]) -> str | None:
    """The pod whose log tells the current run's progress, when reading it can tell
    something new: the current run's first trainer once it has started, and nothing once
    the job has finished (its status already holds the end). A trainer left over from an
    earlier run speaks of that run's checkpoints, not this one's."""
    if job.finished:
        return None
    trainer = pod_name(job.ref.name, Role.TRAINER, 0)
    started = any(pod.name == trainer and pod.run == job.run and pod.phase != PENDING
                  for pod in pods)
    return trainer if started else None


def _keep_waiting(s: Situation) -> Action:
    left = s.seconds_until(s.job.start_time, s.spec.run_policy.active_deadline_seconds)
    return Action(ActionKind.WAIT, requeue_after=left)


def _created_message(s: Situation, plan: RunPlan) -> str:
    counts: dict[str, int] = {}
    for role, _ in expected_pods(s.job.ref.name, s.spec).values():
        counts[role.value] = counts.get(role.value, 0) + 1
    pods = ", ".join(f"{count} {role}" for role, count in counts.items())
    return f"run {plan.number}: created {pods} pod(s), checkpoints in {plan.checkpoint_path}"


_RULES: tuple[Callable[[Situation], Action | None], ...] = (
    _expired, _first_run, _spec_change, _stale_pods, _finished, _suspension, _deadline,
    _creation, _pod_failure, _success)
