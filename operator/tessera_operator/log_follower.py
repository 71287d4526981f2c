"""A running job's progress as its trainer prints it: the trainer's log followed, one stream a job.

Polling the log tail every 10 s left the status 5-10 s behind the trainer's commits. A followed
log (`pods/log?follow=true`, what `kubectl logs -f` reads) hands over each record as it is
written; the follower folds it into the progress and wakes the job's reconcile when the
progress changed, so the status follows within a reconcile's time. The pods stay as they were:
no API token, no port open to the operator (see `progress` for why the log).

A stream ends when the container stops or the connection drops; the follower then opens a new
one (the tail again, then what follows) after a pause that grows while nothing new comes, so a
stopped trainer costs a request every half minute, not a stream of them. Once the container
has stopped, its log is whole: it is read once more, plainly (`read_to_the_end`), so the last
records count even when the stream was backing off after a lost connection. Reading never
fails a reconcile: a failed read is reported as the reason the progress is unavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from tessera.log_records import parse_record

from . import metrics
from .api import KubeApi
from .progress import TrainingProgress, fold_record, log_read_failure, parse_progress

LOG_TAIL_LINES = 200
FIRST_PAUSE_SECONDS = 1.0
LONGEST_PAUSE_SECONDS = 30.0

_log = logging.getLogger(__name__)


@dataclass(eq=False)
class LogFollower:
    """Follows the log of pod `pod` (the incarnation `uid`) while its task runs."""

    connect: Callable[[], KubeApi]  # the client to read with (the latest login's)
    namespace: str
    pod: str
    uid: str
    on_change: Callable[[], None]
    progress: TrainingProgress | None = None  # None: nothing read yet
    failure: str | None = None  # why the last read failed, until one succeeds
    ended: bool = False  # the container stopped and its whole log was read
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.pod}/log"

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._follow(), name=f"log of {self.namespace}/{self.pod}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def follows(self, pod: str, uid: str) -> bool:
        return (self.pod, self.uid) == (pod, uid)

    def reported(self) -> TrainingProgress | None:
        """What the reconcile should take as the trainer's progress (None: unknown yet)."""
        if self.failure is not None:
            return TrainingProgress.unreadable(self.failure)
        return self.progress

    async def read_to_the_end(self) -> None:
        """The container has stopped: stop following, and read the log's tail once (again
        at the next call if that read failed)."""
        if self.ended:
            return
        await self.stop()
        self.ended = await self._read_tail()

    async def catch_up(self) -> None:
        """Read the log's tail once, plainly, beside the stream: for a decision that must
        not miss a record the stream has not handed over yet (a commit written just before
        the config changed decides where the next run starts)."""
        if not self.ended:
            await self._read_tail()

    async def _read_tail(self) -> bool:
        """Fold the log's tail into the progress; False when it could not be read."""
        try:
            text = await self.connect().call("GET", self.path, ok=(400, 404),
                                             params={"tailLines": str(LOG_TAIL_LINES)})
        except Exception as problem:  # whatever went wrong, the lifecycle goes on
            self._failed(problem)
            return False
        self._show(parse_progress(str(text or "").splitlines()))
        return True

    def _failed(self, problem: Exception) -> None:
        status = getattr(problem, "status", None)
        metrics.progress_read_failed(status, type(problem).__name__)
        self.failure = log_read_failure(status, type(problem).__name__)
        _log.warning("reading the log of %s/%s failed: %s", self.namespace, self.pod, problem)

    async def _follow(self) -> None:
        path = self.path
        params = {"follow": "true", "tailLines": str(LOG_TAIL_LINES)}
        pause = FIRST_PAUSE_SECONDS
        while True:
            progress, news = TrainingProgress(), False
            try:
                async for line in self.connect().lines(path, params):
                    record = parse_record(line)
                    if record is None:
                        continue
                    progress = fold_record(progress, record)
                    news = news or progress != self.progress
                    self._show(progress)
            except asyncio.CancelledError:
                raise
            except Exception as problem:  # whatever went wrong, the lifecycle goes on
                self._failed(problem)
                self.on_change()
            pause = FIRST_PAUSE_SECONDS if news else min(pause * 2, LONGEST_PAUSE_SECONDS)
            await asyncio.sleep(pause)

    def _show(self, progress: TrainingProgress) -> None:
        """Publish `progress`, unless it is older than what was shown: a new stream replays
        the tail, whose first records the previous stream had already gone past."""
        shown = self.progress
        if shown is not None and shown.time is not None and \
                (progress.time is None or progress.time < shown.time):
            return
        changed = progress != shown or self.failure is not None
        self.progress, self.failure = progress, None
        if changed:
            self.on_change()
