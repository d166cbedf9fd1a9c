"""Loading a Python candidate and building the argument list its entry point receives."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path

_TORCH_DTYPES = {"bf16": "bfloat16", "fp32": "float32", "int32": "int32", "fp8e4m3": "float8_e4m3fn", "u8": "uint8"}


def load_module(path: str | Path, name: str = "xlang_candidate"):
    """Import a candidate file as a fresh module (its own name, its own globals)."""
    path = str(path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def candidate_trace(exc: BaseException, candidate_files) -> str:
    """The exception and only the frames inside the candidate's own files (never our machinery), with the
    files named by their base name so no path of ours leaks into what a model is shown."""
    files = set(map(str, candidate_files))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in files]
    lines = [f'  File "{Path(f.filename).name}", line {f.lineno}, in {f.name}\n    {f.line}' for f in frames]
    message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    for path in files:
        message = message.replace(path, Path(path).name)
    if len(message) > 3000:
        message = message[:1500] + "\n...\n" + message[-1500:]
    return "\n".join(lines + [message])


def torch_dtype(dtype: str):
    import torch

    return getattr(torch, _TORCH_DTYPES[dtype])


def allocate_outputs(task, shape, device, fill=float("nan")) -> dict:
    """Outputs allocated by the harness and poisoned, so an unwritten element cannot pass."""
    import torch

    return {t.name: torch.full(t.dims(shape), fill, dtype=torch_dtype(t.dtype), device=device)
            for t in task.contract.outputs}


def arguments(task, shape, tensors: dict) -> list:
    """Contract order: the tensors (inputs and outputs as declared), then the int sizes."""
    return [tensors[t.name] for t in task.contract.tensors] + [shape[s] for s in task.contract.sizes]


def entry_arguments(task, shape, device) -> list:
    """Uninitialised tensors of the right shapes: enough for a static build, which runs no kernel."""
    import torch

    tensors = {t.name: torch.empty(t.dims(shape), dtype=torch_dtype(t.dtype), device=device)
               for t in task.contract.tensors}
    return arguments(task, shape, tensors)
