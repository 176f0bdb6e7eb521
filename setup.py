"""Build hook for the optional C parts (log scanner, metric kernel); the rest is pyproject.toml.

``optional=True``: where no C compiler is found the install still succeeds and logs
are read and metrics computed by the pure-Python/numpy paths (same results, slower).
"""

import sys

from setuptools import Extension, setup

# The kernel's sums must be plain IEEE double operations (no fused multiply-add, which
# aarch64 compilers would otherwise emit) to agree bit for bit with numpy.
_KERNEL_FLAGS = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"]

setup(
    ext_modules=[
        Extension("pytest_accuracy.logs._scan", ["pytest_accuracy/logs/_scan.c"], optional=True),
        Extension(
            "pytest_accuracy.compare._metrics",
            ["pytest_accuracy/compare/_metrics.c"],
            depends=["pytest_accuracy/compare/_metrics_loop.h"],
            extra_compile_args=_KERNEL_FLAGS,
            optional=True,
        ),
    ]
)
