"""One call of the candidate on the judge's buffers (Call: inputs written by the judge, outputs poisoned, the slack
around every buffer checked after the call), the stage's verdict where it is found (Outcome), and how a memory
fault reads (memory_fault). Used by every stage of the judge: check, timing, peers, memcheck and ncu."""

from __future__ import annotations

import re

from xlang.profiler.judge.process import Outcome, Runner, RunnerGone
from xlang.task import format_shape

# How CUDA says a kernel touched memory it may not (CUDA_ERROR_ILLEGAL_ADDRESS 700, _MISALIGNED_ADDRESS 716,
# _INVALID_ADDRESS_SPACE 717), as torch, Triton's launcher, the runtime API and cuda-python spell it.
_MEMORY_FAULT = re.compile(r"illegal memory access|an illegal address|ILLEGAL_ADDRESS|IllegalAddress|"
                           r"misaligned address|MISALIGNED_ADDRESS|MisalignedAddress|invalid address space|"
                           r"INVALID_ADDRESS_SPACE|InvalidAddressSpace")


MEMORY_FAULT_CODES = (700, 716, 717)


GUARD_HINT = ("an illegal memory access in the candidate's call (no sanitizer in this run): every buffer the "
              "harness passes ends flush against an unmapped guard range and starts after one, so an access past "
              "its end or before its start faults; check the bounds of loads and stores (tails where a size is "
              "not a multiple of the tile, the last tile, TMA descriptor extents)")


def memory_fault(text: str) -> bool:
    """Whether an error text (the candidate's process's report, or the observer's) is a memory fault."""
    return bool(_MEMORY_FAULT.search(text or ""))


def _dtype(t):
    from xlang.candidate import torch_dtype

    return torch_dtype(t.dtype)


class Call:
    """One set of shared buffers for one shape: inputs written by the judge, outputs poisoned."""

    _ids = 0

    def __init__(self, state, shape: dict):
        from xlang.profiler.buffers import allocate

        Call._ids += 1
        self.id, self.state, self.shape = Call._ids, state, shape
        task = state.task
        self.shared = {t.name: allocate(t.name, t.dims(shape), _dtype(t), state.kind, 0) for t in task.contract.tensors}
        self.inputs = [t.name for t in task.contract.inputs]
        self.outputs = [t.name for t in task.contract.outputs]
        self.sizes = [shape[s] for s in task.contract.sizes]
        self.mapped: set = set()

    def fill(self, inputs: dict) -> None:
        for name in self.inputs:
            self.shared[name].tensor.copy_(inputs[name])
        for name in self.outputs:
            self.shared[name].tensor.fill_(float("nan"))
        for s in self.shared.values():
            s.poison_slack()

    def run(self, runner: Runner, timeout: float, nvtx: str | None = None, primer: bool = False,
            where: str = "") -> None:
        if runner not in self.mapped:
            bufs = list(self.shared.values())
            reply = runner.request({"op": "map", "set": self.id, "buffers": [b.meta.to_dict() for b in bufs]},
                                   fds=[b.fd for b in bufs], timeout=60)
            if reply.get("op") != "mapped":
                raise Outcome("runtime_error", f"the candidate's process could not map the buffers: {reply}")
            self.mapped.add(runner)
        _sync(self.state)
        try:
            reply = runner.request({"op": "call", "set": self.id, "sizes": self.sizes, "nvtx": nvtx, "primer": primer},
                                   timeout=timeout)
        except RunnerGone as e:
            if e.fault:  # its process died of SIGSEGV / SIGBUS: a CPU-side access outside what it may touch
                raise Outcome("memory_error", f"the candidate's process was killed by {e.fault} during its call "
                                              f"({where or format_shape(self.shape)}): an invalid memory access "
                                              f"in its host code, or one past the end or before the start of a "
                                              f"buffer the harness passed (each lies between unmapped guard "
                                              f"pages).\n{e}") from None
            raise Outcome("timeout" if e.timed_out else "runtime_error", f"the candidate's call: {e}") from None
        if reply.get("op") == "error":
            detail = str(reply.get("detail", ""))[:4000]
            if memory_fault(detail):
                raise Outcome("memory_error", f"{GUARD_HINT} ({where or format_shape(self.shape)}). What the "
                                              f"candidate's process reported:\n{detail}")
            raise Outcome("runtime_error", detail or "the candidate's call failed")
        if reply.get("op") != "done":
            raise Outcome("runtime_error", f"unexpected answer from the candidate's process: {str(reply)[:200]}")

    def check_slack(self, where: str = "") -> None:
        """The canary bytes in the slack around every buffer (buffers.py): after every call, in every stage; one
        host sync when they are intact."""
        import torch

        if not bool(torch.cat([s.slack_changed() for s in self.shared.values()]).any()):
            return
        for name, s in self.shared.items():
            damage = s.slack_damage()
            if damage:
                raise Outcome("memory_error", f"the candidate wrote outside {name}: {damage} "
                                              f"({where or 'shape ' + format_shape(self.shape)}); check the "
                                              "bounds of its stores (tails, the last tile)")

    def input_bytes(self) -> int:
        return sum(self.shared[n].tensor.numel() * self.shared[n].tensor.element_size() for n in self.inputs)

    def output_tensors(self) -> dict:
        return {n: self.shared[n].tensor for n in self.outputs}

    def input_tensors(self) -> dict:
        return {n: self.shared[n].tensor for n in self.inputs}

    def close(self, runners=()) -> None:
        for r in runners:
            if r in self.mapped:
                try:
                    r.request({"op": "unmap", "set": self.id}, timeout=30)
                except RunnerGone:
                    pass
        for s in self.shared.values():
            s.close()


def _sync(state) -> None:
    if state.kind == "cuda":
        import torch

        torch.cuda.synchronize()


def make_inputs(task, shape, seed, device, kind):
    import inspect

    if kind and "kind" in inspect.signature(task.make_inputs).parameters:
        return task.make_inputs(shape, seed, device, kind=kind)
    return task.make_inputs(shape, seed, device)
