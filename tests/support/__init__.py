"""Helpers shared by the tests (graphs, servers)."""
