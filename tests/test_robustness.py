"""The judge's own work against hostile candidates (issue 46): a build whose report names more than the judge takes,
a folder chain deeper than any walk goes, FIFOs and links where the judge reads, a foreign process on the GPU, and a
build interrupted by Ctrl-C. Each hostile candidate ends in a named verdict within its time limit; none is an
internal error, a hang, or a verdict stored for an interrupted build."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from xlang import backend as backend_mod
from xlang import census, sandbox, untrusted
from xlang.archs import get_arch
from xlang.backend import build_candidate, build_timed_out
from xlang.task import get_task

HERE = Path(__file__).parent / "kernels" / "isolation"
SHAPE = {"M": 256, "N": 256, "K": 256}

needs_jail = pytest.mark.skipif(sandbox.level() != "bwrap+uid", reason="needs bubblewrap and root (bwrap+uid)")


def _burden(mode: str, target: str = "") -> str:
    return (HERE / "judge_burden_build.py").read_text().replace("__MODE__", mode).replace("__TARGET__", target)


def _xlang_build(tmp_path, source: str, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    """`xlang build --timeout` of a candidate, as a user runs it; (the process, its seconds)."""
    path = tmp_path / "candidate.py"
    path.write_text(source)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "xlang", "build", str(path), "--lang", "triton", "--task", "gemm",
                           "--arch", "h100", "--shape", "M=256,N=256,K=256", "--timeout", str(timeout), "--no-cache"],
                          capture_output=True, text=True, timeout=timeout + backend_mod.POST_BUILD_SLACK_S + 60,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    return proc, time.monotonic() - t0


# ---- 1. a budget on the judge's work after a build ---------------------------------------------------------------

@needs_jail
def test_a_report_naming_1500_modules_is_refused_within_the_timeout(tmp_path):
    """Issue 46: a report naming 1500 cubins made `xlang build --timeout 20` take 618 s of copies and disassembly.
    Now it is compile_error before any copy, well inside the limit, and nothing of it is copied."""
    proc, seconds = _xlang_build(tmp_path, _burden("modules"), 20)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "compile_error" in out and "1500 kernels" in out, out
    assert "internal error" not in out
    assert seconds < 20 + backend_mod.POST_BUILD_SLACK_S, seconds
    build = build_candidate(_burden("modules"), "triton", get_task("gemm"), get_arch("h100"), SHAPE,
                            workdir=tmp_path / "b", cache=False)
    assert not build.ok and "refused" in build.error and not build.kernels
    assert not list((tmp_path / "b").glob("k*.cubin")), "the judge copied what it refused"


def test_the_budget_counts_kernels_modules_and_ptx():
    k = backend_mod.KernelImage
    assert backend_mod.build_budget_problem([k(f"f{i}", "/m.cubin") for i in range(256)]) is None
    assert "257 kernels" in backend_mod.build_budget_problem([k(f"f{i}", "/m.cubin") for i in range(257)])
    many = [k("f", f"/m{i}.cubin", f"/m{i}.ptx") for i in range(65)]
    assert "65 modules" in backend_mod.build_budget_problem(many)
    assert "65 PTX" in backend_mod.build_budget_problem([k("f", "/m.cubin", f"/m{i}.ptx") for i in range(65)])


def test_the_census_stops_at_its_deadline(tmp_path):
    """The census of a build is bounded by the build's deadline: past it, CensusTimeout, never a long wait."""
    with pytest.raises(census.CensusTimeout):
        census.take_census([tmp_path / "x.cubin"], [], get_arch("h100"), ["wgmma"], deadline=time.monotonic() - 1)


@needs_jail
def test_a_build_past_its_limit_with_the_census_is_a_timeout(tmp_path, monkeypatch):
    """With no slack, a build whose child ends just before its limit and names 60 modules (under the count, each
    a real cubin the census disassembles) is stopped at the limit: compile_error marked as the build's time
    limit, within a second or two of it."""
    monkeypatch.setattr(backend_mod, "POST_BUILD_SLACK_S", 0.0)
    honest = build_candidate(_burden("none"), "triton", get_task("gemm"), get_arch("h100"), SHAPE,
                             workdir=tmp_path / "honest", cache=False)
    assert honest.ok, honest.error
    cubin = Path(honest.kernels[0].cubin).read_bytes()
    limit = max(6.0, honest.seconds + 3.0)
    source = (f"import json, os, time\ntime.sleep({limit - honest.seconds - 1.0:.2f})\nout = os.getcwd()\n"
              f"data = {cubin!r}\nkernels = []\n"
              "for i in range(60):\n"
              "    p = os.path.join(out, f'm{i}.cubin')\n"
              "    open(p, 'wb').write(data + bytes(i))\n"
              "    kernels.append({'name': f'gemm_{i}', 'cubin': p, 'ptx': None, 'meta': {}})\n"
              "json.dump({'ok': True, 'error': None, 'kernels': kernels, 'versions': {}},"
              " open(os.path.join(out, 'static_build.json'), 'w'))\nos._exit(0)\n")
    t0 = time.monotonic()
    build = build_candidate(source, "triton", get_task("gemm"), get_arch("h100"), SHAPE, workdir=tmp_path / "b",
                            timeout_s=limit, cache=False)
    seconds = time.monotonic() - t0
    assert not build.ok and build_timed_out(build.error), build.error
    assert seconds < limit + 3.0, (seconds, limit)


@needs_jail
def test_a_report_naming_a_file_that_is_no_module_is_a_compile_error(tmp_path):
    """A named 'cubin' cuobjdump cannot read is the build's failure (compile_error), not the judge's error."""
    source = ("import json, os\nout = os.getcwd()\nopen(os.path.join(out, 'm.cubin'), 'wb').write(os.urandom(4096))\n"
              "json.dump({'ok': True, 'error': None, 'kernels': [{'name': 'gemm', 'cubin': os.path.join(out, "
              "'m.cubin')}], 'versions': {}}, open(os.path.join(out, 'static_build.json'), 'w'))\nos._exit(0)\n")
    build = build_candidate(source, "triton", get_task("gemm"), get_arch("h100"), SHAPE, workdir=tmp_path / "b",
                            cache=False)
    assert not build.ok and "cannot be disassembled" in build.error, build.error


# ---- 2. walks of candidate folders: no recursion, no link, no FIFO opened ---------------------------------------

def _chain(top: Path, depth: int) -> None:
    top.mkdir(parents=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    os.close(fd)


def test_walks_of_a_deep_chain_neither_recurse_nor_follow(tmp_path):
    top = tmp_path / "cache"
    _chain(top, 3000)
    (top / "k.cubin").write_bytes(b"own")
    (top / "fifo.cubin").unlink(missing_ok=True)
    os.mkfifo(top / "fifo.cubin")
    (top / "link.cubin").symlink_to(top / "k.cubin")
    walked = list(untrusted.walk_untrusted(top))
    assert len(walked) == untrusted.WALK_MAX_DEPTH + 1
    assert walked[0][3] == ["k.cubin"]  # the FIFO and the link are no regular files
    with pytest.raises(untrusted.OverLimit, match="levels deep"):
        list(untrusted.walk_untrusted(top, strict=True))
    assert [rel for rel, _ in untrusted.untrusted_files(top, ".cubin")] == ["k.cubin"]
    with pytest.raises(untrusted.OverLimit):
        untrusted.copy_untrusted_tree(top, tmp_path / "copy", strict=True)
    assert untrusted.copy_untrusted_tree(top, tmp_path / "copy2") == 1
    untrusted.remove_untrusted_tree(top)  # 3000 deep: shutil.rmtree's recursion would not get there
    assert not top.exists()


def test_walks_are_bounded_in_entries(tmp_path):
    top = tmp_path / "wide"
    top.mkdir()
    for i in range(50):
        (top / f"f{i}").write_bytes(b"x")
    assert sum(len(f) for *_, f in untrusted.walk_untrusted(top, max_entries=10)) <= 10
    with pytest.raises(untrusted.OverLimit, match="more than 10 entries"):
        list(untrusted.walk_untrusted(top, max_entries=10, strict=True))


def test_a_fifo_or_a_link_where_a_folder_is_read_is_never_opened(tmp_path):
    """A FIFO as the folder itself, or a link to the host's FIFO: nothing is opened (a writer blocked on the FIFO
    stays blocked), nothing is yielded, and removal unlinks the name only."""
    fifo = tmp_path / "host-fifo"
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer():
        fd = os.open(fifo, os.O_WRONLY)  # blocks until someone opens the FIFO to read
        opened.set()
        os.close(fd)

    threading.Thread(target=writer, daemon=True).start()
    link = tmp_path / "cache-link"
    link.symlink_to(fifo)
    own = tmp_path / "cache-fifo"
    os.mkfifo(own)
    for top in (link, own):
        assert list(untrusted.walk_untrusted(top)) == []
        assert untrusted.copy_untrusted_tree(top, tmp_path / f"copy-{top.name}") == 0
        assert list(untrusted.untrusted_files(top, ".cubin")) == []
    assert untrusted.read_untrusted_bytes(link, 10) is None
    time.sleep(0.2)
    assert not opened.is_set(), "the judge opened the host's FIFO through the candidate's link"
    untrusted.remove_untrusted_tree(link)
    assert not link.is_symlink() and fifo.exists()
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # let the writer go


@needs_jail
def test_a_deep_chain_in_the_triton_cache_is_a_named_verdict(tmp_path):
    """Issue 46: a 1500-deep chain in the candidate's Triton cache raised RecursionError in the judge ("internal
    error", the build folder left behind). Now compile_error, within the limit, and `xlang build` removes the
    folder."""
    proc, seconds = _xlang_build(tmp_path, _burden("deep"), 60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "compile_error" in out and "levels deep" in out, out
    assert "internal error" not in out
    assert seconds < 60 + backend_mod.POST_BUILD_SLACK_S
    assert not list(tmp_path.glob("xlang-triton-h100-*")), "the build folder was left behind"


@needs_jail
@pytest.mark.parametrize("mode", ["fifo", "link", "inside"])
def test_a_fifo_planted_in_the_triton_cache_does_not_block_the_judge(tmp_path, mode):
    """The candidate's Triton cache made a FIFO, a link to the host's FIFO, or given a FIFO named like a cubin, as
    its build ends: the build is judged (its kernels are its report's), the host's FIFO is never opened, and the
    judge's copy of the cache holds no FIFO."""
    fifo = tmp_path / "host-fifo"
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer():
        fd = os.open(fifo, os.O_WRONLY)
        opened.set()
        os.close(fd)

    threading.Thread(target=writer, daemon=True).start()
    t0 = time.monotonic()
    build = build_candidate(_burden(mode, str(fifo)), "triton", get_task("gemm"), get_arch("h100"), SHAPE,
                            workdir=tmp_path / "b", timeout_s=60, cache=False)
    assert time.monotonic() - t0 < 60 + backend_mod.POST_BUILD_SLACK_S
    assert build.ok and not build.census.missing, build.error
    time.sleep(0.2)
    assert not opened.is_set(), "the judge opened the host's FIFO"
    copy = tmp_path / "b" / "jit-cache"
    assert all(p.is_file() or p.is_dir() for p in copy.rglob("*")) if copy.exists() else True
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))


# ---- 3. a process that is not the candidate's on the GPU: harness_error, retried once -------------------------

# The judge of each GPU stage, run for real (its own process, its runner in the jail) on the CPU: the spec the
# parent wrote is made the CPU twin of the GPU's, and NVML's process list is the stand-in below (the judge, the
# candidate's runner, and on the attempts STRANGER_ON names, a process of another uid that starts once the
# candidate runs; HELPER: the candidate's own helper process too).
JUDGE_ON_CPU = r'''
import json, os, subprocess, sys
from pathlib import Path

spec_path = Path(sys.argv[1])
spec = json.loads(spec_path.read_text())
spec["device"] = "cpu"
spec["hello"] = {**spec["hello"], "device": "cpu"}
spec["timing"] = {"enabled": False}
spec_path.unlink()
spec_path.write_text(json.dumps(spec))
counter = Path(os.environ["STRANGER_COUNTER"])
attempt = len(counter.read_text().splitlines()) + 1 if counter.exists() else 1
with open(counter, "a") as f:
    f.write("judge\n")

from xlang.profiler import gpuwatch
from xlang.profiler.judge import main as judge_main
from xlang.sandbox import uid_for_slot, uid_processes

uid = uid_for_slot(4 * int(spec["gpu_index"]))
looks, stranger = [], []

def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""

def holders(index):
    looks.append(index)
    pids = [os.getpid()]
    for pid, _ in uid_processes(uid):
        cmd = cmdline(pid)
        parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] if cmdline(pid) else "0"
        if (b"xlang.profiler.runner" in cmd and cmdline(int(parent)) != cmd) or \
                (os.environ.get("HELPER") and b"xlang-gpu-helper-5c1e" in cmd):
            pids.append(pid)
    if str(attempt) in os.environ.get("STRANGER_ON", "").split(",") and len(looks) > 2:
        if not stranger:
            stranger.append(subprocess.Popen(["sleep", "30"]))
        pids.append(stranger[0].pid)
    return sorted(pids)

gpuwatch.compute_processes = holders
judge_main.main([str(spec_path)])
'''


def _evaluate_with_a_stranger(tmp_path, monkeypatch, candidate: str, stranger_on: str, helper: bool = False):
    """evaluate() of a built CPU candidate (as compare hands one over: options.static) on a stand-in GPU whose
    judges are JUDGE_ON_CPU; the parent's own NVML look (the wait before a retry) sees the stranger for 1 s."""
    import random

    from xlang.backend import BuildResult, KernelImage
    from xlang.profiler import evaluate as ev
    from xlang.profiler import gpuwatch
    from xlang.profiler.stages import launch

    slot = random.SystemRandom().randrange(20, 240)  # uids of a slot of this test's own (tests/test_judge_isolation)
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    (build_dir / "candidate.py").write_text((HERE / candidate).read_text())
    build = BuildResult(True, "triton", "gemm", "h100", dict(SHAPE), str(build_dir),
                        load_path=str(build_dir / "candidate.py"), kernels=[KernelImage("gemm", "/none.cubin")])
    wrapper = tmp_path / "judge_on_cpu.py"
    wrapper.write_text(JUDGE_ON_CPU)
    monkeypatch.setattr(ev.gpu_mod, "find_gpu", lambda arch: {"index": slot, "name": "Stand-in", "compute_capability": 90})
    monkeypatch.setattr(ev.gpu_mod, "from_nvml", lambda: None)
    monkeypatch.setattr(ev, "_observer_library", lambda: (None, "no observer in this test"))
    monkeypatch.setattr(launch, "judge_command", lambda spec_path: [sys.executable, str(wrapper), str(spec_path)])
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # the per-GPU lock file
    t0 = time.monotonic()
    monkeypatch.setattr(gpuwatch, "compute_processes", lambda index: [12345] if time.monotonic() - t0 < 1 else [])
    counter = tmp_path / "attempts.txt"
    env = {"STRANGER_COUNTER": str(counter), "STRANGER_ON": stranger_on, **({"HELPER": "1"} if helper else {})}
    options = {"memcheck": False, "ncu": False, "timing": False, "shapes": [{"M": 40, "N": 48, "K": 56}],
               "trials": 1, "extra_env": env, "workdir": tmp_path / "eval",
               "static": {"failures": [], "census_ok": True}}
    verdict = ev.evaluate(build, "triton", get_task("gemm"), get_arch("h100"), dict(SHAPE), options)
    attempts = len(counter.read_text().splitlines()) if counter.exists() else 0
    return verdict, attempts


@needs_jail
def test_a_stranger_on_the_gpu_once_is_retried_and_judged(tmp_path, monkeypatch):
    """A process of another uid takes the GPU while the candidate runs (the H200's "not the judge's alone" run of
    issue 46): no internal error; the GPU stages run again once the GPU is quiet, and that run is the verdict."""
    verdict, attempts = _evaluate_with_a_stranger(tmp_path, monkeypatch, "cpu_gemm_honest.py", stranger_on="1")
    assert attempts == 2
    assert verdict.category == "ok" and verdict.correct, verdict.detail
    retry = verdict.fingerprint["harness_retry"]
    assert "not the judge's alone" in retry["first"] and retry["quiet"] and retry["waited_s"] >= 1.0


@needs_jail
def test_a_stranger_on_both_runs_is_harness_error_and_no_verdict(tmp_path, monkeypatch):
    from xlang import verdict as V

    verdict, attempts = _evaluate_with_a_stranger(tmp_path, monkeypatch, "cpu_gemm_honest.py", stranger_on="1,2")
    assert attempts == 2
    assert verdict.category == V.HARNESS_ERROR and "not the judge's alone" in verdict.detail, verdict.detail
    assert verdict.runtime_ran is False and verdict.runtime_note.startswith("not run (harness_error")
    scores = V.scores(verdict.to_dict())
    assert scores["correct"] is False and scores["compiled"] and not scores["runtime_ran"]


@needs_jail
def test_the_candidates_own_second_gpu_process_stays_forbidden_and_is_not_retried(tmp_path, monkeypatch):
    verdict, attempts = _evaluate_with_a_stranger(tmp_path, monkeypatch, "cpu_gemm_helper_process.py",
                                                  stranger_on="", helper=True)
    assert attempts == 1
    assert verdict.category == "forbidden_call" and "second process" in verdict.detail, verdict.detail
    assert "harness_retry" not in verdict.fingerprint


# ---- 4. Ctrl-C during a cuda_ptx build stores nothing; the resume builds it --------------------------------------

# What runs only while nvcc compiles (not for `nvcc --version`, which the compare asks before any work)
_COMPILER = {"cicc", "cudafe++", "ptxas", "cc1plus"}


def _asks_version(pid: int) -> bool:
    """`ptxas --version` and the like (the toolchain's identity, read before the store is opened): not a build."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"--version" in args


def _compilers_below(root: int) -> list[str]:
    """The names of nvcc's compiling processes descending from root now (a version query is not one: under load
    the test's Ctrl-C once landed on the identity's `ptxas --version`, before the compare had opened its store)."""
    parents, names = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            names[int(entry)] = stat[stat.index("(") + 1:stat.rindex(")")]
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = []
    for pid, name in names.items():
        p, hops = pid, 0
        while p > 1 and hops < 32:
            p, hops = parents.get(p, 0), hops + 1
            if p == root:
                if name in _COMPILER and not _asks_version(pid):
                    found.append(name)
                break
    return found


@pytest.mark.skipif(not __import__("shutil").which("nvcc"), reason="needs nvcc")
def test_ctrl_c_during_a_cuda_ptx_build_stores_nothing_and_the_resume_builds_it(tmp_path):
    """Issue 46: Ctrl-C in `xlang compare` during a cuda_ptx build stored the killed nvcc ("'gcc' died due to signal
    2") as the expert's compile_error, and the resume counted it done. Here SIGINT goes to the compare's process
    group (as a terminal sends it) while nvcc runs: nothing is stored for the cell, and the same command then builds
    and judges it (static_ok on a machine without its GPU)."""
    import signal

    from xlang.store import Store

    store = tmp_path / "runs.db"
    cmd = [sys.executable, "-m", "xlang", "compare", "--arch", "h100", "--langs", "cuda_ptx", "--tasks", "attn_bwd",
           "--model", "reference", "--store", str(store), "--profiler", "none"]
    env = {**os.environ, "XLANG_BUILD_CACHE": str(tmp_path / "build-cache"), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        t0, seen = time.monotonic(), []
        while not seen and proc.poll() is None and time.monotonic() - t0 < 120:
            seen = _compilers_below(proc.pid)
            time.sleep(0.02)
        assert seen, "nvcc never ran: " + (proc.stdout.read() if proc.poll() is not None else "")
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the whole foreground group
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "interrupted" in out, out
    with Store(store, readonly=True) as s:
        assert not [t for t in s.turns(messages=False) if t.get("category")], "an interrupted build was stored"
        assert all(r["status"] != "done" for r in s.runs())
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    with Store(store, readonly=True) as s:
        turns = [t for t in s.turns(messages=False) if t.get("category")]
        assert [t["category"] for t in turns] == ["static_ok"], turns
        assert [r["status"] for r in s.runs()] == ["done"]


# ---- 5. a cell whose judging failed in the judge finishes, and rejudge judges it again -------------------------

def test_a_judge_failure_is_stored_as_no_verdict_and_rejudge_finishes_the_cell(tmp_path, monkeypatch):
    """The judge's own failure while judging a turn (here its census raises; issue 46: a RecursionError) left the
    sample in error: every resume failed the same way and `xlang rejudge` counted the cell unfinished forever. Now
    the turn is stored as harness_error with the candidate's code, the cell finishes, and rejudging that store with
    a working judge judges the stored candidate (static_ok)."""
    import io

    from rich.console import Console

    from xlang import verdict as V
    from xlang.rejudge import run_rejudge
    from xlang.store import Store

    monkeypatch.setenv("XLANG_BUILD_CACHE", str(tmp_path / "build-cache"))

    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded (a judge bug)")

    def rejudge(paths, store):
        return run_rejudge([str(p) for p in paths], str(store), archs=["h100"], langs=["cuda_ptx"], tasks=["gemm"],
                           profiler="none", console=Console(file=io.StringIO(), width=300), progress=False)

    first = tmp_path / "first.db"
    with monkeypatch.context() as m:
        m.setattr(backend_mod, "take_census", broken)
        result = rejudge(["experts"], first)
    assert [o.state for o in result.cells] == ["done"], result.cells
    with Store(first, readonly=True) as s:
        (turn,) = s.turns(messages=False)
        assert turn["category"] == V.HARNESS_ERROR and "RecursionError" in turn["verdict"]["detail"]
        assert turn["code"] and V.scores(turn["verdict"])["runtime_ran"] is False
    again = rejudge([first], tmp_path / "second.db")
    assert [o.state for o in again.cells] == ["done"]
    with Store(tmp_path / "second.db", readonly=True) as s:
        assert [t["category"] for t in s.turns(messages=False)] == [V.STATIC_OK]


def test_a_harness_error_is_no_verdict_in_the_tables():
    """A sample whose only verdict is harness_error is left out of the runtime rates (n_runtime), never counted
    as incorrect; beside a sample that was judged, the rate is that sample's alone."""
    from report_records import run, verdict

    from xlang import verdict as V
    from xlang.report import tables
    from xlang.report.data import from_records

    lost = V.not_judged(V.Verdict(V.HARNESS_ERROR, lang="triton", task="gemm", arch="h100"),
                        "the check stage: the GPU was not the judge's alone: process 7 ...").to_dict()
    lost["build"] = {"ok": True, "census": {"missing": [], "kernels": []}}
    ds = from_records([run("a", "gemm", "triton", "h100", 0, [lost]),
                       run("b", "gemm", "triton", "h100", 1, [verdict("ok", "h100", "triton", "gemm", 1.1)])])
    row = tables.cell_stats(ds).iloc[0]
    assert row["n"] == 2 and row["n_runtime"] == 1 and row["correctness_rate"] == 1.0, row.to_dict()
