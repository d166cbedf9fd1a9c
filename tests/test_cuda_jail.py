"""The CUDA build's jail and the limits of every jailed child (issue 46), on the CPU: nvcc and all it runs build in
the jail of the Python builds, as a fresh uid, seeing only the toolkit, its own folder and the judge's copy of the
template headers; each build has a uid of its own and no keyring; every child has memory, process and file-size
limits; `xlang eval` leaves nothing of what a candidate wrote.

Hostile .cu candidates here are two-liners written in the test (an #include, an .incbin); the Triton ones are the
GEMM expert with something done at import first."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import re
import resource
import shutil
import site
import subprocess
import sys
import tempfile
import time
import uuid
from importlib import metadata
from pathlib import Path

import pytest

from xlang import build_cache, limits, resources, sandbox
from xlang.archs import get_arch
from xlang.backend import build_candidate, get_backend
from xlang.census import disassemble
from xlang.children import run_child
from xlang.task import get_task

REPO = resources.root()
EXPERT = "tasks/gemm/solutions/cuda_ptx_hopper.cu"
SHAPE = {"M": 256, "N": 256, "K": 256}
ENTRY = '// extern "C" void xlang_entry(\n'  # the entry check reads the text: a comment passes it, as in the issue

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
needs_jail = pytest.mark.skipif(sandbox.level() != "bwrap+uid", reason="needs bubblewrap and root (bwrap+uid)")


def _cuda(source: str, workdir: Path, arch: str = "h100", timeout_s: float | None = None):
    return build_candidate(source, "cuda_ptx", get_task("gemm"), get_arch(arch), SHAPE, workdir=workdir,
                           cache=False, timeout_s=timeout_s)


def _expert_paths() -> list[Path]:
    """Every absolute path of the expert a judge's machine has: the checkout's, an editable install's project
    folder, and a copy inside a site folder (a wheel install puts tasks/ inside xlang/)."""
    paths = {REPO / EXPERT}
    try:
        url = json.loads(metadata.distribution("xlang").read_text("direct_url.json") or "{}").get("url", "")
        if url.startswith("file://"):
            paths.add(Path(url[len("file://"):]) / EXPERT)
    except metadata.PackageNotFoundError:
        pass
    for folder in site.getsitepackages():
        paths |= {Path(folder) / EXPERT, Path(folder) / "xlang" / EXPERT}
    return sorted(p for p in paths if p.is_file())


# ---- 1. nvcc in the jail ----------------------------------------------------------------------------------

@needs_nvcc
@needs_jail
def test_the_two_line_candidate_that_includes_the_expert_fails_to_build(tmp_path):
    """The issue's candidate (an include of the expert by a path relative to the template folder) and the same
    by every absolute path of the expert, and relative to the judge's copy of the templates: no build; the
    control (the expert itself) builds with wgmma and TMA."""
    spellings = ["<../../../tasks/gemm/solutions/cuda_ptx_hopper.cu>",
                 f"<{os.path.relpath(REPO / EXPERT, tmp_path / 'r' / 'include' / '0')}>"]
    spellings += [f'"{p}"' for p in _expert_paths()]
    assert len(spellings) >= 3
    for i, spelling in enumerate(spellings):
        build = _cuda(ENTRY + f"#include {spelling}\n", tmp_path / ("r" if i == 1 else f"b{i}"))
        assert not build.ok, f"{spelling} built: {build.census}"
        assert "No such file" in build.error or "cannot open" in build.error, build.error
        assert "gemm_tma_wgmma" not in build.error  # nothing of the expert's text in the feedback
    honest = _cuda((REPO / EXPERT).read_text(), tmp_path / "honest")
    assert honest.ok and set(honest.census.present) >= {"wgmma", "tma"}, honest.error


@needs_nvcc
@needs_jail
def test_an_incbin_of_a_judge_file_embeds_nothing(tmp_path):
    """An assembler .incbin (top-level asm in host code; inline asm in a __device__ function) of the expert and
    of a store's files outside /tmp (one root-only, one readable by all in a 0755 folder): no build, or a build
    whose shared object holds nothing of them. The control: an .incbin of a file the jail does show (the
    toolkit's cuda.h) is embedded, so the check would see one."""
    store = Path.home() / ".cache" / f"xlang-incbin-{uuid.uuid4().hex[:8]}"
    secret = f"xlang-store-secret-{uuid.uuid4().hex}"
    try:
        store.mkdir(mode=0o755, parents=True)
        (store / "results.db").write_text(secret)
        (store / "results.db").chmod(0o600)
        (store / "open.db").write_text(secret)
        (store / "open.db").chmod(0o644)
        targets = {str(REPO / EXPERT): "gemm_tma_wgmma", str(store / "results.db"): secret,
                   str(store / "open.db"): secret}
        for i, (path, marker) in enumerate(targets.items()):
            for form in (f'asm(".section .rodata\\n.incbin \\"{path}\\"\\n.previous");\n',
                         f'__device__ void xlang_incbin_probe() {{ asm volatile(".incbin \\"{path}\\""); }}\n'):
                source = ENTRY + form + 'extern "C" void xlang_entry() {}\n__global__ void k() {}\n'
                build = _cuda(source, tmp_path / f"b{i}-{len(form)}")
                if build.ok:
                    data = Path(build.load_path).read_bytes()
                    assert marker.encode() not in data, f"{path} was embedded ({form.strip()})"
                else:
                    assert marker not in build.error, build.error
        cuda_h = next(p for p in (Path("/usr/local/cuda/include/cuda.h"),) if p.is_file())
        shown = _cuda(ENTRY + f'asm(".section .rodata\\n.incbin \\"{cuda_h}\\"\\n.previous");\n'
                      'extern "C" void xlang_entry() {}\n__global__ void k() {}\n', tmp_path / "control")
        assert shown.ok, shown.error
        assert b"cuTensorMapEncodeTiled" in Path(shown.load_path).read_bytes()
    finally:
        shutil.rmtree(store, ignore_errors=True)


@needs_nvcc
@needs_jail
def test_an_include_of_dev_zero_ends_at_the_memory_limit(tmp_path, monkeypatch):
    """`#include "/dev/zero"` grew the compiler without bound (as root, before the jail). Now it ends well
    within the build's time limit with a compile error that names the memory limit. The cap is lowered to
    1 GiB here (XLANG_BUILD_MEMORY_MB): the default (sandbox.BUILD_MEMORY) would take that much of this box's
    memory to reach."""
    monkeypatch.setenv("XLANG_BUILD_MEMORY_MB", "1024")
    start = time.monotonic()
    build = _cuda('#include "/dev/zero"\nextern "C" void xlang_entry() {}\n', tmp_path / "z", timeout_s=120)
    seconds = time.monotonic() - start
    assert not build.ok and seconds < 60, (seconds, build.error)
    assert "out of memory" in build.error and "memory 1 GiB per process" in build.error, build.error


@needs_nvcc
@pytest.mark.parametrize("arch, path", [("h100", "tasks/gemm/solutions/cuda_ptx_hopper.cu"),
                                        ("b200", "tasks/gemm/solutions/cuda_ptx_blackwell.cu")])
def test_the_experts_build_in_the_jail_with_the_kernels_of_a_plain_nvcc(tmp_path, arch, path):
    """The honest experts: the jailed build's kernels (names and opcodes) are those nvcc makes of the same file
    outside any jail with the repository's template folders, its census has the required families, and its record keeps
    ptxas -v's report and no path of the build's child folder."""
    arch_obj, task = get_arch(arch), get_task("gemm")
    build = _cuda((REPO / path).read_text(), tmp_path / "jail", arch)
    assert build.ok and not build.census.missing, build.error
    assert set(build.census.required) <= set(build.census.present)
    assert build.ptxas_v.startswith("ptxas info") and "child" not in build.log + build.ptxas_v
    assert Path(build.load_path).parent == tmp_path / "jail" and not Path(build.load_path).is_symlink()
    backend = get_backend("cuda_ptx")
    plain = tmp_path / "plain.so"
    subprocess.run(backend.nvcc_command(REPO / path, plain, arch_obj), check=True, capture_output=True)
    jailed = disassemble(Path(build.load_path))  # {kernel: its opcodes}: the same kernels, the same SASS
    assert [k.name for k in build.kernels] == list(jailed) and jailed == disassemble(plain)
    assert task.required_for(arch_obj)  # the families checked above are the task's own


# ---- 2. the seccomp filter and the limits --------------------------------------------------------------------

_KEYCTL_PROBE = ("import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True); "
                 "nr = {'x86_64': 250, 'aarch64': 219}[os.uname().machine]; "
                 "r = libc.syscall(nr, 0, -4, 0, 0, 0); "  # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING)
                 "print(r, ctypes.get_errno(), os.getpid())")


def test_the_keyring_filter_is_the_program_meant():
    """Its instructions, read back: the arch check, the syscall numbers of this machine's table, EPERM."""
    prog = limits.keyring_filter()
    insns = [tuple(int.from_bytes(prog[i + a:i + b], sys.byteorder) for a, b in ((0, 2), (2, 3), (3, 4), (4, 8)))
             for i in range(0, len(prog), 8)]
    assert insns[0] == (0x20, 0, 0, 4)  # A = seccomp_data.arch
    assert insns[-1] == insns[-2] == (0x06, 0, 0, 0x00050001)  # SECCOMP_RET_ERRNO | EPERM
    compared = {k for code, _, _, k in insns if code == 0x15}
    assert {248, 249, 250, 217, 218, 219, limits.AUDIT_ARCH_X86_64, limits.AUDIT_ARCH_AARCH64} <= compared
    for at, (code, jt, jf, k) in enumerate(insns):  # every jump that matches a keyring syscall lands on EPERM
        if code in (0x15, 0x35) and k not in limits.KEYRING_SYSCALLS:
            assert insns[at + 1 + jt][3] == 0x00050001


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64") or sandbox.bwrap_path() is None,
                    reason="needs bubblewrap on x86_64 or aarch64")
def test_under_the_filter_keyctl_fails_with_eperm_and_getpid_works(tmp_path):
    """The filter's bytes as bubblewrap loads them (--seccomp FD), and as every jail gives them (the limits
    wrapper): keyctl gets EPERM; the control without it gets no EPERM."""
    read, write = os.pipe()
    os.write(write, limits.keyring_filter())
    os.close(write)
    bwrap = [sandbox.bwrap_path(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid"]
    with_filter = subprocess.run(bwrap + ["--seccomp", str(read), "--", sys.executable, "-c", _KEYCTL_PROBE],
                                 capture_output=True, text=True, pass_fds=(read,), timeout=60)
    os.close(read)
    result, errno, pid = with_filter.stdout.split()
    assert (result, errno) == ("-1", "1") and int(pid) > 0, with_filter.stderr
    without = subprocess.run(bwrap + ["--", sys.executable, "-c", _KEYCTL_PROBE], capture_output=True, text=True,
                             timeout=60)
    assert without.stdout.split()[1] != "1", without.stdout
    jail = sandbox.Jail(home=tmp_path / "home")
    jail.prepare()
    jailed = run_child(jail.command([sys.executable, "-c", _KEYCTL_PROBE]), 60, raw_env=sandbox.child_env(jail=jail))
    assert jailed.stdout.split()[:2] == ["-1", "1"], jailed.stderr


_LIMITS_PROBE = ("import resource as r; print(' '.join(str(r.getrlimit(getattr(r, n))[1]) for n in "
                 "('RLIMIT_AS', 'RLIMIT_DATA', 'RLIMIT_NPROC', 'RLIMIT_FSIZE'))); "
                 "print(open('/proc/self/mounts').read())")


@needs_jail
def test_a_jailed_child_has_the_limits_and_the_judge_none(tmp_path):
    """A build's child: address space, processes, file size capped, /tmp and /dev/shm sized; a GPU stage's
    jail asks RLIMIT_DATA instead of RLIMIT_AS (CUDA reserves far more address space than it uses); the
    judge's own limits are untouched."""
    before = [resource.getrlimit(getattr(resource, n)) for n in ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE")]
    jail = sandbox.Jail(home=tmp_path / "home")
    jail.prepare()
    run = run_child(jail.command([sys.executable, "-c", _LIMITS_PROBE]), 60, raw_env=sandbox.child_env(jail=jail))
    as_, data, nproc, fsize = map(int, run.stdout.splitlines()[0].split())
    assert (as_, nproc, fsize) == (sandbox.BUILD_MEMORY, sandbox.TASKS, sandbox.FILE_SIZE), run.stderr
    assert data == resource.RLIM_INFINITY
    mounts = {line.split()[1]: line for line in run.stdout.splitlines()[1:] if line}
    assert f"size={sandbox.TMP_SIZE >> 10}k" in mounts["/tmp"] and f"size={sandbox.SHM_SIZE >> 10}k" in mounts["/dev/shm"]
    gpu = sandbox.Jail(home=tmp_path / "gpu-home", gpu=True).limits()
    assert "--data" in gpu and "--as" not in gpu
    assert [resource.getrlimit(getattr(resource, n)) for n in ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE")] == before


def test_build_uids_are_fresh_and_of_their_own_range(tmp_path, monkeypatch):
    """Each jail of a build takes the next uid of a range that no candidate slot, account or nobody has; the
    counter is shared by processes (a second process continues it)."""
    monkeypatch.setenv("XLANG_CACHE", str(tmp_path / "cache"))
    uids = [sandbox.Jail(home=tmp_path / "h").uid for _ in range(3)]
    other = subprocess.run([sys.executable, "-c", "from xlang.sandbox import fresh_build_uid; print(fresh_build_uid())"],
                           capture_output=True, text=True, env={**os.environ, "XLANG_CACHE": str(tmp_path / "cache"),
                                                                "PYTHONPATH": str(REPO)}, cwd=REPO)
    uids.append(int(other.stdout))
    assert len(set(uids)) == 4 and all(sandbox.BUILD_UID_BASE <= u < sandbox.BUILD_UID_BASE + sandbox.BUILD_UID_COUNT
                                       for u in uids)
    assert all(b == a + 1 or (a, b) == (sandbox.BUILD_UID_BASE + sandbox.BUILD_UID_COUNT - 1, sandbox.BUILD_UID_BASE)
               for a, b in zip(uids, uids[1:]))
    assert sandbox.uid_for_slot(999) < sandbox.BUILD_UID_BASE and sandbox.NOBODY < sandbox.BUILD_UID_BASE


# ---- 3. no state from one build to the next: the kernel keyrings ----------------------------------------------

_TRITON_EXPERT = (REPO / "tasks" / "gemm" / "solutions" / "triton.py").read_text()

_KEY_WRITER = '''
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
_NR = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]  # add_key, keyctl
def _add(keyring):
    r = _libc.syscall(_NR[0], b"user", b"xlang-left-by-a-build", b"SECRET_PAYLOAD", 14, keyring)
    return r, ctypes.get_errno()
persistent = _libc.syscall(_NR[1], 22, -1, -4)  # KEYCTL_GET_PERSISTENT(own uid, into KEY_SPEC_USER_KEYRING)
persistent_errno = ctypes.get_errno()
raise RuntimeError(f"KEYS uid={os.getuid()} user={_add(-4)} persistent={persistent},{persistent_errno} "
                   f"into_persistent={_add(persistent) if persistent > 0 else None}")
'''

_KEY_READER = '''
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
_NR = {"x86_64": (249, 250), "aarch64": (218, 219)}[os.uname().machine]  # request_key, keyctl
found = _libc.syscall(_NR[0], b"user", b"xlang-left-by-a-build", None, 0)
found_errno = ctypes.get_errno()
persistent = _libc.syscall(_NR[1], 22, -1, -4)
persistent_errno = ctypes.get_errno()
search = _libc.syscall(_NR[1], 10, persistent, b"user", b"xlang-left-by-a-build", 0) if persistent > 0 else -1
raise RuntimeError(f"KEYS uid={os.getuid()} found={found},{found_errno} persistent={persistent},{persistent_errno} "
                   f"search={search}")
'''


@needs_jail
def test_a_key_one_build_stores_is_not_found_by_the_next(tmp_path):
    """A Triton candidate's import stores a key in its uid's user keyring and in its persistent keyring (which
    lasts days); a second build's candidate looks for it. The first gets EPERM for each, the second finds
    nothing (EPERM again), and the two ran as different build uids."""
    first = build_candidate(_KEY_WRITER + _TRITON_EXPERT, "triton", get_task("gemm"), get_arch("h100"), SHAPE,
                            workdir=tmp_path / "one", cache=False)
    second = build_candidate(_KEY_READER + _TRITON_EXPERT, "triton", get_task("gemm"), get_arch("h100"), SHAPE,
                             workdir=tmp_path / "two", cache=False)
    said = [re.findall(r"KEYS (uid=\d+ .*)", b.error or "")[-1] for b in (first, second)]  # the message, not its line
    assert "user=(-1, 1)" in said[0] and "persistent=-1,1" in said[0], said[0]
    assert "found=-1,1" in said[1] and "persistent=-1,1" in said[1] and "search=-1" in said[1], said[1]
    uids = [int(re.search(r"uid=(\d+)", s).group(1)) for s in said]
    assert uids[0] != uids[1] and all(sandbox.jail_uid(u) and u >= sandbox.BUILD_UID_BASE for u in uids)


def test_the_judge_itself_has_no_keyring_filter():
    """The filter binds children only: the judge's own keyctl is not refused with EPERM by us."""
    libc = ctypes.CDLL(None, use_errno=True)
    nr = {"x86_64": 250, "aarch64": 219}.get(platform.machine())
    if nr is None:
        pytest.skip("x86_64 or aarch64 only")
    result = libc.syscall(nr, 0, -4, 0, 0, 0)
    assert result >= 0 or ctypes.get_errno() != 1


# ---- 4. what a candidate writes does not outlive `xlang eval`, and a file over the limit is its error --------

def _writer(size_mb: int, chunk_mb: int = 64) -> str:
    return (f"import os\nwith open(os.path.join(os.path.expanduser('~'), 'ballast.bin'), 'wb') as _f:\n"
            f"    for _ in range({size_mb} // {chunk_mb}):\n"
            f"        _f.write(os.urandom(1 << 20) * {chunk_mb})\n") + _TRITON_EXPERT


def _eval_leaves_nothing(xlang, tmp_path, monkeypatch, size_mb: int) -> None:
    monkeypatch.setenv("XLANG_FAKE_GPUS", "[]")
    monkeypatch.setenv(build_cache.CACHE_ENV, "0")  # each eval builds (the second is not the first's cache entry)
    source = tmp_path / "writer.py"
    source.write_text(_writer(size_mb))
    work = tmp_path / "work"
    code, out, err = xlang("eval", source, "-l", "triton", "-t", "gemm", "-a", "h100", "--workdir", work,
                           "--shape", "M=256,N=256,K=256")
    assert "static_ok" in out, out + err
    left = [p for p in work.rglob("*") if p.name == "ballast.bin" or p.name == "child" or "-home-" in p.name]
    assert left == [], left
    assert (work / "verdict.json").is_file() and (work / "build" / "build.json").is_file()
    kept = tmp_path / "kept"
    code, out, err = xlang("eval", source, "-l", "triton", "-t", "gemm", "-a", "h100", "--workdir", kept, "--keep",
                           "--shape", "M=256,N=256,K=256")
    assert (kept / "build" / "child" / "ballast.bin").stat().st_size == size_mb << 20 and str(kept) in err


@needs_jail
def test_what_a_build_wrote_is_gone_after_eval(xlang, tmp_path, monkeypatch):
    """128 MiB written into the candidate's home at import: gone after `xlang eval` with a --workdir (the verdict
    and the build record stay), kept with --keep."""
    _eval_leaves_nothing(xlang, tmp_path, monkeypatch, 128)


@pytest.mark.slow
@needs_jail
def test_a_gigabyte_written_by_a_build_is_gone_after_eval(xlang, tmp_path, monkeypatch):
    """The issue's figure: 1 GB (1 GiB, in 64 MiB writes) left in the candidate's home."""
    _eval_leaves_nothing(xlang, tmp_path, monkeypatch, 1024)


@needs_jail
def test_eval_without_a_workdir_leaves_no_folder(xlang, tmp_path, monkeypatch):
    monkeypatch.setenv("XLANG_FAKE_GPUS", "[]")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code, out, err = xlang("eval", "expert", "-l", "triton", "-t", "gemm", "-a", "h100", "--shape", "M=256,N=256,K=256")
    assert code == 4 and "static_ok" in out, out + err
    assert [p for p in tmp_path.iterdir() if p.name.startswith("xlang-eval-")] == []


@needs_jail
def test_a_file_over_the_size_limit_is_a_clean_compile_error(tmp_path, monkeypatch):
    """With a file limit of 16 MiB (XLANG_FILE_SIZE_MB), a candidate that writes 64 MiB at import: the write fails
    (EFBIG: Python ignores SIGXFSZ), its import raises, and the build is a compile error that says so; the file
    stopped at the limit."""
    monkeypatch.setenv("XLANG_FILE_SIZE_MB", "16")
    build = build_candidate(_writer(64, chunk_mb=4), "triton", get_task("gemm"), get_arch("h100"), SHAPE,
                            workdir=tmp_path / "f", cache=False)
    assert not build.ok and "File too large" in build.error, build.error
    assert (tmp_path / "f" / "child" / "ballast.bin").stat().st_size == 16 << 20


@needs_jail
def test_a_process_killed_by_the_file_limit_says_which_limit(tmp_path, monkeypatch):
    """A program that does not ignore SIGXFSZ (any but Python) is killed by it: the jail's exit status names the
    limit (sandbox.limit_note), as a build's error shows it."""
    monkeypatch.setenv("XLANG_FILE_SIZE_MB", "1")
    jail = sandbox.Jail(home=tmp_path / "home")
    jail.prepare()
    run = run_child(jail.command(["sh", "-c", "head -c 4000000 /dev/zero > big"]), 60,
                    raw_env=sandbox.child_env(jail=jail))
    assert "SIGXFSZ" in sandbox.limit_note(run.returncode) and "1 MiB per file" in sandbox.limit_note(run.returncode)
    assert (tmp_path / "home" / "big").stat().st_size == 1 << 20


# ---- on the GPU: the GPU stages under their limits ----------------------------------------------------------------

@pytest.mark.gpu
def test_cuda_works_under_a_gpu_stage_jails_limits(tmp_path):
    """A GPU stage's jail (RLIMIT_DATA, not RLIMIT_AS; processes, file size; the keyring filter): CUDA starts,
    allocates 1 GiB and multiplies; the limits are the ones asked."""
    jail = sandbox.Jail(home=tmp_path / "home", gpu=True, uid=sandbox.uid_for_slot(999))
    jail.prepare()
    probe = ("import resource as r, torch; a = torch.randn(16384, 16384, device='cuda', dtype=torch.bfloat16); "
             "b = (a @ a).float().sum().item(); torch.cuda.synchronize(); "
             "print(r.getrlimit(r.RLIMIT_DATA)[1], r.getrlimit(r.RLIMIT_AS)[1], b == b)")
    try:
        run = run_child(jail.command([sys.executable, "-c", probe]), 300, raw_env=sandbox.child_env(jail=jail))
    finally:
        sandbox.kill_uid(jail.uid)
    print(run.stdout, run.stderr[-2000:])
    data, as_, finite = run.stdout.split()[-3:]
    assert int(data) == sandbox.GPU_MEMORY and int(as_) == resource.RLIM_INFINITY and finite == "True"


@pytest.mark.gpu
@pytest.mark.parametrize("lang", ["cuda_ptx", "triton"])
def test_the_gemm_expert_is_ok_with_the_jailed_build_and_the_limits(tmp_path, lang):
    from xlang.profiler.evaluate import EvalOptions, evaluate

    task = get_task("gemm")
    solution = task.solution(lang, "hopper", get_backend(lang).suffix)
    verdict = evaluate(solution.text, lang, task, get_arch("h100"), task.shape(),
                       EvalOptions(workdir=tmp_path / "e", peers=False))
    print(json.dumps({"lang": lang, "category": verdict.category, "detail": verdict.detail[:300],
                      "speedup": (verdict.timing or {}).get("speedup"),
                      "build_s": (verdict.build or {}).get("seconds")}))
    assert verdict.category == "ok", verdict.detail
