"""Builds Tessera's one compiled part, the fused training loops of `tessera._kernels`.

Everything else is declared in pyproject.toml. The extension is optional: where no C compiler
is found, installation goes on and training uses the equivalent (slower) torch code.
"""

from setuptools import Extension, setup

KERNELS = Extension(
    "tessera._kernels",
    sources=["trainer/tessera/_kernels.c"],
    # Reassociating float sums lets the compiler vectorise the per-row reductions.
    extra_compile_args=["-O3", "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros",
                        "-fno-trapping-math"],
    optional=True,
)

setup(ext_modules=[KERNELS])
