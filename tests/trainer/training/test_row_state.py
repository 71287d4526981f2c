"""A partition's Adagrad sums as the checkpoint stores them (PBG's optimizer state dict)."""

from __future__ import annotations

import torch

from tessera.training.partitions import deserialize_row_state, serialize_row_state


def test_sums_round_trip_and_are_saved_from_their_own_memory() -> None:
    sums = torch.rand(1000)
    blob = serialize_row_state(sums, lr=0.1)
    torch.testing.assert_close(deserialize_row_state(bytes(blob), 1000, "file"), sums)
    # Nothing else is saved: the blob is the sums and a small header around them.
    assert sums.nbytes < len(blob) < sums.nbytes + 2048


def test_a_view_is_saved_without_the_rest_of_its_storage() -> None:
    table = torch.rand(4, 1000)
    view = table[2]
    blob = serialize_row_state(view, lr=0.1)
    torch.testing.assert_close(deserialize_row_state(bytes(blob), 1000, "file"), view)
    assert len(blob) < view.nbytes + 2048
