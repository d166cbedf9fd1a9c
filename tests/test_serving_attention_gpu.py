"""The serving attention tasks on a real Hopper GPU (marked gpu: skipped where none answers).

Quick (well under a minute on an H200 once FlashInfer's kernel is compiled; `-m "gpu and not slow"`):
- The vendor baselines run on the task's own inputs and compute the task: decode's (torch SDPA over the pages it
  gathers) and prefill's (FA2's varlen forward through torch, on a drawn batch that holds a 1-token sequence, which
  cuDNN refuses) are within the task's tolerance of the fp32 reference; the prefill fallback (per sequence: cuDNN,
  and SDPA's other backends for a 1-token sequence) too, called directly.
- decode's peer, FlashInfer's BatchDecodeWithPagedKVCacheWrapper, against the reference where flashinfer imports
  (scripts/serving_on_gpu/ carries it; skipped with the reason where not); its first call JIT-compiles (~1 min).
Slow (marked slow, a full verdict each, ~1 min apiece): each expert gets `ok` at a reduced shape, timed against
the baseline the verdict names (the CuTe DSL ones only where the call carries nvidia-cutlass-dsl).
"""

from pathlib import Path

import pytest

from xlang import verdict as V

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent


def _arch():
    from xlang.profiler.gpu import arch_for_gpu, gpus

    for g in gpus():
        if g["compute_capability"] == 90:
            return arch_for_gpu(g)
    pytest.skip("needs a Hopper (sm_90) GPU")


def _close(task, got, inputs, shape):
    """got within the task's tolerance of the fp32 reference, per element (the judge's rule for `out`)."""
    import torch

    torch.cuda.synchronize()
    want = task.reference(inputs, shape)["out"]
    got = got.reshape(want.shape).float()
    atol, rtol = task.tolerance_for("out")
    bad = ~((got - want).abs() <= atol + rtol * want.abs())
    assert not bool(bad.any()), f"{int(bad.sum())} of {bad.numel()} outside; max abs err {(got - want).abs().max()}"


DECODE_SIZES = [{"P": 16, "B": 16, "S": 2048}, {"P": 1, "B": 8, "S": 1000}, {"P": 64, "D": 256, "B": 8, "S": 3000}]


@pytest.mark.parametrize("sizes", DECODE_SIZES)
def test_decode_baseline_computes_the_task(sizes):
    from xlang.task import get_task

    _arch()
    task = get_task("attn_decode_paged")
    shape = task.shape(sizes)
    inputs = task.make_inputs(shape, 7, "cuda")
    _close(task, task.baseline(inputs, {k: shape[k] for k in task.contract.sizes})(), inputs, shape)


# Two JIT builds in all (each ~1 min): FlashInfer's tensor-core path at D 128 (G = 4, 4, 5) and its CUDA-core
# decode (G = 2)
@pytest.mark.parametrize("sizes", DECODE_SIZES[:2] + [{"H": 40, "HKV": 8, "B": 4, "S": 500},
                                                      {"H": 8, "HKV": 4, "P": 64, "B": 8, "S": 3000}])
def test_decode_flashinfer_peer_computes_the_task(sizes):
    import time

    from xlang.task import get_task

    _arch()
    task = get_task("attn_decode_paged")
    (peer,) = task.peers
    why = peer.missing()
    if why:
        pytest.skip(f"{why}: carry it with scripts/serving_on_gpu/pack.sh (.flashinfer) and unpack.sh")
    shape = task.shape(sizes)
    inputs = task.make_inputs(shape, 8, "cuda")
    t0 = time.monotonic()
    call = peer.call(inputs, {k: shape[k] for k in task.contract.sizes})  # plan(): the JIT compiles here
    out = call()
    print(f"\nFlashInfer decode {sizes}: plan + first call {time.monotonic() - t0:.1f} s")
    _close(task, out, inputs, shape)


def test_prefill_baseline_computes_the_task_on_a_batch_with_a_one_token_sequence():
    from tasks.attn_prefill_ragged import _per_sequence
    from xlang.task import get_task

    _arch()
    task = get_task("attn_prefill_ragged")
    for sizes in ({"B": 6, "T": 4000, "H": 8, "HKV": 2}, {"B": 3, "T": 1500, "H": 4, "HKV": 1, "D": 256}):
        shape = task.shape(sizes)
        inputs = task.make_inputs(shape, 7, "cuda")
        assert 1 in (inputs["cu_seqlens"][1:] - inputs["cu_seqlens"][:-1]).tolist()
        assert task.baseline_label(shape).startswith("FA2 varlen forward")  # an H100/H200 takes every drawn shape
        _close(task, task.baseline(inputs, {k: shape[k] for k in task.contract.sizes})(), inputs, shape)
        if shape["D"] == 128:  # cuDNN's D = 256 on sm90 needs cuDNN > 9.22 (sdp_utils.cpp): the fallback is for
            # other GPUs; called directly here: per sequence, cuDNN, and SDPA's others for the 1-token one
            _close(task, _per_sequence(inputs, {k: shape[k] for k in task.contract.sizes})(), inputs, shape)


@pytest.mark.slow
@pytest.mark.parametrize("task_name, sizes, families", [
    ("attn_decode_paged", "B=16,S=2048", ("cp_async",)),
    ("attn_prefill_ragged", "B=4,T=4096", ("wgmma", "tma")),
])
def test_triton_expert_full_verdict(task_name, sizes, families, tmp_path):
    from xlang.profiler.evaluate import EvalOptions, evaluate
    from xlang.task import get_task, parse_shape

    task = get_task(task_name)
    source = tmp_path / "triton_expert.py"
    source.write_text(task.solution("triton", "hopper", ".py").text)
    v = evaluate(source, "triton", task_name, _arch(), task.shape(parse_shape(sizes)),
                 EvalOptions(label=f"{task_name}-expert"))
    print(f"\n{task_name}: {v.category}: {v.detail[:600]}")
    assert v.category == V.OK, v.detail
    assert v.correct and v.census_ok and v.executed_ok
    assert all(v.executed["families"][f] > 0 for f in families), v.executed["families"]
    assert v.timing["baseline_name"] and v.timing["speedup"] > 0 and not v.timing.get("baseline_error")


@pytest.mark.slow
@pytest.mark.parametrize("sizes", ["B=16,S=2048", "B=64,S=300,P=1,D=64,H=8,HKV=8", "B=2,S=9000,P=64,D=256,H=16,HKV=2"])
def test_cuda_ptx_decode_expert_full_verdict(sizes, tmp_path):
    from xlang.profiler.evaluate import EvalOptions, evaluate
    from xlang.task import get_task, parse_shape

    task = get_task("attn_decode_paged")
    source = tmp_path / "cuda_ptx_expert.cu"
    source.write_text(task.solution("cuda_ptx", "hopper", ".cu").text)
    v = evaluate(source, "cuda_ptx", task.name, _arch(), task.shape(parse_shape(sizes)),
                 EvalOptions(label="attn_decode_paged-cuda_ptx-expert"))
    print(f"\nattn_decode_paged cuda_ptx {sizes}: {v.category}: {v.detail[:600]}")
    assert v.category == V.OK, v.detail
    assert v.correct and v.census_ok and v.executed_ok
    assert all(v.executed["families"].get(f, 0) > 0 for f in ("cp_async", "mma_sync")), v.executed["families"]
    assert v.timing["baseline_name"] and v.timing["speedup"] > 0 and not v.timing.get("baseline_error")


@pytest.mark.slow
@pytest.mark.parametrize("sizes", ["B=4,T=4096", "B=3,T=3000,D=256,H=8,HKV=2"])
def test_cuda_ptx_prefill_expert_full_verdict(sizes, tmp_path):
    from xlang.profiler.evaluate import EvalOptions, evaluate
    from xlang.task import get_task, parse_shape

    task = get_task("attn_prefill_ragged")
    source = tmp_path / "cuda_ptx_expert.cu"
    source.write_text(task.solution("cuda_ptx", "hopper", ".cu").text)
    v = evaluate(source, "cuda_ptx", task.name, _arch(), task.shape(parse_shape(sizes)),
                 EvalOptions(label="attn_prefill_ragged-cuda_ptx-expert"))
    print(f"\nattn_prefill_ragged cuda_ptx {sizes}: {v.category}: {v.detail[:600]}")
    assert v.category == V.OK, v.detail
    assert v.correct and v.census_ok and v.executed_ok
    assert all(v.executed["families"].get(f, 0) > 0 for f in ("wgmma", "tma")), v.executed["families"]
    assert v.timing["baseline_name"] and v.timing["speedup"] > 0 and not v.timing.get("baseline_error")


@pytest.mark.slow
@pytest.mark.parametrize("sizes", ["B=4,T=4096", "B=3,T=3000,D=256,H=8,HKV=2"])
def test_cutedsl_prefill_expert_full_verdict(sizes, tmp_path):
    pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not on this machine (carry .cutedsl)")
    from xlang.profiler.evaluate import EvalOptions, evaluate
    from xlang.task import get_task, parse_shape

    task = get_task("attn_prefill_ragged")
    source = tmp_path / "cutedsl_expert.py"
    source.write_text(task.solution("cutedsl", "hopper", ".py").text)
    v = evaluate(source, "cutedsl", task.name, _arch(), task.shape(parse_shape(sizes)),
                 EvalOptions(label="attn_prefill_ragged-cutedsl-expert"))
    print(f"\nattn_prefill_ragged cutedsl {sizes}: {v.category}: {v.detail[:600]}")
    assert v.category == V.OK, v.detail
    assert v.correct and v.census_ok and v.executed_ok
    assert all(v.executed["families"].get(f, 0) > 0 for f in ("wgmma", "tma")), v.executed["families"]
    assert v.timing["baseline_name"] and v.timing["speedup"] > 0 and not v.timing.get("baseline_error")


@pytest.mark.slow
@pytest.mark.parametrize("sizes", ["B=16,S=2048", "B=64,S=300,P=1,D=64,H=8,HKV=8", "B=2,S=9000,P=64,D=256,H=16,HKV=2"])
def test_cutedsl_decode_expert_full_verdict(sizes, tmp_path):
    pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not on this machine (carry .cutedsl)")
    from xlang.profiler.evaluate import EvalOptions, evaluate
    from xlang.task import get_task, parse_shape

    task = get_task("attn_decode_paged")
    source = tmp_path / "cutedsl_expert.py"
    source.write_text(task.solution("cutedsl", "hopper", ".py").text)
    v = evaluate(source, "cutedsl", task.name, _arch(), task.shape(parse_shape(sizes)),
                 EvalOptions(label="attn_decode_paged-cutedsl-expert"))
    print(f"\nattn_decode_paged cutedsl {sizes}: {v.category}: {v.detail[:600]}")
    assert v.category == V.OK, v.detail
    assert v.correct and v.census_ok and v.executed_ok
    assert v.executed["families"].get("cp_async", 0) > 0, v.executed["families"]
    assert v.timing["baseline_name"] and v.timing["speedup"] > 0 and not v.timing.get("baseline_error")
