"""`xlang eval`: the profiler's command. Light at import time: evaluate() and its workers load on use."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from xlang.backend import toolchain_packages
from xlang.errors import XlangError
from xlang.sandbox import remove_candidate_folders, remove_tree
from xlang.task import format_shape

console = Console()

_STYLE = {"ok": "green", "static_ok": "cyan"}


NOT_RUN_EXIT = 4  # `xlang eval`: it compiled, but its runtime verdict could not be made (no GPU of the arch here)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)


def eval_command(
    file: Path = typer.Argument(..., help="candidate source file, or 'expert' for the task's expert solution"),
    lang: str = typer.Option(..., "--lang", "-l", help="a kernel language: a folder under backends/ or a plugin (xlang langs lists them)"),
    task: str = typer.Option(..., "--task", "-t"),
    arch: str = typer.Option("auto", "--arch", "-a", help="h100 | h200 | b200 | auto (the GPU present)"),
    shape: Optional[str] = typer.Option(None, help="size overrides, e.g. M=4096,N=4096,K=4096"),
    suite: Optional[str] = typer.Option(None, "--suite", help="a shape suite of the task (xlang tasks --suites): "
                                                              "correct on every shape, each timed against the vendor"),
    require: Optional[str] = typer.Option(None, help="required families, comma-separated (default: the task's)"),
    as_json: bool = typer.Option(False, "--json", help="print the verdict as JSON"),
    no_memcheck: bool = typer.Option(False, "--no-memcheck", help="skip compute-sanitizer memcheck"),
    no_ncu: bool = typer.Option(False, "--no-ncu", help="skip Nsight Compute (instructions not verified)"),
    no_timing: bool = typer.Option(False, "--no-timing", help="skip timing"),
    no_peers: bool = typer.Option(False, "--no-peers", help="time only the vendor baseline, not the task's peers "
                                                            "(FA4, quack: public kernels, when installed)"),
    trials: int = typer.Option(2, help="correctness trials per shape (fresh inputs each; the value kinds cycle)"),
    timing_rest_ms: float = typer.Option(0.0, "--timing-rest-ms",
                                         help="idle GPU time before each timed call, the same for every side "
                                              "(ms; 0: none): evens out the power state each side's calls start in"),
    seed: Optional[int] = typer.Option(None, help="base seed (default: random, recorded in the verdict)"),
    timeout: float = typer.Option(300.0, help="wall-clock limit of each worker stage, seconds"),
    workdir: Optional[Path] = typer.Option(None, help="write the verdict, the build record, logs and tool outputs "
                                                      "here (what the candidate wrote is removed unless --keep)"),
    keep: bool = typer.Option(False, "--keep", help="keep the whole work folder (the candidate's build folder and "
                                                    "homes too) and print its path"),
):
    """Judge a candidate on the GPU: build, correctness, memcheck, executed instructions (ncu), speed vs vendor.
    Exit 0 when ok, 1 for any other verdict, 4 when it compiled but no GPU of the arch could judge it."""
    from xlang.archs import get_arch, parse_required
    from xlang.backend import get_backend
    from xlang.profiler.evaluate import EvalOptions, evaluate
    from xlang.task import get_task, parse_shape

    expert = str(file) == "expert"
    if not expert and not file.is_file():
        raise XlangError(f"no such file: {file}")
    if trials < 1:
        raise XlangError("--trials must be at least 1")
    if not 0 <= timing_rest_ms <= 1000:
        raise XlangError("--timing-rest-ms must be between 0 and 1000")
    backend = get_backend(lang)
    task_obj = get_task(task)
    if arch == "auto":
        from xlang.profiler.gpu import auto_arch

        arch_obj = auto_arch()
    else:
        arch_obj = get_arch(arch)
    candidate = file
    if expert:
        solution = task_obj.solution(lang, arch_obj.generation, backend.suffix)
        if solution is None:
            raise XlangError(f"no {lang} expert solution for {task} on {arch_obj.generation} "
                             f"(tasks/{task}/solutions/)")
        candidate = solution.text
    shape_obj = task_obj.shape(parse_shape(shape))
    if suite is not None:
        task_obj.suite(suite)  # an unknown suite: one line listing the task's, before any build
    required = parse_required(arch_obj, require, task_obj.required_for(arch_obj))
    options = EvalOptions(memcheck=not no_memcheck, ncu=not no_ncu, timing=not no_timing, peers=not no_peers,
                          trials=trials, seed=seed, timing_rest_ms=timing_rest_ms,
                          require=required, check_timeout_s=timeout, memcheck_timeout_s=timeout,
                          ncu_timeout_s=timeout, workdir=workdir, fixed=tuple(parse_shape(shape)), suite=suite,
                          label=f"{task}-{lang}-expert" if expert else file.stem)
    if workdir is None:  # ours, so that it can be removed after the verdict, whatever happens
        workdir = options.workdir = Path(tempfile.mkdtemp(prefix=f"xlang-eval-{lang}-{arch_obj.name}-"))
        given = False
    else:
        given = True
    try:
        v = evaluate(candidate, lang, task_obj, arch_obj, shape_obj, options)
    finally:
        if keep:
            typer.echo(f"work folder: {workdir}", err=True)
        elif given:  # the user's folder keeps the judge's records; what the candidate wrote (GBs, maybe) goes
            remove_candidate_folders(workdir)
        else:
            remove_tree(workdir)
    if as_json:
        print(json.dumps(v.to_dict(), indent=1, default=str))
    else:
        print_verdict(v)
    if v.category == "static_ok":  # runtime was asked for and did not run: never read as a pass
        typer.echo(f"not judged: {v.runtime_note or 'the runtime did not run'} (exit {NOT_RUN_EXIT}; "
                   "`xlang build` is the static check)", err=True)
        raise typer.Exit(NOT_RUN_EXIT)
    if v.category == "harness_error":  # no verdict on the candidate: the GPU was not the judge's alone, twice
        retried = " twice" if v.fingerprint.get("harness_retry") else ""
        typer.echo(f"not judged: a process that is not the candidate's held the GPU{retried}; run it again when "
                   f"the GPU is free (exit {NOT_RUN_EXIT})", err=True)
        raise typer.Exit(NOT_RUN_EXIT)
    if v.category != "ok":
        raise typer.Exit(1)


def print_verdict(v) -> None:
    style = _STYLE.get(v.category, "red")
    shape = format_shape(v.shape)
    console.print(f"[bold {style}]{v.category}[/bold {style}]  {v.lang} · {v.task} · {v.arch} · {shape}")
    console.print(v.detail, highlight=False, markup=False)
    if v.runtime_note and v.runtime_note not in v.detail:
        console.print(f"[dim]{v.runtime_note}[/dim]")
    if v.isolation:
        console.print(f"[dim]candidate isolation: {v.isolation}[/dim]")
    e = v.executed or {}
    if e.get("kernels"):
        fams = [f for f in e["families"] if e["families"][f] or f in e.get("required", [])]
        table = Table(title="executed at run time (Nsight Compute, predicated-on threads)")
        table.add_column("kernel")
        table.add_column("own")
        for f in fams:
            table.add_column(f + ("*" if f in e.get("required", []) else ""), justify="right")
        for k in e["kernels"]:
            name = k["name"] if len(k["name"]) <= 60 else k["name"][:57] + "..."
            own = "yes" if k["candidate"] else ("[red]FORBIDDEN[/red]" if k.get("forbidden") else "no")
            table.add_row(name, own, *[f"{k['families'].get(f, 0):,.0f}" for f in fams])
        console.print(table)
    line = math_line(e)
    if line:
        console.print(line, highlight=False, markup=False)
    t = v.timing or {}
    if t.get("candidate"):
        rest = f", {t['rest_ms']:g} ms idle before each call" if t.get("rest_ms") else ""
        table = Table(title=f"timing ({t['method']}, L2 flushed{rest}, shape "
                            f"{','.join(f'{a}={b}' for a, b in t['shape'].items())})")
        for col in ("", "median ms", "q20-q80 ms", "spread %", "reps", "TFLOP/s", "SM MHz, W while timed"):
            table.add_column(col, justify="right")
        timed = [("candidate", t["candidate"], t.get("tflops"), t.get("candidate_power")),
                 (t.get("baseline_name", "baseline"), t["baseline"], t.get("baseline_tflops"), t.get("baseline_power"))]
        timed += [(p["display"], p["stats"], p.get("tflops"), p.get("power")) for p in t.get("peers") or [] if p.get("ran")]
        for label, s, tf, pw in timed:
            table.add_row(label, f"{s['median_ms']:.4f}", f"{s['q20_ms']:.4f}-{s['q80_ms']:.4f}", f"{s['spread_pct']:.2f}",
                          str(s["reps"]), f"{tf:.1f}" if tf else "-", power_cell(pw))
        console.print(table)
        flag = "  [red]beyond roofline (suspicious)[/red]" if t.get("beyond_roofline") else ""
        if t.get("method") != "cupti_kernel_span":
            flag += f"  [yellow]timed by {t.get('method')} (no CUPTI observer here)[/yellow]"
        console.print(f"speedup {speedups_line(t)}{flag}", highlight=False)
        profiles = [("candidate", t.get("candidate_profile")), (t.get("baseline_name", "baseline"), t.get("baseline_profile"))]
        profiles += [(p["display"], p.get("profile")) for p in t.get("peers") or [] if p.get("ran")]
        for label, profile in profiles:
            if profile:
                console.print(f"[dim]{label}, median of a timed call:[/dim] ", end="")
                console.print(profile_line(profile), style="dim", highlight=False, markup=False)
        for line in peers_not_run(t):
            console.print(f"[yellow]{line}[/yellow]", highlight=False)
    if v.suite:
        print_suite(v.suite, v)
    from xlang.verdict import output_tails

    for stage, stream, text in output_tails(v.output):
        console.print(f"[dim]the candidate's {stream} ({stage} stage, the end):[/dim]")
        console.print(text, style="dim", highlight=False, markup=False)
    m = v.memcheck or {}
    if m:
        console.print(f"memcheck: {m.get('summary') or ('clean' if m.get('ran') and not m.get('errors') else m.get('note', ''))}",
                      highlight=False, markup=False)
    fp = v.fingerprint or {}
    g = fp.get("gpu") or {}
    parts = []
    if g:  # no GPU fields when runtime did not run
        when = " (after timing)" if g.get("clocks_sampled") else ""
        parts.append(f"{g.get('name', '')} driver {g.get('driver', '')} SM {g.get('sm_clock_mhz', '?')} MHz{when}")
    languages = [(name, name.replace("-", "_")) for name in toolchain_packages().values()]  # the judge's keys
    versions = " ".join(f"{k} {fp[key]}" for k, key in (("torch", "torch"), ("CUDA", "cuda_runtime"), *languages)
                        if fp.get(key))
    parts += [versions, f"seed {fp.get('seed')}", f"harness {fp.get('harness_version')}", f"{fp.get('seconds')} s"]
    console.print("[dim]" + " · ".join(p for p in parts if p) + "[/dim]")


def print_suite(suite: dict, v) -> None:
    """The suite's per-shape table (latency, TFLOP/s, GB/s, x vendor) and its summary line; where its shapes were
    not timed, why."""
    from xlang.suites import worst_text

    shapes, summary = suite.get("shapes") or [], suite.get("summary")
    timed = [s for s in shapes if s.get("speedup")]
    head = f"suite {suite['name']}: {len(shapes)} shapes ({suite.get('title', '')})"
    if not timed:
        if not v.runtime_ran:
            why = v.runtime_note or "not run"
        else:
            why = "not timed (" + ("the check did not pass: " + v.category if not v.correct else "timing did not run") + ")"
        console.print(f"{head}: correctness and timing {why}", highlight=False, markup=False)
        return
    table = Table(title=head)
    for col in ("layer", "shape", "ms", "vendor ms", "TFLOP/s", "vendor TFLOP/s", "GB/s", "x vendor"):
        table.add_column(col, justify="left" if col in ("layer", "shape") else "right")

    def num(x, digits):
        return f"{x:.{digits}f}" if isinstance(x, (int, float)) else "-"

    for s in shapes:
        table.add_row(s["label"], format_shape(s["shape"]), num(s.get("candidate_ms"), 4), num(s.get("baseline_ms"), 4),
                      num(s.get("tflops"), 1), num(s.get("baseline_tflops"), 1), num(s.get("gbps"), 0),
                      num(s.get("speedup"), 3) + (" (beyond roofline: suspicious)" if s.get("beyond_roofline") else ""))
    console.print(table)
    correct = f"correct on all {len(shapes)} shapes" if v.correct else f"not correct ({v.category})"
    console.print(f"suite {suite['name']}: {correct} · geomean {summary['geomean_speedup']:.3f}x "
                  f"vendor over {summary['timed']} timed · worst {worst_text(summary)} · time-weighted "
                  f"{summary['time_weighted_speedup']:.3f}x", highlight=False, markup=False)


def math_line(e: dict) -> str:
    """'math: GPU 1.008x the task's FLOPs · wgmma 99.2% of it, 1.000x the task · other (FMA, mma.sync) 0.008x
    (at most 0.5x)': what Nsight Compute's counts say of where the math was done ("" when it did not run)."""
    if e.get("gpu_to_task") is None:
        return ""
    parts = [f"math: GPU {e['gpu_to_task']:.3f}x the task's FLOPs"]
    if e.get("tc_share") is not None:
        fam = "/".join(e.get("tc_families") or [])
        parts.append(f"{fam} {e['tc_share']:.1%} of it, {e['tc_to_task']:.3f}x the task")
    if e.get("non_tc_to_task") is not None:
        bound = (e.get("share_rule") or {}).get("other_bound")
        parts.append(f"other (FMA, mma.sync) {e['non_tc_to_task']:.3f}x"
                     + (f" (at most {bound:.2g}x)" if bound else ""))
    gc = e.get("gpu_compute") or {}
    if gc.get("status") and gc["status"] != "ok":
        parts.append(f"GPU computation {gc['status']}")
    return " · ".join(parts)


def power_cell(power: dict | None) -> str:
    """'1776, 692 W, sw_power_cap': the mean SM clock and board power while a side was timed (NVML), and the
    slowdown reasons NVML gave; "-" where they were not recorded (no NVML, or a verdict from before they were)."""
    if not power:
        return "-"
    return ", ".join([str(power["sm_clock_mhz"]), f"{power['power_w']:.0f} W"] + list(power.get("throttle") or []))


def profile_line(profile: dict) -> str:
    """'prep 0.191 · (idle 0.650) fused 7.064 · convert 0.141 ms; idle in all 0.651 ms': each activity's median ms
    in a timed call, the idle time before it where there was any (names cut to 40 characters: they are the
    candidate's own), and the median time a call's span held none of them."""
    def short(name: str) -> str:
        name = name.split("(")[0]
        return name if len(name) <= 40 else name[:37] + "..."

    parts = [(f"(idle {a['idle_before_ms']:.3f}) " if a.get("idle_before_ms") else "") + f"{short(a['name'])} "
             f"{a['median_ms']:.3f}" for a in profile["activities"]]
    return " · ".join(parts) + f" ms; idle in all {profile['idle_ms']:.3f} ms"


def speedups_line(t: dict) -> str:
    """'0.952x vendor (cuBLAS ...) · 1.020x quack GEMM': the speedup over the vendor and over each peer that ran."""
    parts = [f"{t['speedup']:.3f}x vendor ({t.get('baseline_name')})"]
    best = (t.get("best_peer") or {}).get("name")
    for p in t.get("peers") or []:
        if p.get("ran") and p.get("speedup_vs_peer"):
            parts.append(f"{p['speedup_vs_peer']:.3f}x {p['display']}" + (" (best peer)" if p["name"] == best else ""))
    return " · ".join(parts)


def peers_not_run(t: dict) -> list[str]:
    """One line per peer that did not run, with why; one line when the verdict predates peers."""
    if "peers" not in t:
        return ["peers: not run (a verdict from before peers)"]
    return [f"x {p.get('display', p['name'])}: not run ({p.get('reason', '')})" for p in t["peers"] if not p.get("ran")]
