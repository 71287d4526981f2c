"""What an import of featurized entity types needs, checked before any data is read.

A featurized type is imported from its features file (`--features TYPE=FILE`). Its features
are shared by entities anywhere in the graph, so the type has one partition; and a bucket
side is featurized for all of its edges or for none (an edge file has one `lhsd`/`rhsd` pair
per side), so the relations must agree on it, side by side.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config.schema import ConfigSchema, RelationSchema
from ..errors import BadInputError, ConfigError
from .options import ImportOptions


def check_featurized(config: ConfigSchema, relations: Sequence[RelationSchema],
                     options: ImportOptions) -> None:
    """Raise ConfigError or BadInputError naming the key or option to change."""
    for name in options.entity_features:
        if name not in config.entities:
            raise BadInputError(f"--features {name}=...: unknown entity type '{name}'; the "
                                f"config declares {', '.join(sorted(config.entities))}")
        if not config.entities[name].featurized:
            raise ConfigError(f"entities.{name}.featurized", "is false but --features gives "
                              "features for it; set it to true, or drop that --features")
    used = {side for relation in relations for side in (relation.lhs, relation.rhs)}
    for name in sorted(used):
        entity = config.entities[name]
        if not entity.featurized:
            continue
        if name not in options.entity_features:
            raise BadInputError(f"entity type '{name}' is featurized: give its features with "
                                f"--features {name}=FILE (one 'entity<TAB>feature' row per "
                                "feature of each entity)")
        if entity.num_partitions != 1:
            raise ConfigError(f"entities.{name}.num_partitions", f"is {entity.num_partitions}, "
                              "but a featurized type's features are shared by all its "
                              "entities, so it cannot be partitioned; set it to 1")
    for side in ("lhs", "rhs"):
        kinds = {config.entities[getattr(relation, side)].featurized for relation in relations}
        if len(kinds) > 1:
            index = next(i for i, relation in enumerate(relations)
                         if config.entities[getattr(relation, side)].featurized)
            raise ConfigError(f"relations[{index}].{side}", f"is featurized but other "
                              f"relations have plain {side} types; an edge file's {side} is "
                              "featurized for all its edges or none, so make the {side} "
                              "types of all relations featurized, or none of them")
