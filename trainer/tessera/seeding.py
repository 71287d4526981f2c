"""Seeds derived from tuples of ints, stable across processes, machines and Python versions.

Python's `hash` is salted per process for strings and is not guaranteed stable in general, but
the eval holdout and the bucket orders must be the same in every epoch, every Hogwild worker
and every resumed run, so they are seeded from a cryptographic digest of their identity.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def stable_seed(key: Iterable[int]) -> int:
    """A 63-bit seed (valid for torch and random) that depends only on the ints of `key`."""
    digest = hashlib.blake2b(digest_size=8)
    for value in key:
        # Signed, fixed-width and delimited, so (1, 23) and (12, 3) hash differently.
        digest.update(int(value).to_bytes(16, "little", signed=True))
    return int.from_bytes(digest.digest(), "little") >> 1
