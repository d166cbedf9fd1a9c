"""The Triton experts of the serving attention tasks (tasks/attn_decode_paged/solutions/triton.py,
tasks/attn_prefill_ragged/solutions/triton.py) under Triton's CPU interpreter, on the tasks' own drawn inputs
(shuffled page tables with garbage around them, ragged cu_seqlens), NaN-poisoned outputs, fp32 references and
tolerances. Small shapes: every page size and head dim, GQA groups 1..8, lengths 1 and tails. This checks the math of
the very kernels that compile for the GPU, not their GPU behaviour (never run on a GPU).

As in tests/test_attn_bwd_triton.py, TRITON_INTERPRET=1 must be set before triton is imported: the cases run in one
child process (this file run as a script).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CASES = [
    ("attn_decode_paged", {"B": 3, "H": 4, "HKV": 2, "D": 64, "P": 16, "S": 100}, "normal"),
    ("attn_decode_paged", {"B": 2, "H": 3, "HKV": 1, "D": 128, "P": 1, "S": 37}, "large"),
    ("attn_decode_paged", {"B": 4, "H": 8, "HKV": 1, "D": 64, "P": 64, "S": 150}, "large_v"),
    ("attn_decode_paged", {"B": 2, "H": 10, "HKV": 2, "D": 256, "P": 16, "S": 33}, "normal"),
    ("attn_decode_paged", {"B": 1, "H": 1, "HKV": 1, "D": 64, "P": 64, "S": 1}, "normal"),
    ("attn_prefill_ragged", {"B": 3, "T": 200, "H": 2, "HKV": 1, "D": 128}, "normal"),
    ("attn_prefill_ragged", {"B": 2, "T": 140, "H": 2, "HKV": 2, "D": 256}, "peaked"),
    ("attn_prefill_ragged", {"B": 4, "T": 300, "H": 4, "HKV": 2, "D": 128}, "large_v"),
    ("attn_prefill_ragged", {"B": 1, "T": 1, "H": 2, "HKV": 1, "D": 128}, "large"),
]


def _run_case(task_name, sizes, kind, folder: Path) -> dict:
    """Run the expert on one case: the worst excess over atol + rtol*|ref| (<= 0 passes)."""
    import torch

    from xlang.candidate import allocate_outputs, arguments, load_module
    from xlang.task import get_task

    task = get_task(task_name)
    shape = task.shape(sizes)
    solution = task.solution("triton", "hopper", ".py")
    source = folder / f"{task_name}_{'_'.join(map(str, sizes.values()))}_{kind}.py"
    source.write_text(solution.text)
    module = load_module(source, f"serving_triton_{source.stem}")
    assert module.INTERPRETED
    inputs = task.make_inputs(shape, 3, "cpu", kind)
    outputs = allocate_outputs(task, shape, "cpu")
    module.xlang_entry(*arguments(task, shape, {**inputs, **outputs}))
    result = {}
    for name, expected in task.reference(inputs, shape).items():
        atol, rtol = task.tolerance_for(name, kind)
        got = outputs[name].float()
        result[name] = {"finite": bool(torch.isfinite(got).all()),
                        "excess": ((got - expected).abs() - (atol + rtol * expected.abs())).max().item()}
    return result


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    folder = tmp_path_factory.mktemp("serving_triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    proc = subprocess.run([sys.executable, __file__, str(folder)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{'-'.join(f'{k}{v}' for k, v in c[1].items())}-{c[2]}"
                                             for c in CASES])
def test_expert_matches_reference_in_interpreter(results, case):
    result = results[repr(case)]
    assert "error" not in result, result.get("error")
    for name, r in result.items():
        assert r["finite"], f"{name}: non-finite (unwritten or garbage-reached) elements"
        assert r["excess"] <= 0, f"{name}: worst element exceeds atol + rtol*|ref| by {r['excess']:.4g}"


if __name__ == "__main__":
    import traceback

    from tests.test_attn_bwd_triton import _shim_numpy2_interpreter

    _shim_numpy2_interpreter()
    out = {}
    for case in CASES:
        try:
            out[repr(case)] = _run_case(*case, Path(sys.argv[1]))
        except Exception:  # noqa: BLE001 - reported to the test of that case
            out[repr(case)] = {"error": traceback.format_exc()[-3000:]}
        print(repr(case), out[repr(case)], file=sys.stderr, flush=True)
    print(json.dumps(out))
