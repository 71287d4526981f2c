"""The version that ends a weight-averaged run: the means its last checkpoint kept, in place
of the trained values (`model.weight_averaging` says why and how they are kept).

The means cannot replace the trained values as the last checkpoint is written: partitions
swapped out during its chunk are read back and trained on from that version's files. So the
run commits one version more once its last checkpoint is committed, with the same metadata
and optimizer states; a crash in between leaves the last checkpoint, which the next `tessera
train` (finding nothing left to train) finishes the same way.
"""

from __future__ import annotations

from ..config import ConfigSchema
from ..errors import FormatError
from ..log_records import AVERAGED_MODEL_COMMITTED, CHECKPOINT_VERSION
from ..model.weight_averaging import window_of
from ..progress import Reporter
from ..storage.checkpoint import CheckpointStore, embeddings_file
from .partitions import all_partition_keys


def finish_averaging(store: CheckpointStore, config: ConfigSchema, version: int,
                     reporter: Reporter) -> int:
    """After committing `version`: when it is the last checkpoint of a weight-averaged run,
    commit the next version with its means and return it; else return `version`."""
    if not config.weight_averaging or version == 0:
        return version
    metadata = store.read_metadata(version)
    window = window_of(config, metadata)
    averaged_model = store.read_averaged_model(version)
    if window is None or not window.ends_run or averaged_model is None:
        return version  # not the run's end, or its means are in place already
    finished = version + 1
    for entity, part in all_partition_keys(config):
        averaged = store.read_averaged_embeddings(entity, part, version)
        if averaged is None:
            raise FormatError(store.directory.url_of(embeddings_file(entity, part, version)),
                              "lacks the weight-averaging means that the model file of its "
                              "version holds; restore the file, or train again from epoch_N/")
        store.write_embeddings(finished, entity, part, averaged.values,
                               store.read_embeddings_state(entity, part, version), metadata)
    _, model_state = store.read_model(version)
    store.write_model(finished, averaged_model.values, model_state, metadata)
    store.commit(finished, config.to_dict())
    reporter.event(AVERAGED_MODEL_COMMITTED, **{CHECKPOINT_VERSION: finished,
                                                "averaged_checkpoints": averaged_model.count})
    return finished
