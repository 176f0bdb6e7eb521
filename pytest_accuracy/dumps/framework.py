"""Which framework wrote an msprobe dump whose dump.json has no ``framework`` key."""

from __future__ import annotations

import re
from collections.abc import Iterable

from pytest_accuracy.dumps.model import Call, TensorRecord

# Node prefixes only one framework's msprobe hooks write (Tensor/Functional/Distributed: both).
_MS_PREFIXES = frozenset({"Cell", "Mint", "MintFunctional", "Primitive", "Jit"})
_PT_PREFIXES = frozenset({"Module", "Torch", "NPU", "Aten", "VF"})
# MindSpore prints dtypes as Float32 / BFloat16 / Int64 / Bool; PyTorch as torch.float32.
_MS_DTYPE = re.compile(r"(?:B?Float|U?Int|Complex)\d+|Bool")


def infer_framework(calls: Iterable[Call]) -> tuple[str, str]:
    """The framework that wrote these calls and the evidence, said as a note for the reader.

    Old msprobe versions wrote no ``framework`` key; defaulting to PyTorch paired a MindSpore
    dump with a PyTorch one by name and reported a false divergence.  mindtorch (PyTorch code
    on MindSpore) has PyTorch node prefixes with MindSpore tensors.
    """
    prefixes: set[str] = set()
    pt_dtypes = ms_dtypes = 0
    for call in calls:
        prefixes.add(call.prefix)
        for arg in (*call.inputs, *call.outputs):
            if isinstance(arg, TensorRecord):
                pt_dtypes += arg.raw_dtype.startswith("torch.")
                ms_dtypes += bool(_MS_DTYPE.fullmatch(arg.raw_dtype))
    ms_nodes = sorted(prefixes & _MS_PREFIXES)
    pt_nodes = sorted(prefixes & _PT_PREFIXES)
    if ms_dtypes > pt_dtypes:
        if ms_nodes or not pt_nodes:
            framework, why = "mindspore", _why("MindSpore", ms_nodes, ms_dtypes)
        else:
            framework, why = "mindtorch", _why("PyTorch", pt_nodes, ms_dtypes)
            why += " (PyTorch code run on MindSpore)"
    elif pt_dtypes > ms_dtypes:
        framework, why = "pytorch", _why("PyTorch", pt_nodes, pt_dtypes)
    elif ms_nodes and not pt_nodes:
        framework, why = "mindspore", f"node prefixes {', '.join(ms_nodes)}; no tensor dtype"
    else:
        framework, why = "pytorch", "no tensor or node prefix tells; msprobe's own default"
    mixed = " (the dump mixes both kinds of tensor)" if pt_dtypes and ms_dtypes else ""
    return framework, f"dump.json has no 'framework' key: read as {framework} from {why}{mixed}"


def _why(kind: str, prefixes: list[str], tensors: int) -> str:
    nodes = f"node prefixes {', '.join(prefixes)} and " if prefixes else ""
    return f"{nodes}{tensors} tensor dtype(s) written the {kind} way"
