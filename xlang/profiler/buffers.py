"""Memory the judge shares with the candidate's process: the task's inputs and outputs, nothing else.

The judge (trusted) allocates every buffer on its own, exports it as a file descriptor and sends the
descriptor over a Unix socket; the candidate's process (the runner, in its jail) maps it and sees exactly
that buffer: not the judge's clones of the inputs, its reference, or anything else of its process.

Every buffer, on both sides, is laid out the same way, in every stage (check, memcheck, ncu, timing):

    | guard (unmapped) | head slack (canary) | the buffer | tail slack (< 16 B, canary) | guard (unmapped) |
                       '------------------ mapped: whole granules ------------------'

The address range is reserved as guard + mapping + guard and only the middle is mapped, so an access past
either end of the mapping faults (CUDA: an illegal address, CPU: SIGSEGV) in every run, not only under
compute-sanitizer. The buffer sits at the END of its mapping: its start is aligned to the largest power of two
up to 256 that divides its size, never less than the 16 bytes the contract promises, so its last byte is the
last mapped byte whenever its size is a multiple of 16 (every bf16 row of 8 elements). The slack inside the
mapping (before the buffer: up to a granule; after it: under 16 bytes) holds canary bytes 0xFF (NaN for
bf16/fp32, so a read that is used spoils the result) that the judge checks after every call, so a write there
is seen too. What is not caught: a read of the head slack whose value is not used, and any access that lands
beyond the guards (GUARD_BYTES each side) on some other mapping.

  cuda  the CUDA driver's virtual memory API (cuMemAddressReserve / cuMemCreate with a POSIX file-descriptor
        handle / cuMemMap, cuMemExportToShareableHandle / cuMemImportFromShareableHandle), through cuda-python;
        the allocation granularity is 2 MiB.
  cpu   memfd + mmap (MAP_FIXED inside a PROT_NONE reservation): the same protocol without a GPU (the CPU tests
        of the judge/runner split), page granularity.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from dataclasses import asdict, dataclass

MIN_ALIGN = 16  # the start alignment the contract promises (TMA's global base rule)
MAX_ALIGN = 256  # what the caching allocator would give; more is never needed
GUARD_BYTES = 32 << 20  # unmapped address range on each side (address space only: nothing is allocated)
POISON = 0xFF


@dataclass
class BufferMeta:
    name: str
    dtype: str  # torch dtype name, e.g. "bfloat16"
    shape: tuple
    nbytes: int
    size: int  # mapped bytes (whole granules)
    offset: int  # where the buffer starts inside the mapping
    reserve: int  # reserved address range: guard + size + guard
    kind: str  # "cuda" | "cpu"
    device: int = 0
    guard: int = 0  # unmapped bytes before the mapping (and as many after it)

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

    def slack_changed(self):
        """A one-element bool tensor, true when a canary byte changed: no host sync, so that a call's buffers are
        checked with one (Call.check_slack)."""
        import torch

        m = self.meta
        head, tail = self.raw[: m.offset], self.raw[m.offset + m.nbytes:]
        return torch.stack([(head != POISON).any(), (tail != POISON).any()]).any().reshape(1)

    def slack_damage(self) -> str | None:
        """None when every canary byte is intact, else how many changed and how far from the buffer they reach
        ('2 canary bytes changed, up to 2 bytes before its start')."""
        m = self.meta
        tail = (self.raw[m.offset + m.nbytes:] != POISON).nonzero()
        if tail.numel():
            return f"{tail.numel()} canary bytes changed, up to {int(tail[-1]) + 1} bytes past its end"
        head = (self.raw[: m.offset] != POISON).nonzero()
        if head.numel():
            return f"{head.numel()} canary bytes changed, up to {m.offset - int(head[0])} bytes before its start"
        return None

    def slack_intact(self) -> bool:
        return self.slack_damage() is None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.tensor = self.raw = None
        if self._release:
            self._release()
            self._release = None


def start_alignment(nbytes: int) -> int:
    """The buffer's start alignment: the largest power of two up to MAX_ALIGN that divides its size (so its end
    meets the end of the mapping), and never less than MIN_ALIGN."""
    align = MAX_ALIGN
    while align > MIN_ALIGN and nbytes % align:
        align //= 2
    return align


def layout(nbytes: int, granularity: int) -> tuple[int, int, int, int]:
    """(mapped bytes, the buffer's offset in the mapping, the guard on each side, the whole reservation)."""
    align = start_alignment(max(nbytes, 1))
    body = -(-max(nbytes, 1) // align) * align
    size = -(-body // granularity) * granularity
    guard = max(granularity, -(-GUARD_BYTES // granularity) * granularity)
    return size, size - body, guard, guard + size + guard


# ---- CPU: memfd mapped inside a PROT_NONE reservation ----------------------------------------------------

_PROT_NONE, _MAP_FIXED, _MAP_NORESERVE = 0, 0x10, 0x4000
_MAP_FAILED = ctypes.c_void_p(-1).value


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _cpu_map(fd: int, meta: BufferMeta):
    """(raw bytes tensor over the mapping, release): the memfd mapped at guard bytes into a reservation whose
    first and last guard bytes stay PROT_NONE, so an access beyond either end of the mapping is a SIGSEGV."""
    import torch

    libc = _libc()
    base = libc.mmap(None, meta.reserve, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
    if base in (None, _MAP_FAILED):
        raise OSError(ctypes.get_errno(), "mmap of the guarded reservation failed")
    addr = libc.mmap(base + meta.guard, meta.size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | _MAP_FIXED,
                     fd, 0)
    if addr != base + meta.guard:
        libc.munmap(base, meta.reserve)
        raise OSError(ctypes.get_errno(), "mmap of the buffer inside its reservation failed")
    raw = torch.frombuffer((ctypes.c_ubyte * meta.size).from_address(addr), dtype=torch.uint8)
    return raw, lambda: libc.munmap(base, meta.reserve)


def allocate(name: str, shape, dtype, kind: str, device: int = 0) -> Shared:
    """A buffer for `name` of `shape` and torch `dtype`, shareable with the runner."""
    import torch

    dtype_name = str(dtype).replace("torch.", "")
    nbytes = int(torch.tensor([], dtype=dtype).element_size()) * _numel(shape)
    if kind == "cpu":
        size, offset, guard, reserve = layout(nbytes, mmap.PAGESIZE)
        fd = os.memfd_create(f"xlang-{name}", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        meta = BufferMeta(name, dtype_name, tuple(shape), nbytes, size, offset, reserve, "cpu", guard=guard)
        raw, release = _cpu_map(fd, meta)
        return Shared(meta, raw, fd, release)

    cu = _cu()
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    prop.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    gran = _check(cu.cuMemGetAllocationGranularity(
        prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity")
    size, offset, guard, reserve = layout(nbytes, int(gran))
    handle = _check(cu.cuMemCreate(size, prop, 0), "cuMemCreate")
    base, ptr = _map(cu, handle, size, guard, reserve, int(gran), device)
    fd = int(_check(cu.cuMemExportToShareableHandle(
        handle, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "export"))
    raw = torch.as_tensor(_CudaArray(ptr, size), device=f"cuda:{device}")
    meta = BufferMeta(name, dtype_name, tuple(shape), nbytes, size, offset, reserve, "cuda", device, guard)

    def release():
        torch.cuda.synchronize()
        _unmap(cu, base, ptr, size, reserve)
        _check(cu.cuMemRelease(handle), "cuMemRelease")

    return Shared(meta, raw, fd, release)


def _map(cu, handle, size: int, guard: int, reserve: int, gran: int, device: int) -> tuple[int, int]:
    """Reserve guard + size + guard, map the allocation in the middle, leave both guards unmapped.
    -> (the reservation's base, the mapping's start)."""
    base = int(_check(cu.cuMemAddressReserve(reserve, gran, 0, 0), "cuMemAddressReserve"))
    ptr = base + guard
    _check(cu.cuMemMap(ptr, size, 0, handle, 0), "cuMemMap")
    access = cu.CUmemAccessDesc()
    access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = device
    access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    _check(cu.cuMemSetAccess(ptr, size, [access], 1), "cuMemSetAccess")
    return base, ptr


def _unmap(cu, base: int, ptr: int, size: int, reserve: int) -> None:
    _check(cu.cuMemUnmap(ptr, size), "cuMemUnmap")
    _check(cu.cuMemAddressFree(base, reserve), "cuMemAddressFree")


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


class Mapped:
    """The runner's side of one buffer: the task's tensor over memory the judge owns, laid out as the judge's."""

    def __init__(self, meta: dict, fd: int):
        import torch

        self.meta = m = BufferMeta(**{**meta, "shape": tuple(meta["shape"])})
        self._release = None
        if m.kind == "cpu":
            raw, self._release = _cpu_map(fd, m)
            os.close(fd)
        else:
            cu = _cu()
            handle = _check(cu.cuMemImportFromShareableHandle(
                fd, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), "import")
            os.close(fd)
            base, ptr = _map(cu, handle, m.size, m.guard, m.reserve, m.guard & -m.guard, m.device)  # a power of two
            raw = torch.as_tensor(_CudaArray(ptr, m.size), device=f"cuda:{m.device}")

            def release():
                _unmap(cu, base, ptr, m.size, m.reserve)
                _check(cu.cuMemRelease(handle), "cuMemRelease")

            self._release = release
        self.tensor = _view(raw, m)

    def close(self) -> None:
        self.tensor = None
        if self._release:
            self._release()
            self._release = None
