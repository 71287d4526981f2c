"""Test values that name themselves: a test id made from `object()` holds its address, which
differs between processes, and pytest-xdist refuses workers that collected different ids."""

from __future__ import annotations

import enum


class Sentinel(enum.Enum):
    DELETE = "delete"  # a spec field to remove, in a table of changes


DELETE = Sentinel.DELETE
