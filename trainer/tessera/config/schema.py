"""The training config: every key of PyTorch-BigGraph's schema, with PBG's names and defaults.

Each field carries its help text and numeric bounds in `metadata`, so that the validator, the
JSON Schema (and through it the operator's CRD) and the documentation are all derived from
this one file. This module must never import torch: the operator reuses it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

OperatorName = Literal["none", "translation", "diagonal", "linear", "affine", "complex_diagonal",
                       "rotate"]
# Operators that read an embedding as a complex vector (first half real, second half
# imaginary), so its dimension must be even.
COMPLEX_OPERATORS = frozenset({"complex_diagonal", "rotate"})
# Operators whose parameters the N3 regularizer has no term for (matrices; PBG defines none).
UNREGULARIZED_OPERATORS = frozenset({"linear", "affine"})
ComparatorName = Literal["dot", "cos", "l2", "squared_l2", "l1"]
LossName = Literal["ranking", "logistic", "softmax"]
BucketOrderName = Literal["random", "affinity", "inside_out", "outside_in"]
RegularizerName = Literal["N3"]
TrackingName = Literal["none", "tensorboard", "mlflow"]


def option(default: Any = dataclasses.MISSING, *, help: str, minimum: float | None = None,
           exclusive_minimum: float | None = None, maximum: float | None = None) -> Any:
    """A schema field: a default (none means required), help text and optional numeric bounds."""
    metadata = {"help": help, "minimum": minimum, "exclusive_minimum": exclusive_minimum,
                "maximum": maximum}
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True, kw_only=True)
class EntitySchema:
    """One entity type."""

    num_partitions: int = option(
        help="Number of partitions the entities of this type are split into; 1 means "
        "unpartitioned. All partitioned types must use the same count.", minimum=1)
    featurized: bool = option(
        False, help="Whether each entity is the mean of the embeddings of its features.")
    dimension: int | None = option(
        None, help="Embedding dimension of this type, overriding the global `dimension`.",
        minimum=1)


@dataclass(frozen=True, kw_only=True)
class RelationSchema:
    """One relation type: which entity types it joins and how it transforms them."""

    name: str = option(help="A human-readable identifier for the relation type.")
    lhs: str = option(help="Entity type of the left-hand side (source) of its edges.")
    rhs: str = option(help="Entity type of the right-hand side (destination) of its edges.")
    weight: float = option(1.0, help="Multiplier of this relation's loss.", minimum=0)
    operator: OperatorName = option(
        "none", help="Transformation applied to the right-hand side embedding "
        "(to both sides, one operator each, with dynamic relations) before comparison. "
        "`rotate` (RotatE: a rotation of each complex coordinate) is Tessera only.")
    all_negs: bool = option(
        False, help="Use every entity of the partition as a negative instead of sampling.")


@dataclass(frozen=True, kw_only=True)
class ConfigSchema:
    """A whole training run: the graph's schema, the model, the data paths and the loop."""

    # The graph and the model.
    entities: dict[str, EntitySchema] = option(
        help="The entity types, by name.")
    relations: list[RelationSchema] = option(
        help="The relation types; an edge's `rel` value is an index into this list.")
    dimension: int = option(help="Dimension of the embeddings.", minimum=1)
    init_scale: float = option(
        1e-3, help="Standard deviation of the normal distribution new embeddings are drawn from.",
        exclusive_minimum=0)
    max_norm: float | None = option(
        None, help="If set, embeddings are rescaled to at most this L2 norm when used.",
        exclusive_minimum=0)
    global_emb: bool = option(
        True, help="Add a learned per-entity-type embedding to every entity of that type.")
    comparator: ComparatorName = option(
        "cos", help="How a left-hand and a right-hand embedding are scored against each other. "
        "`l1` (negated L1 distance, TransE-L1 with `translation`) is Tessera only.")
    bias: bool = option(
        False, help="Use the first coordinate of each embedding as a bias term of the score.")
    loss_fn: LossName = option("ranking", help="Loss that contrasts positives with negatives.")
    margin: float = option(0.1, help="Margin of the ranking loss.")
    regularization_coef: float = option(
        0.0, help="Weight of the regularizer on the embeddings and relation parameters.",
        minimum=0)
    regularizer: RegularizerName = option("N3", help="Regularizer applied when its coef > 0.")

    # Data.
    entity_path: str = option(
        help="Directory (path or URL) with entity counts and, optionally, entity names.")
    edge_paths: list[str] = option(
        help="Directories (paths or URLs) of edge buckets; each is one edge set of an epoch.")
    checkpoint_path: str = option(help="Directory (path or URL) where checkpoints are written.")
    init_path: str | None = option(
        None, help="Checkpoint directory to initialise the embeddings and the model from.")
    init_old_edge_fraction: float = option(
        1.0, help="Tessera only: with an init_path checkpoint of a smaller graph, the share of "
        "the edges between entities it already has (replayed ones included) that trains in "
        "each epoch (drawn anew each epoch from `seed`); 1 trains all edges, as PBG does, 0 "
        "only the edges that touch a new entity (and forgets the old ones).", minimum=0,
        maximum=1)
    replay_paths: list[str] | None = option(
        None, help="Tessera only: with an init_path, edge paths of old edges mixed into every "
        "bucket of each epoch (each edge once an epoch, sampled as init_old_edge_fraction "
        "says), so that a model trained on new edges does not forget the old ones. Unset: "
        "with an init_path checkpoint of a smaller graph, the edge paths it was trained on "
        "that edge_paths does not name; [] replays nothing.")
    checkpoint_preservation_interval: int | None = option(
        None, help="Keep a copy of the checkpoint every this many epochs (others are deleted).",
        minimum=1)
    storage_options: dict[str, Any] = option(
        {}, help="Options passed to the fsspec filesystem of every URL (e.g. S3 endpoint_url, "
        "key, secret); credentials may also come from the environment.")
    storage_retry_timeout: float = option(
        300.0, help="Seconds for which a storage call that fails transiently (connection "
        "refused or reset, time-out, HTTP 5xx, throttling) is retried, with exponential "
        "backoff, before the command gives up with exit code 75; 0 gives up at once.",
        minimum=0)

    # The training loop.
    num_epochs: int = option(1, help="Number of passes over all the edges.", minimum=0)
    num_edge_chunks: int | None = option(
        None, help="Split each bucket into this many chunks; derived from max_edges_per_chunk "
        "when unset.", minimum=1)
    max_edges_per_chunk: int = option(
        1_000_000_000, help="Upper bound on the edges of a chunk, used when num_edge_chunks is "
        "unset.", minimum=1)
    bucket_order: BucketOrderName = option(
        "inside_out", help="Order in which the buckets of an epoch are trained.")
    workers: int | None = option(
        None, help="Number of Hogwild worker processes; defaults to the number of CPUs.",
        minimum=1)
    batch_size: int = option(1000, help="Number of edges per batch.", minimum=1)
    num_batch_negs: int = option(
        50, help="Negatives taken from the other edges of the batch, per chunk of this size.",
        minimum=0)
    num_uniform_negs: int = option(
        50, help="Negatives drawn uniformly from the partition.", minimum=0)
    num_degree_negs: int = option(
        0, help="Tessera only: negatives drawn in proportion to degree, an entity's number of "
        "training edges in the bucket chunk being trained (so from its partition), besides "
        "the batch and uniform ones; 0 draws none, as PBG.", minimum=0)
    disable_lhs_negs: bool = option(False, help="Do not corrupt the left-hand side.")
    disable_rhs_negs: bool = option(False, help="Do not corrupt the right-hand side.")
    lr: float = option(1e-2, help="Learning rate of the embeddings (Adagrad).", minimum=0)
    relation_lr: float | None = option(
        None, help="Learning rate of the relation parameters; defaults to lr.", minimum=0)
    eval_fraction: float = option(
        0.05, help="Fraction of each bucket's edges held out to evaluate during training.",
        minimum=0, maximum=1)
    eval_num_batch_negs: int = option(
        1000, help="Batch negatives used when evaluating during training.", minimum=0)
    eval_num_uniform_negs: int = option(
        1000, help="Uniform negatives used when evaluating during training.", minimum=0)
    eval_num_degree_negs: int = option(
        0, help="Tessera only: negatives drawn in proportion to degree (as num_degree_negs) "
        "when evaluating during training.", minimum=0)
    early_stopping: bool = option(
        False, help="Stop when the held-out metrics stop improving between epochs.")
    background_io: bool | None = option(
        None, help="Write swapped-out partitions in a background thread while the next "
        "bucket trains (one partition more in memory at a time); and, when every partition "
        "is in memory, each checkpoint from a copy while the next chunk trains (Tessera "
        "only; the model's embeddings once more in memory while it is written). Unset: on "
        "when training on GPUs, which train a chunk faster than it is written; off on CPUs.")
    partition_cache_gb: float = option(
        0.0, help="Tessera only: memory (GB) in which partitions that the next bucket does "
        "not need are kept instead of written to the checkpoint, until the chunk's checkpoint "
        "or until the least recently used must make room; 0 writes each one out as it leaves, "
        "as PBG does. Where memory holds every partition (they were made for a GPU's "
        "memory, say), this removes the writes of swaps.", minimum=0)
    verbose: int = option(0, help="Verbosity of the logs (0, 1 or 2).", minimum=0)
    hogwild_delay: float = option(
        2.0, help="Seconds by which the Hogwild workers after the first wait before the first "
        "bucket of a run, so that their first updates do not collide on fresh embeddings.",
        minimum=0)
    seed: int = option(
        0, help="Tessera only: seeds the initial embeddings, the edge shuffles and the "
        "negatives drawn, so that a run repeats (up to Hogwild's races); runs with other seeds "
        "show how much a result owes to chance (PBG draws anew in every run).", minimum=0)
    dynamic_relations: bool = option(
        False, help="Treat `relations[0]` as a template for many relation types whose count "
        "is read from dynamic_rel_count.txt; batches then mix relation types.")
    reciprocal_relations: bool = option(
        False, help="Tessera only: train each edge (u, r, v) also as (v, r_inverse, u), each "
        "relation's inverse with parameters of its own (relation r + R of the model file, R "
        "relations), and rank left-hand sides of (?, r, v) as right-hand sides of "
        "(v, r_inverse, ?). With disable_lhs_negs, all_negs and softmax: 1-vs-all training "
        "(Lacroix et al. 2018). PBG cannot load the model file.")
    weight_averaging: float = option(
        0.0, help="Tessera only: end the run with the mean of the checkpoints of its last "
        "epochs, this share of num_epochs (at least the last epoch), instead of the last "
        "checkpoint alone: stochastic weight averaging. 0.5 averages the second half. Each "
        "checkpoint of those epochs also keeps the running mean, which PBG ignores; 0 "
        "averages nothing, as PBG.", minimum=0, maximum=1)

    # Experiment tracking.
    tracking: TrackingName = option(
        "none", help="Tessera only: `tensorboard` writes TensorBoard event files of the "
        "training curves (loss, held-out MRR and Hits@k, edges/s; per bucket chunk and per "
        "epoch) from the stats of each committed checkpoint; needs the `tracking` extra "
        "(tensorboardX). `mlflow` logs the same curves as the metrics of an MLflow run, one "
        "per checkpoint_path, with the config as its parameters; needs the `mlflow` extra "
        "(mlflow-skinny). In a distributed job trainer 0 writes them, for every trainer.")
    tracking_path: str | None = option(
        None, help="Tessera only: with tensorboard, the directory (path or URL) of the event "
        "files, by default `tensorboard` in checkpoint_path (on an object store they are "
        "written in a local temporary folder and uploaded after each checkpoint); with "
        "mlflow, the tracking URI (`http://host:5000`, `sqlite:///mlflow.db`), by default "
        "MLflow's own (MLFLOW_TRACKING_URI).")

    # Distributed training.
    num_machines: int = option(1, help="Number of trainer machines.", minimum=1)
    num_partition_servers: int = option(
        -1, help="Number of partition servers; -1 means one per machine, 0 means none.",
        minimum=-1)
    distributed_init_method: str | None = option(
        None, help="torch.distributed rendezvous URL (e.g. tcp://host:port) for distributed "
        "training.")
    distributed_tree_init_order: bool = option(
        True, help="On a fresh distributed start, train a bucket only once one of its "
        "partitions was trained (the first bucket excepted), so that every partition starts "
        "next to trained embeddings; false lets any free bucket start at once.")
    num_gpus: int = option(0, help="Number of GPUs to train on; 0 trains on CPU.", minimum=0)
    num_groups_for_partition_server: int = option(
        16, help="PBG: torch.distributed process groups for talking to partition servers. "
        "Tessera moves partitions over torch RPC: only the default is accepted.", minimum=1)
    num_groups_per_sharded_partition_server: int = option(
        1, help="PBG: process groups per sharded partition server. Tessera never shards "
        "partitions: only the default is accepted.", minimum=1)
    partition_shard_size: int = option(
        250, help="PBG: MiB per shard of a partition spread over several partition servers. "
        "Tessera keeps each partition whole on one server: only the default is accepted.",
        minimum=1)
    half_precision: bool = option(False, help="Train in float16 (GPU only).")

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-serialisable copy, secrets included: what is written or printed goes
        through `redaction.redacted` first."""
        return dataclasses.asdict(self)

    def io_in_background(self) -> bool:
        """Whether partitions and checkpoints are written in the background (`background_io`,
        by default on GPUs only)."""
        return self.num_gpus > 0 if self.background_io is None else self.background_io

    def entity_dimension(self, entity: str) -> int:
        """The embedding dimension of an entity type."""
        return self.entities[entity].dimension or self.dimension

    def num_partitions(self) -> int:
        """The common partition count of the partitioned entity types (1 if none is)."""
        return max(entity.num_partitions for entity in self.entities.values())

    def partition_grid(self) -> tuple[int, int]:
        """(lhs, rhs) partition counts of the bucket grid: a side is partitioned if any entity
        type on that side is (validation makes all partitioned types agree on the count)."""
        return (max(self.entities[r.lhs].num_partitions for r in self.relations),
                max(self.entities[r.rhs].num_partitions for r in self.relations))

    def effective_relation_lr(self) -> float:
        return self.lr if self.relation_lr is None else self.relation_lr
