"""The data layer training and evaluation both stand on: a config's graph (entity counts,
edge buckets, validated edges) and the batches cut from a bucket's edges."""
