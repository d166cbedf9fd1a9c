"""Issue 31 classes 3 and 4 on a real Hopper GPU (marked gpu: skipped where none answers), in triton and cuda_ptx:
an out-of-bounds read made only where compute-sanitizer is absent is memory_error (the guard ranges make it fault
in the unsanitised runs), and a helper process holding a CUDA context of its own is forbidden_call with its
correctness discarded, every stage ending well before its limit. Also the buffer layout itself, through the
CUDA driver: the last byte of every buffer is the last mapped byte, and the byte after it faults."""

import pytest
from test_profiler_gpu import HOSTILE, ROOT, SMALL, _arch, _eval  # the GEMM evaluation on the machine's Hopper GPU

from xlang import verdict as V

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name, lang", [("gemm_oob_one_past_unless_sanitizer.py", "triton"),
                                        ("gemm_oob_one_past_unless_sanitizer.cu", "cuda_ptx"),
                                        ("gemm_oob_unless_sanitizer.py", "triton"),
                                        ("gemm_oob_unless_sanitizer.cu", "cuda_ptx")])
def test_an_oob_read_only_without_the_sanitizer_is_a_memory_error(name, lang):
    v = _eval(HOSTILE / name, lang, SMALL, ncu=False, timing=False)
    assert v.category == V.MEMORY_ERROR, v.detail
    assert "illegal memory access" in v.detail or "guard range" in v.detail
    assert not v.correct


@pytest.mark.parametrize("name, lang", [("gemm_gpu_helper_process.py", "triton"),
                                        ("gemm_gpu_helper_process.cu", "cuda_ptx")])
def test_a_helper_process_with_its_own_context_is_forbidden(name, lang):
    v = _eval(HOSTILE / name, lang, SMALL, check_timeout_s=120, memcheck_timeout_s=120, ncu_timeout_s=120)
    assert v.category == V.FORBIDDEN_CALL, v.detail
    assert "second process" in v.detail and v.correct is False
    assert v.fingerprint["seconds"] < 100  # no stage waited out its limit
    watch = v.fingerprint.get("gpu_watch") or {}
    assert watch.get("checked") and watch.get("forbidden"), watch


def test_honest_candidates_pass_the_watch_in_every_stage():
    v = _eval(ROOT / "tests" / "kernels" / "triton" / "gemm_tma.py", "triton", SMALL)
    assert v.category == V.OK, v.detail
    watch = v.fingerprint["gpu_watch"]
    assert watch["checked"] and watch["forbidden"] is None and watch["stranger"] is None, watch
    for info in (v.memcheck, v.executed):
        assert (info.get("gpu_watch") or {}).get("forbidden") is None, info.get("gpu_watch")


_PROBE = """
import os, sys, torch
from xlang.profiler.buffers import Mapped, allocate
torch.cuda.init(); torch.empty(1, device="cuda")
s = allocate("A", tuple(int(x) for x in sys.argv[1].split("x")), torch.bfloat16, "cuda")
m = Mapped(s.meta.to_dict(), os.dup(s.fd))
t = m.tensor.view(-1)
t.fill_(1.0); torch.cuda.synchronize()
assert (m.tensor.data_ptr() + s.meta.nbytes) % (2 << 20) == 0  # the last byte is the last mapped byte
assert s.tensor.float().sum().item() == t.numel()
import triton
import triton.language as tl


@triton.jit
def peek(X, off, out):
    tl.store(out, tl.load(X + off).to(tl.float32))


out = torch.empty(1, device="cuda")
peek[(1,)](t, t.numel() if sys.argv[2] == "after" else -1, out)  # the element just outside
torch.cuda.synchronize()  # faults when that byte is unmapped
print("no fault", out.item(), flush=True)
"""


@pytest.mark.parametrize("shape, where, faults", [("2048x1024", "after", True), ("40x56", "after", True),
                                                  ("2048x1024", "before", True), ("40x56", "before", False)])
def test_the_byte_after_a_buffer_is_unmapped(shape, where, faults, tmp_path):
    """The runner's own mapping of a judge's buffer: past the end always faults, before the start only when the
    buffer fills whole granules (else the canary slack is there: a read of it is not seen)."""
    import subprocess
    import sys

    _arch()
    script = tmp_path / "probe.py"
    script.write_text(_PROBE)
    out = subprocess.run([sys.executable, str(script), shape, where], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    text = out.stdout + out.stderr
    if faults:
        assert "no fault" not in text and "illegal memory access" in text, text[-2000:]
    else:
        assert "no fault" in text, text[-2000:]
