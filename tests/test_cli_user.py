"""The CLI as a new user meets it (issue 16): one line and a non-zero exit for bad input, never a traceback;
failures before any work; tables that read at 80 columns and piped; the build limit, clean-up and cache."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from test_cli_store import make_store, one_line
from xlang import build_cache, toolchain

ROOT = Path(__file__).resolve().parent.parent
GEMM_CU = ROOT / "tasks" / "gemm" / "solutions" / "cuda_ptx_hopper.cu"
FAKE_GPU = '[{"index": 0, "name": "Fake H200", "compute_capability": 90}]'
BUILD = ["-l", "cuda_ptx", "-t", "gemm", "-a", "h100"]


@pytest.fixture
def no_nvcc(monkeypatch):
    real = toolchain.find_tool
    monkeypatch.setattr(toolchain, "find_tool", lambda name: None if name == "nvcc" else real(name))


# ------------------------------------------------------------------------------------------- smaller items


def test_version_help_and_one_meaning_per_option(xlang, monkeypatch):
    code, out, _ = xlang("--version")
    assert code == 0 and re.match(r"xlang \d+\.\d+\.\d+ \(harness \S+\)", out)
    monkeypatch.setenv("COLUMNS", "200")
    helps = {cmd: xlang(cmd, "--help")[1] for cmd in ("run", "build", "compare")}
    assert "task name (xlang tasks lists them)" in helps["run"] and "task name" in helps["build"]
    for cmd in ("run", "compare"):
        assert "sampling temperature" in helps[cmd] and "most tokens per reply" in helps[cmd]
    defaults = {cmd: re.search(r"--concurrency.*?\[default: (\d+)\]", helps[cmd], re.S).group(1)
                for cmd in ("run", "compare")}
    assert defaults["run"] == defaults["compare"]
    # -t / --task names the task(s) everywhere; compare takes a comma-separated list under both spellings.
    code, _, err = xlang("compare", "--arch", "h100", "--langs", "triton", "--task", "nosuch")
    assert code == 2
    one_line(err, "unknown task 'nosuch'")


def test_build_refuses_folders_and_binary_files(xlang, tmp_path):
    binary = tmp_path / "k.cu"
    binary.write_bytes(b"\x7fELF\x00\xff\xfe\x80" * 64)
    for path, needle in ((tmp_path, "is a directory"), (binary, "not UTF-8"), (tmp_path / "none.cu", "no such file")):
        code, out, err = xlang("build", path, *BUILD)
        assert code == 2, (path, out, err)
        one_line(err, needle)


def test_profiler_and_shape_are_checked_before_any_work(xlang, tmp_path):
    db = tmp_path / "c.db"
    # --shape M,N,K applies to gemm only: accepted with every task selected (the error is the profiler's).
    code, _, err = xlang("compare", "--arch", "h100", "--langs", "triton", "--shape", "M=4096,N=4096,K=4096",
                         "--profiler", "bogus", "--store", db)
    assert code == 2
    one_line(err, "unknown profiler 'bogus'")
    code, _, err = xlang("compare", "--arch", "h100", "--langs", "triton", "--shape", "Q=4", "--store", db)
    assert code == 2
    one_line(err, "--shape Q")
    code, _, err = xlang("run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", "reference", "--profiler", "bogus",
                         "--store", db)
    assert code == 2
    one_line(err, "unknown profiler 'bogus'")
    assert not db.exists()


def test_missing_nvcc_stops_before_any_build(xlang, tmp_path, no_nvcc):
    db = tmp_path / "c.db"
    start = time.monotonic()
    code, out, err = xlang("compare", "--arch", "h100", "--langs", "triton,cuda_ptx", "--tasks", "gemm",
                           "--profiler", "none", "--store", db)
    assert code == 2 and time.monotonic() - start < 10
    one_line(err, "nvcc not found")
    assert not db.exists() and "triton" not in out  # no Triton cell was built first
    code, _, err = xlang("build", GEMM_CU, *BUILD)
    assert code == 2
    one_line(err, "nvcc not found")
    code, _, err = xlang("run", "-t", "gemm", "-l", "cuda_ptx", "-a", "h100", "-m", "reference", "--store", db)
    assert code == 2 and not db.exists()
    one_line(err, "nvcc not found")


# ------------------------------------------------------------------------------- the worker's replacement


def test_worker_urls_point_to_ray(xlang, tmp_path):
    """`xlang worker` is gone (Ray replaces it): a worker URL says what to use instead, in one line."""
    code, _, err = xlang("compare", "--arch", "h100", "--langs", "triton", "--profiler", "http://gpu-box:8765",
                         "--store", tmp_path / "r.db")
    assert code == 2
    one_line(err, "--ray ADDRESS")
    code, _, err = xlang("worker", "--port", "0")
    assert code == 2 and "No such command" in err


# ------------------------------------------------------------------------------------------- models


def test_missing_key_is_said_at_once_without_litellm(tmp_path):
    code = ("import sys, time\nfrom xlang.cli import main\nt = time.monotonic()\n"
            f"try:\n    main(['run', '-t', 'gemm', '-l', 'triton', '-a', 'h100', '-m', 'openai/gpt-4o', '--store', "
            f"{str(tmp_path / 'r.db')!r}])\n"
            "except SystemExit as e:\n    print(e.code, 'litellm' in sys.modules, time.monotonic() - t)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("OPENAI_API_KEY",)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    exit_code, imported, seconds = proc.stdout.split()
    assert exit_code == "2" and imported == "False" and float(seconds) < 3, proc.stdout + proc.stderr
    one_line(proc.stderr, "OPENAI_API_KEY")


def test_a_common_providers_endpoint_is_reached_before_the_run(xlang, tmp_path, monkeypatch):
    """OPENAI_API_KEY set, no network (issue 37): one line and exit 2 before a run is stored, not an `error` run
    after the first call; a proxy, where one is set, is what must answer."""
    real = socket.getaddrinfo

    def offline(host, *a, **kw):
        if host in ("127.0.0.1", "localhost"):
            return real(host, *a, **kw)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", offline)
    for var in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "HTTPS_PROXY", "https_proxy", "ANTHROPIC_BASE_URL",
                "ANTHROPIC_API_BASE", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-fake")
    db = tmp_path / "r.db"
    for model, host in (("openai/gpt-4o", "api.openai.com"), ("anthropic/claude-x", "api.anthropic.com")):
        code, _, err = xlang("run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", model, "--profiler", "none",
                             "--store", db)
        assert code == 2
        one_line(err, host, "does not resolve")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    code, _, err = xlang("compare", "-a", "h100", "-l", "triton", "-m", "openai/gpt-4o", "--store", db)
    assert code == 2
    one_line(err, "proxy", "no answer")
    assert not db.exists()


def test_turns_that_never_got_a_reply_are_no_candidates(xlang, tmp_path):
    """Two samples whose model call failed (no reply): the report counts 0 evaluated candidates, not 2."""
    from xlang.store import Store

    db = tmp_path / "r.db"
    with Store(db) as s:
        s.create_run("r1", task="gemm", lang="triton", arch="h100", model="openai/gpt-4o", source="llm",
                     turns_limit=8, samples=2)
        for k in (0, 1):
            s.start_sample("r1", k)
            s.add_turn("r1", k, 1, messages=[{"role": "user", "content": "x"}],
                       error="InternalServerError: Connection error")
            s.update_sample("r1", k, status="error", note="turn 1: InternalServerError: Connection error")
        s.finish_run("r1", status="error")
    code, out, err = xlang("report", "--store", db, "--out", tmp_path / "rep")
    assert code == 0, err
    assert "2 sample runs, 0 candidates" in out
    assert "0 evaluated candidates" in (tmp_path / "rep" / "report.md").read_text()


def test_model_provider_and_endpoint_are_checked_before_any_work(xlang, tmp_path, monkeypatch):
    db = tmp_path / "r.db"
    monkeypatch.delenv("HOSTED_VLLM_API_BASE", raising=False)
    for cmd in (["run", "-t", "gemm", "-l", "triton", "-a", "h100"], ["compare", "-a", "h100", "-l", "triton"]):
        start = time.monotonic()
        code, _, err = xlang(*cmd, "-m", "hosted_vllm/my-model", "--store", db)
        assert code == 2 and time.monotonic() - start < 5
        one_line(err, "HOSTED_VLLM_API_BASE")
    monkeypatch.setenv("HOSTED_VLLM_API_BASE", "http://nosuchhost.invalid:8000/v1")
    code, _, err = xlang("run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", "hosted_vllm/my-model",
                         "--store", db)
    assert code == 2
    one_line(err, "does not resolve")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HOSTED_VLLM_API_BASE", f"http://127.0.0.1:{port}/v1")
    code, _, err = xlang("run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", "hosted_vllm/my-model",
                         "--store", db)
    assert code == 2
    one_line(err, "no answer")
    code, _, err = xlang("run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", "notaprovider/foo", "--store", db)
    assert code == 2
    one_line(err, "no provider")
    assert not db.exists()  # nothing stored: no error run for a name that could never work


def test_errors_that_cannot_succeed_are_not_retried(monkeypatch):
    from xlang.agent import llm

    litellm = llm.litellm_module()
    calls = []

    def raising(exc):
        def completion(**kw):
            calls.append(1)
            raise exc
        return completion

    monkeypatch.setattr(llm, "_sleep", lambda s: None)
    dns = litellm.APIConnectionError(message="Connection error", llm_provider="hosted_vllm", model="m")
    dns.__cause__ = socket.gaierror(-2, "Name or service not known")
    cases = [(dns, 1),
             (litellm.AuthenticationError(message="bad key", llm_provider="openai", model="m"), 1),
             (litellm.RateLimitError(message="slow down", llm_provider="openai", model="m"), 3)]
    for exc, attempts in cases:
        calls.clear()
        monkeypatch.setattr(litellm, "completion", raising(exc))
        reply = llm.LLMClient("openai/m", retries=2).complete([{"role": "user", "content": "x"}])
        assert reply.error and reply.attempts == attempts == len(calls), (type(exc).__name__, reply.attempts)


# ------------------------------------------------------------------------------------------- tables


def test_tasks_and_archs_at_80_columns_piped_and_json(xlang, monkeypatch):
    from xlang.task import all_tasks, format_shape

    monkeypatch.setenv("COLUMNS", "80")
    for cmd in ("tasks", "archs"):
        code, out, _ = xlang(cmd)
        assert code == 0 and "…" not in out
        assert max(len(line) for line in out.splitlines()) <= 80, cmd
        if cmd == "tasks":
            words = {w for t in all_tasks() for w in format_shape(t.default_shape).replace(",", ", ").split()}
            assert all(w in out.split() for w in words)  # every size whole, none cut
    monkeypatch.delenv("COLUMNS")
    code, out, _ = xlang("tasks")  # piped (not a terminal): no 80-column cut
    assert "xlang_entry(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D)" in out
    assert "B=4, H=48, HKV=48, S=4096, D=128" in out
    code, out, _ = xlang("tasks", "--json")
    rows = json.loads(out)
    assert {r["task"] for r in rows} >= {"gemm", "attn_fwd"} and rows[0]["default_shape"]
    code, out, _ = xlang("archs", "--json")
    data = json.loads(out)
    assert {a["arch"] for a in data["archs"]} >= {"h100", "b200"} and data["families"][0]["sass"]


def test_compare_table_at_80_columns_says_not_run_once():
    from rich.console import Console

    from report_records import NOT_RUN, records
    from xlang.compare import CompareResult
    from xlang.compare_output import print_table
    from xlang.report import tables
    from xlang.report.data import from_records

    ds = from_records(records(), [])
    result = CompareResult([], ds, tables.cell_stats(ds), 0.0)
    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    print_table(result, console)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in text
    first_note = next(i for i, ln in enumerate(lines) if ln.startswith("¹"))
    body = "\n".join(lines[:first_note])
    assert NOT_RUN not in body and "not run¹" in body  # the reason once, as a footnote
    assert text.count(NOT_RUN) == 1 and f" {NOT_RUN}" in "\n".join(lines[first_note:])
    cells = tables.format_cells(result.stats)
    for col in ("task", "arch", "lang"):
        for value in cells[col]:
            assert re.search(rf"(^|\s){re.escape(value)}(\s|$)", body, re.M), value  # never split
    # Every word of every cell is somewhere whole in the table.
    words = {w for col in cells.columns for v in cells[col] for w in str(v).split() if not str(v).startswith("not run")}
    assert all(w in body.split() for w in words), sorted(w for w in words if w not in body.split())


# ------------------------------------------------------------------------------------------- build


def test_build_limit_cleanup_keep_and_cache(xlang, tmp_path, monkeypatch):
    monkeypatch.setenv("XLANG_BUILD_CACHE", str(tmp_path / "cache"))  # its own: the entry tampered below is ours
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    loop = tmp_path / "loop.py"
    loop.write_text("while True:\n    pass\n")
    start = time.monotonic()
    code, out, err = xlang("build", loop, "-l", "triton", "-t", "gemm", "-a", "h100", "--timeout", "3")
    assert code == 1 and "exceeded 3 s" in out and time.monotonic() - start < 30, out + err
    code, _, err = xlang("build", loop, "-l", "triton", "-t", "gemm", "-a", "h100", "--timeout", "0")
    assert code == 2
    one_line(err, "--timeout")

    code, out, err = xlang("build", GEMM_CU, *BUILD)  # cold
    assert code == 0 and "from the build cache" not in out, out + err
    start = time.monotonic()
    code, out, err = xlang("build", GEMM_CU, *BUILD)  # warm: the same source, toolchain and build code
    assert code == 0 and "from the build cache" in out and time.monotonic() - start < 2, out + err
    assert list(scratch.iterdir()) == []  # no build folder left behind
    code, out, err = xlang("build", GEMM_CU, *BUILD, "--keep")
    kept = Path(re.search(r"build folder: (\S+)", out).group(1))
    assert kept.is_dir() and (kept / "candidate.so").is_file() and (kept / "build.json").is_file()

    # A cache entry whose files changed is never used: rebuilt, and the entry replaced.
    entry = next(p for p in Path(build_cache.cache_root()).glob("*/*") if (p / "files" / "candidate.so").is_file())
    with open(entry / "files" / "candidate.so", "ab") as f:
        f.write(b"tampered")
    code, out, err = xlang("build", GEMM_CU, *BUILD, "--json")
    assert code == 0 and json.loads(out)["cached"] is False
    code, out, err = xlang("build", GEMM_CU, *BUILD, "--json")
    assert code == 0 and json.loads(out)["cached"] is True

    # Reused by run and compare (the agent loop judges through the same build).
    db = tmp_path / "r.db"
    code, out, err = xlang("run", "-t", "gemm", "-l", "cuda_ptx", "-a", "h100", "-m", "reference", "--profiler",
                           "none", "--store", db)
    assert code == 0, out + err
    from xlang.store import Store

    with Store(db, readonly=True) as s:
        assert [t["build"]["cached"] for t in s.turns()] == [True]
        assert s.runs()[0]["versions"]["nvcc"].startswith("V13.")  # the toolchain that built it is recorded
    code, out, err = xlang("compare", "--arch", "h100", "--langs", "cuda_ptx", "--tasks", "gemm", "--profiler",
                           "none", "--store", tmp_path / "c.db", "--json")
    assert code == 0, err
    cells = json.loads(out)["cells"]
    assert len(cells) == 1 and cells[0]["state"] == "done" and cells[0]["seconds"] < 5


def test_cache_key_covers_source_and_target():
    from xlang.archs import get_arch
    from xlang.backend import get_backend
    from xlang.task import get_task

    gemm, attn, h100, b200 = get_task("gemm"), get_task("attn_fwd"), get_arch("h100"), get_arch("b200")
    src = GEMM_CU.read_text()
    cuda_ptx, triton = get_backend("cuda_ptx"), get_backend("triton")
    base = build_cache.key(src, cuda_ptx, gemm, h100, gemm.shape(), ("wgmma",))
    assert base == build_cache.key(src, cuda_ptx, gemm, h100, gemm.shape(), ("wgmma",))
    others = [build_cache.key(src + " ", cuda_ptx, gemm, h100, gemm.shape(), ("wgmma",)),
              build_cache.key(src, cuda_ptx, gemm, b200, gemm.shape(), ("wgmma",)),
              build_cache.key(src, cuda_ptx, attn, h100, attn.shape(), ("wgmma",)),
              build_cache.key(src, cuda_ptx, gemm, h100, gemm.shape({"M": 128}), ("wgmma",)),
              build_cache.key(src, cuda_ptx, gemm, h100, gemm.shape(), ("wgmma", "tma")),
              build_cache.key(src, triton, gemm, h100, gemm.shape(), ("wgmma",))]
    assert len({base, *others}) == len(others) + 1


# ------------------------------------------------------------------------------------------- the sweep


def test_no_command_shows_a_traceback_for_bad_input(xlang, tmp_path, monkeypatch):
    """Every command, fed bad input: a non-zero exit, no traceback, no 'internal error' (each case handled)."""
    monkeypatch.delenv("HOSTED_VLLM_API_BASE", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("XLANG_FAKE_GPUS", "[]")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\x00\x01garbage" * 50)
    binary = tmp_path / "bin.py"
    binary.write_bytes(b"\xff\xfe\x00" * 50)
    newer = make_store(tmp_path / "newer.db")
    import sqlite3

    with sqlite3.connect(newer) as c:
        c.execute("UPDATE meta SET value='99'")
    ok_py = ROOT / "tasks" / "gemm" / "solutions" / "triton.py"
    s = ["--store", tmp_path / "s.db"]
    cases = [
        ["nosuchcommand"], ["tasks", "--bogus"], ["archs", "extra"],
        ["build"], ["build", ok_py], ["build", ok_py, "-l", "fortran", "-t", "gemm", "-a", "h100"],
        ["build", ok_py, "-l", "triton", "-t", "nosuch", "-a", "h100"],
        ["build", ok_py, "-l", "triton", "-t", "gemm", "-a", "a100"],
        ["build", ok_py, "-l", "triton", "-t", "gemm", "-a", "h100", "--shape", "M=x"],
        ["build", ok_py, "-l", "triton", "-t", "gemm", "-a", "h100", "--shape", "Z=4"],
        ["build", ok_py, "-l", "triton", "-t", "gemm", "-a", "h100", "--require", "nosuchfamily"],
        ["build", binary, "-l", "triton", "-t", "gemm", "-a", "h100"],
        ["build", tmp_path, "-l", "triton", "-t", "gemm", "-a", "h100"],
        ["build", ok_py, "-l", "triton", "-t", "gemm", "-a", "h100", "--timeout", "-1"],
        ["eval", tmp_path / "none.py", "-l", "triton", "-t", "gemm", "-a", "h100"],
        ["eval", "expert", "-l", "triton", "-t", "gemm"],
        ["eval", "expert", "-l", "triton", "-t", "gemm", "-a", "h100", "--trials", "0"],
        ["eval", "expert", "-l", "triton", "-t", "gemm", "-a", "h100", "--timing-rest-ms", "-5"],
        ["compare", "--arch", "h100", "--langs", "triton", "--timing-rest-ms", "5000", *s],
        ["run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", "reference", "--turns", "0", *s],
        ["run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", "reference", "--docs", "bogus", *s],
        ["run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", "openai/gpt-4o", *s],
        ["run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", "hosted_vllm/x", *s],
        ["run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", f"replay:{tmp_path / 'none.db'}", *s],
        ["run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", f"replay:{garbage}", *s],
        ["run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", "reference", "--store", garbage],
        ["run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", "reference", "--store", newer],
        ["run", "-t", "gemm", "-l", "triton", "-a", "h100", "-m", "reference", "--store", tmp_path],
        ["compare", "--arch", "", "--langs", "triton", *s], ["compare", "--arch", "h100", "--langs", "", *s],
        ["compare", "--arch", "h100", "--langs", "triton", "--turns", "0", *s],
        ["compare", "--arch", "h100", "--langs", "triton", "--profiler", "http://nosuchhost.invalid:1", *s],
        ["compare", "--arch", "h100", "--langs", "triton", "--store", garbage],
        ["compare", "--arch", "h100", "--langs", "triton", "--store", newer],
        ["report", "--store", tmp_path / "none.db"], ["report", "--store", garbage], ["report", "--store", newer],
        ["report", "--store", tmp_path],
        ["trajectory", "--store", tmp_path / "none.db"], ["trajectory", "--store", garbage],
        ["trajectory", "x", "--store", newer], ["trajectory", "--store", binary],
        ["compare", "--arch", "h100", "--langs", "triton", "--ray", "--profiler", "none", *s],
    ]
    for args in cases:
        code, out, err = xlang(*args)
        text = out + err
        assert code != 0, (args, text)
        assert "Traceback" not in text and "internal error" not in text, (args, text)


# ------------------------------------------------------------------------------------------- issue 37, item 6


def test_report_where_with_a_value_no_run_has_is_one_line(xlang, tmp_path):
    db = make_store(tmp_path / "r.db")
    code, _, err = xlang("report", "--store", db, "--where", "lang=nosuch", "--out", tmp_path / "rep")
    assert code == 2 and not (tmp_path / "rep").exists()
    one_line(err, "lang=nosuch", "triton")
    code, _, err = xlang("report", "--store", db, "--where", "lang=triton,arch=b200", "--out", tmp_path / "rep")
    assert code == 2
    one_line(err, "arch=b200", "h100")
    code, _, err = xlang("report", "--store", db, "--where", "lang=triton", "--out", tmp_path / "rep")
    assert code == 0, err


def test_ctrl_c_says_so_in_one_line(xlang, tmp_path, monkeypatch):
    """Typer turns a KeyboardInterrupt into a silent exit 130: the user gets a word as well."""
    from xlang import compare

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(compare, "run_compare", interrupted)
    code, _, err = xlang("compare", "--arch", "b200", "--langs", "triton", "--profiler", "none",
                         "--store", tmp_path / "r.db")
    assert code == 130
    one_line(err, "interrupted")


def test_help_shows_no_value_for_flags(xlang, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    for cmd in ([], ["compare"], ["build"], ["run"], ["report"], ["eval"], ["fixit", "collect"], ["tasks"]):
        code, out, _ = xlang(*cmd, "--help")
        assert code == 0 and "--help" in out, cmd
        assert "<bool>" not in out and "BOOLEAN" not in out, (cmd, out)


def test_progress_says_what_a_turn_waits_for(tmp_path, monkeypatch):
    """Between stored turns the loop tells its display what it is doing (the model, the build, the verdict):
    compare's per-cell line and run's line per sample show it instead of "starting" or nothing."""
    from xlang import compare
    from xlang.agent import loop

    seen = []
    loop.run(loop.RunConfig(task="gemm", lang="triton", arch="b200", model="reference", turns=1, profiler="none",
                            store=str(tmp_path / "r.db")), on_stage=lambda *e: seen.append(e))
    assert seen == [(0, 1, 1, "building")]
    passed = []
    real = loop.run

    def spy(cfg, on_turn=None, on_stage=None):
        passed.append(on_stage)
        return real(cfg, on_turn, on_stage)

    monkeypatch.setattr(loop, "run", spy)
    cfg = compare.CompareConfig(archs=["b200"], langs=["triton"], tasks=["gemm"], store=str(tmp_path / "c.db"),
                                profiler="none")
    compare.run_compare(cfg, progress=False)
    assert passed and callable(passed[0])


def test_eval_without_a_gpu_of_the_arch_is_not_a_pass(xlang, monkeypatch):
    """`xlang eval --arch b200` with no such GPU: static_ok is printed, but the exit is 4, not 0."""
    monkeypatch.setenv("XLANG_FAKE_GPUS", "[]")
    code, out, err = xlang("eval", "expert", "-l", "triton", "-t", "gemm", "-a", "b200")
    assert code == 4 and "static_ok" in out
    assert "not judged" in err and "Traceback" not in err
