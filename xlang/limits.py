"""The limits of a candidate's child (issue 46): resource limits and a seccomp filter, set by a small exec wrapper
that the jail puts right before the candidate's command (sandbox.Jail.command), so they bind the child and what
it starts, never the judge.

    python -I -S <runner package>/xlang/limits.py --as BYTES --data BYTES --nproc N --fsize BYTES --seccomp HEX -- CMD

The wrapper sets each limit given (soft = hard, so the child cannot raise it again), installs the seccomp filter
(no new privileges first, which the filter needs), then execs CMD: the same process, so a tool stage's tool keeps
the pid the judge watches. Run with -I -S it imports only the standard library; anything it cannot set stops it
(exit 126): a child never runs with less than it was given.

The filter (keyring_filter) makes add_key, request_key and keyctl fail with EPERM: a build or stage cannot leave a
key in its uid's kernel keyrings (the user and persistent keyrings outlive the process, the persistent one for
days) for a later one to read, nor read one. Everything else is allowed. It is given by this wrapper, not by
bubblewrap's --seccomp FD, so that the same filter binds a child at every isolation level (a tool stage's 'uid'
rung runs without bubblewrap) and no descriptor has to travel through every caller of the jail.

This file imports only the standard library at its top: it runs as a script inside the jail, before any of xlang
could be imported there.
"""

from __future__ import annotations

import os
import struct
import sys

# ---- the seccomp filter: classic BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]} -------

_NR, _ARCH = 0, 4  # byte offsets of the syscall number and the audit arch in struct seccomp_data
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = the 32-bit word at offset k
_JEQ, _JGE = 0x15, 0x35  # BPF_JMP | BPF_JEQ / BPF_JGE | BPF_K: compare A with k, skip jt or jf instructions
_RET = 0x06  # BPF_RET | BPF_K: return k
RET_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW (include/uapi/linux/seccomp.h)
RET_EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
AUDIT_ARCH_X86_64 = 0xC000003E  # EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE (include/uapi/linux/audit.h)
AUDIT_ARCH_AARCH64 = 0xC00000B7  # EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
X32_SYSCALL_BIT = 0x40000000  # the x32 ABI's syscalls on x86_64 carry it (arch/x86/include/uapi/asm/unistd.h)
# The keyring syscalls, (add_key, request_key, keyctl), by audit arch, from the kernel's syscall tables:
# arch/x86/entry/syscalls/syscall_64.tbl (248, 249, 250) and include/uapi/asm-generic/unistd.h, which arm64
# uses (__NR_add_key 217, __NR_request_key 218, __NR_keyctl 219).
KEYRING_SYSCALLS = {AUDIT_ARCH_X86_64: (248, 249, 250), AUDIT_ARCH_AARCH64: (217, 218, 219)}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)  # struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}


def keyring_filter() -> bytes:
    """The filter's program (struct sock_filter[]), laid out as:

        A = arch
        for each arch of KEYRING_SYSCALLS:
            if A != arch: skip this arch's block
            A = nr
            (x86_64) if A >= X32_SYSCALL_BIT: EPERM      the x32 ABI: nothing of ours uses it
            if A == add_key / request_key / keyctl: EPERM
            ALLOW
        EPERM                                           another ABI (i386 on x86_64, arm32 on arm64): refused
        EPERM (the target of every jump to "deny": the last instruction)"""
    blocks = []
    for arch, numbers in KEYRING_SYSCALLS.items():
        checks = [("ge", X32_SYSCALL_BIT)] if arch == AUDIT_ARCH_X86_64 else []
        checks += [("eq", n) for n in numbers]
        blocks.append((arch, checks))
    size = 1 + sum(1 + 1 + len(checks) + 1 for _, checks in blocks) + 2
    prog = [_insn(_LD_W_ABS, _ARCH)]
    for arch, checks in blocks:
        prog.append(_insn(_JEQ, arch, 0, 1 + len(checks) + 1))  # not this arch: over its block
        prog.append(_insn(_LD_W_ABS, _NR))
        for how, k in checks:  # jump offsets count from the next instruction; the last one is the deny
            prog.append(_insn(_JGE if how == "ge" else _JEQ, k, size - 1 - (len(prog) + 1), 0))
        prog.append(_insn(_RET, RET_ALLOW))
    prog += [_insn(_RET, RET_EPERM), _insn(_RET, RET_EPERM)]
    assert len(prog) == size and size - 1 < 256  # one-byte jump offsets
    return b"".join(prog)


# ---- the wrapper ----------------------------------------------------------------------------------------

_RLIMITS = {"--as": "RLIMIT_AS", "--data": "RLIMIT_DATA", "--nproc": "RLIMIT_NPROC", "--fsize": "RLIMIT_FSIZE"}


def wrapper_args(script: str, limits: dict[str, int], seccomp: bytes | None) -> list[str]:
    """The wrapper's command line (before `--` and the child's command): `limits` maps _RLIMITS' options to
    values; `script` is this file as the jail shows it (the runner package's copy)."""
    args = [sys.executable, "-I", "-S", script]
    for option, value in limits.items():
        if option not in _RLIMITS:
            raise ValueError(f"unknown limit {option}")
        args += [option, str(int(value))]
    if seccomp:
        args += ["--seccomp", seccomp.hex()]
    return args + ["--"]


def _install_seccomp(prog: bytes) -> None:
    import ctypes

    class SockFprog(ctypes.Structure):  # struct sock_fprog {unsigned short len; struct sock_filter *filter}
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(prog, len(prog))
    fprog = SockFprog(len(prog) // 8, ctypes.addressof(buffer))
    # PR_SET_NO_NEW_PRIVS (38): required to install a filter without CAP_SYS_ADMIN (setpriv set it already)
    if libc.prctl(38, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    # PR_SET_SECCOMP (22), SECCOMP_MODE_FILTER (2)
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def main(argv: list[str]) -> None:
    import resource

    try:
        cut = argv.index("--")
        options, cmd = argv[:cut], argv[cut + 1:]
        if not cmd or len(options) % 2:
            raise ValueError("usage: limits.py [--as|--data|--nproc|--fsize N]... [--seccomp HEX] -- CMD...")
        for option, value in zip(options[::2], options[1::2]):
            if option == "--seccomp":
                _install_seccomp(bytes.fromhex(value))
            else:
                limit = getattr(resource, _RLIMITS[option])
                resource.setrlimit(limit, (int(value), int(value)))
    except (ValueError, KeyError, OSError) as e:
        print(f"xlang limits: cannot set the child's limits ({e}): not started", file=sys.stderr)
        os._exit(126)
    import signal

    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them, and exec would pass that on: the defaults
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        print(f"xlang limits: cannot run {cmd[0]}: {e}", file=sys.stderr)
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
