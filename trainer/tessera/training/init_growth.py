"""Starting from an `init_path` checkpoint trained before the graph grew: what is checked, and
which old edges the run replays.

An import that extends a dictionary appends new entities after the known ones of each
partition, so a checkpoint trained on the smaller graph holds the first rows of each
partition now: those start from it, the rows after them as a fresh run starts them. The
checkpoint stores no names, so the order is checked where it can be: when the checkpoint was
trained on another entity folder (its config.json says which) and both folders hold names,
the names of its rows must be the first names of the partition now. In the same folder an
import only ever appends (unless told to replace the dictionary).

What the grown run trains is chosen here too (`plan_replay`): trained on its new edges alone,
the model forgets the old ones (the known entities and the relation operators drift towards
the new edges: on UMLS the old test triples' filtered MRR fell from 0.95 to 0.26, see
docs/benchmarks.md), so by default the edges the checkpoint was trained on are replayed,
mixed into the new ones bucket by bucket.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..config import ConfigSchema
from ..data.graph_data import GraphData
from ..errors import BadInputError, FormatError
from ..progress import Reporter
from ..storage.checkpoint import CheckpointStore
from ..storage.edges import bucket_file
from ..storage.entities import (
    entity_count_file,
    entity_names_file,
    is_published,
    read_entity_names,
)
from ..storage.fs import Directory


def check_grown_partition(config: ConfigSchema, init: CheckpointStore, entity: str, part: int,
                          rows: int, count: int, url: str) -> None:
    """Raise FormatError unless `rows` rows trained in `init` can start the first rows of a
    partition of `count` entities (`url`: the checkpoint's file of that partition)."""
    if rows > count:
        raise FormatError(url, f"has {rows} rows but the partition has {count} entities "
                               f"({entity_count_file(entity, part)} in {config.entity_path}): "
                               "init_path was trained on more entities than entity_path holds; "
                               "use the entity_path it was trained with (or one that extends "
                               "it), or drop init_path")
    trained_on = _trained_entity_path(init)
    if trained_on is None or trained_on.rstrip("/") == config.entity_path.rstrip("/"):
        return
    before = Directory.from_config(trained_on, config)
    now = Directory.from_config(config.entity_path, config)
    names_file = entity_names_file(entity, part)
    if not (is_published(before, names_file) and is_published(now, names_file)):
        return
    known = read_entity_names(before, entity, part)[:rows]
    current = read_entity_names(now, entity, part)[:rows]
    for offset, (old, new) in enumerate(zip(known, current)):
        if old != new:
            raise FormatError(url, f"row {offset} is entity {old!r} ({before.url_of(names_file)})"
                                   f" but offset {offset} of that partition is {new!r} now "
                                   f"({now.url_of(names_file)}): entity_path does not extend "
                                   "the dictionary init_path was trained on; import the new "
                                   f"edges into {trained_on} (known entities keep their ids "
                                   "there), or drop init_path")


def _trained_entity_path(init: CheckpointStore) -> str | None:
    """The entity_path the checkpoint was trained with, if its config.json says."""
    try:
        trained = init.read_config().get("entity_path")
    except BadInputError:
        return None  # a checkpoint made by another tool: nothing to compare with
    return trained if isinstance(trained, str) else None


FORGETS = (
    "init_path {init} is a model of a smaller graph and no edge between the entities it knows "
    "trains in this run ({why}): the known entities and the relations drift towards the new "
    "edges and forget the old ones (old test triples of UMLS: filtered MRR 0.95 before, 0.26 "
    "after). Leave replay_paths unset to replay the edges init_path learned, or name the old "
    "edge paths in it, with init_old_edge_fraction above 0; see "
    "docs/after-training.md#training-the-grown-graph")
ONE_AFTER_THE_OTHER = (
    "edge_paths names edge sets init_path learned ({old}) next to new ones ({new}): each "
    "epoch trains them one after the other, and the set trained last pulls the model its way "
    "(old test triples of UMLS: filtered MRR 0.95 before, 0.87 after). Give edge_paths the "
    "new edge sets alone: the old ones are then replayed, mixed into them; see "
    "docs/after-training.md#training-the-grown-graph")


@dataclass(frozen=True)
class Replay:
    """The old edge sets a run from `init_path` mixes into each bucket it trains, and, when
    the run risks forgetting what the checkpoint learned, why (said once at the start)."""

    paths: list[str]
    risk: str | None = None


def with_replay(config: ConfigSchema, reporter: Reporter) -> ConfigSchema:
    """The config with `replay_paths` resolved by `plan_replay`, said (or warned about) once.
    Checkpoints then record what was replayed in their config.json, so that the next growth
    replays it too. Without an `init_path` nothing grew: the config stays as given."""
    if not config.init_path:
        return config
    replay = plan_replay(config, GraphData(config))
    if replay.risk is not None:
        reporter.event(f"train: warning: {replay.risk}")
    elif replay.paths:
        reporter.event("replaying the edges init_path learned", replay_paths=replay.paths,
                       init_old_edge_fraction=config.init_old_edge_fraction)
    return dataclasses.replace(config, replay_paths=replay.paths)


def plan_replay(config: ConfigSchema, data: GraphData) -> Replay:
    """What a run replays: `replay_paths` as given (with an init_path); unset, the edge paths
    the checkpoint learned that `edge_paths` does not name, when the graph grew since."""
    init = CheckpointStore.init_from_config(config)
    if init is None:
        return Replay([])
    if data.known_rows is None:  # nothing grew: nothing is old
        return Replay(list(config.replay_paths or []))
    learned = learned_edge_paths(init, config)
    if config.replay_paths is not None:
        paths, why = list(config.replay_paths), "replay_paths is []"
    else:
        candidates = [path for path in learned if path not in config.edge_paths]
        paths = [path for path in candidates if _holds_buckets(path, config)]
        gone = [path for path in candidates if path not in paths]
        why = (f"the edge paths it learned are gone: {', '.join(gone)}" if gone else
               f"{init.directory.url_of('config.json')} names no edge paths")
    old = [path for path in config.edge_paths if path in learned]
    if config.init_old_edge_fraction == 0:
        return Replay([], FORGETS.format(init=config.init_path,
                                         why="init_old_edge_fraction is 0"))
    if paths:
        return Replay(paths)
    if old and len(old) < len(config.edge_paths):
        return Replay([], ONE_AFTER_THE_OTHER.format(
            old=", ".join(old), new=", ".join(p for p in config.edge_paths if p not in old)))
    if not old and not holds_old_edges(data):
        return Replay([], FORGETS.format(
            init=config.init_path, why=f"every edge of edge_paths touches a new entity and {why}"))
    return Replay([])


def holds_old_edges(data: GraphData, windows: int = 8, window: int = 128) -> bool:
    """Whether edge_paths hold edges between entities init_path knows (the whole grown graph
    imported anew, or new facts about known entities), looking at a few windows of each
    bucket."""
    for edge_path_idx, sizes in enumerate(data.bucket_sizes):
        for bucket, size in sizes.items():
            for start in sorted({size * i // windows for i in range(windows)} if size else []):
                edges = data.read_edges(edge_path_idx, bucket, start, start + window)
                if data.between_known(bucket, edges).any():
                    return True
    return False


def learned_edge_paths(init: CheckpointStore, config: ConfigSchema) -> list[str]:
    """The edge paths whose edges the checkpoint's model learned, as its config.json says:
    its edge_paths and replay_paths (unset: what its own init_path learned), and so on back
    through the init_path checkpoints that still have their config."""
    paths: list[str] = []
    seen: set[str] = set()
    store: CheckpointStore | None = init
    while store is not None and store.directory.url not in seen:
        seen.add(store.directory.url)
        try:
            trained = store.read_config()
        except BadInputError:
            break  # gone, or a checkpoint made by another tool
        replayed = trained.get("replay_paths")
        for path in [*(trained.get("edge_paths") or []), *(replayed or [])]:
            if isinstance(path, str) and path not in paths:
                paths.append(path)
        parent = trained.get("init_path")
        store = CheckpointStore(Directory.from_config(parent, config)) \
            if replayed is None and isinstance(parent, str) and parent else None
    return paths


def _holds_buckets(path: str, config: ConfigSchema) -> bool:
    return Directory.from_config(path, config).exists(bucket_file(0, 0))
