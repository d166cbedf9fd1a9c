"""The Gluon Hopper attention-backward expert on a real Hopper GPU (marked gpu: skipped where none answers).
NEVER RUN YET: written in a session without a GPU (2026-12-02); what it asserts is what the expert is meant to do.

The expert (the text the harness gets: attn_bwd_causal through set_constants) runs in this process on the task's
own inputs into NaN-poisoned outputs, on shapes with tails, GQA and every head dim; each output is within the
task's tolerance of the fp32 reference, and the CPU model (tasks/attn_bwd/verify/attn_bwd_gluon_emulate.py) is
within the same tolerance of the kernel, so the model the CPU tests check is the kernel that runs. A second call
gives the same bits (no atomics: the GQA sum is one CTA's, in a fixed order). The full verdict (jail, memcheck,
ncu, timing) is scripts/device/h200_verdicts.sh PHASE=new.
"""

import pytest

pytestmark = pytest.mark.gpu

CASES = [  # (task, B, H, HKV, S, D, input kind)
    ("attn_bwd", 1, 4, 2, 130, 96, "normal"),
    ("attn_bwd", 2, 8, 8, 1000, 128, "flat"),
    ("attn_bwd", 1, 8, 2, 257, 64, "scaled"),
    ("attn_bwd_causal", 1, 4, 1, 300, 128, "normal"),
    ("attn_bwd_causal", 2, 4, 2, 77, 96, "flat"),
    ("attn_bwd_causal", 1, 2, 2, 1, 64, "normal"),
]


def _hopper():
    from xlang.profiler.gpu import gpus

    if not any(g["compute_capability"] == 90 for g in gpus()):
        pytest.skip("needs a Hopper (sm_90) GPU")


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-B{c[1]}H{c[2]}KV{c[3]}S{c[4]}D{c[5]}-{c[6]}" for c in CASES])
def test_expert_matches_reference_and_model(case, tmp_path):
    import torch

    from tasks.attn_bwd.verify import attn_bwd_gluon_emulate as emu
    from xlang.candidate import allocate_outputs, arguments, load_module
    from xlang.task import get_task

    _hopper()
    task = get_task(case[0])
    solution = task.solution("gluon", "hopper", ".py")
    source = tmp_path / "gluon_hopper_bwd.py"
    source.write_text(solution.text)
    module = load_module(source, f"gluon_bwd_{tmp_path.name}")
    shape = dict(zip(("B", "H", "HKV", "S", "D"), case[1:6]))
    inputs = task.make_inputs(shape, 5, "cuda", case[6])
    runs = []
    for _ in range(2):
        outputs = allocate_outputs(task, shape, "cuda")
        module.xlang_entry(*arguments(task, shape, {**inputs, **outputs}))
        torch.cuda.synchronize()
        runs.append(outputs)
    cpu_inputs = {k: v.cpu() for k, v in inputs.items()}
    model = allocate_outputs(task, shape, "cpu")
    emu.entry(emu.solution_constants(emu.SOLUTIONS[0]), task.name.endswith("_causal"))(
        *arguments(task, shape, {**cpu_inputs, **model}))
    reference = task.reference(cpu_inputs, shape)
    for name, want in reference.items():
        atol, rtol = task.tolerance_for(name, case[6])
        got = runs[0][name].float().cpu()
        assert torch.isfinite(got).all(), f"{name}: unwritten or non-finite elements"
        assert ((got - want).abs() <= atol + rtol * want.abs()).all(), f"{name}: {(got - want).abs().max()}"
        assert ((got - model[name].float()).abs() <= atol + rtol * want.abs()).all(), f"{name}: kernel != model"
        assert torch.equal(runs[0][name], runs[1][name]), f"{name}: two calls differ"
