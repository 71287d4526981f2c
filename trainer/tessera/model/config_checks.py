"""What the model needs from a config beyond the schema's own rules, checked before training.

Each rule would otherwise fail deep inside the first batch (PyTorch-BigGraph fails there);
here it fails at start-up with the key to change.
"""

from __future__ import annotations

from ..config import ConfigSchema
from ..errors import ConfigError
from .operators import OPERATORS


def check_model_config(config: ConfigSchema) -> None:
    """Raise ConfigError naming the key if the model cannot be built or trained from config."""
    relations = config.relations[:1] if config.dynamic_relations else config.relations
    for index, relation in enumerate(relations):
        path = f"relations[{index}]"
        lhs_dim = config.entity_dimension(relation.lhs)
        rhs_dim = config.entity_dimension(relation.rhs)
        if lhs_dim != rhs_dim:
            raise ConfigError(path, f"its entity types '{relation.lhs}' (dimension {lhs_dim}) "
                              f"and '{relation.rhs}' (dimension {rhs_dim}) cannot be compared; "
                              "give them the same dimension")
        if OPERATORS[relation.operator].complex_valued and rhs_dim % 2 != 0:
            raise ConfigError(f"{path}.operator", f"{relation.operator} splits embeddings into "
                              "real and imaginary halves, so it needs an even dimension, not "
                              f"{rhs_dim}")
        featurized = [side for side in (relation.lhs, relation.rhs)
                      if config.entities[side].featurized]
        if relation.all_negs and featurized:
            raise ConfigError(f"{path}.all_negs", f"entity type '{featurized[0]}' is featurized, "
                              "so its entities cannot be listed as negatives; set all_negs: false")
        if config.regularization_coef > 0 and not OPERATORS[relation.operator].regularizable:
            raise ConfigError("regularization_coef", f"the {config.regularizer} regularizer is not "
                              f"defined for the {relation.operator} operator of {path}; set "
                              "regularization_coef: 0 or use another operator")
