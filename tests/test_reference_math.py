"""The tasks' fp32 references agree with torch's own math on small CPU shapes, and inputs are never zeros."""

import pytest

torch = pytest.importorskip("torch")

from xlang.task import get_task  # noqa: E402


def _torch_attention(inputs, shape, causal):
    q, k, v = (inputs[n].double().requires_grad_() for n in ("Q", "K", "V"))
    group = shape["H"] // shape["HKV"]
    kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ kk.transpose(-1, -2)) / shape["D"] ** 0.5
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return q, k, v, torch.softmax(s, -1) @ vv, torch.logsumexp(s, -1)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_forward_and_backward_references(causal):
    shape = {"B": 1, "H": 4, "HKV": 2, "S": 37, "D": 64}
    fwd = get_task("attn_fwd_causal" if causal else "attn_fwd")
    inputs = fwd.make_inputs(shape, seed=3, device="cpu")
    ref = fwd.reference(inputs, shape)
    q, k, v, o, lse = _torch_attention(inputs, shape, causal)
    torch.testing.assert_close(ref["O"].double(), o.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ref["LSE"].double(), lse.detach(), atol=1e-5, rtol=1e-5)

    bwd = get_task("attn_bwd_causal" if causal else "attn_bwd")
    binputs = bwd.make_inputs(shape, seed=3, device="cpu")
    grads = bwd.reference(binputs, shape)
    q, k, v, o, _ = _torch_attention(binputs, shape, causal)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), binputs["dO"].double())
    for name, want in (("dQ", dq), ("dK", dk), ("dV", dv)):
        torch.testing.assert_close(grads[name].double(), want, atol=1e-4, rtol=1e-4)


def test_gemm_reference_and_inputs():
    task = get_task("gemm")
    shape = {"M": 24, "N": 16, "K": 40}
    a = task.make_inputs(shape, seed=1, device="cpu")
    b = task.make_inputs(shape, seed=2, device="cpu")
    assert not torch.equal(a["A"], b["A"]) and a["A"].dtype == torch.bfloat16
    assert (a["A"] != 0).float().mean() > 0.99
    ref = task.reference(a, shape)["C"]
    torch.testing.assert_close(ref, a["A"].double().matmul(a["B"].double().t()).float(), atol=1e-4, rtol=1e-5)
    assert task.flops(task.default_shape) == 2 * 8192 * 7168 * 5120
