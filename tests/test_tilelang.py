"""TileLang, the language plugin of plugins/xlang-tilelang (issue 39): its backend's contract (from the plugin's
source, with no tilelang needed), a plugin's own module run by the child, xlang/ naming no plugin language, and,
where tilelang and the plugin are installed (pip install ./plugins/xlang-tilelang), the experts' static builds to
cubins for sm_90a and sm_100a through the jailed build child, with their SASS census."""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

from xlang import backend as B
from xlang import python_backend as PB
from xlang.archs import archs, get_arch
from xlang.task import get_task, task_names

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "plugins" / "xlang-tilelang"


def _installed() -> bool:
    """tilelang and the plugin both installed: the build child imports the plugin from the site folders."""
    eps = [ep for ep in importlib.metadata.entry_points(group=B.ENTRY_POINT_GROUP) if ep.name == "tilelang"]
    try:
        importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:
        return False
    return bool(eps)


needs_tilelang = pytest.mark.skipif(not _installed(), reason="tilelang and plugins/xlang-tilelang not installed")


@pytest.fixture
def tilelang_backend(monkeypatch):
    """The plugin's BACKEND, from its source when it is not installed (its module imports only xlang)."""
    if not _installed():
        monkeypatch.syspath_prepend(str(PLUGIN))
    sys.modules.pop("xlang_tilelang.backend", None)
    from xlang_tilelang.backend import BACKEND

    if "tilelang" not in B.backends():
        B.register_backend(BACKEND)
        yield B.get_backend("tilelang")
        B.unregister_backend("tilelang")
    else:
        yield B.get_backend("tilelang")


def test_the_plugin_registers_its_backend_under_the_entry_point_group():
    meta = tomllib.loads((PLUGIN / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"][B.ENTRY_POINT_GROUP] == {"tilelang": "xlang_tilelang.backend:BACKEND"}
    assert "prompt.md" in meta["tool"]["setuptools"]["package-data"]["xlang_tilelang"]


def test_no_file_in_xlang_names_the_plugin_language():
    named = [str(p.relative_to(ROOT)) for p in (ROOT / "xlang").rglob("*") if p.is_file() and p.suffix != ".pyc"
             and re.search(rb"tile_?lang", p.read_bytes(), re.I)]
    assert named == []


def test_backend_contract(tilelang_backend, tmp_path):
    be = tilelang_backend
    assert isinstance(be, PB.PythonModuleBackend) and be.name == "tilelang" and be.title == "TileLang"
    assert be.folder == Path(sys.modules["xlang_tilelang.backend"].__file__).resolve().parent
    assert (be.folder / "prompt.md").is_file() and be.static_build == "xlang_tilelang.static_build"
    assert be.tools == ("nvcc",) and "tilelang" in be.versions() and be.fingerprint_packages == (("tilelang", "tilelang"),)
    assert be.kernels_on_disk and be.jit_cache == ".tilelang"  # its cubins: kernel.cubin files in its cache
    assert be.child_env(tmp_path)["TILELANG_CACHE_DIR"] == str(tmp_path / ".tilelang")
    assert "TILELANG_CACHE_DIR" in B.jit_env(tmp_path)  # every child gets it
    build = B.BuildResult(True, "tilelang", "gemm", "h100", {}, str(tmp_path), load_path=str(tmp_path / "c.py"))
    (tmp_path / "jit-cache").mkdir()
    assert be.seed_cache(build) is None  # the run compiles its own host library, never the build machine's
    for arch in archs().values():
        for rel in be.doc_files(arch):
            assert (ROOT / "arch_docs" / rel).is_file(), rel
        for task in map(get_task, task_names()):
            text = be.prompt_section(task, arch)
            assert arch.sm in text and "{{" not in text and "{%" not in text
            assert not any(a.sm in text for a in archs().values() if a.sm != arch.sm)
    assert "T.alloc_tmem" in be.prompt_section(get_task("gemm"), get_arch("b200"))
    assert "warp-specialises" in be.prompt_section(get_task("gemm"), get_arch("h100"))


@pytest.mark.parametrize("source, why", [
    ("C = torch.matmul(A, B)", "torch compute"),
    ("k = T.CUDASourceCodeKernel(src)", "cuda_ptx"),
    ("T.import_source(code)", "cuda_ptx"),
    ("T.call_extern('int', 'f')", "cuda_ptx"),
    ("tilelang.compile(f, execution_backend='cutedsl')", "cutedsl"),
    ("os.environ['TILELANG_DISABLE_CACHE'] = '1'", "cache"),
])
def test_screen(tilelang_backend, source, why):
    found = tilelang_backend.screen(source)
    assert found and why in found[0]


def test_screen_passes_the_experts(tilelang_backend):
    for path in sorted(ROOT.glob("tasks/*/solutions/tilelang*.py")):
        assert tilelang_backend.screen(path.read_text()) == [], path


def test_child_imports_a_plugin_module_by_its_own_name(monkeypatch, tmp_path):
    from xlang import resources

    (tmp_path / "xl_plugin_probe").mkdir()
    (tmp_path / "xl_plugin_probe" / "__init__.py").write_text("")
    (tmp_path / "xl_plugin_probe" / "static_build.py").write_text("def main(argv):\n    return 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert resources.import_module("xl_plugin_probe.static_build").main([]) == 7
    assert resources.import_module("backends.triton.static_build").__name__ == "xlang.backends.triton.static_build"
    assert resources.import_module("profiler.judge").__name__ == "xlang.profiler.judge"  # xlang's own first


# ---- static builds (tilelang installed) ------------------------------------------------------------------------

EXPERTS = [  # (task, arch, expert file, required families present, families that must be absent)
    ("gemm", "h100", "tasks/gemm/solutions/tilelang_hopper.py", {"wgmma", "tma", "setmaxnreg"}, set()),
    ("gemm", "b200", "tasks/gemm/solutions/tilelang_blackwell.py", {"tcgen05_mma", "tma", "tmem_alloc"}, set()),
    ("attn_fwd", "h100", "tasks/attn_fwd/solutions/tilelang_hopper.py", {"wgmma", "tma"}, set()),
    ("attn_fwd", "b200", "tasks/attn_fwd/solutions/tilelang_blackwell.py", {"tcgen05_mma", "tma", "tmem"}, set()),
    # the Hopper attention's fragment accumulators give mma.sync on sm_100a, never tcgen05 (arch_docs/b200)
    ("attn_fwd", "b200", "tasks/attn_fwd/solutions/tilelang_hopper.py", {"tma"}, {"tcgen05_mma"}),
]


@needs_tilelang
@pytest.mark.slow
@pytest.mark.parametrize("task, arch, expert, present, absent", EXPERTS)
def test_expert_builds_statically_with_its_families(task, arch, expert, present, absent, tmp_path):
    build = B.build_candidate(ROOT / expert, "tilelang", get_task(task), get_arch(arch), workdir=tmp_path / "w",
                              timeout_s=900, cache=False)
    assert build.ok, build.error
    counts = {f: n for k in build.census.kernels for f, n in k.families.items() if n}
    assert present <= set(counts), counts
    assert not absent & set(counts), counts
    for k in build.kernels:  # the judge's copies, TileLang's kernel names, the target's SASS
        assert Path(k.cubin).parent == tmp_path / "w" and k.name.endswith("_kernel") and k.meta["target"] == get_arch(arch).sm
    assert build.kernels[0].meta["calls"] == 1 and build.kernels[0].meta["execution_backend"] == "tvm_ffi"


@needs_tilelang
@pytest.mark.slow
def test_a_tilelang_error_reaches_the_model(tmp_path):
    source = ("import tilelang\nimport tilelang.language as T\n\n"
              "def xlang_entry(A, B, C, M, N, K):\n"
              "    @T.prim_func\n"
              "    def bad(A: T.Tensor((M, K), T.bfloat16), C: T.Tensor((M, N), T.bfloat16)):\n"
              "        with T.Kernel(1, threads=128) as bx:\n"
              "            S = T.alloc_shared((64, 64), T.bfloat16)\n"
              "            T.gemm(S, S, C)\n"
              "    tilelang.compile(bad)(A, C)\n")
    build = B.build_candidate(source, "tilelang", get_task("gemm"), get_arch("h100"), workdir=tmp_path / "w",
                              shape={"M": 64, "N": 64, "K": 64}, timeout_s=600, cache=False)
    assert not build.ok and "candidate.py" in build.error and "/project/" not in build.error
