"""The Dockerfile's targets, read statically (no image is built in tests): a slim operator
without torch, and trainers with the pinned torch (the CPU build, and the CUDA build for GPU
nodes), all non-root, all from the same sources that the build context lets in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def stages() -> dict[str, str]:
    """Stage name -> its instructions (comments left out)."""
    text = re.sub(r"^\s*#.*\n", "", (REPO / "Dockerfile").read_text(), flags=re.MULTILINE)
    parts = re.split(r"^FROM\s+\S+\s+AS\s+([\w-]+)\s*$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def extra_requirements(extra: str) -> list[str]:
    """The requirements of one extra in pyproject.toml (a list of one-line strings there)."""
    pyproject = (REPO / "pyproject.toml").read_text()
    block = re.search(rf"^{extra} = \[(.*?)\]", pyproject, flags=re.MULTILINE | re.DOTALL)
    return re.findall(r'"([^"]+)"', block.group(1))


def test_targets_exist_and_run_as_an_unprivileged_user():
    found = stages()
    assert {"operator", "trainer", "trainer-cuda"} <= set(found)
    for target in ("operator", "trainer", "trainer-cuda"):
        users = re.findall(r"^USER\s+(\S+)", found[target], flags=re.MULTILINE)
        assert users and users[-1].split(":")[0] not in ("0", "root"), target


def test_operator_image_installs_the_operator_extra_and_no_torch():
    operator = stages()["operator"] + stages()["base"]
    assert '".[operator]"' in operator
    assert "torch" not in operator.lower()
    assert extra_requirements("operator")
    assert not any("torch" in requirement for requirement in extra_requirements("operator"))


TRAINERS = ("trainer", "trainer-cuda")


@pytest.mark.parametrize("target", TRAINERS)
def test_trainer_images_pin_the_trainer_extras_torch(target):
    (pin,) = [requirement for requirement in extra_requirements("trainer")
              if requirement.startswith("torch")]
    trainer = stages()[target]
    # `tracking: tensorboard` and `tracking: mlflow` work in pods too: their clients are in
    # the image.
    extras = '".[trainer,tracking,mlflow]"'
    assert pin in trainer and extras in trainer
    # torch first, from PyTorch's own index, so that the extra's pin is already met by it.
    assert trainer.index(pin) < trainer.index(extras)


def test_each_trainer_image_takes_its_torch_build_from_its_index():
    indexes = {target: re.findall(r"--index-url\s+\"?(\S+?)\"?\s", stages()[target])
               for target in TRAINERS}
    assert indexes == {"trainer": ["https://download.pytorch.org/whl/cpu"],
                       "trainer-cuda": ["https://download.pytorch.org/whl/${TORCH_CUDA}"]}
    (cuda,) = re.findall(r"^ARG\s+TORCH_CUDA=(cu\d+)$", stages()["trainer-cuda"],
                         flags=re.MULTILINE)
    assert cuda.startswith("cu12")


def test_cuda_trainer_asks_for_the_driver_but_not_for_every_gpu():
    cuda = stages()["trainer-cuda"]
    (capabilities,) = re.findall(r"NVIDIA_DRIVER_CAPABILITIES=(\S+)", cuda)
    assert set(capabilities.split(",")) == {"compute", "utility"}
    assert "NVIDIA_VISIBLE_DEVICES" not in cuda  # the device plugin says which GPUs
    assert "NVIDIA" not in stages()["trainer"]


@pytest.mark.parametrize("target", TRAINERS)
def test_trainer_images_build_the_training_kernels_and_drop_the_compiler(target):
    trainer = stages()[target]
    assert "gcc" in trainer and 'python -c "import tessera._kernels"' in trainer
    assert trainer.index("import tessera._kernels") < trainer.index("apt-get purge -y")


@pytest.mark.parametrize("target", TRAINERS)
def test_trainer_images_run_tessera(target):
    match = re.search(r"^ENTRYPOINT\s+(\[.*\])", stages()[target], flags=re.MULTILINE)
    assert yaml.safe_load(match.group(1)) == ["tessera"]


def test_operator_entrypoint_is_the_charts_command():
    match = re.search(r"^ENTRYPOINT\s+(\[.*\])", stages()["operator"], flags=re.MULTILINE)
    entrypoint = yaml.safe_load(match.group(1))
    deployment = (REPO / "helm" / "tessera" / "templates" / "deployment.yaml").read_text()
    (command,) = re.findall(r"command:\s*(\[.*\])", deployment)
    assert entrypoint == yaml.safe_load(command) == ["python", "-m", "tessera_operator"]


def test_build_context_holds_only_the_package_sources():
    lines = [line for line in (REPO / ".dockerignore").read_text().splitlines()
             if line and not line.startswith("#")]
    assert lines[0] == "*"  # everything out, then the sources back in
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert 'readme = "README.md"' in (REPO / "pyproject.toml").read_text()
    assert allowed == {"pyproject.toml", "setup.py", "README.md", "trainer", "operator"}
    assert all((REPO / name).exists() for name in allowed)
    copied = re.findall(r"^COPY\s+(.+?)\s+\S+$", stages()["base"], flags=re.MULTILINE)
    assert {name for sources in copied for name in sources.split()} == allowed
