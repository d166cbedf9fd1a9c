"""The hostile cases of the new task families (tests/kernels/hostile: fp8_scale_once_per_row.py for
gemm_fp8_blockscale's scale factors, nvfp4_scales_as_mx.py for gemm_nvfp4's, decode_contiguous_pages.py and
decode_whole_last_page.py for attn_decode_paged's page tables and lengths, prefill_aligned_key_tiles.py for
attn_prefill_ragged's sequence bounds) fail the task's own comparison under Triton's CPU interpreter, on the task's
drawn inputs, in every case tried but the input kinds a case names (which cannot separate it): the inputs are what
catches them, before any GPU stage (where the hostile corpus run judges them: benchmarks/hostile_corpus_run.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_fp8_experts import INTERPRETER_SHIM

from xlang.task import get_task

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "kernels" / "hostile"

# In a child: TRITON_INTERPRET is read when triton.jit decorates; the numpy shim is tests/test_fp8_experts.py's.
_CHILD = INTERPRETER_SHIM + r'''
import json
from xlang.candidate import allocate_outputs, arguments, load_module
from xlang.profiler.judge.verify import compare_output
from xlang.task import get_task

task = get_task(sys.argv[2])
if task.name == "gemm_nvfp4":  # Triton 3.6's interpreter has no tl.dot_scaled: the task's CPU model supplies it
    sys.path.insert(0, "tasks/gemm_nvfp4/verify")
    __import__("triton_blackwell_emulate").install()
module = load_module(sys.argv[1])
out = []
for sizes in json.loads(sys.argv[3]):
    shape = task.shape(sizes)
    for kind in task.input_kinds:
        inputs = task.make_inputs(shape, 7, "cpu", kind)
        outputs = allocate_outputs(task, shape, "cpu")
        module.xlang_entry(*arguments(task, shape, {**inputs, **outputs}))
        failed = []
        for name, expected in task.reference(inputs, shape).items():
            atol, rtol = task.tolerance_for(name, kind)
            stats = compare_output(name, outputs[name], expected, atol=atol, rtol=rtol)
            failed += [name] if "failure" in stats else []
        out.append({"shape": sizes, "kind": kind, "failed": failed})
print(json.dumps(out))
'''

# (file, task, shapes, the input kinds it may pass and why): every other drawn input must fail.
CASES = [
    ("fp8_scale_once_per_row.py", "gemm_fp8_blockscale", [{"M": 130, "N": 144, "K": 256}, {"M": 7, "N": 272, "K": 384}],
     {}),
    ("decode_contiguous_pages.py", "attn_decode_paged", [{"B": 3, "H": 4, "HKV": 2, "D": 64, "P": 16, "S": 100},
                                                         {"B": 2, "H": 3, "HKV": 1, "D": 128, "P": 1, "S": 37}], {}),
    ("decode_whole_last_page.py", "attn_decode_paged", [{"B": 3, "H": 4, "HKV": 2, "D": 64, "P": 16, "S": 100},
                                                        {"B": 2, "H": 6, "HKV": 3, "D": 128, "P": 64, "S": 37}], {}),
    ("prefill_aligned_key_tiles.py", "attn_prefill_ragged", [{"B": 3, "T": 300, "H": 2, "HKV": 1, "D": 128},
                                                             {"B": 5, "T": 257, "H": 4, "HKV": 2, "D": 128}],
     {"peaked": "one dominant key per row: the previous sequence's keys it adds carry no weight"}),
    ("nvfp4_scales_as_mx.py", "gemm_nvfp4", [{"M": 130, "N": 144, "K": 256}, {"M": 7, "N": 272, "K": 384}], {}),
]


@pytest.mark.slow
@pytest.mark.parametrize("file, task, shapes, may_pass", CASES, ids=[c[0] for c in CASES])
def test_the_hostile_case_fails_every_drawn_input_under_the_interpreter(file, task, shapes, may_pass, tmp_path):
    pytest.importorskip("triton")
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script), str(HOSTILE / file), task, json.dumps(shapes)],
                          capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cases = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(cases) == len(shapes) * len(get_task(task).input_kinds), cases
    assert all(c["failed"] for c in cases if c["kind"] not in may_pass), cases
    for sizes in shapes:  # and the verdict: at least one trial of every shape fails
        assert any(c["failed"] for c in cases if c["shape"] == sizes), (sizes, cases)
