"""`xlang run`: the agent loop from the command line. Registered on the CLI app by register(app); nothing
heavy (litellm, torch) is imported until the command runs."""

from __future__ import annotations

import threading
from typing import Optional

import typer

from xlang.compare import DEFAULT_CONCURRENCY

SHOW = ("prompt", "reply", "code", "feedback", "verdict", "build", "notes")


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
    app.command("trajectory")(trajectory_command)


def run_command(
    task: str = typer.Option(..., "--task", "-t", help="task name (xlang tasks lists them), e.g. gemm"),
    lang: str = typer.Option(..., "--lang", "-l", help="a kernel language: a folder under backends/ or a plugin (xlang langs lists them)"),
    arch: str = typer.Option(..., "--arch", "-a", help="h100 | h200 | b200"),
    model: str = typer.Option(..., "--model", "-m",
                              help="a litellm model (openai/..., anthropic/..., hosted_vllm/...), 'reference', "
                                   "or 'replay:DB' / 'replay:DB#RUN_ID'"),
    turns: int = typer.Option(8, help="turns per sample"),
    samples: int = typer.Option(1, help="independent trajectories"),
    docs: str = typer.Option("contracts", help="architecture docs level: none | params | templates | contracts"),
    profiler: str = typer.Option("local", help="local | none (GPUs elsewhere: --ray ADDRESS)"),
    ray: Optional[str] = typer.Option(None, "--ray", help="run on Ray: --ray alone starts one on this machine's "
                                                          "GPUs, --ray ADDRESS joins a cluster (xlang[ray])"),
    store: str = typer.Option(None, help="results database (default: xlang-runs/results.db or $XLANG_STORE)"),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="stop starting LLM calls past this many USD"),
    concurrency: int = typer.Option(DEFAULT_CONCURRENCY, help="samples run at the same time"),
    stop_on_ok: bool = typer.Option(False, "--stop-on-ok", help="end a sample at its first ok (or static_ok)"),
    shape: Optional[str] = typer.Option(None, help="size overrides, e.g. M=4096,N=4096,K=4096"),
    suite: Optional[str] = typer.Option(None, "--suite", help="a shape suite of the task (xlang tasks --suites): "
                                                              "each verdict checks and times every shape of it"),
    temperature: Optional[float] = typer.Option(None, help="sampling temperature (default: the provider's)"),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens",
                                             help="most tokens per reply (default: the provider's)"),
    seed: int = typer.Option(0, help="base seed; sample k uses seed+k"),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="name the run; an existing one is resumed"),
    prompt_variants: Optional[str] = typer.Option(
        None, "--prompt-variants", help="named prompt variants, one per sample in turn: base, plan, terse, or "
                                        "NAME=FILE (default: base)"),
    context: str = typer.Option("trimmed", "--context", help="what each prompt keeps of earlier turns: trimmed | "
                                                             "full | latest-pair | single-user"),
    target_speedup: Optional[float] = typer.Option(None, "--target-speedup",
                                                   help="stop a sample once a candidate correct with the target "
                                                        "instructions reaches this speedup"),
    no_peers: bool = typer.Option(False, "--no-peers", help="time only the vendor baseline, not the task's peers "
                                                            "(public kernels such as FA4, quack) in each verdict"),
    notes: str = typer.Option("none", "--notes", help="after a failed turn, add fix notes retrieved by BM25 to the "
                                                      "feedback: none | bm25 | bm25+kernel (each with its fixed kernel)"),
    notes_store: Optional[str] = typer.Option(None, "--notes-store",
                                              help="the notes (notes.jsonl from `xlang fixit export`)"),
    notes_k: int = typer.Option(3, "--notes-k", help="notes retrieved per failed turn"),
):
    """Run the agent loop: a model writes the task's kernel in a language for an architecture, turn by turn."""

    from rich.table import Table

    from xlang.agent.loop import RunConfig, run
    from xlang.store import default_store
    from xlang.task import parse_shape
    from xlang.terminal import make_console

    console = make_console()  # piped: not cut at 80 columns
    lock = threading.Lock()
    if ray is not None:
        from xlang.errors import XlangError
        from xlang.scaleout import profiler_spec

        if profiler != "local":
            raise XlangError(f"--ray runs the profiler on the Ray cluster's GPUs: drop --profiler {profiler}")
        profiler = profiler_spec(ray)
    cfg = RunConfig(task=task, lang=lang, arch=arch, model=model, turns=turns, samples=samples, docs=docs,
                    profiler=profiler, store=store or default_store(),
                    max_cost=max_cost, concurrency=concurrency, stop_on_ok=stop_on_ok, shape=parse_shape(shape), suite=suite,
                    temperature=temperature, max_tokens=max_tokens, seed=seed, run_id=run_id,
                    prompt_variants=prompt_variants, context=context, target_speedup=target_speedup,
                    peers=not no_peers, notes=notes, notes_store=notes_store, notes_k=notes_k)

    def on_turn(e):
        detail = (e.error or e.detail or "").strip().splitlines()
        first = detail[0][:110] if detail else ""
        speed = f" speedup {e.speedup:.3g}x" if e.speedup else ""
        colour = {"ok": "green", "static_ok": "cyan"}.get(e.category or "", "yellow" if e.category else "red")
        with lock:
            console.print(f"sample {e.sample_idx} turn {e.turn_idx}/{e.turns}: [{colour}]{e.category or 'error'}"
                          f"[/{colour}]{speed}  {first}  [dim]${e.cost_usd:.4f}[/dim]", highlight=False)

    from xlang.backend import require_build_tools

    require_build_tools([lang])  # nvcc for cuda_ptx, cuobjdump: before the run is created or a model called
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    # Between turns, one transient line per sample says what it waits for (the model, the build, the verdict).
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True) as bar:
        rows: dict[int, int] = {}

        def on_stage(k, turn_idx, n, what):
            with lock:
                if k not in rows:
                    rows[k] = bar.add_task("", total=None)
                bar.update(rows[k], description=f"sample {k} turn {turn_idx}/{n}: {what}")

        result = run(cfg, on_turn, on_stage)
    table = Table(title=f"run {result.run_id}: {task} · {lang} · {arch} · {model}")
    for col in ("sample", "status", "turns", "best turn", "best category", "speedup", "note"):
        table.add_column(col)
    for s in result.samples:
        table.add_row(str(s.sample_idx), s.status, str(s.turns), str(s.best_turn or "-"), s.best_category or "-",
                      f"{s.best_speedup:.3g}x" if s.best_speedup else "-", (s.note or "")[:80])
    console.print(table)
    if suite:  # the suite summary and per-shape table of the run's best candidate (nothing when none was timed)
        from xlang.compare_output import print_suites
        from xlang.report import source

        print_suites(source.load(result.store, [result.run_id]), console)
    console.print(f"runtime: {result.runtime_note or 'ran'} · cost ${result.cost_usd:.4f} · store {result.store} · "
                  f"status {result.status}", highlight=False)
    if result.status == "error":
        raise typer.Exit(1)


def trajectory_command(
    run_id: Optional[str] = typer.Argument(None, help="a run id (default: list the runs)"),
    store: str = typer.Option(None, help="results database (default: xlang-runs/results.db or $XLANG_STORE)"),
    sample: Optional[int] = typer.Option(None, help="only this sample"),
    turn: Optional[int] = typer.Option(None, help="print one turn's --show part in full"),
    show: str = typer.Option("feedback", help=f"with --turn: {' | '.join(SHOW)}"),
):
    """Show stored runs, a run's turns, or one turn's exact prompt, reply, code, feedback or verdict."""
    import json

    from rich.table import Table

    from xlang.errors import XlangError
    from xlang.store import Store, default_store
    from xlang.terminal import make_console

    if show not in SHOW:
        raise XlangError(f"--show {show}: not a part of a turn (one of: {', '.join(SHOW)})")
    path = store or default_store()
    console = make_console()
    with Store(path, readonly=True) as db:
        if run_id is None:
            table = Table(title=str(path))
            for col in ("run", "task", "lang", "arch", "model", "docs", "samples", "status", "cost $"):
                table.add_column(col)
            for r in db.runs():
                table.add_row(r["run_id"], r["task"], r["lang"], r["arch"], r["model"], r["docs_level"] or "",
                              str(r["samples"]), r["status"], f"{r['cost_usd']:.4f}")
            console.print(table)
            return
        if db.run(run_id) is None:
            raise XlangError(f"no run '{run_id}' in {path}")
        turns = db.turns(run_id=run_id, sample_idx=sample)
        if turn is not None:
            part = {"prompt": "messages"}.get(show, show)
            chosen = [t for t in turns if t["turn_idx"] == turn]
            if not chosen:
                raise XlangError(f"run {run_id} has no turn {turn}" + (f" in sample {sample}" if sample is not None
                                                                        else ""))
            for t in chosen:
                value = t.get(part)
                print(f"--- sample {t['sample_idx']} turn {turn}: {show}")
                print(value if isinstance(value, str) else json.dumps(value, indent=1, default=str))
            return
        table = Table(title=f"run {run_id}")
        shown = any(t.get("notes") for t in turns)
        for col in ("sample", "turn", "category", "speedup", "tokens", "cost $", "llm s", "build s", "detail",
                    *(("notes",) if shown else ())):
            table.add_column(col)
        for t in turns:
            detail = ((t["verdict"] or {}).get("detail") or t["error"] or "").strip().splitlines()
            table.add_row(str(t["sample_idx"]), str(t["turn_idx"]), t["category"] or "error",
                          f"{t['speedup']:.3g}" if t["speedup"] else "-", str(t["total_tokens"] or 0),
                          f"{t['cost_usd']:.4f}", f"{t['llm_seconds'] or 0:.1f}", f"{t['build_seconds'] or 0:.1f}",
                          detail[0][:70] if detail else "",
                          *((", ".join(n["id"] for n in t.get("notes") or []) or "-",) if shown else ()))
        console.print(table)
