"""`xlang compare`: the language × architecture matrix, run cell by cell through the agent loop and profiler.

A cell is one (task, language, architecture) with the compare's model, turn limit, sample count, docs level,
shape and seed (its key, `cell_key`). Its run id is the key and the cell's toolchain identity (xlang.identity:
the language's packages and tools, the disassembler, the harness, whether runtime runs and the driver), so
re-running the same command resumes: a cell whose run is stored as finished under the same toolchain is never run
again; an interrupted one is resumed by the agent loop (every stored turn is kept, the turn that was in flight is
done again); the store (SQLite, WAL, synchronous=FULL) keeps every committed turn through a SIGKILL. Under another
toolchain, or when runtime is available for a cell judged without it, or with `--rerun`, the cell is judged again
into a new run and its older run is kept, marked superseded (reports leave it out). When the architecture's GPU is not reachable (`--profiler local` on a machine
without it, or a Ray cluster without it) the cells still compile and take the static census, and their runtime
columns say why they were not run, e.g. "not run (no sm_100a device)".

With `--ray [ADDRESS]` (xlang.scaleout) cells run several at a time: builds are Ray CPU tasks, verdicts Ray GPU
tasks on nodes that declare the architecture's SM; only this process (the driver) writes the store.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from xlang.errors import XlangError

from xlang.store import DEFAULT_PATH as DEFAULT_STORE  # one default for every command

DEFAULT_CONCURRENCY = 4  # samples of one cell (or of one `xlang run`) at the same time: one default for both


@dataclass
class CompareConfig:
    archs: list[str]
    langs: list[str]
    tasks: list[str] | None = None  # None: every task
    model: str = "reference"
    turns: int = 8
    samples: int = 1
    docs: str = "contracts"
    store: str = DEFAULT_STORE
    profiler: str = "local"
    shape: dict = field(default_factory=dict)
    seed: int = 0
    concurrency: int = DEFAULT_CONCURRENCY
    max_cost: float | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    prompt_variants: str | None = None  # the agent loop's options (xlang.agent.loop.RunConfig)
    context: str = "trimmed"
    target_speedup: float | None = None
    peers: bool = True  # time the tasks' peers in each verdict (--no-peers: the vendor only)
    timing_rest_ms: float = 0.0  # idle GPU before each timed call, every side alike (EvalOptions.timing_rest_ms)
    ray: str | None = None  # --ray: "local" (start Ray here) or a cluster address; None: no Ray
    rerun: bool = False  # --rerun: judge every cell of this compare again, even when a run of it is stored
    notes: list[str] = field(default_factory=lambda: ["none"])  # --notes: fix-note levels, an axis of the matrix
    notes_store: str | None = None  # --notes-store: the notes (notes.jsonl of `xlang fixit export`)
    notes_k: int = 3  # --notes-k: notes retrieved per failed turn
    # --suite: shape suites (xlang.suites), an axis of the matrix: each task runs once per named suite it carries,
    # and once without a suite when it carries none of them
    suites: list[str] = field(default_factory=list)


@dataclass
class Cell:
    task: str
    lang: str
    arch: str
    run_id: str
    key: str = ""  # the cell (cell_key): every run of it, under any toolchain, starts with it
    identity: dict = field(default_factory=dict)  # xlang.identity.toolchain_identity of this cell
    supersedes: list = field(default_factory=list)  # the cell's earlier runs this one replaces
    why: str = ""  # why the cell is judged again ("" when it is new or resumed)
    options: dict = field(default_factory=dict)  # RunConfig fields of this cell alone (xlang rejudge: its model,
    # turns, docs, shape, seed and context come from the stored run or the file it judges again)
    notes: str = "none"  # the fix-note level of the cell's runs (xlang.fixit.notes; --notes, an axis)
    suite: str = ""  # the shape suite its verdicts check and time ("" none; --suite, an axis)


@dataclass
class CellOutcome:
    cell: Cell
    state: str  # "stored" (finished before), "done", "missing", "error", "budget"
    seconds: float = 0.0
    summary: str = ""


@dataclass
class CompareResult:
    cells: list[CellOutcome]
    dataset: object  # xlang.report.data.Dataset of this compare's runs
    stats: object  # pandas DataFrame: tables.cell_stats
    seconds: float


def split_list(text: str | None) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def _solution_digest(task: str, lang: str, arch: str) -> str | None:
    from xlang.archs import get_arch
    from xlang.backend import get_backend
    from xlang.task import get_task

    solution = get_task(task).solution(lang, get_arch(arch).generation, get_backend(lang).suffix)
    return hashlib.sha256(solution.text.encode()).hexdigest()[:16] if solution else None


def task_shape(cfg: CompareConfig, task: str) -> dict:
    """The --shape sizes this task has (--shape M=4096 applies to gemm, S=2048 to the attention tasks)."""
    from xlang.task import get_task

    sizes = get_task(task).default_shape
    return {k: v for k, v in sorted(cfg.shape.items()) if k in sizes}


def task_suites(cfg: CompareConfig, task: str) -> list[str]:
    """The --suite names this task carries, in the given order; [""] (no suite) when it carries none of them."""
    from xlang.task import get_task

    own = get_task(task).suites()
    return [s for s in cfg.suites if s in own] or [""]


def cell_run_id(cfg: CompareConfig, task: str, lang: str, arch: str, runtime=None, notes: str = "none",
                suite: str = "") -> str:
    """Deterministic: the same command under the same toolchain names the same run (what makes a compare
    resumable). runtime: the cell's Runtime (None: static only)."""
    from xlang.identity import digest, toolchain_identity

    return f"{cell_key(cfg, task, lang, arch, notes, suite)}-t{digest(toolchain_identity(lang, runtime))}"


def _notes_digest(path: str | None) -> str | None:
    """The notes store's content (sha256, 16 hex): other notes are another cell run."""
    if not path:
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def cell_key(cfg: CompareConfig, task: str, lang: str, arch: str, notes: str = "none", suite: str = "") -> str:
    """The cell, whatever the toolchain: the run id of compares made before toolchain identities (stores made then
    resume through their recorded versions, xlang.identity.stored_identity). A fix-note level other than none
    names another cell, with the notes store's content and --notes-k; so does a shape suite, with its shapes (a
    suite whose shapes change is another cell)."""
    key = {"task": task, "lang": lang, "arch": arch, "model": cfg.model, "turns": cfg.turns, "samples": cfg.samples,
           "docs": cfg.docs, "shape": task_shape(cfg, task), "seed": cfg.seed,
           "temperature": cfg.temperature, "max_tokens": cfg.max_tokens}
    # The loop's options name a different run only when set (so stores made before them still resume).
    for name, default in (("prompt_variants", None), ("context", "trimmed"), ("target_speedup", None),
                          ("peers", True), ("timing_rest_ms", 0.0)):
        if getattr(cfg, name) != default:
            key[name] = getattr(cfg, name)
    if notes != "none":
        key.update(notes=notes, notes_store=_notes_digest(cfg.notes_store), notes_k=cfg.notes_k)
    if suite:
        from xlang.task import get_task

        key.update(suite=suite, suite_shapes=get_task(task).suite(suite).describe()["shapes"])
    from xlang import HARNESS_VERSION

    if HARNESS_VERSION != "3":  # another harness measures differently: its verdicts are new runs (ids of 3 unchanged)
        key["harness"] = HARNESS_VERSION
    if cfg.model == "reference":  # a new or changed expert solution is a new cell run; a missing one is re-checked
        key["solution"] = _solution_digest(task, lang, arch)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    model = "".join(c if c.isalnum() or c in "-_." else "_" for c in cfg.model)[:40]
    return f"cmp-{task}-{lang}-{arch}-{model}-{digest}"


def validate(cfg: CompareConfig) -> CompareConfig:
    """Check every name before any work; fill in the task list."""
    from xlang.archs import get_arch
    from xlang.backend import get_backend
    from xlang.task import get_task, task_names

    if not cfg.archs:
        raise XlangError("--arch needs at least one architecture (e.g. --arch b200 or --arch h100,b200)")
    if not cfg.langs:
        raise XlangError("--langs needs at least one language (e.g. --langs triton,cuda_ptx)")
    if cfg.turns < 1 or cfg.samples < 1:
        raise XlangError("--turns and --samples must be at least 1")
    # Absolute: the agent loop puts build folders beside the store, and builds run in child processes.
    cfg.store = str(Path(cfg.store).expanduser().resolve())
    cfg.archs = [get_arch(a).name for a in dict.fromkeys(cfg.archs)]
    cfg.langs = list(dict.fromkeys(cfg.langs))
    for lang in cfg.langs:
        get_backend(lang)
    cfg.tasks = list(dict.fromkeys(cfg.tasks)) if cfg.tasks else list(task_names())
    known = set()
    for t in cfg.tasks:
        task = get_task(t)
        known |= set(task.default_shape)
        task.shape(task_shape(cfg, t))  # the task's own rules (e.g. S divisible by the tile)
    cfg.suites = list(dict.fromkeys(cfg.suites or []))
    for name in cfg.suites:  # each suite must be some selected task's
        if not any(name in get_task(t).suites() for t in cfg.tasks):
            carried = "; ".join(f"{t}: {', '.join(get_task(t).suites()) or 'none'}" for t in cfg.tasks)
            raise XlangError(f"--suite {name}: no selected task has such a suite (suites of the tasks: {carried}; "
                             "`xlang tasks --suites` lists them)")
    unknown = sorted(set(cfg.shape) - known)
    if unknown:
        raise XlangError(f"--shape {', '.join(unknown)}: no selected task has such a size "
                         f"(tasks {', '.join(cfg.tasks)} have {', '.join(sorted(known))})")
    from xlang.backend import require_build_tools

    require_build_tools(cfg.langs)  # before any cell is built (e.g. nvcc), not after the other languages' cells
    _check_model(cfg.model)
    from xlang.agent.prompt import DOCS_LEVELS

    if cfg.docs not in DOCS_LEVELS:
        raise XlangError(f"unknown docs level '{cfg.docs}' (known: {', '.join(DOCS_LEVELS)})")
    from xlang.agent.prompt import CONTEXT_POLICIES, parse_prompt_variants

    if cfg.context not in CONTEXT_POLICIES:
        raise XlangError(f"unknown context policy '{cfg.context}' (known: {', '.join(CONTEXT_POLICIES)})")
    parse_prompt_variants(cfg.prompt_variants)  # unknown names and missing files: before any work
    from xlang.fixit.notes import check_level, read_notes

    cfg.notes = list(dict.fromkeys(cfg.notes or ["none"]))
    for level in cfg.notes:
        check_level(level, cfg.notes_store)
    if cfg.notes_k < 1:
        raise XlangError("--notes-k must be at least 1")
    if cfg.notes_store:
        cfg.notes_store = str(Path(cfg.notes_store).expanduser().resolve())
        read_notes(cfg.notes_store)  # a missing or malformed notes file: before any work
    return cfg


def plan(cfg: CompareConfig, runtimes: dict | None = None) -> list[Cell]:
    """Task-major, then architecture, then language, then suite, then fix-note level. runtimes: arch -> the Runtime
    its cells are judged with."""
    from xlang.identity import digest, toolchain_identity

    cells = []
    for t in cfg.tasks:
        for a in cfg.archs:
            for lang in cfg.langs:
                identity = toolchain_identity(lang, (runtimes or {}).get(a))
                for suite in task_suites(cfg, t):
                    for notes in cfg.notes or ["none"]:
                        key = cell_key(cfg, t, lang, a, notes, suite)
                        cells.append(Cell(t, lang, a, f"{key}-t{digest(identity)}", key, identity, notes=notes,
                                          suite=suite))
    return cells


_RUN_OF_CELL = re.compile(r"^(?P<key>.+?)-t[0-9a-f]{8}(?:-r\d+)?$")


def _key_of(run_id: str, keys: set[str]) -> str | None:
    if run_id in keys:  # a run stored before toolchain identities
        return run_id
    m = _RUN_OF_CELL.match(run_id)
    return m.group("key") if m and m.group("key") in keys else None


def _free_id(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    n = 2
    while f"{base}-r{n}" in taken:
        n += 1
    return f"{base}-r{n}"


def resolve(cfg: CompareConfig, cells: list[Cell]) -> set[str]:
    """Decide each cell against the store: its stored run (returned in the set, cell.run_id set to it), an
    unfinished run of the same identity to resume, or a new run (the cell's earlier live runs in cell.supersedes).
    Opens the store as its writer, so a store this compare cannot write (read-only, damaged, a newer schema, a
    folder) stops it here, before any work."""
    from xlang.identity import satisfies
    from xlang.store import Store

    stored: set[str] = set()
    keys = {c.key for c in cells}
    with Store(cfg.store) as store:
        by_cell: dict[str, list[dict]] = {}
        for r in store.runs():
            key = _key_of(r["run_id"], keys)
            if key:
                by_cell.setdefault(key, []).append(r)
        for cell in cells:
            runs = by_cell.get(cell.key, [])
            live = [r for r in runs if not r.get("superseded_by")]
            fits = [r for r in live if satisfies(r, store.turns(run_id=r["run_id"], messages=False)
                                                 if cell.identity.get("runtime") else [], cell.identity)]
            done = [r for r in fits if r["status"] == "done"]
            if done and not cfg.rerun:
                cell.run_id = done[-1]["run_id"]
                stored.add(cell.run_id)
                continue
            unfinished = [r for r in fits if r["status"] != "done"]
            cell.run_id = unfinished[-1]["run_id"] if unfinished else _free_id(cell.run_id,
                                                                               {r["run_id"] for r in runs})
            cell.supersedes = [r["run_id"] for r in live if r["run_id"] != cell.run_id]
            earlier = [r for r in live if r["status"] == "done" and r["run_id"] != cell.run_id]
            if earlier:
                cell.why = _why(earlier[-1], cell.identity, cfg.rerun and earlier[-1] in done)
    return stored


def _check_model(model: str) -> None:
    """The model name, its key and its endpoint, before any work (reference and replay are checked per cell)."""
    if model == "reference" or model.startswith(("replay:", "file:")):
        return
    from xlang.agent.llm import check_environment

    check_environment(model)


def _check_profiler(cfg: CompareConfig) -> str:
    """Ray (--ray) must start or answer before any work. Returns a line describing where runtime runs."""
    spec = cfg.profiler
    if spec == "ray" or spec.startswith("ray:"):  # --profiler ray[:ADDRESS] is --ray [ADDRESS]
        from xlang.scaleout import address_of

        cfg.ray, cfg.profiler = address_of(spec), "local"
        spec = "local"
    if cfg.ray:
        if spec != "local":
            raise XlangError(f"--ray runs the profiler on the Ray cluster's GPUs: drop --profiler {spec}")
        from xlang.scaleout import connect

        return connect(cfg.ray)
    if spec in ("local", "none"):
        return spec
    if "://" not in spec and ":" not in spec:  # a bare word is a typo, not a host name
        from xlang.agent.runtime import _FACTORIES

        if spec in _FACTORIES:
            return spec
        raise XlangError(f"unknown profiler '{spec}' (known: {', '.join(_FACTORIES)}; GPUs elsewhere: --ray ADDRESS)")
    from xlang.agent.runtime import make_runtime

    make_runtime(spec, None)  # a worker URL: the one-line error that says what replaced it
    return spec


def _why(run: dict, identity: dict, rerun: bool) -> str:
    """Why a cell with a finished run is judged again, for the log: '--rerun', 'triton 3.6.0 -> 3.9.0', ..."""
    from xlang.identity import differences, stored_identity

    if rerun:
        return "--rerun"
    why = [c for c in differences(run, identity) if not c.startswith(("runtime ", "driver "))]
    if identity.get("runtime") and not stored_identity(run).get("runtime"):
        why.append("runtime now available")
    elif identity.get("runtime"):
        why.append("its runtime did not run or the driver changed")
    return ", ".join(why) or "judged again"


def _runtimes(cfg: CompareConfig) -> dict:
    """arch -> the Runtime the compare's cells of it are judged with (after _check_profiler)."""
    from xlang.agent.runtime import make_runtime
    from xlang.archs import get_arch

    return {a: make_runtime(_profiler_spec(cfg), get_arch(a)) for a in cfg.archs}


def run_cell(cfg: CompareConfig, cell: Cell, on_turn=None, on_stage=None):
    """One cell through the agent loop (resumes the cell's run when it exists); the cell's earlier runs it replaces
    are marked superseded first, so a report never counts both."""
    from xlang.agent.loop import RunConfig, run

    if cell.supersedes:
        from xlang.store import Store

        with Store(cfg.store) as store:
            store.supersede(cell.supersedes, cell.run_id)

    options = {**dict(model=cfg.model, turns=cfg.turns, samples=cfg.samples, docs=cfg.docs,
                      shape=task_shape(cfg, cell.task), seed=cfg.seed, context=cfg.context,
                      suite=cell.suite or None), **cell.options}
    rc = RunConfig(task=cell.task, lang=cell.lang, arch=cell.arch, profiler=_profiler_spec(cfg), store=cfg.store,
                   max_cost=cfg.max_cost, concurrency=cfg.concurrency, temperature=cfg.temperature,
                   max_tokens=cfg.max_tokens, run_id=cell.run_id, prompt_variants=cfg.prompt_variants,
                   target_speedup=cfg.target_speedup, peers=cfg.peers, timing_rest_ms=cfg.timing_rest_ms,
                   notes=cell.notes, notes_store=cfg.notes_store if cell.notes != "none" else None,
                   notes_k=cfg.notes_k, **options)
    return run(rc, on_turn, on_stage)


def cell_label(cell: Cell) -> str:
    """'gemm · triton · h100', with the suite and the fix-note level when there are."""
    return f"{cell.task} · {cell.lang} · {cell.arch}" + (f" · suite {cell.suite}" if cell.suite else "") \
        + (f" · notes {cell.notes}" if cell.notes != "none" else "")


def _profiler_spec(cfg: CompareConfig) -> str:
    if not cfg.ray:
        return cfg.profiler
    from xlang.scaleout import profiler_spec

    return profiler_spec(cfg.ray)


def _run_on_ray(cfg: CompareConfig, todo: list[Cell], console, progress: bool) -> list[CellOutcome]:
    """--ray: several cells at a time (two per GPU the cluster declares), each through the agent loop whose builds
    and verdicts are Ray tasks; the display shows queued / building / evaluating / done per GPU."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from xlang import scaleout

    slots = scaleout.gpu_slots()
    outcomes: list[CellOutcome] = []

    def one(cell):
        t0 = time.monotonic()
        return run_cell(cfg, cell), time.monotonic() - t0

    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
               TextColumn("elapsed"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True, disable=not progress) as bar, \
            ThreadPoolExecutor(max(2, 2 * len(slots)), thread_name_prefix="xlang-cell") as pool:
        overall = bar.add_task("cells", total=len(todo))
        rows = [bar.add_task("", total=None) for _ in range(len(slots) + 1)]
        futures = {pool.submit(one, cell): cell for cell in todo}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            scaleout.MONITOR.poll()
            for row, line in zip(rows, scaleout.progress_lines(scaleout.MONITOR.snapshot(), slots)):
                bar.update(row, description=f"  {line}")
            for future in done:
                cell = futures[future]
                result, seconds = future.result()
                state, text, cats = _summarise(result)
                outcomes.append(CellOutcome(cell, state, seconds, text))
                bar.advance(overall)
                console.print(f"{_mark(state, cats)} {cell_label(cell)}: {text} "
                              f"[dim]({seconds:.1f} s)[/dim]", highlight=False)
    snap = scaleout.MONITOR.snapshot()
    if snap["done"]:
        console.print("Ray verdicts per GPU: " + ", ".join(f"{slot} {n}" for slot, n in sorted(snap["done"].items())),
                      highlight=False)
    return outcomes


def _mark(state: str, categories) -> str:
    """A finished cell's mark (xlang.report.marks): ✓ every sample passed (ok, static_ok), ✗ a sample finished
    with a failing verdict (compile_error, missing_instructions, ...), ○ no verdict (not run, a missing expert, a
    run stopped short, harness_error). Plain characters, so a log without colour still tells them apart."""
    from xlang.report import marks  # lazy, as the report imports below: pandas only once a cell is done

    return marks.mark(marks.worst(categories) if state == "done" else marks.NONE, rich=True)


def _summarise(result) -> tuple[str, str, list]:
    """(state, one line, each sample's best category) for a finished cell."""
    samples = result.samples
    statuses = [s.status for s in samples]
    if statuses and all(s == "missing" for s in statuses):
        return "missing", "missing: " + (samples[0].note or "no candidate"), []
    cats = [s.best_category or s.status for s in samples]
    counts = {c: cats.count(c) for c in dict.fromkeys(cats)}
    text = ", ".join(f"{c} ×{n}" if n > 1 else c for c, n in counts.items())
    speed = [s.best_speedup for s in samples if s.best_speedup]
    if speed:
        text += f"  best {max(speed):.2f}×"
    if result.runtime_note:
        text += f"  [runtime {result.runtime_note}]"
    return result.status, text, [s.best_category for s in samples]


def count_text(cfg: CompareConfig, cells: list[Cell], matrix: bool = True) -> str:
    """How many cells there are, in factors that multiply to that number: '2 task(s) × 1 arch(s) × 2 language(s) =
    4 cells'; with --suite a task counts once per suite it carries (once without a suite when it carries none), and
    the line says which. Not a matrix (xlang rejudge: one cell per stored run, candidate file or expert): the count
    and what it spans."""
    tasks = list(dict.fromkeys(c.task for c in cells))
    if not matrix:
        return (f"{len(cells)} cells (one per stored run, candidate file or expert, across {len(tasks)} task(s), "
                f"{len(dict.fromkeys(c.arch for c in cells))} arch(s), "
                f"{len(dict.fromkeys(c.lang for c in cells))} language(s))")
    suites = {t: list(dict.fromkeys(c.suite for c in cells if c.task == t)) for t in tasks}
    runs = sum(map(len, suites.values()))
    factors = f"{len(tasks)} task(s)"
    if any(s != [""] for s in suites.values()):  # --suite: each of a task's suites is a cell of its own
        factors = f"{runs} task run(s) (" + "; ".join(
            f"{t}: {', '.join(s)}" if s != [""] else f"{t}: no suite" for t, s in suites.items()) + ")"
    factors += f" × {len(cfg.archs)} arch(s) × {len(cfg.langs)} language(s)"
    if len(cfg.notes) > 1:
        factors += f" × {len(cfg.notes)} notes levels"
    return f"{factors} = {len(cells)} cells"


def run_compare(cfg: CompareConfig, console=None, progress: bool = True, planner=None,
                title: str = "xlang compare") -> CompareResult:
    """Run (or resume) the whole matrix, then compute its table from the store. planner(cfg, runtimes) -> cells
    replaces the matrix's plan (xlang rejudge: one cell per stored run or candidate file)."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    from xlang.report import source, tables

    console = console or Console()
    validate(cfg)
    where = _check_profiler(cfg)
    cells = (planner or plan)(cfg, _runtimes(cfg))
    finished = resolve(cfg, cells)
    todo = [c for c in cells if c.run_id not in finished]
    console.print(f"[bold]{title}[/bold]: {count_text(cfg, cells, planner is None)} · "
                  + (f"model {cfg.model} · turns {cfg.turns} · samples {cfg.samples} · docs {cfg.docs}" if planner is None
                     else "candidates as stored") + f" · runtime: {where} · store {cfg.store}"
                  + (f" · shape {','.join(f'{k}={v}' for k, v in cfg.shape.items())}" if cfg.shape else "")
                  + (f" · notes {','.join(cfg.notes)} ({cfg.notes_store})" if cfg.notes != ["none"] else "")
                  + (f" · suites {','.join(cfg.suites)}" if cfg.suites else "")
                  + (f" · {len(finished)} cell(s) already stored, {len(todo)} to run" if finished else ""),
                  highlight=False)
    again: dict[str, int] = {}
    for c in todo:
        if c.why:
            again[c.why] = again.get(c.why, 0) + 1
    if again:
        console.print("judged again (older runs kept, marked superseded): "
                      + "; ".join(f"{n} cell(s): {why}" for why, n in again.items()), highlight=False)
    start = time.monotonic()
    outcomes = [CellOutcome(c, "stored") for c in cells if c.run_id in finished]
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
               TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn()]
    if cfg.ray:
        outcomes += _run_on_ray(cfg, todo, console, progress)
        todo = []
    with Progress(*columns, console=console, transient=True, disable=not progress) as bar:
        overall = bar.add_task("cells", total=len(todo))
        for i, cell in enumerate(todo, 1):
            label = cell_label(cell)
            current = bar.add_task(f"  {label}: starting", total=cfg.samples)
            bar.update(overall, description=f"cells ({i}/{len(todo)}: {label})")
            done_samples = set()

            def on_turn(e, current=current, label=label, done_samples=done_samples):
                if e.turn_idx >= e.turns or e.error:
                    done_samples.add(e.sample_idx)
                what = e.category or "error"
                bar.update(current, completed=len(done_samples),
                           description=f"  {label}: sample {e.sample_idx} turn {e.turn_idx}/{e.turns} {what}")

            def on_stage(k, turn_idx, turns, what, current=current, label=label):
                bar.update(current, description=f"  {label}: sample {k} turn {turn_idx}/{turns} {what}")

            t0 = time.monotonic()
            result = run_cell(cfg, cell, on_turn, on_stage)
            state, text, cats = _summarise(result)
            outcome = CellOutcome(cell, state, time.monotonic() - t0, text)
            outcomes.append(outcome)
            bar.remove_task(current)
            bar.advance(overall)
            console.print(f"{_mark(state, cats)} {label}: {text} [dim]({outcome.seconds:.1f} s)[/dim]", highlight=False)
    dataset = source.load(cfg.store, [c.run_id for c in cells])
    stats = tables.cell_stats(dataset)
    order = {c.run_id: i for i, c in enumerate(cells)}
    outcomes.sort(key=lambda o: order[o.cell.run_id])
    return CompareResult(outcomes, dataset, stats, time.monotonic() - start)
