"""The CuTe DSL serving experts' compiled functions accept the very call their xlang_entry makes (a real cute.compile
for sm_90a on CPU tensors, the launch replaced by a recorder: tests/kernels/cutedsl/marshal_check.py). The static
build cannot show this (its compiled object is a no-op that accepts anything), and a wrong call would fail only on
the GPU. A call with one scalar left out must fail here. Never launched: no GPU."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed")

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "tests/kernels/cutedsl/marshal_check.py"
CASES = [
    ("attn_prefill_ragged", "B=3,T=300,H=4,HKV=2,D=256"),
    ("attn_decode_paged", "B=3,H=8,HKV=2,D=128,P=16,S=700"),
]


def _check(task, path, sizes):
    return subprocess.run([sys.executable, str(CHECK), task, str(path), sizes], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("task,sizes", CASES, ids=[c[0] for c in CASES])
def test_the_compiled_function_takes_the_entrys_call(task, sizes):
    done = _check(task, ROOT / f"tasks/{task}/solutions/cutedsl_hopper.py", sizes)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "marshalled" in done.stdout


@pytest.mark.slow
def test_a_call_with_an_argument_left_out_fails(tmp_path):
    text = (ROOT / "tasks/attn_decode_paged/solutions/cutedsl_hopper.py").read_text()
    assert "fn(*args, *scalars, stream)" in text
    wrong = tmp_path / "wrong.py"
    wrong.write_text(text.replace("fn(*args, *scalars, stream)", "fn(*args, *scalars[:-1], stream)"))
    done = _check("attn_decode_paged", wrong, CASES[1][1])
    assert done.returncode != 0 and "marshalled" not in done.stdout
    assert "Missing required arguments" in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]
