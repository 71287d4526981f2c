"""Tessera: PyTorch-BigGraph-style training of embeddings of huge multi-relation graphs."""

__version__ = "0.1.0"
