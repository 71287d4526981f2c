"""`tracking: mlflow`: a training run's curves as the metrics of an MLflow run.

One MLflow run per training of a checkpoint path: a rerun that resumes the checkpoint finds its
run by a tag (a hash of the checkpoint path) and goes on logging into it, as the TensorBoard
curves go on; a path with no committed chunk (new, or emptied to train afresh) gets a new run.
The run's parameters are the config's top-level keys, secrets redacted, logged once (MLflow
keeps a parameter's first value). `tracking_path` is the tracking URI (`http://host:5000`,
`sqlite:///mlflow.db`, `databricks`...); without it MLflow's own setting applies
(`MLFLOW_TRACKING_URI`). The experiment is `MLFLOW_EXPERIMENT_NAME`, else `tessera`.

Making the run is the only call that waits on the tracking server, and its failure stops the
command before any training, as a missing tensorboardX does. The points are logged through
MLflow's own asynchronous queue: a slow or failing server never holds training up; what it
fails to take is in MLflow's log, and the run still trains.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .config import ConfigSchema
from .config.redaction import redacted, without_url_credentials
from .errors import BadInputError, TransientError
from .stop_signals import Terminated
from .storage.failures import one_line
from .tracking import Point

_log = logging.getLogger(__name__)

EXTRA = "mlflow"  # the pip extra that brings the client
DEFAULT_EXPERIMENT = "tessera"
CHECKPOINT_TAG = "tessera.checkpoint"  # the hash a resumed run is found by
CHECKPOINT_PATH_TAG = "tessera.checkpoint_path"  # the same path, for people
PARENT_RUN_TAG = "mlflow.parentRunId"  # MLflow's own tag of a nested run (a tune's trial)
# MLflow error codes that say the request itself is wrong (retrying cannot help).
_BAD_REQUEST_CODES = frozenset({"INVALID_PARAMETER_VALUE", "BAD_REQUEST", "ENDPOINT_NOT_FOUND",
                                "PERMISSION_DENIED", "UNAUTHENTICATED", "INVALID_STATE"})


_HTTP_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "4",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def mlflow_client_class() -> Any:
    """MlflowClient; without MLflow, a bad input that names the extra to install."""
    try:
        from mlflow import MlflowClient
    except ImportError as error:
        raise BadInputError(f"tracking: mlflow needs the mlflow-skinny package: pip install "
                            f"'tessera[{EXTRA}]' (or mlflow), or set tracking: none") from error
    # MLflow's HTTP client retries an unreachable server for about four minutes (7 retries,
    # backoff factor 2, 120 s a request) before the run starts, saying nothing: about 15 s
    # here, unless the environment sets its own.
    for name, value in _HTTP_RETRIES.items():
        os.environ.setdefault(name, value)
    # MLflow logs its set-up steps (database migrations...) at INFO to stderr, where a pod's
    # JSON lines go: only its warnings are worth a line there.
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    return MlflowClient


class MlflowRun:
    """The MLflow run of a checkpoint path: made or found when opened, its points logged
    without waiting, ended with the training's outcome."""

    def __init__(self, config: ConfigSchema, *, resume: bool = False,
                 parent: MlflowRun | None = None) -> None:
        client_class = mlflow_client_class()
        self._pending: list[Any] = []  # MLflow's handles of the batches still queued
        try:
            self.client = client_class(tracking_uri=config.tracking_path)
            self.run_id = self._find_or_start(config, resume, parent)
        except Exception as error:  # noqa: BLE001 - MLflow's and its HTTP stack's, classified
            stop = wrapped_stop(error)
            if stop is not None:  # SIGTERM or Ctrl-C while MLflow retried: a stop, not a failure
                raise stop from None
            raise _classified(error, config.tracking_path) from error

    def write(self, points: Iterable[Point]) -> None:
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        metrics = [Metric(name, value, timestamp, step) for name, value, step in points]
        if not metrics:
            return
        try:
            self._pending.append(self.client.log_batch(self.run_id, metrics=metrics,
                                                       synchronous=False))
        except Exception as error:  # noqa: BLE001 - tracking never stops a training run
            self._warn("tracking points not logged", error)

    def compare_by(self, values: Mapping[str, Any], figures: Mapping[str, float],
                   step: int) -> None:
        """The figures as metrics at `step`; the values are parameters already (the config's
        keys)."""
        self.write([(name, value, step) for name, value in figures.items()])

    def close(self, status: str) -> None:
        """Wait for the queued points, then end the run as `FINISHED`, `FAILED` or `KILLED`."""
        for operation in self._pending:
            try:
                operation.wait()
            except Exception as error:  # noqa: BLE001 - the training's outcome is what counts
                self._warn("tracking points not logged", error)
        try:
            self.client.set_terminated(self.run_id, status)
        except Exception as error:  # noqa: BLE001
            self._warn("tracking run not ended", error)

    def _warn(self, message: str, error: Exception) -> None:
        _log.warning(message, extra={"fields": {
            "run_id": self.run_id, "error": without_url_credentials(one_line(error))}})

    def _find_or_start(self, config: ConfigSchema, resume: bool,
                       parent: MlflowRun | None) -> str:
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
        experiment = self.client.get_experiment_by_name(experiment_name)
        experiment_id = experiment.experiment_id if experiment is not None \
            else self.client.create_experiment(experiment_name)
        checkpoint = without_url_credentials(config.checkpoint_path)
        if "://" not in checkpoint:  # a local path: the same run from any working folder
            checkpoint = os.path.abspath(checkpoint)
        checkpoint_key = hashlib.sha256(checkpoint.encode()).hexdigest()[:32]
        found = resume and self.client.search_runs(
            [experiment_id], f"tags.`{CHECKPOINT_TAG}` = '{checkpoint_key}'", max_results=1,
            order_by=["attributes.start_time DESC"])
        if found:
            run_id: str = found[0].info.run_id
            self.client.update_run(run_id, status="RUNNING")
            return run_id
        name = checkpoint.rstrip("/").rsplit("/", 1)[-1] or checkpoint
        nested = {} if parent is None else {PARENT_RUN_TAG: parent.run_id}
        run = self.client.create_run(experiment_id, run_name=name, tags={
            CHECKPOINT_TAG: checkpoint_key, CHECKPOINT_PATH_TAG: checkpoint, **nested})
        from mlflow.entities import Param

        self.client.log_batch(run.info.run_id, params=[
            Param(key, value) for key, value in run_parameters(config.to_dict()).items()])
        return str(run.info.run_id)


def wrapped_stop(error: BaseException) -> BaseException | None:
    """The stop (SIGTERM's Terminated, Ctrl-C) that MLflow's retries wrapped in their own error,
    if one did."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, (Terminated, KeyboardInterrupt)):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def run_parameters(config: Mapping[str, Any]) -> dict[str, str]:
    """The config's top-level keys as MLflow parameters: secrets redacted, values as JSON
    (strings as they are), cut to what MLflow takes."""
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    parameters = {}
    for key, value in redacted(config).items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        parameters[key] = text[:MAX_PARAM_VAL_LENGTH]
    return parameters


def _classified(error: Exception, tracking_uri: str | None) -> BadInputError | TransientError:
    """A failure to make or find the run: a bad URI or a refused request is bad input, the
    rest (an unreachable or failing server) worth a retry."""
    where = f"tracking_path: MLflow at {without_url_credentials(tracking_uri or 'its default')}"
    problem = without_url_credentials(one_line(error))
    if getattr(error, "error_code", None) in _BAD_REQUEST_CODES:
        return BadInputError(f"{where}: {problem}; fix tracking_path or MLflow's settings, "
                             "or set tracking: none")
    return TransientError(f"{where}: {problem}; retry, or set tracking: none")
