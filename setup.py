"""Build hook for the optional C log scanner; all other metadata is in pyproject.toml.

``optional=True``: where no C compiler is found the install still succeeds and
logs are read by the pure-Python path (same tables, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("pytest_accuracy.logs._scan", ["pytest_accuracy/logs/_scan.c"], optional=True)
    ]
)
