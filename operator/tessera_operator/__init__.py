"""Tessera's Kubernetes operator: runs EmbeddingJobs (kopf controller; never imports torch)."""
