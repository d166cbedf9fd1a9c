"""`xlang fixit collect | repair | explain | export`: registered on the CLI app by register(app). Nothing heavy
(litellm, torch) is imported until a command runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

fixit_app = typer.Typer(no_args_is_help=True, add_completion=False,
                        help="Failure -> fix training data from results stores, and the notes `xlang run --notes` "
                             "retrieves.")


def register(app: typer.Typer) -> None:
    app.add_typer(fixit_app, name="fixit")


def _console():
    from xlang.terminal import make_console

    return make_console()


@fixit_app.command("collect")
def collect_command(
    store: List[str] = typer.Option(..., "--store", "-s", help="a results store (repeat for several)"),
    out: Path = typer.Option(..., "--out", "-o", help="the fixit folder to write (pairs.jsonl, unfixed.jsonl, ...)"),
    accept: str = typer.Option("ok", help="what fixes a failure: ok | static_ok (ok or static_ok) | category "
                                          "(passed the stage that failed)"),
    categories: Optional[str] = typer.Option(None, help="failure categories, comma-separated (default: all but "
                                                        "no_code)"),
    cap: int = typer.Option(200, help="most pairs per bucket (category, task, lang, arch); 0: no cap"),
    dedup: float = typer.Option(0.9, help="near-duplicate threshold: Jaccard similarity of normalised-token "
                                          "shingles (1.0: identical tokens only)"),
    seed: int = typer.Option(0, help="seed of the choice within a capped bucket"),
    as_json: bool = typer.Option(False, "--json", help="print collect.json"),
):
    """Select failure -> fix pairs (a failed turn and a later turn of the same sample that fixed it)."""
    from xlang.fixit.collect import collect

    m = collect(store, out, accept=accept, categories=[c for c in (categories or "").split(",") if c] or None,
                cap=cap or None, dedup=dedup, seed=seed)
    if as_json:
        print(json.dumps(m, indent=1, default=str))
        return
    c = _console()
    c.print(f"found {m['found']['pairs']} pairs, {m['found']['unfixed']} unfixed failures, {m['found']['kernels']} "
            f"final kernels in {len(m['stores'])} store(s)", highlight=False)
    c.print(f"kept {m['kept']['pairs']} pairs, {m['kept']['unfixed']} unfixed, {m['kept']['kernels']} kernels "
            f"(after dedup {m['after_dedup']}, cap {m['cap']} per bucket) -> {out}", highlight=False)
    for name, st in m["buckets"]["pairs"].items():
        c.print(f"  {name}: {st['kept']}/{st['available']}", highlight=False)


@fixit_app.command("repair")
def repair_command(
    folder: Path = typer.Argument(..., help="a fixit folder (from xlang fixit collect)"),
    model: str = typer.Option(..., "--model", "-m", help="the teacher: any litellm model"),
    profiler: str = typer.Option("local", help="local | none | a worker URL: the judge of every repair (as xlang run)"),
    accept: str = typer.Option("ok", help="a repair counts when it is: ok | static_ok | category (fixes the failed "
                                          "category)"),
    attempts: int = typer.Option(1, help="independent conversations with the teacher per failure until one counts"),
    turns: int = typer.Option(1, help="turns per conversation: after a reply that does not count, the judge's "
                                      "feedback on it is the teacher's next message"),
    limit: Optional[int] = typer.Option(None, help="repair at most this many failures"),
):
    """Have a teacher model repair failures with no fix, in a loop with the judge's feedback; each repair is judged
    before it counts."""
    from xlang.fixit.repair import repair

    c = _console()

    def shown(f, attempt, category, ok):
        c.print(f"{f['id']} {f['category']} ({f['task']}/{f['lang']}/{f['arch']}) reply of attempt {attempt}: {category} "
                f"{'[green]accepted[/green]' if ok else '[yellow]not counted[/yellow]'}", highlight=False)

    s = repair(folder, model, profiler=profiler, accept=accept, attempts=attempts, turns=turns, limit=limit,
               on_attempt=shown)
    c.print(f"{s['accepted']} of {s['failures']} failures repaired ({s['attempts']} replies, {s['rejected']} not "
            f"counted, {s['errors']} provider errors, ${s['cost_usd']:.4f})", highlight=False)


@fixit_app.command("explain")
def explain_command(
    folder: Path = typer.Argument(..., help="a fixit folder"),
    model: str = typer.Option(..., "--model", "-m", help="the model writing the notes: any litellm model"),
    force: bool = typer.Option(False, "--force", help="write a note for pairs that have one too"),
    limit: Optional[int] = typer.Option(None, help="explain at most this many pairs"),
):
    """Have a model write a short fix note per pair: what was wrong, what changed, why."""
    from xlang.fixit.explain import explain

    s = explain(folder, model, force=force, limit=limit)
    _console().print(f"{s['explained']} of {s['pairs']} pairs explained ({s['errors']} errors, ${s['cost_usd']:.4f})",
                     highlight=False)
    if s["errors"]:
        raise typer.Exit(1)


@fixit_app.command("export")
def export_command(
    folder: Path = typer.Argument(..., help="a fixit folder"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="where to write (default: FOLDER/export)"),
    allow_unexplained: bool = typer.Option(False, "--allow-unexplained",
                                           help="export pairs without an explanation too (fixed code only)"),
    formats: str = typer.Option("chat", "--format", help="layouts, comma-separated: chat (fixit.jsonl, always "
                                                         "written) | ptxbench (5-message think-trace layout with a "
                                                         "loss mask per message) | sharegpt (LLaMA-Factory)"),
    reasoning_model: Optional[str] = typer.Option(None, "--reasoning-model",
                                                  help="whose traces (xlang fixit reason) are the <think> part"),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="leave out records longer than this"),
    tokenizer: str = typer.Option("litellm:gpt-4o", "--tokenizer", help="counts the tokens: litellm:MODEL or "
                                                                         "hf:PATH (a tokenizer.json)"),
):
    """Write fixit.jsonl, kernelgen.jsonl, notes.jsonl, Parquet and the data card (and the ptxbench / ShareGPT
    layouts with --format)."""
    from xlang.fixit.export import export

    target = out or folder / "export"
    card = export(folder, target, require_explanation=not allow_unexplained,
                  formats=[f.strip() for f in formats.split(",") if f.strip()], reasoning_model=reasoning_model,
                  max_tokens=max_tokens, tokenizer=tokenizer)
    k = card["counts"]
    _console().print(f"{k['fixit']} Fixit, {k['kernelgen']} KernelGen records, {k['notes']} notes -> {target} "
                     f"(data card: {target / 'DATACARD.md'})", highlight=False)
    for kind in ("fixit", "kernelgen"):
        x = card["layouts"].get(kind)
        if x:
            _console().print(f"  {kind}: {x['records']} records in {', '.join(x['files'].values())} ({x['no_trace']} "
                             f"without a trace by {reasoning_model}, {x['too_long']} too long)", highlight=False)


@fixit_app.command("reason")
def reason_command(
    folder: Path = typer.Argument(..., help="a fixit folder"),
    model: str = typer.Option(..., "--model", "-m", help="the reasoning teacher: any litellm model"),
    max_words: int = typer.Option(600, "--max-words", help="the bound of a trace (a longer reply is left out)"),
    what: str = typer.Option("pairs,kernels", help="pairs (Fixit) and / or kernels (KernelGen), comma-separated"),
    force: bool = typer.Option(False, "--force", help="write a trace for rows that have one by this model too"),
    limit: Optional[int] = typer.Option(None, help="at most this many rows"),
):
    """Have a reasoning teacher write the bounded reasoning trace behind each fix and each kernel."""
    from xlang.fixit.reason import reason

    s = reason(folder, model, max_words=max_words, what=tuple(w.strip() for w in what.split(",") if w.strip()),
               force=force, limit=limit)
    _console().print(f"{s['written']} of {s['rows']} traces written ({s['over_limit']} over {max_words} words, "
                     f"{s['rejected']} rejected, {s['errors']} errors, ${s['cost_usd']:.4f})", highlight=False)
    if s["errors"]:
        raise typer.Exit(1)


@fixit_app.command("build")
def build_command(
    recipe: Path = typer.Argument(..., help="a recipe (TOML: sources, teachers, datasets; see xlang.fixit.recipe)"),
    as_json: bool = typer.Option(False, "--json", help="print summary.json"),
):
    """Build a study's datasets (direct vs fix-based, balanced or not, per reasoning teacher) from stores."""
    from xlang.fixit.recipe import build

    c = _console()
    summary = build(recipe, on_step=None if as_json else (lambda text: c.print(text, highlight=False)))
    if as_json:
        print(json.dumps(summary, indent=1, default=str))
