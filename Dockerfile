# syntax=docker/dockerfile:1
# Tessera's three images, from one source tree:
#   docker build --target operator -t tessera-operator:0.1.0 .   # the kopf operator, no torch
#   docker build --target trainer  -t tessera-trainer:0.1.0 .    # `tessera` with torch (CPU)
#   docker build --target trainer-cuda -t tessera-trainer-cuda:0.1.0 .  # torch for CUDA GPUs
# All run as an unprivileged user (uid 10001) and need no writable root filesystem.

ARG PYTHON_VERSION=3.11

# --- what both images share: Python, the user, the source --------------------------------------
FROM python:${PYTHON_VERSION}-slim AS base
# No .pyc files (the root filesystem is read-only at run time), logs straight to the pod's
# output, no pip cache or version check in the image.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp
RUN groupadd --gid 10001 tessera \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
       --shell /usr/sbin/nologin tessera
WORKDIR /src
# The README is the package's long description, so the build needs it too.
COPY pyproject.toml setup.py README.md ./
COPY trainer ./trainer
COPY operator ./operator

# --- the operator: kopf and the config schema, never torch --------------------------------------
FROM base AS operator
RUN pip install ".[operator]" && rm -rf /src
WORKDIR /
USER 10001:10001
ENTRYPOINT ["python", "-m", "tessera_operator"]
CMD ["--standalone", "--all-namespaces"]

# --- the trainer: every role of a job (`tessera train`, `tessera lock-server`, ...) -------------
FROM base AS trainer
# torch's CPU build first (from PyTorch's own index), so that the trainer extra's pin is met
# without pulling the CUDA build and its libraries. A C compiler, present only during this
# step, builds the training kernels (tessera._kernels); the import fails the build without them.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
    && pip install ".[trainer,tracking,mlflow]" \
    && cd / && python -c "import tessera._kernels" \
    && apt-get purge -y --auto-remove gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* /src
WORKDIR /
USER 10001:10001
ENTRYPOINT ["tessera"]
CMD ["--help"]

# --- the trainer for GPU nodes (config num_gpus > 0): the same, with torch's CUDA build ---------
# Base: the same python:3.11-slim, not an nvidia/cuda image. PyTorch's CUDA wheels bring the CUDA
# runtime, cuBLAS, cuDNN and NCCL as pip packages (nvidia-*), and the GPU driver (libcuda) is
# mounted from the node by the NVIDIA container toolkit when the device plugin hands the pod a
# GPU; an nvidia/cuda base would only add a second copy of those libraries. torch==2.13.0 comes
# from PyTorch's index for CUDA 12.8 (TORCH_CUDA, e.g. --build-arg TORCH_CUDA=cu130 for CUDA 13):
# 12.8 builds run on H100/H200 (sm_90) and Blackwell, and, through CUDA's minor-version
# compatibility, on any node driver of the 12.x series (>= 525), the widest choice on managed
# node pools.
FROM base AS trainer-cuda
ARG TORCH_CUDA=cu128
# The toolkit mounts only the driver parts a container asks for: compute (CUDA) and utility
# (nvidia-smi, NVML). Which GPUs are visible (NVIDIA_VISIBLE_DEVICES) is left to the device
# plugin, so that a pod without a GPU limit never sees the node's GPUs.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --index-url "https://download.pytorch.org/whl/${TORCH_CUDA}" torch==2.13.0 \
    && pip install ".[trainer,tracking,mlflow]" \
    && cd / && python -c "import tessera._kernels" \
    && apt-get purge -y --auto-remove gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* /src
WORKDIR /
USER 10001:10001
ENTRYPOINT ["tessera"]
CMD ["--help"]
