# Hostile (CPU stand-in for an out-of-bounds kernel): computes the right C, then touches one element outside a
# buffer the harness passed, as $XLANG_TEST_OOB says: "<read|write>-<after|before>:<A|B|C>" (after: the element
# just past the end; before: the element just before the start). Raw addresses through ctypes, as a kernel has.
import ctypes
import os


def xlang_entry(A, B, C, M, N, K):
    C.copy_((A.float() @ B.float().t()).to(C.dtype))
    how, name = os.environ["XLANG_TEST_OOB"].split(":")
    t = {"A": A, "B": B, "C": C}[name]
    size = t.element_size()
    addr = t.data_ptr() + t.numel() * size if how.endswith("after") else t.data_ptr() - size
    if how.startswith("read"):
        ctypes.string_at(addr, size)
    else:
        ctypes.memmove(addr, b"\0" * size, size)
