"""Everything Tessera keeps in files, in PBG's formats, on any fsspec backend.

- `fs`: `Directory`, a directory at a URL with atomic writes and ranged remote reads.
- `entities`: entity counts and names, dynamic relation counts and names (`entity_path`).
- `edges`: edge buckets `edges_{lhs}_{rhs}.h5`, appended to and read by row range.
- `checkpoint`: versioned, crash-safe checkpoints (`CheckpointStore`).

This package never imports torch: optimizer states travel as the bytes torch.save produced
(or through a binary file over their dataset, which torch.save and torch.load use directly),
embeddings and parameters as numpy arrays.
"""

from .checkpoint import (
    CheckpointStore,
    ModelParameters,
    embeddings_file,
    model_file,
    should_preserve,
)
from .edges import (
    EDGE_FORMAT_VERSION,
    BucketEdges,
    BucketWriter,
    bucket_file,
    open_bucket_writer,
    read_bucket,
    read_bucket_size,
    write_bucket,
)
from .entities import (
    entity_count_file,
    entity_names_file,
    read_dynamic_relation_count,
    read_entity_count,
    read_entity_counts,
    read_entity_names,
    read_relation_names,
    write_dynamic_relation_count,
    write_entity_count,
    write_entity_names,
    write_relation_names,
)
from .fs import Directory
from .retry import translate_errors

__all__ = [
    "EDGE_FORMAT_VERSION",
    "BucketEdges",
    "BucketWriter",
    "CheckpointStore",
    "Directory",
    "ModelParameters",
    "bucket_file",
    "embeddings_file",
    "entity_count_file",
    "entity_names_file",
    "model_file",
    "open_bucket_writer",
    "read_bucket",
    "read_bucket_size",
    "read_dynamic_relation_count",
    "read_entity_count",
    "read_entity_counts",
    "read_entity_names",
    "read_relation_names",
    "should_preserve",
    "translate_errors",
    "write_bucket",
    "write_dynamic_relation_count",
    "write_entity_count",
    "write_entity_names",
    "write_relation_names",
]
