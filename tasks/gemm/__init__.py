"""gemm: bf16 C = A · Bᵀ with fp32 accumulation (A [M,K], B [N,K], C [M,N], all row-major)."""

from xlang.task import Contract, Task, TensorArg


def reference(inputs, shape):
    # fp32 on the device the inputs live on; TF32 is off so the reference is true fp32.
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    return {"C": inputs["A"].float() @ inputs["B"].float().t()}


def make_inputs(shape, seed, device):
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    M, N, K = shape["M"], shape["N"], shape["K"]
    return {
        "A": torch.randn(M, K, generator=g, device=device).to(torch.bfloat16),
        "B": torch.randn(N, K, generator=g, device=device).to(torch.bfloat16),
    }


def baseline(inputs, shape):
    """cuBLAS through torch, writing into a preallocated C as the candidate does."""
    import torch

    A, B = inputs["A"], inputs["B"]
    C = torch.empty(shape["M"], shape["N"], dtype=torch.bfloat16, device=A.device)
    return lambda: torch.matmul(A, B.t(), out=C)


def check_shape(shape):
    M, N, K = shape["M"], shape["N"], shape["K"]
    if min(M, N, K) < 1:
        raise ValueError("M, N and K must be positive")
    if N % 8 or K % 8:
        raise ValueError("N and K must be multiples of 8 (16-byte aligned rows, as TMA requires)")


def test_shapes_for(shape):
    # Sizes that are not multiples of any usual tile: tails in M, N and K.
    return [{"M": 1000, "N": 776, "K": 520}, {"M": 2056, "N": 3080, "K": 1032}]


TASK = Task(
    name="gemm",
    title="bf16 GEMM C = A·Bᵀ",
    contract=Contract(
        tensors=(
            TensorArg("A", "in", "bf16", ("M", "K")),
            TensorArg("B", "in", "bf16", ("N", "K"), "(C = A @ B.T)"),
            TensorArg("C", "out", "bf16", ("M", "N")),
        ),
        sizes=("M", "N", "K"),
        rules=(
            "Compute C[m, n] = sum_k A[m, k] * B[n, k] with fp32 accumulation, rounded to bf16.\n"
            "Every shape with M >= 1 and N, K positive multiples of 8 must work (tails included):\n"
            "the harness checks the default shape and smaller shapes such as M=1000, N=776, K=520.\n"
            "All tensors are contiguous and 16-byte aligned."
        ),
    ),
    default_shape={"M": 8192, "N": 7168, "K": 5120},
    tolerance={"atol": 1e-2, "rtol": 1e-2},
    flops=lambda s: 2.0 * s["M"] * s["N"] * s["K"],
    min_bytes=lambda s: 2.0 * (s["M"] * s["K"] + s["N"] * s["K"] + s["M"] * s["N"]),
    make_inputs=make_inputs,
    reference=reference,
    baseline=baseline,
    baseline_name="cuBLAS (torch.matmul)",
    test_shapes_for=test_shapes_for,
    check_shape=check_shape,
)
