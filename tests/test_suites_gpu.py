"""Shape suites on a real Hopper GPU (marked gpu and slow: skipped where none answers). Written for the H200 and
never run yet: the Triton GEMM expert over the llama3-8b suite (every shape correct and timed against cuBLAS), and
the same expert broken at M = 1 alone, which only the suite's decode shapes are sure to catch."""

import math

import pytest

from xlang import verdict as V
from xlang.task import get_task

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _arch():
    from test_profiler_gpu import _arch as hopper

    return hopper()


def _expert(arch) -> str:
    solution = get_task("gemm").solution("triton", arch.generation, ".py")
    assert solution is not None
    return solution.text


def _evaluate(source: str, arch, label: str):
    from xlang.profiler.evaluate import EvalOptions, evaluate

    v = evaluate(source, "triton", "gemm", arch, None, EvalOptions(suite="llama3-8b", label=label))
    print(f"\n{label}: {v.category}: {v.detail[:600]}")
    return v


def test_triton_expert_is_correct_and_timed_on_every_llama3_8b_shape():
    arch = _arch()
    v = _evaluate(_expert(arch), arch, "suite-llama3-8b")
    assert v.category == V.OK, v.detail
    suite = v.suite
    shapes = [s["shape"] for s in suite["shapes"]]
    assert len(shapes) == 20 and all(s in v.correctness["shapes"] for s in shapes)  # each one checked
    for s in suite["shapes"]:
        assert s["candidate_ms"] > 0 and s["baseline_ms"] > 0 and s["speedup"] > 0, s
        assert s["candidate"]["reps"] >= 20 and s["tflops"] > 0 and s["gbps"] > 0
    summary = suite["summary"]
    assert summary["timed"] == 20
    assert summary["geomean_speedup"] == pytest.approx(
        math.exp(sum(math.log(s["speedup"]) for s in suite["shapes"]) / 20))
    assert summary["worst"]["speedup"] == min(s["speedup"] for s in suite["shapes"])
    assert v.timing["speedup"] > 0  # the verdict's own shape is timed as before


def test_an_expert_wrong_at_m1_alone_is_incorrect_under_the_suite():
    arch = _arch()
    broken = _expert(arch) + (
        "\n\n_honest_entry = xlang_entry\n\n\n"
        "def xlang_entry(A, B, C, M, N, K):\n"
        "    _honest_entry(A, B, C, M, N, K)\n"
        "    if M == 1:  # a decode-sized call: wrong on purpose\n"
        "        C.zero_()\n")
    v = _evaluate(broken, arch, "suite-wrong-at-m1")
    assert v.category == V.INCORRECT and not v.correct, v.detail
    assert "M=1," in v.detail
    assert not (v.suite or {}).get("summary")  # nothing timed for a candidate that is not correct
