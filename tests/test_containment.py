"""Containment (issue 31 items 1 and 2, issue 41): the judge never writes where a candidate could, every stage
runs in one jail (tool stages included: the tool and its target inside it, at the strongest variant the tool
works in), and a jail shows a candidate only what it needs.

CPU tests build and judge hostile candidates of tests/kernels/isolation/ with the real jail (bwrap+uid here, as
on the GPU machine); the GPU tests at the end do the same in the check, memcheck and ncu stages."""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from xlang import resources, sandbox, untrusted
from xlang.archs import get_arch
from xlang.backend import build_candidate
from xlang.profiler.evaluate import EvalOptions, evaluate
from xlang.profiler.judge.plan import Plan
from xlang.profiler.stages.launch import run_stage
from xlang.task import get_task

HERE = Path(__file__).parent / "kernels" / "isolation"
REPO = resources.root()

needs_jail = pytest.mark.skipif(sandbox.level() != "bwrap+uid", reason="needs bubblewrap and root (bwrap+uid)")


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.is_symlink(), p.stat(follow_symlinks=False).st_size)
            for p in folder.rglob("*")}


def _repo_files() -> set:
    return {str(p) for p in (REPO / "xlang").rglob("*") if "__pycache__" not in p.parts}


# ---- 1. the judge never writes where a candidate could ---------------------------------------------------

@needs_jail
def test_links_planted_at_build_time_are_never_written_through(tmp_path):
    """A Triton candidate's import plants links named like every file and folder the judge writes, pointing
    into a stand-in for the repository; `evaluate` (the static part, as `xlang eval` on a CPU box) then writes
    its build, census and verdict: nothing appears in the target, nothing in the repository, and the judge's
    files are real files in its own folders."""
    target = tmp_path / "repo"
    target.mkdir(mode=0o777)
    target.chmod(0o777)  # writable by anyone: only the judge's care keeps it empty
    source = (HERE / "plant_links_build.py").read_text().replace("__TARGET__", str(target))
    before = _repo_files()
    work = tmp_path / "eval"
    verdict = evaluate(source, "triton", "gemm", "h100", {"M": 256, "N": 256, "K": 256},
                       EvalOptions(run="never", workdir=work))
    assert verdict.category == "static_ok", verdict.detail
    assert list(target.iterdir()) == [], "the judge wrote through a planted link"
    assert _repo_files() == before
    build = work / "build"
    for name in ("build.json", "candidate.py", "k0.cubin", "k1.ptx"):
        assert (build / name).is_file() and not (build / name).is_symlink(), name
    assert (work / "verdict.json").is_file() and not (work / "verdict.json").is_symlink()
    child = build / "child"
    assert child.is_dir() and not child.is_symlink(), "the candidate replaced its folder"
    assert (child / "build.json").is_symlink()  # it did plant them: in its own folder, where no one reads them
    assert not (build / "jit-cache" / "cache-link").exists()  # a link in its JIT cache is not copied
    assert all(not p.is_symlink() for p in (build / "jit-cache").rglob("*"))
    cubins = [k["cubin"] for k in verdict.build["kernels"]]
    assert cubins and all(Path(c).parent == build for c in cubins)  # the census read the judge's copies


@needs_jail
def test_a_report_naming_files_through_links_is_refused(tmp_path):
    """The static build's report may name only regular files of the child's folder: a candidate that makes the
    file its build will write (k0_<kernel>.cubin) a link gets a build failure, never the link's target read
    as its cubin."""
    plant = ("import os\nopen(os.path.join(os.getcwd(), 'real.cubin'), 'wb').close()\n"
             "os.symlink(os.path.join(os.getcwd(), 'real.cubin'), os.path.join(os.getcwd(), 'k0_gemm_tc.cubin'))\n")
    build = build_candidate(plant + _reader([], fail_at_import=True), "triton", get_task("gemm"), get_arch("h100"),
                            {"M": 256, "N": 256, "K": 256}, workdir=tmp_path / "b", cache=False)
    assert not build.ok and "not a regular file of its own" in build.error, build.error
    assert not (tmp_path / "b" / "k0.cubin").exists()


def test_the_judges_writes_refuse_a_planted_name(tmp_path):
    """write_new never writes through a link nor over a file that was there; replace_file replaces a link
    instead of following it; a stage folder is made fresh, never reused."""
    from xlang.profiler.stages.launch import _fresh_folder

    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "j").mkdir()
    link = tmp_path / "j" / "result.json"
    link.symlink_to(outside / "result.json")
    with pytest.raises(FileExistsError):
        untrusted.write_new(link, "x")
    untrusted.replace_file(link, "judged")
    assert not link.is_symlink() and link.read_text() == "judged" and not (outside / "result.json").exists()
    (tmp_path / "j" / "check").symlink_to(outside)
    fresh = _fresh_folder(tmp_path / "j", "check")
    assert fresh.name == "check-2" and fresh.is_dir() and not fresh.is_symlink()
    assert list(outside.iterdir()) == []


def test_untrusted_trees_are_copied_without_links(tmp_path):
    src, secret = tmp_path / "cache", tmp_path / "secret"
    (src / "ab").mkdir(parents=True)
    secret.mkdir()
    (secret / "key.cubin").write_bytes(b"secret")
    (src / "ab" / "k.cubin").write_bytes(b"own")
    (src / "ab" / "link.cubin").symlink_to(secret / "key.cubin")
    (src / "dir-link").symlink_to(secret)
    (src / "..hidden").write_text("x")
    assert untrusted.copy_untrusted_tree(src, tmp_path / "copy") == 1
    assert _tree(tmp_path / "copy") == {"ab": (False, 4096), "ab/k.cubin": (False, 3)}
    assert [rel for rel, _ in untrusted.untrusted_files(src, ".cubin")] == ["ab/k.cubin"]
    assert untrusted.read_untrusted_below(src, "dir-link/key.cubin", 100) is None
    assert untrusted.read_untrusted_below(src, "ab/k.cubin", 100) == b"own"


# ---- 2. one jail for every stage: the tool and its target inside it ------------------------------------

def _tool_stage(tmp_path, tool_args: list[str], marker: str):
    build = tmp_path / "build"
    build.mkdir()
    (build / "candidate.py").write_text((HERE / "cpu_gemm_shm_marker.py").read_text().replace("__MARKER__", marker))
    tool = [sys.executable, str(HERE / "shm_tool.py"), "{LOG}", *tool_args]
    spec = {"lang": "triton", "task": "gemm", "arch": "h100", "device": "cpu", "tool": tool, "tool_exit_s": 30,
            "hello": {"op": "hello", "device": "cpu", "lang": "triton", "load": str(build / "candidate.py")},
            "readable": [str(build / "candidate.py"), str(HERE)], "trials": [({"M": 40, "N": 48, "K": 56}, "normal", 3)],
            "timing": {"enabled": False},
            "gpu_index": 37}  # uids of a slot no other test on a shared box uses (kill_uid ends a stage's uids)
    work = tmp_path / "eval"
    work.mkdir(mode=0o700)
    return run_stage(Plan.from_dict({**spec, "mode": "memcheck"}), work, "memcheck", 180, env={"XLANG_CACHE": str(tmp_path / "c")})


@needs_jail
def test_a_tool_stage_runs_in_the_full_jail_and_leaves_no_marker(tmp_path):
    marker = f"xlang-marker-{uuid.uuid4().hex[:8]}"
    try:
        run = _tool_stage(tmp_path, [], marker)
        assert run.result.status == "ok", run.result
        assert run.result.isolation == "bwrap+uid"
        assert run.result.jail_ladder == [{"variant": "all", "ok": True, "why": "ok"}]
        assert "ERROR SUMMARY: 0 errors" in (run.stage_dir / "tool.log").read_text()
        assert not Path("/dev/shm", marker).exists() and not Path("/tmp", marker).exists()
    finally:
        for folder in ("/dev/shm", "/tmp"):
            Path(folder, marker).unlink(missing_ok=True)


@needs_jail
def test_a_tool_that_fails_in_a_pid_namespace_gets_the_next_variant(tmp_path):
    """The ladder: the tool (here one whose injection, like the H200's note said, does not survive a PID
    namespace) is probed with a trusted target at each variant; the first that works is used and recorded,
    and /dev/shm and /tmp stay private."""
    marker = f"xlang-marker-{uuid.uuid4().hex[:8]}"
    try:
        run = _tool_stage(tmp_path, ["--host-pidns", os.readlink("/proc/self/ns/pid")], marker)
        assert run.result.status == "ok", run.result
        assert run.result.isolation == "bwrap+uid (no PID namespace)"
        ladder = run.result.jail_ladder
        assert [t["variant"] for t in ladder] == ["all", "no-pid"] and [t["ok"] for t in ladder] == [False, True]
        assert "before first instrumented API call" in ladder[0]["why"]
        assert not Path("/dev/shm", marker).exists() and not Path("/tmp", marker).exists()
    finally:
        for folder in ("/dev/shm", "/tmp"):
            Path(folder, marker).unlink(missing_ok=True)


def test_uid_files_left_in_shared_folders_are_removed(tmp_path):
    """The last rung (no bubblewrap) shares the host's /tmp and /dev/shm: what the candidate's uid left at
    their top is removed after the stage; nothing of another owner."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    uid = sandbox.uid_for_slot(13)
    mine = tmp_path / "shm"
    mine.mkdir()
    (mine / "left").write_text("x")
    os.chown(mine / "left", uid, uid)
    (mine / "sub").mkdir()
    os.chown(mine / "sub", uid, uid)
    (mine / "ours").write_text("y")
    (mine / "link").symlink_to(tmp_path)
    os.chown(mine / "link", uid, uid, follow_symlinks=False)
    assert sandbox.remove_uid_files(uid, (str(mine),)) == 3
    assert sorted(p.name for p in mine.iterdir()) == ["ours"] and tmp_path.is_dir()


# ---- 3. the jail shows only what a candidate needs ------------------------------------------------------

def test_the_candidates_environment_names_only_what_its_jail_binds(tmp_path):
    jail = sandbox.Jail(home=tmp_path / "home", readable=[tmp_path / "candidate.py"])
    env = sandbox.child_env(jail=jail)
    roots = jail.bound_roots()
    for name, value in env.items():
        for part in value.split(os.pathsep):
            if part.startswith("/"):
                assert sandbox._under(part, roots), (name, part)
    assert str(REPO) not in env["PYTHONPATH"] and env["PYTHONPATH"].split(os.pathsep)[0] == \
        str(sandbox.runner_package())
    args = jail.command(["true"])
    assert "/" not in [args[i + 1] for i, a in enumerate(args) if a == "--ro-bind"]  # no whole-root view
    assert str(REPO) not in [args[i + 1] for i, a in enumerate(args) if a in ("--ro-bind", "--bind")]


def test_the_runner_package_has_no_answers():
    pkg = sandbox.runner_package()
    files = {str(p.relative_to(pkg)) for p in pkg.rglob("*") if p.is_file()}
    assert "xlang/profiler/runner.py" in files and "backends/triton/static_build.py" in files
    assert "tasks/gemm/__init__.py" in files
    assert not [f for f in files if "/solutions/" in f or "/drafts/" in f or f.startswith(("arch_docs", "reports"))
                or "NOTES" in f or f.startswith("xlang/agent")]
    assert all(not os.access(p, os.W_OK) or os.geteuid() == 0 for p in pkg.rglob("*.py"))
    assert sandbox.runner_package() == pkg  # made once, by content


def test_every_backend_imports_from_the_runner_package_alone():
    """The runner loads a candidate's backend from the runner package, which has no agent: a backend module that
    imports xlang.agent at its top (as a first cut of the cuda_ptx ptxas -v record did) fails every run there."""
    import subprocess

    from xlang.backend import backends

    pkg = sandbox.runner_package()
    names = sorted(backends())
    # As the runner starts: its module first (which stops an editable install's finder serving the checkout).
    probe = (f"import importlib, sys; sys.path.insert(0, {str(pkg)!r}); import xlang.profiler.runner; "
             f"[importlib.import_module(f'backends.{{n}}.backend') for n in {names!r}]; "
             "print('backends imported', flush=True); import xlang.agent")
    res = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=120, cwd="/")
    assert res.stdout.strip() == "backends imported", res.stderr[-2000:]
    assert res.returncode == 1 and res.stderr.strip().endswith("No module named 'xlang.agent'")  # the package has none


def test_the_runner_serves_no_expert_from_an_editable_install():
    """An editable install's finder maps xlang.tasks to the checkout (solutions included) when the package found first
    lacks it: once the runner has started, the checkout's tasks and agent are not importable by those names."""
    import subprocess

    pkg = sandbox.runner_package()
    for name in ("xlang.tasks", "xlang.agent", "xlang.backends"):
        probe = f"import sys; sys.path.insert(0, {str(pkg)!r}); import xlang.profiler.runner; import {name}"
        res = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=120, cwd="/")
        assert res.returncode == 1 and res.stderr.strip().endswith(f"No module named {name!r}"), (name, res.stderr[-800:])


def _reader(paths: list[str], fail_at_import: bool) -> str:
    text = (HERE / "read_host_files.py").read_text()
    text = text.replace("PATHS = []  # the test puts its paths here", f"PATHS = {paths!r}")
    return text.replace("FAIL_AT_IMPORT = True", f"FAIL_AT_IMPORT = {fail_at_import}")


@needs_jail
def test_the_static_build_child_sees_no_answers_stores_homes_or_reports(tmp_path):
    """One read attempt per thing a candidate must not see: the expert of its task, a results store beside
    the checkout, another candidate's build folder (outside /tmp), a file in a user's 755 home, the
    repository's reports. Any that opens fails the build with what it read; none may."""
    other = Path.home() / ".cache" / f"xlang-containment-{uuid.uuid4().hex[:8]}"
    store = REPO.parent / f".xlang-containment-{uuid.uuid4().hex[:8]}.db"
    home = Path("/home") / f"xlang-containment-{uuid.uuid4().hex[:8]}"
    try:
        first = build_candidate((HERE / "cpu_gemm_honest.py").read_text(), "triton", get_task("gemm"),
                                get_arch("h100"), {"M": 64, "N": 64, "K": 64}, workdir=other, cache=False)
        store.write_text("SQLite format 3 -- a stand-in results store")
        home.mkdir(mode=0o755, parents=True)
        (home / "notes.txt").write_text("a user's file")
        (home / "notes.txt").chmod(0o644)
        report = next(p for p in (REPO / "reports").rglob("*.md"))
        paths = [str(REPO / "tasks" / "gemm" / "solutions" / "triton.py"), str(store), str(first.workdir),
                 str(Path(first.workdir) / "candidate.py"), str(home / "notes.txt"), str(report),
                 str(REPO / "reports"), str(REPO), str(REPO / "xlang-runs")]
        source = _reader(paths, fail_at_import=True)
        build = build_candidate(source, "triton", get_task("gemm"), get_arch("h100"),
                                {"M": 256, "N": 256, "K": 256}, workdir=tmp_path / "b", cache=False)
        assert build.ok, build.error
        assert build.census is not None and not build.census.missing
        # the control: the same reads of a file the jail does show succeed (the candidate's own source)
        shown = _reader([str(tmp_path / "c" / "candidate.py")], fail_at_import=True)
        seen = build_candidate(shown, "triton", get_task("gemm"), get_arch("h100"), {"M": 256, "N": 256, "K": 256},
                               workdir=tmp_path / "c", cache=False)
        assert not seen.ok and "the jail showed" in seen.error
    finally:
        store.unlink(missing_ok=True)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)


@needs_jail
def test_a_candidate_that_loads_the_expert_fails_to_build(tmp_path):
    source = (HERE / "load_expert.py").read_text().replace("__CHECKOUT__", str(REPO))
    verdict = evaluate(source, "triton", "gemm", "h100", {"M": 256, "N": 256, "K": 256},
                       EvalOptions(run="never", workdir=tmp_path / "e"))
    assert verdict.category == "compile_error", verdict.detail
    assert "no expert solution in view" in verdict.detail


# ---- on the GPU: the same in the check, memcheck and ncu stages -------------------------------------------

@pytest.mark.gpu
def test_gpu_stages_leave_no_shm_marker_and_show_no_answers(tmp_path):
    """A Triton candidate that writes a /dev/shm and /tmp marker in every process and tries to read the expert,
    a store beside the checkout, a user's home file and the reports; what it sees turns into a wrong answer.
    Judged in full (check, memcheck, ncu): ok, no marker left, every stage's jail recorded."""
    marker = f"xlang-marker-{uuid.uuid4().hex[:8]}"
    store = REPO.parent / f".xlang-containment-{uuid.uuid4().hex[:8]}.db"
    home = Path("/home") / f"xlang-containment-{uuid.uuid4().hex[:8]}"
    try:
        store.write_text("a stand-in results store")
        home.mkdir(mode=0o755, parents=True)
        (home / "notes.txt").write_text("a user's file")
        paths = [str(REPO / "tasks" / "gemm" / "solutions" / "triton.py"), str(store), str(home / "notes.txt"),
                 str(next((REPO / "reports").rglob("*.md"))), str(REPO)]
        reader = _reader(paths, fail_at_import=False)
        shm = (f"\nfor _f in ('/dev/shm', '/tmp'):\n    try:\n        open(os.path.join(_f, {marker!r}), 'w').write('x')\n"
               "    except OSError:\n        pass\n")
        verdict = evaluate(reader + shm, "triton", "gemm", "h100", {"M": 1024, "N": 1024, "K": 1024},
                           EvalOptions(workdir=tmp_path / "e", peers=False))
        print(json.dumps({"category": verdict.category, "detail": verdict.detail[:400],
                          "stage_isolation": verdict.fingerprint.get("stage_isolation")}, indent=1))
        assert verdict.category == "ok", verdict.detail
        assert verdict.memcheck.get("ran") and verdict.executed.get("ran")
        assert set(verdict.fingerprint["stage_isolation"]) == {"check", "memcheck", "ncu"}
        assert not Path("/dev/shm", marker).exists() and not Path("/tmp", marker).exists()
    finally:
        store.unlink(missing_ok=True)
        shutil.rmtree(home, ignore_errors=True)
        for folder in ("/dev/shm", "/tmp"):
            Path(folder, marker).unlink(missing_ok=True)


@pytest.mark.gpu
def test_gpu_tool_stages_of_a_cuda_ptx_candidate_leave_no_shm_marker(tmp_path):
    """The same for cuda_ptx: its shared object writes a marker in /dev/shm and /tmp when it is loaded (in the
    check, memcheck and ncu processes alike); a plain-FMA GEMM, so its verdict is missing_instructions with
    memcheck and Nsight Compute run. No marker survives the verdict; each stage's jail is recorded."""
    marker = f"xlang-marker-{uuid.uuid4().hex[:8]}"
    plant = ("#include <cstdio>\n__attribute__((constructor)) static void xlang_plant() {\n"
             f'  for (const char* d : {{"/dev/shm/{marker}", "/tmp/{marker}"}}) {{\n'
             '    FILE* f = fopen(d, "w"); if (f) { fputs("left by a candidate", f); fclose(f); }\n  }\n}\n')
    source = plant + (Path(__file__).parent / "kernels" / "agent" / "gemm_fma.cu").read_text()
    try:
        verdict = evaluate(source, "cuda_ptx", "gemm", "h100", {"M": 512, "N": 512, "K": 512},
                           EvalOptions(workdir=tmp_path / "e", peers=False))
        print(json.dumps({"category": verdict.category, "detail": verdict.detail[:300],
                          "stage_isolation": verdict.fingerprint.get("stage_isolation")}, indent=1))
        assert verdict.correct, verdict.detail
        assert verdict.memcheck.get("ran") and verdict.executed.get("ran"), verdict.detail
        assert all(verdict.fingerprint["stage_isolation"].values())
        assert not Path("/dev/shm", marker).exists() and not Path("/tmp", marker).exists()
    finally:
        for folder in ("/dev/shm", "/tmp"):
            Path(folder, marker).unlink(missing_ok=True)
