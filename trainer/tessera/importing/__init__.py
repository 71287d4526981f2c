"""`tessera import`: TSV/CSV/Parquet edge lists into entity files and partitioned HDF5 buckets."""

from .importer import import_edges
from .options import ImportOptions
from .summary import ImportSummary, InputSummary

__all__ = ["ImportOptions", "ImportSummary", "InputSummary", "import_edges"]
