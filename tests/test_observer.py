"""The CUPTI observer (xlang/profiler/observer*): library build, record parsing and framing, the pipe protocol.

CPU tests build the real library and drive its real control thread through InitializeInjection (no driver here, so
it must report X records, never crash); the GPU test injects it into a torch + triton program."""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from xlang.profiler import observer as obs
from xlang.profiler import observer_records as obs_records
from xlang.profiler.observer import Observer
from xlang.profiler.observer_records import (CopyRecord, EndRecord, ErrorRecord, KernelRecord, ModuleRecord,
                                             ObserverError, RecordError, SetRecord, WarningRecord, frame_mac, kernels,
                                             parse_line, span, unframe)

REPO = Path(__file__).resolve().parents[1]
H = "ab" * 32


def _cupti_or_skip():
    try:
        return obs.find_cupti()
    except ObserverError as exc:
        pytest.skip(f"no CUPTI headers/library on this machine: {exc}")


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    _cupti_or_skip()
    return obs.build_library(tmp_path_factory.mktemp("observer-cache"))


# ------------------------------------------------------------------------------------------------------ building
def test_library_builds_and_exports_the_injection_entry(library):
    assert library.is_file()
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not installed")
    out = subprocess.run([nm, "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[1:2] == ["T"]}
    assert "InitializeInjection" in exported
    # internal state and helpers stay hidden (built with -fvisibility=hidden)
    assert not any(name.startswith(("g_", "on_", "ring_", "mod_")) for name in exported), exported


def test_library_links_no_driver_or_runtime(library):
    out = subprocess.run(["ldd", str(library)], capture_output=True, text=True).stdout
    assert "libcupti" in out
    assert "libcuda.so" not in out and "libcudart" not in out


def test_build_is_cached_by_source(library):
    again = obs.build_library(library.parent)
    assert again == library
    assert again.stat().st_mtime_ns == library.stat().st_mtime_ns


def test_missing_cupti_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(obs, "_cuda_roots", lambda: [tmp_path / "nowhere"])
    monkeypatch.setattr(obs.toolchain, "packaged_files", lambda relative: [])  # no wheel that carries CUPTI
    with pytest.raises(ObserverError, match="CUPTI headers and library not found"):
        obs.build_library(tmp_path / "cache")


# ------------------------------------------------------------------------------- the C side's hashing and naming
@pytest.fixture(scope="module")
def clib(library):
    return ctypes.CDLL(str(library))  # loads libcupti too; never call InitializeInjection in this process


@pytest.mark.parametrize("size", [0, 1, 55, 56, 63, 64, 65, 119, 1000, 100_003])
def test_c_sha256_matches_hashlib(clib, size):
    data = bytes((i * 131 + 7) & 0xFF for i in range(size))
    out = ctypes.create_string_buffer(65)
    clib.xlang_observer_sha256_hex(data, ctypes.c_size_t(size), out)
    assert out.value.decode() == hashlib.sha256(data).hexdigest()


def test_c_hmac_matches_the_judges_frame_mac(clib):
    key = bytes(range(16))
    body = "K 1 2 0 1 7 9 1 1 1 128 1 1 0 0 0 - some_kernel"
    msg = f"41 {body}".encode()
    out = ctypes.create_string_buffer(65)
    clib.xlang_observer_hmac_hex(key, msg, ctypes.c_size_t(len(msg)), out)
    assert out.value.decode() == hmac.new(key, msg, hashlib.sha256).hexdigest()
    assert out.value.decode()[: obs_records.MAC_HEX] == frame_mac(key, 41, body)


@pytest.mark.parametrize("name, want", [
    ("plain_kernel", "plain_kernel"),
    ("void f<int>(float*, int)", "void?f<int>(float*,?int)"),
    ("a\nK 1 2 fake\r", "a?K?1?2?fake?"),
    ("", "?"),
    ("caf\u00e9", "caf??"),  # UTF-8 bytes are not printable ASCII
])
def test_c_sanitize(clib, name, want):
    out = ctypes.create_string_buffer(obs_records.MAX_NAME + 1)
    clib.xlang_observer_sanitize(name.encode(), out)
    assert out.value.decode() == want


def test_c_sanitize_bounds_huge_names(clib):
    out = ctypes.create_string_buffer(obs_records.MAX_NAME + 1)
    clib.xlang_observer_sanitize(b"x" * 100_000, out)
    assert out.value == b"x" * obs_records.MAX_NAME
    assert parse_line(f"K 1 2 0 1 7 9 1 1 1 32 1 1 0 0 0 - {out.value.decode()}").name == out.value.decode()


# -------------------------------------------------------------------------------------------------- parsing
KERNEL = f"K 100 250 0 1 13 77 132 1 1 384 1 1 232448 0 0 {H} nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT"


def test_parse_every_record_type():
    k = parse_line(KERNEL)
    assert isinstance(k, KernelRecord)
    assert (k.start, k.end, k.duration, k.stream, k.corr) == (100, 250, 150, 13, 77)
    assert k.grid == (132, 1, 1) and k.block == (384, 1, 1) and k.dyn_smem == 232448
    assert k.module == H and k.name.startswith("nvjet") and not k.device_launched
    assert parse_line("C 5 9 0 1 7 3 4096 1") == CopyRecord(5, 9, 0, 1, 7, 3, 4096, 1)
    assert parse_line("S 5 9 0 1 7 3 4096") == SetRecord(5, 9, 0, 1, 7, 3, 4096)
    assert parse_line(f"M {H} 12345 1 9") == ModuleRecord(H, 12345, 1, 9)
    assert parse_line("X missing_kernel_records 3") == ErrorRecord("missing_kernel_records", 3)
    assert parse_line("W enable_device_graph -17") == WarningRecord("enable_device_graph", -17)
    assert parse_line("E 4 10 20 30 40") == EndRecord(4, 10, 20, 30, 40)
    assert parse_line(KERNEL.replace(H, "-")).module == obs_records.MODULE_UNKNOWN


@pytest.mark.parametrize("line", [
    "",
    "K",
    KERNEL.rsplit(" ", 1)[0],  # missing name
    KERNEL + " extra",  # a name with a space would add a field
    KERNEL.replace("nvjet", "x" * 300),  # name over MAX_NAME
    KERNEL.replace("nvjet", "caf\u00e9"),  # non-ASCII
    KERNEL.replace("K 100 250", "K 300 250"),  # ends before it starts
    KERNEL.replace("K 100 250", "K -1 250"),
    KERNEL.replace("K 100 250", f"K 100 {2**64}"),  # beyond u64
    KERNEL.replace("K 100 250", "K 1e3 250"),
    KERNEL.replace("K 100 250", "K 0x10 250"),
    KERNEL.replace(" 132 1 1 ", " 0 1 1 "),  # empty grid
    KERNEL.replace(" 13 77 ", f" {2**32} 77 "),  # stream id beyond u32
    KERNEL.replace(H, "ab" * 31),  # short hash
    KERNEL.replace(H, "AB" * 32),  # not lowercase hex
    KERNEL.replace(" 0 0 " + H, " 0 2 " + H),  # device-launched flag not 0/1
    "C 5 9 0 1 7 3 4096",  # missing copy kind
    "C 5 9 0 1 7 3 4096 999",
    "S 5 9 0 1 7 3",
    "M - 12 1",
    "M zz 12 1 9",
    "X bad what 3",
    "X what 1.5",
    "X wh@t 1",
    "E 1 2 3 4",
    "Z 1 2 3",
    " K 1 2",
    "K  100 250",
    "K 1 2\n",
    "x" * 5000,
])
def test_parse_rejects_malformed_and_hostile_lines(line):
    with pytest.raises(RecordError):
        parse_line(line)


def test_unframe_accepts_only_the_librarys_lines():
    key = os.urandom(16)
    body = "S 5 9 0 1 7 3 4096"
    good = f"7 {body} {frame_mac(key, 7, body)}".encode()
    assert unframe(key, good, 7) == body
    with pytest.raises(RecordError, match="was due"):
        unframe(key, good, 8)  # replayed or reordered
    with pytest.raises(RecordError, match="bad mac"):
        unframe(os.urandom(16), good, 7)  # written by someone without the key
    forged = f"7 S 1 9 0 1 7 3 4096 {frame_mac(key, 7, body)}".encode()
    with pytest.raises(RecordError, match="bad mac"):
        unframe(key, forged, 7)  # body changed, mac kept
    for bad in (b"", b"7 " + body.encode(), good + b" ", b" " + good, good.replace(b" ", b"  ", 1),
                good[:-1] + b"G", b"7 " + b"\xff" * 10 + b" " + b"0" * 16, b"x" * 5000):
        with pytest.raises(RecordError):
            unframe(key, bad, 7)


# -------------------------------------------------------------------------------------------------- span
def _k(start, end, stream=7, module=H, name="k"):
    return parse_line(f"K {start} {end} 0 1 {stream} 1 1 1 1 32 1 1 0 0 0 {module} {name}")


def test_span_covers_kernels_copies_and_sets_on_every_stream():
    records = [_k(1000, 1500), _k(1200, 4000, stream=9), parse_line("C 900 950 0 1 7 2 64 1"),
               parse_line("S 3990 4100 0 1 11 3 64"), parse_line(f"M {H} 10 1 1"), parse_line("W x 1")]
    assert span(records) == 4100 - 900
    assert span([_k(10, 10)]) == 0
    assert span([]) == 0
    assert span([parse_line(f"M {H} 10 1 1")]) == 0
    assert [k.stream for k in kernels(records)] == [7, 9]


def test_span_refuses_untimed_records():
    with pytest.raises(ObserverError, match="no timestamps"):
        span([_k(1000, 1500), _k(0, 0)])


# ------------------------------------------------------------------- the protocol, against the real library
RUNNER = "import ctypes, os, sys; lib = ctypes.CDLL(os.environ['CUDA_INJECTION64_PATH']); " \
         "print(lib.InitializeInjection(), flush=True); sys.stdin.read()"


def _spawn(library, code=RUNNER, **kw):
    o = Observer(library, **kw)
    env, fds = o.child_args()
    # From a file, not `-c`: @triton.jit reads its function's source (the GPU child defines a Triton kernel).
    script = Path(tempfile.mkdtemp(prefix="xlang-observer-child-")) / "child.py"
    script.write_text(code)
    proc = subprocess.Popen([sys.executable, str(script)], env={**os.environ, **env}, pass_fds=fds,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    o.start()
    return o, proc


def _stop(o, proc):
    o.close()
    proc.stdin.close()
    proc.wait(timeout=30)


def test_library_without_a_driver_reports_errors_and_never_crashes(library):
    """No driver here: InitializeInjection must still return, answer flushes with framed, MAC'd lines and say,
    through X records, that nothing can be trusted."""
    o, proc = _spawn(library)
    try:
        assert proc.stdout.readline().strip() == "1"
        for n in range(3):
            with pytest.raises(ObserverError, match="observer reported errors") as exc:
                o.flush(20.0)
            whats = {r.what for r in exc.value.records if isinstance(r, ErrorRecord)}
            assert "activity_flush" in whats and "ctx_sync_unavailable" in whats
            if n == 0:
                assert "dlopen_libcuda" in whats
            assert o.last_end is not None and o.last_end.flush_no == n
            assert (o.last_end.launches, o.last_end.kernels) == (0, 0)
    finally:
        _stop(o, proc)
    assert proc.returncode == 0


FORGER = textwrap.dedent("""
    import ctypes, os, sys
    lib = ctypes.CDLL(os.environ['CUDA_INJECTION64_PATH'])
    lib.InitializeInjection()
    fd = int(os.environ['XLANG_OBSERVER_FD'])
    os.write(fd, b"0 K 1 2 0 1 7 1 1 1 1 32 1 1 0 0 0 - forged 0123456789abcdef\\n")
    print("1", flush=True)
    sys.stdin.read()
""")


def test_a_line_forged_by_the_runner_poisons_the_stream(library):
    o, proc = _spawn(library, FORGER)
    try:
        assert proc.stdout.readline().strip() == "1"
        with pytest.raises(ObserverError, match="rejected: bad mac"):
            o.flush(20.0)
    finally:
        _stop(o, proc)


def test_flush_times_out_when_nothing_answers(tmp_path):
    # a runner that never initialises CUDA: no library thread, so no end marker
    o, proc = _spawn(tmp_path / "not-loaded.so", "import sys; print(1, flush=True); sys.stdin.read()")
    try:
        proc.stdout.readline()
        with pytest.raises(ObserverError, match="timed out"):
            o.flush(0.5)
    finally:
        _stop(o, proc)


def test_flush_fails_when_the_runner_is_gone(tmp_path):
    o, proc = _spawn(tmp_path / "not-loaded.so", "print(1)")
    proc.wait(timeout=30)
    with pytest.raises(ObserverError, match="closed"):
        o.flush(5.0)
    o.close()


def test_record_cap(library):
    o, proc = _spawn(library, max_records=2)  # a flush without a driver yields more than two records
    try:
        proc.stdout.readline()
        with pytest.raises(ObserverError, match="more than 2 records"):
            o.flush(20.0)
    finally:
        _stop(o, proc)


def test_overlong_line(library):
    code = textwrap.dedent("""
        import os, sys
        fd = int(os.environ['XLANG_OBSERVER_FD'])
        os.write(fd, b"0 " + b"K" * 100000)
        print(1, flush=True); sys.stdin.read()
    """)
    o, proc = _spawn(library, code)
    try:
        proc.stdout.readline()
        with pytest.raises(ObserverError, match="longer than"):
            o.flush(5.0)
    finally:
        _stop(o, proc)


# -------------------------------------------------------------------------------------------------- GPU
GPU_CHILD = textwrap.dedent("""
    import hashlib, json, sys, threading
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def xlang_observer_probe(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

    def step(info=None):
        print(json.dumps(info or {}), flush=True)
        sys.stdin.readline()

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    step()                                    # 1: setup done
    c = a @ b                                 # 2: one cuBLAS matmul, not synchronised by us
    step({"main_stream": torch.cuda.current_stream().cuda_stream})

    def side():                               # 3: another Python thread, another stream
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            (a * 3).sum()
        side.ptr = s.cuda_stream
    t = threading.Thread(target=side); t.start(); t.join()
    step({"side_stream": side.ptr})
    x = torch.ones(4096, device="cuda")       # 4: a Triton kernel: its module must carry the cubin's hash
    k = xlang_observer_probe[(4,)](x, 4096, BLOCK=1024)
    step({"cubin_sha256": hashlib.sha256(k.asm["cubin"]).hexdigest()})
    s = torch.cuda.Stream()                   # 5: a captured launch runs nothing; its replay runs in a graph
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        x.mul_(1.5)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        x.mul_(1.5)
    g.replay()
    step()
""")


@pytest.mark.gpu
def test_gpu_observer_sees_matmul_side_stream_and_module_hashes(library):
    o, proc = _spawn(library, GPU_CHILD)
    try:
        def step():
            line = proc.stdout.readline()
            assert line, "GPU child died"
            return json.loads(line)

        step()
        setup = o.flush(60.0)  # module loads and setup kernels
        assert kernels(setup), "setup launched kernels but none was recorded"
        proc.stdin.write("\n"); proc.stdin.flush()
        step()
        mm = o.flush(30.0)
        ks = kernels(mm)
        assert ks, "the matmul was not recorded"
        assert any(k.duration > 0 for k in ks)
        assert span(mm) > 0
        assert any(s in k.name.lower() for k in ks for s in ("gemm", "nvjet", "xmma", "cutlass")), \
            [k.name for k in ks]
        main_streams = {k.stream for k in ks}

        proc.stdin.write("\n"); proc.stdin.flush()
        step()
        side = kernels(o.flush(30.0))
        assert side, "kernels launched from a second Python thread were not recorded"
        assert {k.stream for k in side} - main_streams, "side-stream kernels reported on the main stream"

        proc.stdin.write("\n"); proc.stdin.flush()
        info = step()
        tri = [k for k in kernels(o.flush(30.0)) if "xlang_observer_probe" in k.name]
        assert len(tri) == 1, "the Triton kernel was not recorded exactly once"
        assert tri[0].module == info["cubin_sha256"], "kernel not attributed to the module Triton compiled"
        assert info["cubin_sha256"] in o.modules
        assert o.last_end.launches >= 1 and o.last_end.kernels >= 1

        proc.stdin.write("\n"); proc.stdin.flush()
        step()
        graphed = kernels(o.flush(30.0))  # a captured launch must not count as a missing kernel record
        assert any(k.graph_id != 0 for k in graphed), "the graph replay's kernel was not recorded"
        proc.stdin.write("\n"); proc.stdin.flush()
    finally:
        _stop(o, proc)
    assert proc.returncode == 0
