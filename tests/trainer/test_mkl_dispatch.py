"""MKL picks its code by the CPU's features once `tessera` is imported before torch."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tessera.mkl_dispatch

PROBE = """
import ctypes, json, os, sys
import tessera, torch
library = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
torch.manual_seed(0)
a, b = torch.randn(300, 200), torch.randn(200, 400)
error = ((a @ b).double() - a.double() @ b.double()).abs().max().item()
json.dump({"code": library.mkl_serv_cpu_detect(), "error": error,
           "enabled": tessera.mkl_dispatch.ENABLED}, sys.stdout)
"""


def cpu_flags() -> tuple[str, set[str]]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    vendor = next((line.split(":")[1].strip() for line in text.splitlines()
                   if line.startswith("vendor_id")), "")
    flags = next((set(line.split(":")[1].split()) for line in text.splitlines()
                  if line.startswith("flags")), set())
    return vendor, flags


def probe(**environment: str) -> dict[str, float]:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            env={**os.environ, **environment}, timeout=120, check=True)
    return json.loads(result.stdout)


def mkl_in_torch() -> bool:
    import torch

    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    return library.exists() and hasattr(ctypes.CDLL(str(library)), "mkl_serv_cpu_detect")


needs_mkl = pytest.mark.skipif(not Path("/proc/cpuinfo").exists() or not mkl_in_torch(),
                               reason="torch without MKL, or no /proc/cpuinfo")


@needs_mkl
def test_mkl_uses_the_cpus_vector_code_and_stays_float32() -> None:
    told, untold = probe(), probe(TESSERA_MKL_ANY_CPU="0")
    assert told["enabled"] and not untold["enabled"]
    vendor, flags = cpu_flags()
    if vendor != "GenuineIntel" and "avx512f" in flags:
        # Without the answer MKL runs its generic code on this CPU.
        assert told["code"] > untold["code"]
    else:
        assert told["code"] >= untold["code"]
    # Same float32 products: both within float32 rounding of the exact result.
    assert told["error"] < 1e-3 and untold["error"] < 1e-3


def test_it_stays_off_when_torch_came_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch", object()))
    assert tessera.mkl_dispatch.allow_any_cpu() is False
    monkeypatch.setenv("TESSERA_MKL_ANY_CPU", "0")
    monkeypatch.delitem(sys.modules, "torch")
    assert tessera.mkl_dispatch.allow_any_cpu() is False
