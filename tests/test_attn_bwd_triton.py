"""The Triton attention-backward expert (tasks/attn_bwd/solutions/triton.py) under Triton's CPU interpreter.

The expert is taken through the task machinery (Task.solution), so attn_bwd_causal runs the text the harness
gets (CAUSAL = True set by set_constants). Inputs, reference, tolerance and the NaN-poisoned outputs are the
task's own. Small shapes only: every head dim, GQA groups 1, 2 and 4, tails (S = 1, 37, 130), both input
kinds. This checks the math of the very kernels that compile for the GPU, not their GPU behaviour.

Triton picks the interpreter when a function is decorated, its own library functions (tl.sum, ...) included,
so TRITON_INTERPRET=1 must be set before triton is first imported: the cases run in one child process (this
file run as a script), and each test reads its case's result.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (task, B, H, HKV, S, D, input kind)
CASES = [
    ("attn_bwd", 1, 2, 1, 37, 64, "normal"),
    ("attn_bwd", 1, 2, 1, 37, 64, "flat"),
    ("attn_bwd", 1, 4, 2, 130, 96, "normal"),
    ("attn_bwd", 2, 4, 4, 1, 128, "normal"),
    ("attn_bwd_causal", 1, 4, 1, 130, 128, "normal"),
    ("attn_bwd_causal", 1, 4, 2, 130, 96, "flat"),
    ("attn_bwd_causal", 1, 2, 2, 37, 64, "normal"),
]


def _shim_numpy2_interpreter():
    """Triton 3.6's interpreter turns a scalar (a 1-element array) into a loop bound with int(array), which
    NumPy 2 refuses; .item() is the same value."""
    import triton.runtime.interpreter as interp

    original = interp._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    interp._patch_lang_tensor = patch_lang_tensor


def _run_case(task_name, B, H, HKV, S, D, kind, folder: Path) -> dict:
    """Run the expert on one case; for each output, the worst excess over atol + rtol*|ref| (<= 0 passes)."""
    import torch

    from xlang.candidate import allocate_outputs, arguments, load_module
    from xlang.task import get_task

    task = get_task(task_name)
    solution = task.solution("triton", "hopper", ".py")
    assert solution is not None and solution.path.name == "triton.py"
    assert ("\nCAUSAL = True\n" in solution.text) == task_name.endswith("_causal")
    source = folder / f"{task_name}_{B}_{H}_{HKV}_{S}_{D}_{kind}.py"
    source.write_text(solution.text)
    module = load_module(source, f"attn_bwd_triton_{source.stem}")
    assert module.INTERPRETED

    shape = {"B": B, "H": H, "HKV": HKV, "S": S, "D": D}
    inputs = task.make_inputs(shape, 3, "cpu", kind)
    outputs = allocate_outputs(task, shape, "cpu")
    module.xlang_entry(*arguments(task, shape, {**inputs, **outputs}))

    result = {}
    for name, expected in task.reference(inputs, shape).items():
        atol, rtol = task.tolerance_for(name, kind)
        got = outputs[name].float()
        excess = ((got - expected).abs() - (atol + rtol * expected.abs())).max().item()
        result[name] = {"finite": bool(torch.isfinite(got).all()), "excess": excess,
                        "max_err": (got - expected).abs().max().item()}
    return result


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    folder = tmp_path_factory.mktemp("attn_bwd_triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    proc = subprocess.run([sys.executable, __file__, str(folder)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-B{c[1]}H{c[2]}KV{c[3]}S{c[4]}D{c[5]}-{c[6]}" for c in CASES])
def test_expert_matches_reference_in_interpreter(results, case):
    result = results[repr(case)]
    assert "error" not in result, result.get("error")
    for name, r in result.items():
        assert r["finite"], f"{name}: non-finite (unwritten) elements"
        assert r["excess"] <= 0, f"{name}: worst element exceeds atol + rtol*|ref| by {r['excess']:.4g}"


if __name__ == "__main__":
    import traceback

    _shim_numpy2_interpreter()
    out = {}
    for case in CASES:
        try:
            out[repr(case)] = _run_case(*case, Path(sys.argv[1]))
        except Exception:  # noqa: BLE001 - reported to the test of that case
            out[repr(case)] = {"error": traceback.format_exc()[-3000:]}
        print(repr(case), out[repr(case)], file=sys.stderr, flush=True)
    print(json.dumps(out))
