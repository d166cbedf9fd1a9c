"""The Gluon attention-backward experts' algorithm, re-enacted on the CPU (tasks/attn_bwd/verify/attn_bwd_gluon_emulate.py).

Gluon has no CPU interpreter (test_gluon_has_no_interpreter shows it), so the experts themselves cannot run here:
the model re-enacts their block loops with each solution's own tile constants and must match the task's reference
at the task's tolerance on fixed and drawn shapes (odd S, S = 1, causal, GQA groups 1-4, every head dim, every
input kind), and fail for each seeded bug (a wrong causal mask, a wrong GQA reduction, an unmasked tail, ...).
The source fragments the model relies on are checked to be in the solution files, so a change to a kernel's
algorithm that the model does not follow fails here. None of this runs the kernels: see tasks/attn_bwd/NOTES_gluon.md.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.attn_bwd.verify import attn_bwd_gluon_emulate as emu
from xlang.task import get_task

ROOT = Path(__file__).resolve().parents[1]
CASES = emu.FIXED_CASES + emu.drawn_cases(8)
# What the model assumes of both kernels, as the solution files spell it.
MODELLED_SOURCE = (
    'mask=in_seq, other=float("inf")) * 1.4426950408889634',  # LSE +inf past S, in log2 units
    "delta = gl.load(Delta + bh.to(gl.int64) * S + offs_m, mask=in_seq, other=0.0)",
    "first_m = start_n  # BN is a multiple of BM",  # causal dK/dV pass starts at the key block's first row
    "n_steps = group * n_q",  # every query head of the GQA group, in one CTA
    "bh = head0 + it // n_q",
    "head0 = (bkv // HKV) * H + (bkv % HKV) * group",
    "if first_m + (it % n_q) * BM < start_n + BN:",  # causal dK/dV: the diagonal band is masked
    "p_t = gl.where(gl.expand_dims(offs_m, 0) >= gl.expand_dims(offs_n, 1), p_t, 0.0)",
    "kv_row = ((bh // H) * HKV + (bh % H) // (H // HKV)) * S",
    "mask_from = gl.minimum(S, start_m)",
    "end_n = gl.minimum(S, start_m + BM)",
    "if (j + 1) * BN > mask_from:",
    "keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(offs_m, 1))",
    "_store_rows(dQ, ",
    "* scale, bh * S + start_m, S - start_m, D, acc_layout)",
    "* scale, bkv * S + start_n, S - start_n, D, acc_layout)",
    "gl.store(Delta + rows, gl.sum(o * do, 1), mask=rows < n_rows)",
    "DP = 64 if D <= 64 else 128",
)


def _shape(case):
    return dict(zip(("B", "H", "HKV", "S", "D"), case[1:6]))


@pytest.fixture(scope="module", params=emu.SOLUTIONS, ids=[p.stem for p in emu.SOLUTIONS])
def solution(request):
    return request.param, emu.solution_constants(request.param)


def test_model_follows_the_solutions_source(solution):
    text = solution[0].read_text()
    missing = [line for line in MODELLED_SOURCE if line not in text]
    assert not missing, f"{solution[0].name} no longer has what the CPU model re-enacts: {missing}"


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-B{c[1]}H{c[2]}KV{c[3]}S{c[4]}D{c[5]}-{c[6]}" for c in CASES])
def test_model_matches_the_reference(solution, case):
    worst = emu.check_case(get_task(case[0]), _shape(case), case[6], solution[1])
    assert max(worst.values()) <= 0, f"worst excess over atol + rtol |ref| per output: {worst}"


@pytest.mark.parametrize("mutation", sorted(emu.MUTATIONS))
def test_a_seeded_bug_fails(solution, mutation):
    worst = [max(emu.check_case(get_task(c[0]), _shape(c), c[6], solution[1], mutation).values())
             for c in emu.FIXED_CASES]
    assert max(worst) > 0, f"{mutation} ({emu.MUTATIONS[mutation]}) passed every case"


# Where a causal or GQA bug must show: a causal case with more than one key; a case with a GQA group; for the kv
# head taken modulo HKV, a group and more than one kv head (h % HKV == h // G when HKV == 1 or G == 1).
FAILS_WHERE = {
    "causal_mask_dropped_in_dkdv": lambda c: c[0].endswith("_causal") and c[4] > 1,
    "gqa_first_head_only": lambda c: c[2] > c[3],
    "gqa_kv_head_modulo": lambda c: c[2] > c[3] > 1,
}


@pytest.mark.parametrize("mutation", sorted(FAILS_WHERE))
def test_causal_and_gqa_bugs_fail_exactly_where_they_live(mutation):
    """Each fails every case that exercises it and passes the others: the check sees the bug itself."""
    consts = emu.solution_constants(emu.SOLUTIONS[0])
    for case in emu.FIXED_CASES:
        failed = max(emu.check_case(get_task(case[0]), _shape(case), case[6], consts, mutation).values()) > 0
        assert failed == FAILS_WHERE[mutation](case), (mutation, case, failed)


def test_gluon_has_no_interpreter(tmp_path):
    """TRITON_INTERPRET=1 covers @triton.jit only: a @gluon.jit launch on CPU tensors still asks for a GPU driver
    (triton 3.6). If this starts passing a value back, the experts could be checked by running them instead."""
    pytest.importorskip("triton.experimental.gluon")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import torch\n"
        "from triton.experimental import gluon\n"
        "from triton.experimental.gluon import language as gl\n"
        "@gluon.jit\n"
        "def k(X, N: gl.constexpr):\n"
        "    offs = gl.arange(0, N, layout=gl.BlockedLayout([1], [32], [1], [0]))\n"
        "    gl.store(X + offs, gl.load(X + offs) * 2)\n"
        "x = torch.ones(32)\n"
        "try:\n"
        "    k[(1,)](x, 32, num_warps=1)\n"
        "    print('ran', float(x.sum()))\n"
        "except Exception as e:\n"
        "    print('refused', type(e).__name__, e)\n")
    proc = subprocess.run([sys.executable, str(probe)], env=dict(os.environ, TRITON_INTERPRET="1"),
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("refused") and "driver" in proc.stdout, proc.stdout
