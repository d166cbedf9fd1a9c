"""Memory the judge shares with the candidate's process: the task's inputs and outputs, nothing else.

The judge (trusted) allocates every buffer on its own, exports it as a file descriptor and sends the
descriptor over a Unix socket; the candidate's process (the runner, in its jail) maps it and sees exactly
that buffer: not the judge's clones of the inputs, its reference, or anything else of its process.

  cuda  the CUDA driver's virtual memory API (cuMemCreate with a POSIX file-descriptor handle,
        cuMemExportToShareableHandle / cuMemImportFromShareableHandle), through cuda-python. Each buffer is
        its own allocation, placed at the END of its mapping, and the virtual range after the mapping is
        reserved but never mapped: a read or write past the end faults in every stage, not only under
        memcheck. The slack before the buffer (the allocation granularity is 2 MiB) is filled with 0xFF
        (NaN for bf16/fp32) and checked after every call, so a write before the start is seen too.
  cpu   memfd + mmap: the same protocol without a GPU (the CPU tests of the judge/runner split).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import asdict, dataclass

ALIGN = 256  # the buffer's start alignment (the contract promises 16 bytes)
POISON = 0xFF


@dataclass
class BufferMeta:
    name: str
    dtype: str  # torch dtype name, e.g. "bfloat16"
    shape: tuple
    nbytes: int
    size: int  # mapped bytes
    offset: int  # where the buffer starts inside the mapping
    reserve: int  # reserved virtual bytes (size + unmapped guard)
    kind: str  # "cuda" | "cpu"
    device: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


class _CudaArray:
    """Just enough of __cuda_array_interface__ for torch.as_tensor to wrap a raw device range as bytes."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None}


def _cu():
    try:
        from cuda.bindings import driver as cu
    except ImportError:  # cuda-python before the cuda.bindings layout
        from cuda import cuda as cu  # type: ignore[no-redef]
    return cu


def _check(result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    cu = _cu()
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what}: {err}")
    return rest[0] if len(rest) == 1 else rest


def _view(raw, meta: BufferMeta):
    return raw[meta.offset: meta.offset + meta.nbytes].view(_torch_dtype(meta.dtype)).view(*meta.shape)


class Shared:
    """One shared buffer on the judge's side: `tensor` is the task's view, `fd` what the runner maps."""

    def __init__(self, meta: BufferMeta, raw, fd: int, release):
        self.meta, self.raw, self.fd, self._release = meta, raw, fd, release
        self.tensor = _view(raw, meta)

    def poison_slack(self) -> None:
        m = self.meta
        self.raw[: m.offset].fill_(POISON)
        self.raw[m.offset + m.nbytes:].fill_(POISON)

    def slack_intact(self) -> bool:
        m = self.meta
        head, tail = self.raw[: m.offset], self.raw[m.offset + m.nbytes:]
        return bool((head == POISON).all()) and bool((tail == POISON).all())

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.tensor = self.raw = None
        if self._release:
            self._release()
            self._release = None


def _layout(nbytes: int, granularity: int) -> tuple[int, int, int]:
    body = -(-max(nbytes, 1) // ALIGN) * ALIGN
    size = -(-body // granularity) * granularity
    return size, size - body, size + granularity  # mapped, offset, reserved (one unmapped granule after)


def allocate(name: str, shape, dtype, kind: str, device: int = 0) -> Shared:
    """A buffer for `name` of `shape` and torch `dtype`, shareable with the runner."""
    import torch

    dtype_name = str(dtype).replace("torch.", "")
    nbytes = int(torch.tensor([], dtype=dtype).element_size()) * _numel(shape)
    if kind == "cpu":
        size, offset, _ = _layout(nbytes, mmap.PAGESIZE)
        fd = os.memfd_create(f"xlang-{name}", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size)
        raw = torch.frombuffer(mm, dtype=torch.uint8)
        meta = BufferMeta(name, dtype_name, tuple(shape), nbytes, size, offset, size, "cpu")
        return Shared(meta, raw, fd, lambda: None)

    cu = _cu()
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    prop.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    gran = _check(cu.cuMemGetAllocationGranularity(
        prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity")
    size, offset, reserve = _layout(nbytes, int(gran))
    handle = _check(cu.cuMemCreate(size, prop, 0), "cuMemCreate")
    ptr = _map(cu, handle, size, reserve, int(gran), device)
    fd = int(_check(cu.cuMemExportToShareableHandle(
        handle, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "export"))
    raw = torch.as_tensor(_CudaArray(int(ptr), size), device=f"cuda:{device}")
    meta = BufferMeta(name, dtype_name, tuple(shape), nbytes, size, offset, reserve, "cuda", device)

    def release():
        torch.cuda.synchronize()
        _unmap(cu, ptr, size, reserve)
        _check(cu.cuMemRelease(handle), "cuMemRelease")

    return Shared(meta, raw, fd, release)


def _map(cu, handle, size: int, reserve: int, gran: int, device: int):
    ptr = _check(cu.cuMemAddressReserve(reserve, gran, 0, 0), "cuMemAddressReserve")
    _check(cu.cuMemMap(ptr, size, 0, handle, 0), "cuMemMap")
    access = cu.CUmemAccessDesc()
    access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = device
    access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    _check(cu.cuMemSetAccess(ptr, size, [access], 1), "cuMemSetAccess")
    return ptr


def _unmap(cu, ptr, size: int, reserve: int) -> None:
    _check(cu.cuMemUnmap(ptr, size), "cuMemUnmap")
    _check(cu.cuMemAddressFree(ptr, reserve), "cuMemAddressFree")


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


class Mapped:
    """The runner's side of one buffer: the task's tensor over memory the judge owns."""

    def __init__(self, meta: dict, fd: int):
        import torch

        self.meta = m = BufferMeta(**{**meta, "shape": tuple(meta["shape"])})
        self._release = None
        if m.kind == "cpu":
            self._mm = mmap.mmap(fd, m.size)
            os.close(fd)
            raw = torch.frombuffer(self._mm, dtype=torch.uint8)
        else:
            cu = _cu()
            handle = _check(cu.cuMemImportFromShareableHandle(
                fd, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), "import")
            os.close(fd)
            gran = m.reserve - m.size
            ptr = _map(cu, handle, m.size, m.reserve, gran, m.device)
            raw = torch.as_tensor(_CudaArray(int(ptr), m.size), device=f"cuda:{m.device}")

            def release():
                _unmap(cu, ptr, m.size, m.reserve)
                _check(cu.cuMemRelease(handle), "cuMemRelease")

            self._release = release
        self.tensor = _view(raw, m)

    def close(self) -> None:
        self.tensor = None
        if self._release:
            self._release()
            self._release = None
