"""The training config of one run: the user's config plus what the operator decides.

A job trains in runs. The first run writes its checkpoints to the config's `checkpoint_path`,
exactly where `tessera train` on a laptop would. A restart (a failed pod, a resumed
suspension, a changed image) keeps the run's checkpoint directory, so `tessera train` resumes
from the last committed version. A changed training config (a new `observedGeneration`: the
GitOps retraining path) starts a new run in `{checkpoint_path}/generation_{G}`, initialised
(PBG's `init_path`) from the previous run's checkpoint: the previous embeddings are the
starting point and `num_epochs` more epochs are trained on the new data, while every earlier
checkpoint stays where it was.

The operator also owns the keys that describe the pods: `num_machines` and
`num_partition_servers` come from the replica counts, and `distributed_init_method` points at
the job's lock-server Service, which hosts the rendezvous of the distributed roles.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from .labels import JobRef, lock_server_service_name
from .spec import EmbeddingJobSpec

CONFIG_DIR = "/etc/tessera"
CONFIG_FILE = "config.json"
CONFIG_PATH = f"{CONFIG_DIR}/{CONFIG_FILE}"
RENDEZVOUS_PORT = 29500  # torch.distributed's customary port


@dataclass(frozen=True)
class RunPlan:
    """Which run the pods belong to and where it reads and writes checkpoints."""

    number: int
    checkpoint_path: str
    init_path: str | None


def first_plan(spec: EmbeddingJobSpec) -> RunPlan:
    return RunPlan(1, spec.config.checkpoint_path, spec.config.init_path)


def restarted_plan(plan: RunPlan) -> RunPlan:
    """The same training, new pods: they resume from the run's last checkpoint."""
    return dataclasses.replace(plan, number=plan.number + 1)


def retraining_plan(spec: EmbeddingJobSpec, previous: RunPlan, previous_version: int | None,
                    generation: int) -> RunPlan:
    """A new training run for a changed config, starting from the previous run's checkpoint
    when it committed one (else from wherever the previous run started)."""
    base = spec.config.checkpoint_path.rstrip("/")
    init = previous.checkpoint_path if previous_version else previous.init_path
    return RunPlan(previous.number + 1, f"{base}/generation_{generation}", init)


def rendezvous_url(job: JobRef) -> str:
    host = f"{lock_server_service_name(job.name)}.{job.namespace}.svc"
    return f"tcp://{host}:{RENDEZVOUS_PORT}"


def run_config(job: JobRef, spec: EmbeddingJobSpec, plan: RunPlan) -> dict[str, Any]:
    """The config file the pods of the run read (every key, defaults filled in)."""
    config = dataclasses.replace(
        spec.config, checkpoint_path=plan.checkpoint_path, init_path=plan.init_path,
        num_machines=spec.trainers.replicas,
        num_partition_servers=spec.partition_servers.replicas,
        distributed_init_method=rendezvous_url(job) if spec.distributed else None)
    return config.to_dict()


def config_file_text(config: dict[str, Any]) -> str:
    return json.dumps(config, indent=2, sort_keys=True) + "\n"
