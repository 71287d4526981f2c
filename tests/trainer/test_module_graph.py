"""The shape of the `tessera` package: what may import what.

The shared vocabulary must stay free of torch, so that the processes that only speak it (the
lock server's bookkeeping, the world layout) start without loading the training stack.
"""

from __future__ import annotations

import subprocess
import sys


def test_the_vocabulary_and_the_world_layout_do_not_import_torch() -> None:
    probe = ("import sys, tessera.vocabulary, tessera.distributed.world; "
             "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "[]"
