"""`one_thread`: torch on one intra-op thread for a test, as in a Hogwild worker, whose
compiled paths (`compiled_loop`) run only there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
