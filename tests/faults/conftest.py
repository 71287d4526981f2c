"""Every test in tests/faults belongs to the `faults` marker, so `make faults` runs the fault
families alone (kills at exact moments, OS errors, concurrent writers, secrets, temp files)."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.faults)
