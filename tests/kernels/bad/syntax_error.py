"""BAD candidate (expected: compile_error): not valid Python."""

def xlang_entry(A, B, C, M, N, K)
    pass
