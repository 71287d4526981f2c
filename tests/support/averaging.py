"""Checking a weight-averaged run's result against the epochs it kept in `epoch_N/`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tessera.storage.checkpoint import CheckpointStore
from tessera.storage.fs import Directory


def store_of(path: Path) -> CheckpointStore:
    return CheckpointStore(Directory(str(path)))


def tables(store: CheckpointStore, num_partitions: int) -> list[np.ndarray]:
    """Every partition's embeddings and every model parameter of the committed version."""
    params, _ = store.read_model()
    return [*(store.read_embeddings("node", part)[0] for part in range(num_partitions)),
            *(values for _, (_, values) in sorted(params.items()))]


def assert_holds_the_mean_of_its_last_epochs(checkpoints: Path, averaged_epochs: list[int],
                                             num_partitions: int) -> None:
    """The committed version is the mean of the epochs `averaged_epochs` (counted from 1, one
    checkpoint each, each kept in `epoch_N/`), one version after the last of them."""
    final = store_of(checkpoints)
    epochs = [tables(store_of(checkpoints / f"epoch_{n}"), num_partitions)
              for n in averaged_epochs]
    for values, *of_epochs in zip(tables(final, num_partitions), *epochs, strict=True):
        np.testing.assert_allclose(values, np.mean(of_epochs, axis=0), rtol=1e-5, atol=1e-7)
    # The last trained version kept the running mean beside its own values; the averaged
    # version, one more, holds it in their place.
    last_trained = store_of(checkpoints / f"epoch_{averaged_epochs[-1]}")
    mean = last_trained.read_averaged_embeddings("node", 0, last_trained.current_version())
    assert mean is not None
    assert (mean.first_epoch, mean.count) == (averaged_epochs[0] - 1, len(averaged_epochs))
    assert final.current_version() == last_trained.current_version() + 1
    assert final.read_averaged_model(final.current_version()) is None
    assert not np.allclose(final.read_embeddings("node", 0)[0],
                           last_trained.read_embeddings("node", 0)[0])
