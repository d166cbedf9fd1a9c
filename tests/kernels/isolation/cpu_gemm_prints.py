# A CPU gemm "candidate" that prints as it works (80 numbered lines on stderr, one on stdout), then computes C
# right: what it printed must reach the stage's result, the verdict, `xlang eval` and the model's feedback.
import sys


def xlang_entry(A, B, C, M, N, K):
    for i in range(80):
        print(f"xlang-stderr-marker line {i}: tile {i % 7} of {M}x{N}", file=sys.stderr)
    print("xlang-stdout-marker done", flush=True)
    C.copy_((A.float() @ B.float().t()).to(C.dtype))
