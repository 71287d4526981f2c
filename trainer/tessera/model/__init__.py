"""The model: relation operators, comparators, losses, negatives and batch scoring."""

from .comparators import COMPARATORS, BiasedComparator, Comparator, make_comparator
from .embedding_model import BatchResult, EmbeddingModel
from .gradients import BatchGradients, batch_gradients
from .losses import LOSSES, Loss, make_loss
from .negatives import Chunking, plan_chunking
from .operators import DYNAMIC_OPERATORS, OPERATORS, DynamicOperator, Operator
from .parameter_names import public_name, state_dict_key
from .regularizers import REGULARIZERS, N3Regularizer, make_regularizer
from .rows import RowGradients, TouchedRows, gather_rows

__all__ = [
    "COMPARATORS",
    "DYNAMIC_OPERATORS",
    "LOSSES",
    "OPERATORS",
    "REGULARIZERS",
    "BatchGradients",
    "BatchResult",
    "BiasedComparator",
    "Chunking",
    "Comparator",
    "DynamicOperator",
    "EmbeddingModel",
    "Loss",
    "N3Regularizer",
    "Operator",
    "RowGradients",
    "TouchedRows",
    "batch_gradients",
    "gather_rows",
    "make_comparator",
    "make_loss",
    "make_regularizer",
    "plan_chunking",
    "public_name",
    "state_dict_key",
]
