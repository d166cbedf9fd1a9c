"""The judge/runner split on the CPU: the candidate runs in its own jailed process on buffers the judge shares
(memfd here, CUDA VMM on a GPU), and nothing it does reaches the judge's objects, files, secrets or the next
candidate. GPU classes (timing, observer, memcheck, ncu) are in tests/test_hostile_gpu.py."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from plans import plan

from xlang.profiler.judge.plan import Plan
from xlang.profiler.stages.launch import run_stage
from xlang.sandbox import level
from xlang.task import get_task

HERE = Path(__file__).parent / "kernels" / "isolation"
SECRET = "sk-xlang-test-secret-0123456789"
# The candidate uids of these CPU stages (4 per "GPU" index): a slot of this test process's own, so that a stage
# of another test run on the same machine (which kills its slots' uids when it ends) cannot kill ours.
SLOTS = random.SystemRandom().randrange(20, 240)


def _check(tmp_path, candidate: str, shapes=None, env=None, runner_env=None):
    task = get_task("gemm")
    shapes = shapes or task.draw_shapes({"M": 64, "N": 64, "K": 64}, random.Random(1), 2)
    shapes = [{k: min(v, 96) // 8 * 8 or 8 for k, v in s.items()} for s in shapes]
    build = tmp_path / "build"
    build.mkdir()
    (build / "candidate.py").write_text((HERE / candidate).read_text())
    spec = {"lang": "triton", "task": "gemm", "arch": "h100", "device": "cpu", "gpu_index": SLOTS,
            "hello": {"op": "hello", "device": "cpu", "lang": "triton", "load": str(build / "candidate.py")},
            "readable": [str(build)], "trials": [(s, "normal", 10 + i) for i, s in enumerate(shapes)],
            "timing": {"enabled": False}, "call_timeout_s": 60, "env": runner_env or {}}
    work = tmp_path / "eval"
    work.mkdir(mode=0o700)
    return run_stage(plan(**{**spec, "mode": "check"}), work, "check", 120, env=env)


def test_honest_cpu_candidate_is_correct(tmp_path):
    run = _check(tmp_path, "cpu_gemm_honest.py")
    assert run.result.status == "ok", run.result
    assert run.result.correctness["passed"] and run.result.correctness["trials"] >= 2


def test_tampering_candidate_reaches_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XLANG_TEST_API_KEY", SECRET)
    before = {p: p.read_bytes() for p in Path("xlang").glob("*.py")}
    run = _check(tmp_path, "cpu_gemm_tamper.py")
    assert run.result.status == "runtime_error"  # it raised; its own message is all it could say
    detail = run.result.detail
    assert SECRET not in detail and SECRET not in run.child.stdout + run.child.stderr
    if level() != "process":
        # It found nothing to read or write: no /proc of ours, no writable file of ours, no signal to us.
        assert "found: []" in detail, detail[:500]
    assert {p: p.read_bytes() for p in Path("xlang").glob("*.py")} == before
    assert not Path("xlang-runs-owned").exists()


def test_survivor_does_not_outlive_the_stage(tmp_path):
    if level() == "process":
        pytest.skip("without a PID namespace a double-forked survivor can escape (isolation level 'process')")
    run = _check(tmp_path, "cpu_gemm_survivor.py")
    assert run.result.status == "ok", run.result
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", "xlang-survivor-marker-7f3a"], capture_output=True, text=True).stdout
    assert not left.strip(), f"survivor processes: {left}"


def test_then_an_honest_candidate_is_judged_as_before(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _check(tmp_path / "a", "cpu_gemm_tamper.py")
    run = _check(tmp_path / "b", "cpu_gemm_honest.py")
    assert run.result.status == "ok", run.result


def test_isolation_level_is_the_strongest_here():
    # CI and this machine run as root with user namespaces: the full jail must be what we get.
    if os.geteuid() == 0:
        assert level() == "bwrap+uid"


def test_tool_stage_output_reaches_the_judge_only_through_its_channels(tmp_path):
    """memcheck / ncu: the tool runs with the candidate; its log comes through a pipe into the judge's folder and
    its report is copied out of the candidate's home (a stand-in tool here: a shell that writes both)."""
    build = tmp_path / "build"
    build.mkdir()
    (build / "candidate.py").write_text((HERE / "cpu_gemm_honest.py").read_text())
    tool = ["sh", "-c", 'echo "========= ERROR SUMMARY: 0 errors" > {LOG}; echo report > {REPORT}.ncu-rep; exec "$@"',
            "tool"]
    shape = {"M": 40, "N": 48, "K": 56}
    spec = {"lang": "triton", "task": "gemm", "arch": "h100", "device": "cpu", "tool": tool,
            "hello": {"op": "hello", "device": "cpu", "lang": "triton", "load": str(build / "candidate.py")},
            "readable": [str(build)], "trials": [(shape, "normal", 3)], "timing": {"enabled": False}}
    work = tmp_path / "eval"
    work.mkdir(mode=0o700)
    run = run_stage(plan(**{**spec, "mode": "memcheck"}), work, "memcheck", 120)
    assert run.result.status == "ok", run.result
    assert run.result.runner_exit == 0
    assert "ERROR SUMMARY: 0 errors" in (work / "memcheck" / "tool.log").read_text()
    assert (work / "memcheck" / "report.ncu-rep").read_text() == "report\n"


def test_tool_stage_ends_with_a_survivor_left_below_the_tool(tmp_path):
    """The tools wait for every process they injected and reap orphans (subreapers): a survivor would hold the
    stage to its limit. The judge ends everything but the tool once the tool had its grace period."""
    from xlang.sandbox import _uid_drop_sees_python

    if not _uid_drop_sees_python():
        pytest.skip("tool stages run the candidate under its own uid only where that uid can run our Python "
                    "(root, setpriv, a world-readable interpreter): the GPU image, not this box")
    build = tmp_path / "build"
    build.mkdir()
    (build / "candidate.py").write_text((HERE / "cpu_gemm_survivor.py").read_text())
    tool = [sys.executable, str(HERE / "subreaper_tool.py"), "{LOG}"]
    shape = {"M": 40, "N": 48, "K": 56}
    spec = {"lang": "triton", "task": "gemm", "arch": "h100", "device": "cpu", "tool": tool, "tool_exit_s": 60,
            "hello": {"op": "hello", "device": "cpu", "lang": "triton", "load": str(build / "candidate.py")},
            "readable": [str(build), str(HERE)], "trials": [(shape, "normal", 3)], "timing": {"enabled": False}}
    work = tmp_path / "eval"
    work.mkdir(mode=0o700)
    t0 = time.monotonic()
    run = run_stage(plan(**{**spec, "mode": "memcheck"}), work, "memcheck", 120)
    assert run.result.status == "ok", run.result
    assert time.monotonic() - t0 < 50  # the 15 s grace, not the 60 s the tool was given
    assert "ERROR SUMMARY: 0 errors" in (work / "memcheck" / "tool.log").read_text()
    left = subprocess.run(["pgrep", "-f", "xlang-survivor-marker-7f3a"], capture_output=True, text=True).stdout
    assert not left.strip(), f"survivor processes: {left}"


def test_tool_cleanup_spares_only_the_tool(tmp_path):
    """What the judge kills when a tool stage's tool does not end by itself: every Python of the candidate's
    uid (the runner, a survivor sitting below the tool, a subreaper) and whatever is outside the tool's tree;
    never the tool, nor a program the tool itself runs below it."""
    import shutil as _shutil

    from xlang.profiler.judge.process import _kill_all_but_the_tool
    from xlang.sandbox import uid_for_slot, uid_processes

    if os.geteuid() != 0 or not _shutil.which("setpriv"):
        pytest.skip("needs root and setpriv")
    uid = uid_for_slot(11)
    # A survivor's interpreter, as /proc/PID/exe names it, where the candidate's uid can run it (pytest's tmp_path
    # sits below /tmp/pytest-of-root, mode 0700).
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="xlang-fake-python-", dir="/tmp"))
    folder.chmod(0o755)
    fake_python = folder / "python3.12"
    _shutil.copy("/bin/sleep", fake_python)
    drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    tool = subprocess.Popen(drop + ["sh", "-c", f"{fake_python} 60 & sleep 61 & wait"], start_new_session=True)
    orphan = subprocess.Popen(drop + ["sleep", "62"], start_new_session=True)
    try:
        deadline = time.monotonic() + 20  # the shell starts its two children when the (shared, loaded) box lets it
        while len(before := {pid for pid, _ in uid_processes(uid)}) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(before) == 4, before
        assert _kill_all_but_the_tool(uid, tool.pid, ["sh"]) == 2
        time.sleep(0.3)
        left = {pid for pid, _ in uid_processes(uid)}
        assert tool.pid in left and orphan.pid not in left and len(left) == 2  # the tool and its own `sleep 61`
    finally:
        tool.kill()
        orphan.kill()
        from xlang.sandbox import kill_uid

        kill_uid(uid)
        _shutil.rmtree(folder, ignore_errors=True)


def test_the_watch_takes_the_runner_by_its_command_line_not_the_first_python(tmp_path):
    """A tool may itself be a Python (tests/kernels/isolation/shm_tool.py is), whose arguments name the runner's
    command, and which starts its target later: arm() waits for the process that runs `-m xlang.profiler.runner`,
    so the runner is spared at close (CI, 2 loaded cores: a watch armed on the tool's Python alone missed the
    runner, and close killed it, -9, before it could leave)."""
    from xlang.profiler.gpuwatch import GpuWatch
    from xlang.sandbox import uid_for_slot

    tool = tmp_path / "slow_tool.py"
    tool.write_text("import socket, subprocess, sys, time\n"
                    "time.sleep(1.0)\n"
                    "ours, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
                    "subprocess.call(sys.argv[1:] + [str(its.fileno()), 'cpu'], pass_fds=[its.fileno()])\n")
    # the jail (here a shell) starts the tool, which starts the runner a second later
    jail = subprocess.Popen(["sh", "-c", f'"{sys.executable}" {tool} "{sys.executable}" -m xlang.profiler.runner; true'],
                            start_new_session=True)
    watch = GpuWatch(0, uid_for_slot(9))

    def children(pid):
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    try:
        watch.arm(jail.pid, wait_s=30)
        tools = children(jail.pid)
        targets = children(tools[0]) if tools else []
        assert len(targets) == 1 and targets[0] in watch.runner, (tools, targets, watch.runner)
    finally:
        watch.stop()
        os.killpg(jail.pid, 9)
        jail.wait()


def test_a_tool_that_dies_ends_the_stage_at_once(tmp_path):
    """A candidate that kills the tool it runs under (compute-sanitizer, Nsight Compute) leaves its own process
    hanging: the judge notices within a second that the process it started is gone (runtime_error), instead of
    waiting out the call's limit."""
    import signal

    build = tmp_path / "build"
    build.mkdir()
    (build / "candidate.py").write_text((HERE / "cpu_gemm_honest.py").read_text())
    pidfile = tmp_path / "target.pid"
    tool = [sys.executable, str(HERE / "stopping_tool.py"), str(pidfile), "0.5"]
    spec = {"lang": "triton", "task": "gemm", "arch": "h100", "device": "cpu", "tool": tool, "tool_exit_s": 5,
            "load_timeout_s": 100, "call_timeout_s": 100,
            "hello": {"op": "hello", "device": "cpu", "lang": "triton", "load": str(build / "candidate.py")},
            "readable": [str(build), str(HERE)], "trials": [({"M": 40, "N": 48, "K": 56}, "normal", 3)],
            "timing": {"enabled": False}}
    work = tmp_path / "eval"
    work.mkdir(mode=0o700)
    t0 = time.monotonic()
    try:
        run = run_stage(plan(**{**spec, "mode": "memcheck"}), work, "memcheck", 120)
        assert run.result.status == "runtime_error", run.result
        assert "the tool it runs under) is gone" in run.result.detail
        assert time.monotonic() - t0 < 60
    finally:
        if pidfile.is_file():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except (ProcessLookupError, PermissionError, ValueError):
                pass


# ---- kernel provenance (the decisions the judge makes from the observer's records; no GPU needed) -----------

def _kernel(name: str, module: str):
    from xlang.profiler.observer_records import KernelRecord

    return KernelRecord(1, 2, 0, 1, 7, 1, (1, 1, 1), (128, 1, 1), 0, 0, False, module, name)


def _provenance(tmp_path, lang="cuda_ptx", own=b"our cubin", built=("gemm_tc",)):
    from xlang.profiler.judge.observed import Provenance

    cubin = tmp_path / "own.cubin"
    cubin.write_bytes(own)
    return Provenance(plan(**{"lang": lang, "own_cubins": [str(cubin)], "build_kernels": list(built),
                       "jit_cache": ".triton" if lang in ("triton", "gluon") else None}), tmp_path / "home")


def test_provenance_accepts_own_modules_and_torch_utilities(tmp_path):
    import hashlib

    prov = _provenance(tmp_path)
    ours = hashlib.sha256(b"our cubin").hexdigest()
    prov.vet([_kernel("gemm_tc", ours), _kernel("_ZN2at6native29vectorized_elementwise_kernelIfill", "ab" * 32),
                _kernel("gemm_tc", "-")])  # an unknown module under a name its own build compiled


def test_provenance_rejects_vendor_and_foreign_kernels(tmp_path):
    from xlang.profiler.judge.process import Outcome

    prov = _provenance(tmp_path)
    for kernel in (_kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "cd" * 32),  # cuBLAS by name
                   _kernel("gemm_tc", "ef" * 32),  # our name, but a module we did not build: renamed vendor code
                   _kernel("my_helper_kernel", "-")):  # unknown module and a name the build never compiled
        with pytest.raises(Outcome) as e:
            prov.vet([kernel])
        assert e.value.status == "forbidden_call", kernel


def test_provenance_reads_a_cutedsl_name_after_the_jits_own_prefix(tmp_path):
    """CuTe DSL names every kernel kernel_cutlass_<function>_<static arguments>_<n>, so another drawn shape gives a
    name the build never compiled: the DSL's own 'cutlass' is not a vendor's, but the rest is still screened."""
    from xlang.profiler.judge.observed import Outcome, Provenance

    spec = {"lang": "cutedsl", "own_cubins": [], "kernels_on_disk": False, "jit_kernel_prefix": "kernel_cutlass_",
            "build_kernels": ["kernel_cutlass__dq_kernel_tensorptrbf16gmemalign16o128i64div1281281_2"]}
    prov = Provenance(plan(**spec), tmp_path / "home")
    prov.vet([_kernel("kernel_cutlass__dq_kernel_tensorptrbf16gmemalign16o64i64div64641_2", "ab" * 32)])
    for name in ("kernel_cutlass_kernel_quackgemm_sm90GemmSm90_object_at_0", "kernel_cutlass_FlashAttnFwd_1",
                 "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "cutlass3x_sm90_tensorop_gemm_bf16"):
        with pytest.raises(Outcome) as e:
            prov.vet([_kernel(name, "cd" * 32)])
        assert e.value.status == "forbidden_call", name
    # the candidate's own kernel function may be called gemm_kernel: after its stem only the arguments are read
    stems = Provenance(plan(**spec, build_kernel_stems=["kernel_cutlass_gemm_kernel_"]), tmp_path / "home")
    stems.vet([_kernel("kernel_cutlass_gemm_kernel_tensorptrbf16gmemalign16o1000_0", "ab" * 32)])
    with pytest.raises(Outcome):  # without that stem the name is screened after the prefix
        prov.vet([_kernel("kernel_cutlass_gemm_kernel_tensorptrbf16gmemalign16o1000_0", "ab" * 32)])
    with pytest.raises(Outcome):  # a library's kernel under the stem still shows its class in the arguments
        stems.vet([_kernel("kernel_cutlass_gemm_kernel_quackgemm_sm90GemmSm90_object_at__0", "ab" * 32)])
    # a library kernel the candidate's code JIT-compiled at build time is built, and still screened
    lib = "kernel_cutlass_kernel_quackgemm_sm90GemmSm90_object_at__0"
    built_lib = Provenance(plan(**{**spec, "build_kernels": [lib]}), tmp_path / "home")
    with pytest.raises(Outcome):
        built_lib.vet([_kernel(lib, "ab" * 32)])
    # a language that keeps its kernels on disk is never read after a prefix
    strict = Provenance(plan(**{**spec, "kernels_on_disk": True}), tmp_path / "home")
    with pytest.raises(Outcome):
        strict.vet([_kernel("kernel_cutlass__dq_kernel_x", "cd" * 32)])


def test_provenance_finds_a_triton_candidates_jit_output(tmp_path):
    import hashlib

    prov = _provenance(tmp_path, lang="triton", built=())
    jit = tmp_path / "home" / ".triton" / "abc"
    jit.mkdir(parents=True)
    (jit / "gemm_kernel.cubin").write_bytes(b"triton wrote this")
    prov.vet([_kernel("gemm_kernel", hashlib.sha256(b"triton wrote this").hexdigest())])
    (jit / "sneaky.cubin").symlink_to("/etc/hostname")  # never followed
    prov.rescan()
    assert hashlib.sha256(Path("/etc/hostname").read_bytes()).hexdigest() not in prov.own


def test_a_kernel_of_another_toolchain_is_not_the_languages_own(tmp_path):
    """Language attribution: a cubin in the candidate's home is its own only where its language's JIT writes
    (Triton: .triton); a cuda_ptx candidate that runs Triton, or a CuTe DSL one that runs Triton or loads
    PTX through cuda-python, ran another language's kernels, whatever they are named."""
    import hashlib

    from xlang.profiler.judge.observed import Outcome, Provenance

    jit = tmp_path / "home" / ".triton" / "abc"
    jit.mkdir(parents=True)
    (jit / "matmul_kernel.cubin").write_bytes(b"triton wrote this")
    triton_module = hashlib.sha256(b"triton wrote this").hexdigest()
    with pytest.raises(Outcome) as e:  # a cuda_ptx candidate: its own kernels come from its build only
        _provenance(tmp_path, lang="cuda_ptx").vet([_kernel("matmul_kernel", triton_module)])
    assert e.value.status == "forbidden_call"
    cutedsl = {"lang": "cutedsl", "own_cubins": [], "kernels_on_disk": False, "jit_kernel_prefix": "kernel_cutlass_",
               "jit_cache": None, "build_kernels": ["kernel_cutlass__gemm_kernel_t_0"],
               "build_kernel_stems": ["kernel_cutlass__gemm_kernel_"]}
    prov = Provenance(plan(**cutedsl), tmp_path / "home")
    for name, module in (("matmul_kernel", triton_module), ("fma_ptx_tile", "ab" * 32)):
        with pytest.raises(Outcome) as e:
            prov.vet([_kernel(name, module)])
        assert e.value.status == "forbidden_call" and "did not make" in e.value.detail
    # its own kernels at another shape, and torch's utilities (a zeroed scratch), are fine
    prov.vet([_kernel("kernel_cutlass__gemm_kernel_u_1", "cd" * 32),
                _kernel("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEE", "ef" * 32)])


def test_same_kernels_under_ncu_as_when_timed():
    from xlang.profiler.stages.ncu import _same_kernels

    assert _same_kernels({"profiled_names": ["b", "a"]}, ["a", "b"]) is None
    assert _same_kernels({"profiled_names": ["a"]}, None) is None  # nothing observed: no claim either way
    cat, detail = _same_kernels({"profiled_names": ["wgmma_tile"]}, ["wgmma_tile", "fma_rest"])
    assert cat == "not_executed" and "fma_rest" in detail
    # counts matter: the tensor-core kernel twice under the profiler, once when timed
    assert _same_kernels({"profiled_names": ["wgmma_tile"] * 2}, ["wgmma_tile"])[0] == "not_executed"
    # torch's utility kernels under the profiler are no claim; a fresh buffer's lazy setup matches the first
    # timed call (the observed lists hold the candidate's own kernels only)
    fill = "_ZN2at6native29vectorized_elementwise_kernelILi8ENS0_11FillFunctorIsEE"
    assert _same_kernels({"profiled_names": [fill, "gemm_tc"]}, ["gemm_tc"]) is None
    assert _same_kernels({"profiled_names": ["init_tile", "gemm_tc"]}, ["gemm_tc"], ["init_tile", "gemm_tc"]) is None
    # but a kernel of the candidate's own named like a utility is compared: FMA work hidden from the profiler
    cat, _ = _same_kernels({"profiled_names": ["wgmma_tile"]}, ["wgmma_tile", "fma_elementwise_rest"])
    assert cat == "not_executed"


def test_own_kernels_of_a_call_are_those_of_the_candidates_modules(tmp_path):
    prov = _provenance(tmp_path, built=("gemm_tc",))
    own = hashlib.sha256(b"our cubin").hexdigest()
    assert prov.is_own(_kernel("gemm_tc", own)) and prov.is_own(_kernel("x_elementwise_fma", own))
    assert not prov.is_own(_kernel("_ZN2at6native29vectorized_elementwise_kernel", "torch-module-hash"))
    assert prov.is_own(_kernel("gemm_tc", "-")) and not prov.is_own(_kernel("other", "-"))


def test_flooding_and_pipe_holding_candidate_is_bounded(tmp_path):
    start = time.monotonic()
    run = _check(tmp_path, "cpu_gemm_flood.py")
    assert run.result.status == "ok", run.result
    assert time.monotonic() - start < 90
    assert len(run.child.stdout) + len(run.child.stderr) < 2 << 20  # what is kept of the output is bounded


def test_kill_uid_ends_what_a_stage_left_behind_and_nothing_else():
    import shutil as _shutil

    from xlang.sandbox import kill_uid, uid_for_slot

    if os.geteuid() != 0 or not _shutil.which("setpriv"):
        pytest.skip("needs root and setpriv (the uid change is what makes the cleanup possible)")
    mine, other = uid_for_slot(9), uid_for_slot(10)
    procs = [subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "60"],
                              start_new_session=True) for uid in (mine, mine, mine, other)]
    try:
        time.sleep(0.3)
        spared = procs[2].pid
        assert kill_uid(mine, keep=lambda pid, _: pid == spared) >= 2  # a tool stage's tool is spared until its turn
        for p in procs[:2]:
            assert p.wait(5) == -9
        assert procs[2].poll() is None
        assert kill_uid(mine) >= 1 and procs[2].wait(5) == -9
        assert procs[3].poll() is None  # another stage's candidate is untouched
        assert kill_uid(0) == 0 and kill_uid(65534) == 0  # never root, never a system account
    finally:
        for p in procs:
            p.kill()


def test_a_jail_on_one_gpu_of_several_binds_only_that_gpus_node(monkeypatch, tmp_path):
    """With the GPU's minor number known, a bubblewrap jail binds /dev/nvidia<minor> and the driver's control
    nodes, never another GPU's node, and tells CUDA its one GPU is device 0 (what scripts/device/gpu_node_probe.sh
    showed on two H200s: CUDA_VISIBLE_DEVICES=1 inside such a jail finds no GPU). Without bubblewrap (uid)
    or with the minor unknown, every node is bound as before."""
    from xlang import sandbox

    nodes = [Path(f"/dev/{n}") for n in ("nvidia-caps", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1",
                                         "nvidiactl")]
    monkeypatch.setattr(sandbox, "_gpu_device_nodes", lambda: nodes)
    monkeypatch.setattr(sandbox, "level", lambda: "bwrap+uid")
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(sandbox, "_uid_drop_sees_python", lambda: True)

    def bound(jail):
        args = jail.command(["true"])
        return {args[i + 1] for i, a in enumerate(args) if a == "--dev-bind"}

    one = sandbox.Jail(home=tmp_path, gpu=True, gpu_node=1, uid=64005)
    assert bound(one) == {"/dev/nvidia-caps", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1",
                          "/dev/nvidiactl"}
    assert one.env() == one.env("1") == {"CUDA_VISIBLE_DEVICES": "0"}
    assert one.env("MIG-5e3c0b1a-0000-0000-0000-000000000000") == {}  # a UUID names the same device inside
    for jail in (sandbox.Jail(home=tmp_path, gpu=True, uid=64005),
                 sandbox.Jail(home=tmp_path, gpu=True, gpu_node=1, namespaces="uid", uid=64005),
                 sandbox.Jail(home=tmp_path, gpu=True, gpu_node=7, uid=64005)):  # no such node here
        assert jail.env() == {}
        assert not jail.relaxed and {"/dev/nvidia0", "/dev/nvidia1"} <= bound(jail) or jail.relaxed


def test_the_candidates_jail_hides_the_peers_libraries(monkeypatch, tmp_path):
    """FA4 and quack are what a candidate is compared with, never its answer: under bubblewrap their package
    folders are an empty tmpfs in the candidate's jail (after the binds that bring a site folder back); the
    vendor's and the peers' own processes see them."""
    from xlang import sandbox
    from xlang.task import peer_library_folders

    monkeypatch.setattr(sandbox, "level", lambda: "bwrap+uid")
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(sandbox, "_uid_drop_sees_python", lambda: True)
    lib = tmp_path / "site" / "quack"
    lib.mkdir(parents=True)
    args = sandbox.Jail(home=tmp_path / "home", hidden=[lib]).command(["true"])
    at = args.index(str(lib))
    assert args[at - 1] == "--tmpfs" and at < args.index("--chdir")
    assert str(lib) not in sandbox.Jail(home=tmp_path / "home").command(["true"])
    # the folders are found from the tasks' peers without importing anything (none is installed in CI)
    assert all(p.is_dir() for p in peer_library_folders())


# ---- who else held the GPU while the candidate was timed --------------------------------------------------
def test_gpu_tenants_from_before_the_candidate_are_the_environments():
    """A process that held the GPU before the candidate's runner started (same PID, same start time) cannot be
    the candidate's: the run is not judged (harness_error), and the candidate is not blamed."""
    from xlang.profiler.judge.process import foreign_gpu_work

    me = 100
    before = {100: "5", 200: "7"}
    after = {100: "5", 200: "7", 300: "9", 301: "9"}
    assert foreign_gpu_work(before, after, me) == ([200], [300, 301])


def test_a_reused_pid_is_not_the_environments():
    """The same PID with another start time is a new process: it counts against the candidate."""
    from xlang.profiler.judge.process import foreign_gpu_work

    assert foreign_gpu_work({200: "7"}, {200: "8", 300: "9"}, me=1) == ([], [200, 300])


def test_without_a_snapshot_every_other_process_is_the_candidates_side():
    from xlang.profiler.judge.process import foreign_gpu_work

    assert foreign_gpu_work(None, {1: "1", 300: "9"}, me=1) == ([], [300])
    assert foreign_gpu_work({2: "3"}, None, me=1) == ([], [])


def test_process_start_time_names_one_process():
    from xlang.profiler.judge.process import process_started

    mine = process_started(os.getpid())
    assert mine is not None and mine.isdigit()
    assert process_started(os.getpid()) == mine
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert process_started(child.pid) is not None
    finally:
        child.kill()
        child.wait()
    assert process_started(2 ** 22 + 12345) is None  # above pid_max: no such process


# ---- a judge dies with its caller -------------------------------------------------------------------------
_CHILD = ("import os, sys, time; from xlang.children import die_with_parent; die_with_parent(int(sys.argv[1])); "
          "print(os.getpid(), flush=True); time.sleep(60)")
_PARENT = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', sys.argv[1], str(__import__('os')."
           "getpid())], stdout=sys.stdout, start_new_session=True); time.sleep(60)")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_judge_dies_when_its_caller_is_killed():
    """A judge runs in its own session; killing its caller (a timed-out `xlang eval` or test run) must still take
    it down, or it keeps the GPU and the next evaluation shares it."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _CHILD], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    os.kill(child_pid, 0)  # alive while its parent is
    parent.kill()
    parent.wait()
    for _ in range(50):
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return
        try:  # a zombie until someone reaps it: dead is dead
            if Path(f"/proc/{child_pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except OSError:
            return
        time.sleep(0.1)
    os.kill(child_pid, 9)
    pytest.fail("the child outlived its killed parent")


def test_a_judge_whose_caller_is_already_gone_exits():
    not_the_parent = str(2 ** 22 + 12345)  # above Linux's pid_max: no process has it
    out = subprocess.run([sys.executable, "-c", _CHILD, not_the_parent], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and out.stdout == ""


# ---- out-of-bounds accesses fault in every run (guard ranges, canaries) -------------------------------------
@pytest.mark.parametrize("how", ["read-after:A", "write-after:C", "read-before:B", "write-before:C"])
def test_an_access_just_outside_a_buffer_is_a_memory_error(tmp_path, how):
    """Each buffer lies between unmapped guard pages (PROT_NONE here, unmapped VA on a GPU): one element past
    the end or before the start faults (SIGSEGV in the runner) without any sanitizer. 64x64 bf16 is two whole
    pages, so both ends of every buffer meet a guard."""
    run = _check(tmp_path, "cpu_gemm_out_of_bounds.py", shapes=[{"M": 64, "N": 64, "K": 64}],
                 runner_env={"XLANG_TEST_OOB": how})
    assert run.result.status == "memory_error", run.result
    assert "SIGSEGV" in run.result.detail and "guard" in run.result.detail
    assert run.result.correctness is None


def test_a_write_into_the_slack_before_a_buffer_damages_its_canary(tmp_path):
    """40x56 bf16 is not a whole page: the buffer ends flush with its mapping and the bytes before it are
    canaries, checked after every call."""
    run = _check(tmp_path, "cpu_gemm_out_of_bounds.py", shapes=[{"M": 40, "N": 48, "K": 56}],
                 runner_env={"XLANG_TEST_OOB": "write-before:C"})
    assert run.result.status == "memory_error", run.result
    assert "wrote outside C" in run.result.detail and "up to 2 bytes before its start" in run.result.detail


def test_the_buffer_layout_ends_flush_and_starts_after_a_guard():
    from xlang.profiler.buffers import GUARD_BYTES, MIN_ALIGN, layout, start_alignment

    gran = 2 << 20
    for nbytes in (16, 4480, 3 * 2**20 + 48, 2**21, 8192 * 5120 * 2):
        size, offset, guard, reserve = layout(nbytes, gran)
        assert offset + nbytes == size  # the last byte is the last mapped byte
        assert (guard + offset) % start_alignment(nbytes) == 0 and start_alignment(nbytes) >= MIN_ALIGN
        assert guard >= GUARD_BYTES and reserve == 2 * guard + size and size % gran == 0
    assert start_alignment(8192 * 5120 * 2) == 256 and start_alignment(40 * 56 * 2) == 128 and start_alignment(24 * 2) == 16
    size, offset, _, _ = layout(18, gran)  # not a multiple of 16: under 16 canary bytes after it
    assert size - offset - 18 == 14


# ---- no second GPU process (the judge's GPU watch, with an NVML stand-in) -----------------------------------
HELPER_MARKER = b"xlang-gpu-helper-5c1e"


def _judge_here(tmp_path, candidate: str, mode: str = "check", runner_env=None, tool=None):
    """The judge's own stage logic, run in this process (so that NVML can be stood in for): the real Runner, jail,
    GPU watch and verdict, on the CPU."""
    from xlang.profiler.judge import main as judge_main

    build = tmp_path / "build"
    build.mkdir()
    (build / "candidate.py").write_text((HERE / candidate).read_text())
    stage = tmp_path / "stage"
    stage.mkdir(mode=0o700)
    spec = {"lang": "triton", "task": "gemm", "arch": "h100", "device": "cpu", "gpu_index": SLOTS, "mode": mode,
            "hello": {"op": "hello", "device": "cpu", "lang": "triton", "load": str(build / "candidate.py")},
            "readable": [str(build), str(HERE)], "trials": [({"M": 40, "N": 48, "K": 56}, "normal", 3)] * 2,
            "timing": {"enabled": False}, "call_timeout_s": 60, "env": runner_env or {}, "stage_dir": str(stage),
            "tool_exit_s": 60, **({"tool": tool} if tool else {})}
    return judge_main.run(Plan.from_dict(spec), lambda text: None)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _nvml_stand_in(monkeypatch, uid: int, helper_holds: bool, extra=()):
    """NVML's compute-process list as the judge would get it on a GPU: the judge, the candidate's runner and, when
    helper_holds, the candidate's helper process (and `extra` pids).

    The runner is told by its command line; a child it has forked but not yet exec'd carries the same command line
    for a moment (vfork shares its memory), and would hold no context on a GPU (CUDA contexts do not cross fork), so a
    process whose command line is its parent's is not the runner."""
    from xlang.profiler import gpuwatch
    from xlang.sandbox import uid_processes

    def holders(index):
        pids = [os.getpid(), *extra]
        for pid, _ in uid_processes(uid):
            cmd = _cmdline(pid)
            runner = b"xlang.profiler.runner" in cmd and _cmdline(_parent(pid)) != cmd
            if runner or (helper_holds and HELPER_MARKER in cmd):
                pids.append(pid)
        return sorted(pids)

    monkeypatch.setattr(gpuwatch, "compute_processes", holders)


def _no_helper_left():
    time.sleep(0.3)
    left = subprocess.run(["pgrep", "-f", HELPER_MARKER.decode()], capture_output=True, text=True).stdout
    return not left.strip()


def _needs_uid_jail():
    if level() != "bwrap+uid":
        pytest.skip("the candidate's own uid is what tells its processes apart (isolation bwrap+uid)")


def test_a_helper_process_holding_the_gpu_is_forbidden_and_its_correctness_discarded(tmp_path, monkeypatch):
    from xlang.sandbox import uid_for_slot

    _needs_uid_jail()
    _nvml_stand_in(monkeypatch, uid_for_slot(4 * SLOTS), helper_holds=True)
    result = _judge_here(tmp_path, "cpu_gemm_helper_process.py")
    assert result.status == "forbidden_call", result
    assert "second process" in result.detail and "python" in result.detail
    assert not (result.correctness or {}).get("passed")
    watch = result.gpu_watch
    assert watch["checked"] and watch["forbidden"]["pid"] in {h["pid"] for h in watch["helpers"]}
    assert _no_helper_left()


def test_a_stage_whose_call_waits_on_a_gpu_helper_ends_at_once(tmp_path, monkeypatch):
    """The class-4 candidate's call waited on its helper under memcheck and Nsight Compute until their limit; the
    watch ends the stage as soon as it sees the helper's context."""
    from xlang.sandbox import uid_for_slot

    _needs_uid_jail()
    _nvml_stand_in(monkeypatch, uid_for_slot(4 * SLOTS), helper_holds=True)
    t0 = time.monotonic()
    result = _judge_here(tmp_path, "cpu_gemm_helper_process.py", runner_env={"XLANG_TEST_HELPER_WAIT": "1"})
    assert result.status == "forbidden_call", result
    assert time.monotonic() - t0 < 30  # the call's limit is 60 s, the helper sleeps 120 s
    assert _no_helper_left()


def test_a_helper_process_without_a_gpu_context_is_allowed_and_recorded(tmp_path, monkeypatch):
    """It can do no GPU work: recorded (pid, name, when), killed with the stage, the stage ending at once."""
    from xlang.sandbox import uid_for_slot

    _needs_uid_jail()
    _nvml_stand_in(monkeypatch, uid_for_slot(4 * SLOTS), helper_holds=False)
    t0 = time.monotonic()
    result = _judge_here(tmp_path, "cpu_gemm_helper_process.py")
    assert result.status == "ok", result
    assert time.monotonic() - t0 < 30
    helpers = result.gpu_watch["helpers"]
    assert helpers and all(h["first_seen_s"] >= 0 for h in helpers) and result.gpu_watch["forbidden"] is None
    assert _no_helper_left()


def test_the_helper_is_seen_through_the_uids_process_tree_in_a_stage_of_its_own(tmp_path):
    """The judge as a process of its own (no stand-in: NVML is absent here): the helper is in the stage's result."""
    _needs_uid_jail()
    run = _check(tmp_path, "cpu_gemm_helper_process.py")
    assert run.result.status == "ok", run.result
    assert run.result.gpu_watch["helpers"] and run.result.gpu_watch["nvml"] is False
    assert _no_helper_left()


def test_a_stranger_on_the_gpu_makes_the_candidate_not_judged(tmp_path, monkeypatch):
    """A process of another uid that takes a context while the candidate runs is nothing the candidate can start:
    not forbidden_call, but the run is not judged (harness_error). One that was there before stays allowed."""
    from xlang.sandbox import uid_for_slot

    _needs_uid_jail()
    uid = uid_for_slot(4 * SLOTS)
    from xlang.profiler import gpuwatch

    before = subprocess.Popen(["sleep", "60"])
    stranger = None
    try:
        _nvml_stand_in(monkeypatch, uid, helper_holds=False, extra=[before.pid])
        (tmp_path / "a").mkdir()
        result = _judge_here(tmp_path / "a", "cpu_gemm_honest.py")
        assert result.status == "ok", result  # the tenant from before the candidate started is the environment's
        real = gpuwatch.compute_processes
        looks = []

        def late(index):  # a new process takes the GPU once the candidate runs (after the watch's first look)
            nonlocal stranger
            looks.append(index)
            if stranger is None and len(looks) > 2:
                stranger = subprocess.Popen(["sleep", "60"])
            return real(index) + ([stranger.pid] if stranger else [])

        monkeypatch.setattr(gpuwatch, "compute_processes", late)
        (tmp_path / "b").mkdir()
        result = _judge_here(tmp_path / "b", "cpu_gemm_honest.py")
        assert result.status == "harness_error" and "not judged" in result.detail, result
    finally:
        for p in (before, stranger):
            if p is not None:
                p.kill()


# ---- what the candidate printed: kept (a bounded tail) in every stage, the verdict and the feedback ---------
def test_the_check_stage_keeps_the_end_of_the_candidates_output(tmp_path):
    from xlang.profiler.judge.process import OUTPUT_TAIL_CHARS

    run = _check(tmp_path, "cpu_gemm_prints.py")
    assert run.result.status == "ok", run.result
    out = run.result.candidate_output
    assert "xlang-stderr-marker line 79" in out["stderr"] and "xlang-stdout-marker done" in out["stdout"]
    assert len(out["stderr"]) == OUTPUT_TAIL_CHARS and "line 79:" in out["stderr"].splitlines()[-1]  # its end
    (tmp_path / "flood").mkdir()
    flood = _check(tmp_path / "flood", "cpu_gemm_flood.py")
    assert all(len(t) <= OUTPUT_TAIL_CHARS for t in flood.result.candidate_output.values())


def test_a_tool_stage_keeps_the_end_of_the_candidates_output(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    (build / "candidate.py").write_text((HERE / "cpu_gemm_prints.py").read_text())
    tool = ["sh", "-c", 'echo "========= ERROR SUMMARY: 0 errors" > {LOG}; exec "$@"', "tool"]
    spec = {"lang": "triton", "task": "gemm", "arch": "h100", "device": "cpu", "tool": tool, "gpu_index": SLOTS,
            "hello": {"op": "hello", "device": "cpu", "lang": "triton", "load": str(build / "candidate.py")},
            "readable": [str(build)], "trials": [({"M": 40, "N": 48, "K": 56}, "normal", 3)],
            "timing": {"enabled": False}}
    work = tmp_path / "eval"
    work.mkdir(mode=0o700)
    run = run_stage(plan(**{**spec, "mode": "memcheck"}), work, "memcheck", 120)
    assert run.result.status == "ok", run.result
    assert "xlang-stderr-marker line 79" in run.result.candidate_output["stderr"]


_CPU_JUDGE = """import json, sys
from xlang.profiler.judge.main import main
spec = json.load(open(sys.argv[1]))
spec.update(device="cpu", gpu_index={slots}, trials=[({{"M": 40, "N": 48, "K": 56}}, "normal", 3)],
            readable=[{build!r}], hello={{"op": "hello", "device": "cpu", "lang": "triton", "load": {load!r}}},
            timing={{"enabled": False}}, observer_library=None)
open(sys.argv[1], "w").write(json.dumps(spec))
main(sys.argv[1:])
"""


def test_the_verdict_and_the_feedback_show_what_the_candidate_printed(tmp_path, monkeypatch):
    """evaluate() on a stand-in GPU whose judge is the real one run on the CPU: the check stage's tail of the
    candidate's stderr reaches verdict.output, `xlang eval`'s text and the model's feedback (shortened)."""
    import io

    from rich.console import Console

    from xlang import verdict as V
    from xlang.agent.feedback import feedback_text
    from xlang.archs import get_arch
    from xlang.backend import BuildResult, get_backend
    from xlang.profiler import commands
    from xlang.profiler import evaluate as ev
    from xlang.profiler.stages import launch

    build = tmp_path / "build"
    build.mkdir()
    load = build / "candidate.py"
    load.write_text((HERE / "cpu_gemm_prints.py").read_text())
    wrapper = tmp_path / "cpu_judge.py"
    wrapper.write_text(_CPU_JUDGE.format(slots=SLOTS, build=str(build), load=str(load)))
    monkeypatch.setattr(ev.gpu_mod, "find_gpu", lambda arch: {"index": 0, "name": "Fake H200", "compute_capability": 90})
    monkeypatch.setattr(ev.gpu_mod, "from_nvml", lambda: None)
    monkeypatch.setattr(launch, "judge_command", lambda spec_path: [sys.executable, str(wrapper), str(spec_path)])
    monkeypatch.setattr(ev, "_observer_library", lambda: (None, "no observer in this test"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # the per-GPU lock file
    result = BuildResult(True, "triton", "", "", {}, str(build), load_path=str(load))
    v = ev.evaluate(result, "triton", "gemm", "h200", {"M": 40, "N": 48, "K": 56},
                    {"memcheck": False, "ncu": False, "timing": False, "workdir": tmp_path / "w"})
    assert v.correct, v.detail
    assert "xlang-stderr-marker line 79" in v.output["check"]["stderr"]
    assert V.Verdict.from_dict(v.to_dict()).output == v.output  # stored and read back with the verdict
    text = feedback_text(v, turn_idx=1, turns=4, backend=get_backend("triton"), arch=get_arch("h200"))
    assert "xlang-stderr-marker line 79" in text and "xlang-stdout-marker done" in text
    assert "line 59:" not in text  # shortened: its last 20 lines
    buf = io.StringIO()
    monkeypatch.setattr(commands, "console", Console(file=buf, width=120))
    commands.print_verdict(v)
    assert "xlang-stderr-marker line 79" in buf.getvalue() and "stderr (check stage" in buf.getvalue()


def test_the_watch_rule_under_a_tool(monkeypatch):
    """Under compute-sanitizer / Nsight Compute (no PID namespace): the tool and the runner (there before the
    candidate's code loaded) may hold contexts, and so may a program from the tool's own folders that is not a
    Python, and a relaunch of the target by the tool (application replay) while the runner holds none; a second
    Python of the candidate's uid holding a context beside the runner is forbidden, even from the tool's folder."""
    from xlang import sandbox
    from xlang.profiler import gpuwatch

    me, tool, runner, uid = os.getpid(), 900001, 900002, 64123
    procs = {tool: (uid, 1, "/opt/nsight/ncu"), runner: (uid, tool, "/usr/bin/python3.12"),
             900003: (uid, tool, "/opt/nsight/target/ncu-helper"), 900004: (uid, tool, "/usr/bin/python3.12"),
             900005: (uid, runner, "/opt/nsight/python3")}
    monkeypatch.setattr(sandbox, "uid_processes", lambda u: [(p, v[1]) for p, v in procs.items() if v[0] == u])
    monkeypatch.setattr(gpuwatch, "_status", lambda p: {"uid": procs[p][0], "ppid": procs[p][1], "name": "x"}
                        if p in procs else {})
    monkeypatch.setattr(gpuwatch, "_exe", lambda p: procs[p][2] if p in procs else "")
    holding: list = []
    monkeypatch.setattr(gpuwatch, "compute_processes", lambda index: [me, *holding])

    def watch(*holders, armed=(tool, runner)):
        w = gpuwatch.GpuWatch(0, uid, before={}, tool_pid=tool, tool_dirs=("/opt/nsight",))
        w.runner, w.root_pid = set(armed), tool
        holding[:] = holders
        w.poll()
        return w.finding()

    assert watch(tool, runner) is None
    assert watch(runner, 900003) is None  # the tool's own program
    assert watch(900004, armed=(tool, runner)) is None  # a relaunch by the tool, the runner holding nothing
    assert watch(runner, 900004)[0] == "forbidden_call"  # a second Python beside the runner
    assert watch(runner, 900005)[0] == "forbidden_call"  # a Python is never the tool's, wherever it lies


def test_a_memory_fault_the_driver_reports_is_a_memory_error(tmp_path, monkeypatch):
    """NVML's Xid events are the driver's word: an MMU fault (Xid 31) while the candidate's code runs is
    memory_error even when its process says its call went well; another Xid is only recorded."""
    from xlang.profiler import gpuwatch
    from xlang.sandbox import uid_for_slot

    _needs_uid_jail()
    _nvml_stand_in(monkeypatch, uid_for_slot(4 * SLOTS), helper_holds=False)
    for xid, status in ((13, "ok"), (31, "memory_error")):
        drains = []

        def events(index, xid=xid):  # nothing pending at arm; the fault on a later poll
            drains.append(index)
            return [xid] if len(drains) == 3 else []

        monkeypatch.setattr(gpuwatch, "xid_events", events)
        (tmp_path / str(xid)).mkdir()
        result = _judge_here(tmp_path / str(xid), "cpu_gemm_honest.py")
        assert result.status == status, result
        assert result.gpu_watch["xids"][0]["xid"] == xid and result.gpu_watch["xid_watch"]
        if status == "memory_error":
            assert "Xid 31" in result.detail and "MMU fault" in result.detail
