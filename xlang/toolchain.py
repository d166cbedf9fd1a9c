"""Find the NVIDIA tools: nvcc (CUDA toolkit) and cuobjdump/nvdisasm (toolkit, NVIDIA's pip packages, or another
installed Python package that carries them, such as a JIT compiler's wheel)."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

from xlang.errors import XlangError


def _toolkit_dirs() -> list[Path]:
    dirs = [Path(os.environ[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    return dirs + [Path("/usr/local/cuda/bin")]


def _python_package_dirs() -> list[Path]:
    # nvidia-cuda-cuobjdump / -nvdisasm install under site-packages/nvidia/cu13/bin (cu12: cuda_*/bin).
    site = Path(sysconfig.get_paths()["purelib"])
    return [site / "nvidia" / "cu13" / "bin", site / "nvidia" / "cuda_cuobjdump" / "bin",
            site / "nvidia" / "cuda_nvdisasm" / "bin"]


_PACKAGED_FOLDERS = ("bin", "include", "lib", "lib64")  # where a wheel keeps the NVIDIA files it carries


@functools.cache
def _packaged_index() -> dict[str, list[Path]]:
    """{file name: paths} of the files every installed Python distribution keeps in a bin/, include/ or lib*/
    folder, by distribution name: read once (about a second), only when a tool is found nowhere else."""
    index: dict[str, list[Path]] = {}
    dists = sorted(importlib.metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower())
    for dist in dists:
        for f in dist.files or ():
            parts = f.parts
            if len(parts) > 1 and (parts[-2] in _PACKAGED_FOLDERS or "lib" in parts[:-1]):
                index.setdefault(parts[-1], []).append(Path(dist.locate_file(f)))
    return index


def packaged_files(relative: str) -> list[Path]:
    """Files that installed Python distributions (not NVIDIA's tool packages only: a JIT compiler's wheel carries
    its own cuobjdump, nvdisasm, CUPTI and CUDA headers) hold at a path ending in `relative`, e.g.
    'bin/cuobjdump' or 'include/cupti.h'; those present on disk, in distribution-name order."""
    tail = Path(relative).parts
    return [p for p in _packaged_index().get(tail[-1], []) if p.parts[-len(tail):] == tail and p.is_file()]


@functools.cache
def find_tool(name: str) -> Path | None:
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    for d in _toolkit_dirs() + _python_package_dirs():
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return d / name
    return next((p for p in packaged_files(f"bin/{name}") if os.access(p, os.X_OK)), None)


def require_tool(name: str) -> Path:
    path = find_tool(name)
    if path is None:
        hints = {
            "nvcc": "install the CUDA toolkit (13.0 or newer) or set CUDA_HOME",
            "cuobjdump": "pip install nvidia-cuda-cuobjdump (or install the CUDA toolkit)",
            "nvdisasm": "pip install nvidia-cuda-nvdisasm (or install the CUDA toolkit)",
            "ncu": "install Nsight Compute",
            "compute-sanitizer": "install the CUDA toolkit's compute-sanitizer",
        }
        raise XlangError(f"{name} not found: {hints.get(name, 'install it')}")
    return path


def cuda_include_dir() -> Path | None:
    nvcc = find_tool("nvcc")
    if nvcc is None:
        return None
    inc = nvcc.resolve().parent.parent / "include"
    return inc if inc.is_dir() else None


@functools.cache
def nvcc_version() -> str | None:
    """nvcc's release and build lines (e.g. 'release 13.0, V13.0.88; Build cuda_13.0.r13.0/...'), None without nvcc."""
    nvcc = find_tool("nvcc")
    if nvcc is None:
        return None
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in out.splitlines() if "release" in ln or ln.startswith("Build")]
    return "; ".join(ln.split("tools, ", 1)[-1] for ln in lines) or out.strip()[-200:] or None

