"""BAD candidate (expected: forbidden_call from the static screen): the entry point calls torch.matmul."""

import torch


def xlang_entry(A, B, C, M, N, K):
    torch.matmul(A, B.t(), out=C)
