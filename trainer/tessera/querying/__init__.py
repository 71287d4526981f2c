"""Queries on a trained checkpoint: embeddings by name, nearest neighbours (`tessera neighbors`,
`tessera.load`)."""
