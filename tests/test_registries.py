"""Tasks and architectures: what the registries hold, and that bad names fail in one clear line."""

import random
import subprocess
import sys

import pytest

from xlang.archs import archs, families, get_arch, parse_required
from xlang.errors import XlangError
from xlang.task import all_tasks, get_task, parse_shape, task_names


def test_every_task_is_registered():
    assert set(task_names()) == {"gemm", "gemm_fp8_blockscale", "gemm_mxfp8", "gemm_nvfp4", "attn_fwd",
                                 "attn_fwd_causal", "attn_bwd", "attn_bwd_causal", "attn_decode_paged",
                                 "attn_prefill_ragged"}


def test_archs_and_their_required_families():
    assert get_arch("h100").sm == get_arch("h200").sm == "sm_90a"
    assert get_arch("b200").sm == "sm_100a"
    assert get_arch("h100").default_required == ("wgmma", "tma")
    assert get_arch("b200").default_required == ("tcgen05_mma", "tma")
    for a in archs().values():
        assert a.sources and a.figures["sms"] > 100 and a.figures["peak_dense_bf16_tflops"] > 500


def test_family_spellings_match_the_sass_seen_on_these_machines():
    seen = {  # shared/FACTS.md, "SASS spellings seen"
        "wgmma": ["HGMMA.64x128x16.F32.BF16"], "tma": ["UTMALDG.2D", "UTMASTG.2D"],
        "mbarrier": ["SYNCS.EXCH.64", "SYNCS.ARRIVE.TRANS64.A1T0", "SYNCS.PHASECHK.TRANS64.TRYWAIT"],
        "setmaxnreg": ["USETMAXREG.DEALLOC.CTAPOOL"], "tcgen05_mma": ["UTCHMMA", "UTCHMMA.2CTA", "UTCIMMA"],
        "wgmma_fp8": ["QGMMA.64x8x32.F32.E4M3.E4M3"], "tcgen05_cp": ["UTCCP.T.S", "UTCCP.T.S.4x32dp128bit"],
        "tmem": ["LDTM.x16", "STTM.x8"], "tcgen05_commit": ["UTCBAR"], "ldmatrix": ["LDSM.16.M88.4"],
        "stmatrix": ["STSM.16.M88.4"], "cp_async": ["LDGSTS.E.BYPASS.128"], "bulk_copy": ["UBLKCP.S.G"],
    }
    fams = families()
    for name, opcodes in seen.items():
        for op in opcodes:
            assert fams[name].sass.search(op), (name, op)
            others = [f for f in fams if f != name and fams[f].sass.search(op)]
            assert not others, (op, others)
    assert not fams["wgmma"].sass.search("HMMA.16816.F32.BF16")
    # UTCQMMA is tcgen05_f8f6f4 or tcgen05_block_scale by its operands (tests/test_census_lowprecision.py), never
    # tcgen05_mma; UTCOMMA (mxf4, mxf4nvf4) is block-scaled only.
    for op in ("UTCQMMA", "UTCQMMA.2CTA", "UTCOMMA", "UTCOMMA.4X"):
        assert [f for f in fams if fams[f].sass.search(op)] == (["tcgen05_block_scale"] if op.startswith("UTCOMMA") else
                                                                ["tcgen05_f8f6f4", "tcgen05_block_scale"]), op
    assert not fams["tma"].sass.search("UBLKCP.S.G")


def test_required_override_and_unknown_family():
    assert parse_required(get_arch("h100"), "wgmma,mbarrier") == ("wgmma", "mbarrier")
    with pytest.raises(XlangError, match="not available on b200"):
        parse_required(get_arch("b200"), "wgmma")


def test_unknown_names_are_one_line_errors():
    for call in (lambda: get_arch("z100"), lambda: get_task("conv")):
        with pytest.raises(XlangError) as e:
            call()
        assert "\n" not in str(e.value)


def test_shapes_are_parameters_checked_by_the_contract():
    attn = get_task("attn_fwd")
    asked = parse_shape("HKV=8,D=96")
    gqa = attn.shape(asked)
    assert gqa["H"] == 48 and gqa["HKV"] == 8 and gqa["D"] == 96
    drawn = attn.draw_shapes(gqa, random.Random(0), 3, fixed=asked)
    assert drawn[0] == gqa and len(drawn) == 4
    for small in drawn[1:]:
        assert small["H"] == 48 and small["HKV"] == 8 and small["D"] == 96 and small["S"] % 16
    with pytest.raises(XlangError, match="D must be one of"):
        attn.shape({"D": 80})
    with pytest.raises(XlangError, match="multiple of HKV"):
        attn.shape({"HKV": 5})
    with pytest.raises(XlangError, match="multiples of 8"):
        get_task("gemm").shape({"K": 100})
    with pytest.raises(XlangError, match="no size"):
        get_task("gemm").shape({"Q": 1})


def test_contract_is_the_same_entry_point_in_every_language():
    for task in all_tasks():
        c = task.contract
        py, cu = c.python_signature(), c.c_signature()
        names = [t.name for t in c.tensors] + list(c.sizes)
        assert py.startswith("def xlang_entry(") and "xlang_entry(" in cu
        assert all(n in py and n in cu for n in names)
        assert c.outputs and c.inputs
    assert get_task("attn_bwd").contract.python_signature() == \
        "def xlang_entry(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D) -> None"


def test_importing_xlang_and_cli_help_stay_light():
    code = ("import sys, xlang, xlang.cli, xlang.task, xlang.archs\n"
            "from xlang.task import all_tasks; all_tasks()\n"
            "heavy = [m for m in ('torch', 'triton', 'cutlass', 'litellm') if m in sys.modules]\n"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
    out = subprocess.run([sys.executable, "-m", "xlang", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "build" in out.stdout


def test_the_prompt_shows_each_tasks_real_reference_code():
    for task in all_tasks():
        source = task.reference_source()
        assert source.lstrip().startswith(("def ", "# outputs =")) and "lambda" not in source, task.name
        compile(source, task.name, "exec")  # whole functions, not a fragment
    assert "causal=True" in get_task("attn_bwd_causal").reference_source()


def test_causal_experts_are_the_non_causal_ones_with_the_switch_on():
    from xlang.task import set_constants

    for lang, suffix, line in (("triton", ".py", "CAUSAL = True"), ("cuda_ptx", ".cu", "#define XL_CAUSAL 1")):
        base = get_task("attn_fwd").solution(lang, "hopper", suffix)
        causal = get_task("attn_fwd_causal").solution(lang, "hopper", suffix)
        assert causal.path == base.path and line in causal.text.splitlines() and line not in base.text.splitlines()
        assert len(causal.text.splitlines()) == len(base.text.splitlines())
    for lang, suffix, line in (("triton", ".py", "CAUSAL = True"), ("cuda_ptx", ".cu", "#define XL_CAUSAL 1"),
                               ("cutedsl", ".py", "CAUSAL = True"), ("gluon", ".py", "CAUSAL = True")):
        for gen in ("hopper", "blackwell"):
            bwd, bwd_causal = (get_task(t).solution(lang, gen, suffix) for t in ("attn_bwd", "attn_bwd_causal"))
            # every language here has a backward expert on both generations (cutedsl Blackwell since issue 14,
            # gluon since issue 35)
            assert bwd is not None and bwd_causal is not None, (lang, gen)
            assert bwd_causal.path == bwd.path and line in bwd_causal.text.splitlines(), (lang, gen)
            assert line not in bwd.text.splitlines()
    assert get_task("attn_bwd_causal").solution("tilelang", "hopper", ".py") is None  # no base expert yet
    with pytest.raises(ValueError, match="defines none"):
        set_constants("x = 1\n", {"CAUSAL": "True"}, "f.py")
    with pytest.raises(ValueError, match="defined 2 times"):
        set_constants("CAUSAL = 0\nCAUSAL = 1\n", {"CAUSAL": "True"}, "f.py")


def test_langs_lists_every_discovered_language_with_what_it_needs():
    """`xlang langs` comes from the registry (no list of names anywhere else): every backend, its file suffix,
    the Python packages and tools its builds need, and whether they are here."""
    import json

    from typer.testing import CliRunner

    from xlang.backend import backends
    from xlang.cli import app

    res = CliRunner().invoke(app, ["langs", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["lang"]: r for r in json.loads(res.output)}
    assert list(rows) == list(backends())
    assert {"triton", "gluon", "cuda_ptx", "cutedsl"} <= set(rows)
    assert rows["cutedsl"]["packages"].keys() == {"torch", "nvidia-cutlass-dsl"}
    assert "nvcc" in rows["cuda_ptx"]["tools"]


def test_fixit_fences_come_from_the_backends():
    from xlang.fixit.common import fence

    assert [fence(x) for x in ("triton", "gluon", "cutedsl", "cuda_ptx", "nosuch")] == \
        ["python", "python", "python", "cuda", ""]
