"""Static (no-GPU) builds of the CuTe DSL test kernels, checked by SASS opcodes.

Each build runs in its own subprocess because build_static patches cutlass
process-wide. Skipped when nvidia-cutlass-dsl is not installed; the SASS
checks are skipped when no cuobjdump is found.
"""

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="nvidia-cutlass-dsl not installed"
)


def _cuobjdump():
    exe = shutil.which("cuobjdump")
    if exe:
        return exe
    for site in sys.path:
        for pat in ("nvidia/cu13/bin/cuobjdump", "nvidia/cuda_cuobjdump/bin/cuobjdump",
                    "triton/backends/nvidia/bin/cuobjdump"):
            hits = glob.glob(os.path.join(site, pat))
            if hits:
                return hits[0]
    return None


def _build(source, arch, out, mnk="256,256,256"):
    proc = subprocess.run(
        [sys.executable, "-m", "backends.cutedsl.static_build", source, "--arch", arch,
         "--out", str(out), "--mnk", mnk],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON from static_build:\n{proc.stdout}\n{proc.stderr}")


def _opcodes(cubin):
    exe = _cuobjdump()
    if exe is None:
        pytest.skip("cuobjdump not found")
    sass = subprocess.run([exe, "-sass", cubin], capture_output=True, text=True).stdout
    ops = {}
    for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass):
        ops[m.group(1)] = ops.get(m.group(1), 0) + 1
    return ops


CASES = [
    ("hopper_tma_wgmma.py", "sm_90a", {"HGMMA", "UTMALDG"}, {"UTCHMMA", "LDTM"}),
    ("blackwell_tma_tcgen05.py", "sm_100a", {"UTCHMMA", "UTMALDG", "LDTM"}, {"HGMMA"}),
    ("fma_only.py", "sm_90a", {"LDG", "STG"}, {"HGMMA", "UTMALDG", "UTCHMMA", "LDTM"}),
    ("fma_only.py", "sm_100a", {"LDG", "STG"}, {"HGMMA", "UTMALDG", "UTCHMMA", "LDTM"}),
]


@pytest.mark.parametrize("name,arch,must,must_not", CASES)
def test_kernel_builds_with_expected_sass(tmp_path, name, arch, must, must_not):
    res = _build(os.path.join(HERE, name), arch, tmp_path)
    assert res["ok"], res
    assert len(res["compiled"]) == 1
    rec = res["compiled"][0]
    assert rec["kernels"] and os.path.exists(rec["ptx"]) and os.path.exists(rec["cubin"][0])
    ops = _opcodes(rec["cubin"][0])
    assert must <= set(ops), ops
    assert not (must_not & set(ops)), ops


def _write(tmp_path, body):
    p = tmp_path / "cand.py"
    p.write_text(body)
    return str(p)


_JIT = '''
import cutlass, cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack

@cute.kernel
def k(a: cute.Tensor):
    t, _, _ = cute.arch.thread_idx()
    a[t] = a[t] + a[t]

@cute.jit
def host(a: cute.Tensor):
    k(a).launch(grid=(1, 1, 1), block=(128, 1, 1))
'''


def test_direct_jit_call_is_reported(tmp_path):
    src = _write(tmp_path, _JIT + "\ndef xlang_entry(A, B, C, M, N, K):\n    host(from_dlpack(C))\n")
    res = _build(src, "sm_90a", tmp_path / "out")
    assert not res["ok"] and res["error_kind"] == "direct_jit_call", res


def test_nothing_compiled_is_reported(tmp_path):
    src = _write(tmp_path, "def xlang_entry(A, B, C, M, N, K):\n    C.zero_()\n")
    res = _build(src, "sm_90a", tmp_path / "out")
    assert not res["ok"] and res["error_kind"] == "nothing_compiled", res


def test_compile_error_is_trimmed_and_located(tmp_path):
    body = _JIT.replace("a[t] + a[t]", "a[t] + not_defined")
    body += "\ndef xlang_entry(A, B, C, M, N, K):\n    cute.compile(host, from_dlpack(C))(from_dlpack(C))\n"
    res = _build(_write(tmp_path, body), "sm_90a", tmp_path / "out")
    assert not res["ok"] and res["error_kind"] == "compile_error", res
    assert "not_defined" in res["error"] and "\x1b[" not in res["error"]
    assert res["where"].startswith("cand.py:")


def test_candidate_options_are_kept_but_arch_is_ours(tmp_path):
    body = _JIT + ('\ndef xlang_entry(A, B, C, M, N, K):\n'
                   '    f = cute.compile(host, from_dlpack(C), options="--opt-level 2 --gpu-arch sm_80")\n'
                   '    f(from_dlpack(C))\n')
    res = _build(_write(tmp_path, body), "sm_100a", tmp_path / "out")
    assert res["ok"], res
    opts = res["compiled"][0]["options"]
    assert "--opt-level 2" in opts and "sm_80" not in opts and "--gpu-arch sm_100a" in opts
    assert res["compiled"][0]["ptx"].endswith(".sm_100a.ptx")
