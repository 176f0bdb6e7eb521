"""Compare two runs: pairing, metrics, judgement, divergence (DESIGN.md, "Diagnosis model")."""

from pytest_accuracy.compare.engine import Comparison
from pytest_accuracy.compare.judge import compare_tensor
from pytest_accuracy.compare.results import NodeResult, ScalarDiff, TensorComparison
from pytest_accuracy.pairing.base import Pairing, pair_by_name

__all__ = [
    "Comparison",
    "NodeResult",
    "Pairing",
    "ScalarDiff",
    "TensorComparison",
    "compare_tensor",
    "pair_by_name",
]
