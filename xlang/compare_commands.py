"""`xlang compare` and `xlang report`. Registered on the CLI app by register(app); pandas,
matplotlib and the agent loop are imported only when a command runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from xlang.compare import DEFAULT_CONCURRENCY


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)
    app.command("report")(report_command)


def compare_command(
    arch: str = typer.Option(..., "--arch", "-a", help="architectures, comma-separated: h100,h200,b200"),
    langs: str = typer.Option(..., "--langs", "-l", help="kernel languages, comma-separated, e.g. triton,gluon,cuda_ptx,cutedsl (xlang langs lists them)"),
    tasks: Optional[str] = typer.Option(None, "--tasks", "--task", "-t",
                                        help="tasks, comma-separated (default: all; xlang tasks lists them)"),
    model: str = typer.Option("reference", "--model", "-m",
                              help="'reference' (the expert solutions), a litellm model, or 'replay:DB[#RUN]'"),
    turns: int = typer.Option(8, help="turn limit per sample"),
    samples: int = typer.Option(1, help="independent trajectories per cell"),
    docs: str = typer.Option("contracts", help="architecture docs level: none | params | templates | contracts"),
    store: Optional[str] = typer.Option(None, help="results database (default: xlang-runs/results.db or "
                                                   "$XLANG_STORE)"),
    profiler: str = typer.Option("local", help="local | none (GPUs elsewhere: --ray ADDRESS)"),
    ray: Optional[str] = typer.Option(None, "--ray", help="run on Ray: --ray alone starts one on this machine's "
                                                          "GPUs, --ray ADDRESS joins a cluster (xlang[ray])"),
    shape: Optional[str] = typer.Option(None, help="size overrides, each for the tasks that have that size, e.g. "
                                                   "M=4096,N=4096,K=4096 (gemm) or S=2048 (attention); a sweep, one "
                                                   "row per shape: M=1024,2048,4096 (values) or M=1024:8192:x2 "
                                                   "(LO:HI:STEP, HI included; xF multiplies, a number adds)"),
    suite: Optional[str] = typer.Option(None, "--suite", help="shape suites, comma-separated, an axis of the matrix "
                                                              "(xlang tasks --suites): each verdict checks and times "
                                                              "every shape of the suite, for the tasks that carry it"),
    seed: int = typer.Option(0, help="base seed; sample k uses seed+k"),
    concurrency: int = typer.Option(DEFAULT_CONCURRENCY, help="samples of one cell run at the same time"),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="per cell: stop LLM calls past this many USD"),
    temperature: Optional[float] = typer.Option(None, help="sampling temperature (default: the provider's)"),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens",
                                             help="most tokens per reply (default: the provider's)"),
    report: Optional[Path] = typer.Option(None, help="also write the report of this compare to this folder"),
    as_json: bool = typer.Option(False, "--json", help="print the cells and the table as JSON at the end"),
    prompt_variants: Optional[str] = typer.Option(
        None, "--prompt-variants", help="named prompt variants, one per sample in turn: base, plan, terse, or "
                                        "NAME=FILE (default: base)"),
    context: str = typer.Option("trimmed", "--context", help="what each prompt keeps of earlier turns: trimmed | "
                                                             "full | latest-pair | single-user"),
    target_speedup: Optional[float] = typer.Option(None, "--target-speedup",
                                                   help="stop a sample once a candidate correct with the target "
                                                        "instructions reaches this speedup"),
    no_peers: bool = typer.Option(False, "--no-peers", help="time only the vendor baseline, not the tasks' peers "
                                                            "(public kernels such as FA4, quack) in each verdict"),
    timing_rest_ms: float = typer.Option(0.0, "--timing-rest-ms",
                                         help="idle GPU time before each timed call, the same for every side "
                                              "(ms; 0: none; a non-zero value names new cells)"),
    notes: str = typer.Option("none", "--notes", help="fix-note levels, comma-separated, an axis of the matrix: none | "
                                                      "bm25 | bm25+kernel (after a failed turn, notes retrieved "
                                                      "by BM25 from --notes-store are added to the feedback)"),
    notes_store: Optional[str] = typer.Option(None, "--notes-store",
                                              help="the notes (notes.jsonl from `xlang fixit export`)"),
    notes_k: int = typer.Option(3, "--notes-k", help="notes retrieved per failed turn"),
    rerun: bool = typer.Option(False, "--rerun", help="judge every cell of this compare (its --tasks, --langs, "
                                                      "--arch) again, even when stored; older runs are kept, marked "
                                                      "superseded"),
):
    """Run the language × architecture matrix (resumable) and print the main table."""
    from xlang.compare import CompareConfig, run_compare, split_list
    from xlang.compare_output import print_table, to_json
    from xlang.store import default_store
    from xlang.task import parse_shapes
    from xlang.terminal import make_console

    if not 0 <= timing_rest_ms <= 1000:
        from xlang.errors import XlangError

        raise XlangError("--timing-rest-ms must be between 0 and 1000")
    console = make_console(stderr=as_json)  # --json: the JSON alone on stdout
    shapes = parse_shapes(shape)  # a sweep: one compare per shape, one table with a row per shape
    results = []
    for one_shape in shapes:
        cfg = CompareConfig(archs=split_list(arch), langs=split_list(langs), tasks=split_list(tasks) or None,
                            model=model, turns=turns, samples=samples, docs=docs, store=store or default_store(),
                            profiler=profiler, shape=one_shape, seed=seed, concurrency=concurrency,
                            max_cost=max_cost, temperature=temperature, max_tokens=max_tokens,
                            prompt_variants=prompt_variants, context=context, target_speedup=target_speedup, ray=ray,
                            peers=not no_peers, timing_rest_ms=timing_rest_ms, rerun=rerun,
                            notes=split_list(notes) or ["none"], notes_store=notes_store, notes_k=notes_k,
                            suites=split_list(suite))
        results.append(run_compare(cfg, console))
    result = results[0] if len(results) == 1 else _merged(results, cfg.store)
    print_table(result, console, title=f"xlang compare · model {cfg.model} · turns {cfg.turns} · "
                                       f"samples {cfg.samples} · docs {cfg.docs}")
    if report is not None:
        from xlang.report import write_report

        try:
            rep = write_report(result.dataset, report)
        except OSError as e:
            from xlang.errors import XlangError

            raise XlangError(f"cannot write the report to {report}: {e.strerror or e} (the results are stored in "
                             f"{cfg.store}: xlang report --store {cfg.store} --out DIR)") from None
        console.print(f"report: {rep.index}", highlight=False)
    else:
        console.print(f"[dim]{len(result.cells)} cells in {result.seconds:.1f} s · store {cfg.store} · "
                      f"xlang report --store {cfg.store}[/dim]", highlight=False)
    if as_json:
        print(json.dumps(to_json(result), indent=1))
    if any(o.state == "error" for o in result.cells):
        raise typer.Exit(1)


def _merged(results, store: str):
    """One CompareResult of a sweep's compares: every cell once, the table over all their runs (a row per shape)."""
    from xlang.compare import CompareResult
    from xlang.report import source, tables

    cells = list({o.cell.run_id: o for r in results for o in r.cells}.values())
    dataset = source.load(store, [o.cell.run_id for o in cells])
    return CompareResult(cells, dataset, tables.cell_stats(dataset), sum(r.seconds for r in results))


def report_command(
    store: Optional[str] = typer.Option(None, help="results database (default: xlang-runs/results.db or "
                                                   "$XLANG_STORE), or several comma-separated, read as one; "
                                                   "opened read-only, never changed"),
    out: Optional[Path] = typer.Option(None, help="output folder (default: report-<store name> beside the store)"),
    title: Optional[str] = typer.Option(None, help="the report's title"),
    where: Optional[str] = typer.Option(None, "--where", help="only these runs, e.g. model=openai/gpt-5,docs=params "
                                                              "(AXIS=VALUE pairs; a|b for either)"),
    by: Optional[str] = typer.Option(None, "--by", help="also a table grouped by these axes, printed and written "
                                                        "(data/custom.csv): any of task, arch, lang, model, docs, "
                                                        "prompt_variant, context, notes, suite, shape, D, gqa, turns_limit, "
                                                        "turns"),
    turn_limits: str = typer.Option("1,4,8", "--turn-limits", help="the turn limits of the main and turn tables"),
    model: Optional[str] = typer.Option(None, "--model", help="the model of the language × architecture table "
                                                              "(default: the one with the most samples)"),
):
    """Write every table of the article (index.html with plots, report.md, CSV/Parquet) from a results store."""
    from xlang.errors import XlangError
    from xlang.report import provenance, source, write_report
    from xlang.report.data import parse_axes, parse_where
    from xlang.store import default_store
    from xlang.terminal import make_console

    console = make_console()
    store = store or default_store()
    first = store.split(",")[0].strip()
    out = out or Path(first).parent / f"report-{Path(first).stem}"
    filters = parse_where(where)
    axes = parse_axes(by)
    try:
        limits = tuple(sorted({int(x) for x in turn_limits.split(",") if x.strip()}))
    except ValueError:
        limits = ()
    if not limits or min(limits) < 1:
        raise XlangError(f"--turn-limits '{turn_limits}': expected positive integers, e.g. 1,4,8")
    full = source.load(store)
    for axis, values in filters.items():  # a value no run has is a typo, not an empty report
        known = sorted(set(full.runs[axis].astype(str))) if len(full.runs) else []
        unknown = [v for v in values if v not in known]
        if unknown:
            raise XlangError(f"--where {axis}={'|'.join(unknown)}: no run in {store} has that {axis} "
                             f"({axis} values: {', '.join(repr(k) if k == '' else k for k in known) or 'none'})")
    ds = full.filter(filters)
    if filters and ds.runs.empty:
        raise XlangError(f"--where {where}: no run in {store} matches all of these at once")
    if model is not None and not (ds.runs["model"] == model).any():
        known = ", ".join(sorted(ds.runs["model"].unique())) or "none"
        raise XlangError(f"--model {model}: no run of that model in {store} (models: {known})")
    try:
        rep = write_report(ds, out, title, limits=limits, model=model, by=axes or None, where=filters)
    except OSError as e:
        raise XlangError(f"cannot write the report to {out}: {e.strerror or e}"
                         + (f" ({e.filename})" if e.filename and str(e.filename) != str(out) else "")) from None
    console.print(f"{len(ds.runs)} sample runs, {len(ds.turns)} candidates from {store}"
                  + (f" (filter {where})" if filters else ""), highlight=False)
    if axes:
        from rich.table import Table

        display = rep.tables["custom_display"]
        table = Table(title=f"by {', '.join(axes)}", header_style="bold")
        for col in display.columns:
            table.add_column(str(col), overflow="fold")
        for row in display.itertuples(index=False):
            table.add_row(*[str(v) for v in row])
        console.print(table)
    if not ds.empty:
        from rich.table import Table

        display = rep.tables["metrics_models_display"]
        table = Table(title="pass@k and fast_p per model (samples correct with the target instructions)",
                      header_style="bold")
        for col in display.columns:
            table.add_column(str(col), overflow="fold")
        for row in display.itertuples(index=False):
            table.add_row(*[str(v) for v in row])
        console.print(table)
    for line in provenance.runtime_banners(ds):
        console.print(f"[yellow]not run:[/yellow] {line}", highlight=False)
    console.print(f"wrote {rep.index}, {rep.markdown}, {len(rep.plots)} plots, {len(rep.csv)} CSV"
                  + (f", {len(rep.parquet)} Parquet" if rep.parquet else f" ({rep.parquet_note})"), highlight=False)

