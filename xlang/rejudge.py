"""`xlang rejudge SOURCE... --store NEW.db`: judge a frozen corpus again under the installed toolchain.

A source is a results store (every candidate of every run that was not superseded, replayed turn for turn as
`--model replay:DB#RUN` does), a candidate file or a folder of them (each file one run of one turn), or the word
`experts` (the expert solutions, as `xlang compare --model reference`). Each becomes a compare cell, judged by
xlang.compare's machinery (the same loop, profiler, Ray scale-out, identities and resume): its key names the source
candidate (its run id and the digest of its replies, or the file's name and digest) and its run id adds the
toolchain identity (xlang.identity), so running the same command again resumes, and running it under another
toolchain into the same store judges again. Static only (`--profiler none`, or no GPU of the architecture here) or
with runtime (`--profiler local`, `--ray`). `xlang diff OLD.db NEW.db` then says what changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Optional

from xlang import compare
from xlang.archs import get_arch
from xlang.backend import backends, get_backend, lang_names, read_source
from xlang.compare import Cell, CompareConfig, cell_key, split_list
from xlang.compare_output import print_table, to_json
from xlang.errors import XlangError
from xlang.identity import digest, toolchain_identity
from xlang.store import Store
from xlang.task import get_task, task_names
from xlang.terminal import make_console

EXPERTS = "experts"


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _run_cells(cfg: CompareConfig, spec: dict) -> list[tuple]:
    """(task, lang, arch, key, options) for every candidate run of a store."""
    db = Path(spec["path"]).resolve()
    out = []
    with Store(db, readonly=True) as store:
        turns: dict[str, list] = {}
        for t in store.turns(messages=False):
            turns.setdefault(t["run_id"], []).append(t)
        for run in store.runs():
            if run.get("superseded_by") or not turns.get(run["run_id"]):
                continue
            if not _chosen(cfg, run["task"], run["lang"], run["arch"], spec):
                continue
            replies = [(t["sample_idx"], t["turn_idx"], hashlib.sha256(
                str(t.get("code") if t.get("model") in ("reference", "file") else t.get("reply")).encode()
            ).hexdigest()) for t in turns[run["run_id"]]]
            options = dict(model=f"replay:{db}#{run['run_id']}", turns=run.get("turns_limit") or
                           max(t["turn_idx"] for t in turns[run["run_id"]]), docs=run.get("docs_level") or "contracts",
                           shape=run.get("shape") or {}, seed=run.get("seed") or 0,
                           context=run.get("context") or "trimmed")
            suite = (run.get("config") or {}).get("suite")
            if suite:  # judged again with its shape suite (a run without one keeps its key as before suites)
                options["suite"] = suite
            key_of = {"of": run["run_id"], "model": run["model"], "replies": replies, "peers": cfg.peers,
                      "timing_rest_ms": cfg.timing_rest_ms, **{k: v for k, v in options.items() if k != "model"}}
            out.append((run["task"], run["lang"], run["arch"],
                        f"rj-{run['task']}-{run['lang']}-{run['arch']}-{_digest(key_of)}", options))
    return out


def _file_cells(cfg: CompareConfig, spec: dict) -> list[tuple]:
    path = Path(spec["path"])
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    known = backends()
    out = []
    for f in files:
        suffix_langs = [n for n, b in known.items() if b.suffix == f.suffix]
        if not suffix_langs:
            continue
        lang = spec.get("lang") or (f.parent.name if f.parent.name in suffix_langs else
                                    suffix_langs[0] if len(suffix_langs) == 1 else None)
        if lang is None:
            raise XlangError(f"{f}: which language? (a {f.suffix} file in a folder not named after one of "
                             f"{', '.join(suffix_langs)}): pass --lang")
        task = spec.get("task") or max((t for t in task_names() if f.stem.startswith(t)), key=len, default=None)
        if task is None:
            raise XlangError(f"{f}: which task? (its name starts with none of {', '.join(task_names())}): "
                             "pass --task")
        code = read_source(f)
        for arch in cfg.archs:
            if _chosen(cfg, task, lang, arch, spec):
                key_of = {"file": f.name, "sha": hashlib.sha256(code.encode()).hexdigest(), "peers": cfg.peers,
                          "timing_rest_ms": cfg.timing_rest_ms}
                out.append((task, lang, arch, f"rf-{task}-{lang}-{arch}-{_digest(key_of)}",
                            dict(model=f"file:{f.resolve()}", turns=1, samples=1)))
    return out


def _expert_cells(cfg: CompareConfig, spec: dict) -> list[tuple]:
    ref = dataclasses.replace(cfg, model="reference")
    return [(t, lang, a, cell_key(ref, t, lang, a), dict(model="reference"))
            for t in (spec.get("tasks") or task_names()) for a in cfg.archs for lang in spec["langs"]
            if _chosen(cfg, t, lang, a, spec)]


def _chosen(cfg: CompareConfig, task: str, lang: str, arch: str, spec: dict) -> bool:
    return (not spec.get("tasks") or task in spec["tasks"]) and (not spec.get("langs") or lang in spec["langs"]) \
        and (not spec.get("archs") or arch in spec["archs"])


def sources(paths: list[str], archs: list[str], langs: list[str], tasks: list[str], task: str | None,
            lang: str | None) -> list[dict]:
    """Each source as {kind, path, ...filters}, checked before any work."""
    out = []
    if task:
        get_task(task)  # an unknown task: one line before any work
    for p in paths:
        spec = {"archs": archs, "langs": langs, "tasks": tasks, "task": task, "lang": lang, "path": p}
        if task and not tasks:  # the experts and a store's runs: --task is a filter, as --tasks TASK
            spec["tasks"] = [task]
        if p == EXPERTS:
            if not archs:
                raise XlangError("rejudge experts needs --arch (e.g. --arch h100,b200)")
            spec.update(kind="experts", langs=langs or list(lang_names()))
        elif Path(p).is_dir() or (Path(p).is_file() and Path(p).suffix != ".db"):
            if not archs:
                raise XlangError(f"rejudge {p} (candidate files) needs --arch (e.g. --arch h100,b200)")
            spec["kind"] = "files"
        elif Path(p).is_file():
            spec["kind"] = "store"
        else:
            raise XlangError(f"rejudge: no such store, file or folder '{p}' (or the word '{EXPERTS}')")
        if lang:
            get_backend(lang)
        out.append(spec)
    return out


def plan_cells(cfg: CompareConfig, specs: list[dict]) -> list[tuple]:
    kinds = {"store": _run_cells, "files": _file_cells, "experts": _expert_cells}
    seen, out = set(), []
    for spec in specs:
        for cell in kinds[spec["kind"]](cfg, spec):
            if cell[3] not in seen:  # the same candidate named twice is judged once
                seen.add(cell[3])
                out.append(cell)
    return out


def planner(cells: list[tuple]):
    """The compare planner of these cells: each one's run id is its key and its toolchain identity."""
    def plan(cfg, runtimes):
        out = []
        for task, lang, arch, key, options in cells:
            identity = toolchain_identity(lang, runtimes.get(arch))
            out.append(Cell(task, lang, arch, f"{key}-t{digest(identity)}", key, identity, options=options))
        return out

    return plan


def run_rejudge(paths: list[str], store: str, archs=None, langs=None, tasks=None, task=None, lang=None,
                profiler: str = "local", ray: str | None = None, rerun: bool = False, concurrency: int = 4,
                console=None, progress: bool = True):
    archs = [get_arch(a).name for a in (archs or [])]
    # langs: a placeholder until the cells' languages replace it below (plan_cells reads only the archs)
    cfg = CompareConfig(archs=archs or ["h100"], langs=list(langs or lang_names()), tasks=tasks or None, store=store,
                        profiler=profiler, ray=ray, rerun=rerun, concurrency=concurrency)
    specs = sources(paths, archs, langs or [], tasks or [], task, lang)
    cells = plan_cells(cfg, specs)
    if not cells:
        raise XlangError("rejudge: no candidate to judge in " + ", ".join(paths)
                         + (" (after --arch/--langs/--tasks)" if archs or langs or tasks else ""))
    cfg.archs = list(dict.fromkeys(c[2] for c in cells))
    cfg.langs = list(dict.fromkeys(c[1] for c in cells))
    cfg.tasks = list(dict.fromkeys(c[0] for c in cells))
    return compare.run_compare(cfg, console, progress, planner=planner(cells), title="xlang rejudge")


def register(app) -> None:
    import typer  # lazy: the command line's, not a library caller's

    @app.command("rejudge")
    def rejudge_command(
        paths: list[str] = typer.Argument(..., metavar="SOURCE...",
                                          help="results stores (.db), candidate files or folders, or 'experts'"),
        store: str = typer.Option(..., "--store", help="the store the new verdicts go to (resumable)"),
        arch: Optional[str] = typer.Option(None, "--arch", "-a", help="architectures (files and experts: which to "
                                                                      "judge for; stores: only these)"),
        langs: Optional[str] = typer.Option(None, "--langs", "-l", help="only these languages"),
        tasks: Optional[str] = typer.Option(None, "--tasks", "-t", help="only these tasks"),
        task: Optional[str] = typer.Option(None, "--task", help="the task of candidate files (default: the task "
                                                                "their name starts with); experts and stores: only "
                                                                "this task"),
        lang: Optional[str] = typer.Option(None, "--lang", help="the language of candidate files (default: their "
                                                                "folder's name, else their suffix's language)"),
        profiler: str = typer.Option("local", help="local | none (none: static only)"),
        ray: Optional[str] = typer.Option(None, "--ray", help="run on Ray, as xlang compare --ray"),
        rerun: bool = typer.Option(False, "--rerun", help="judge again even what this store holds already"),
        as_json: bool = typer.Option(False, "--json", help="print the cells and the table as JSON at the end"),
    ):
        """Judge stored candidates, candidate files or the experts again under the installed toolchain into a
        store (then: xlang diff OLD.db NEW.db)."""
        console = make_console(stderr=as_json)
        result = run_rejudge(paths, store, split_list(arch), split_list(langs), split_list(tasks), task, lang,
                             profiler, ray, rerun, console=console)
        print_table(result, console, title="xlang rejudge")
        console.print(f"[dim]{len(result.cells)} cells in {result.seconds:.1f} s · store {store} · "
                      f"xlang diff OLD.db {store}[/dim]", highlight=False)
        if as_json:
            print(json.dumps(to_json(result), indent=1))
        if any(o.state == "error" for o in result.cells):
            raise typer.Exit(1)
