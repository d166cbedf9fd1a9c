"""The agent loop: samples (concurrent, bounded) of up to N turns each; every turn is prompted, answered,
judged, given feedback and stored before the next one starts.

A run is resumable: run it again with the same --run-id and each sample continues after its last stored turn
(rebuilding the conversation from the store); finished samples are skipped, nothing is duplicated.

Options researchers compare on: prompt variants (sample k gets variant k mod their number, recorded with the
sample), the context policy (what of the earlier turns each prompt keeps: xlang.agent.prompt.CONTEXT_POLICIES),
and a target speedup (a sample stops once a candidate correct with the target instructions reaches it).
"""

from __future__ import annotations

import platform
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from xlang import verdict as V
from xlang.agent import feedback as F
from xlang.agent import prompt as P
from xlang.agent.buildinfo import package_version, toolchain_versions
from xlang.agent.runtime import Assessment, Runtime, assess, make_runtime
from xlang.archs import get_arch
from xlang.backend import BuildInterrupted, backends, get_backend, interrupted_since, interrupts_seen, note_interrupt
from xlang.agent.sources import Source, make_source
from xlang.errors import XlangError
from xlang.identity import toolchain_identity
from xlang.fixit.notes import NoteIndex, check_level, notes_feedback  # bm25s itself only when notes are used
from xlang.store import DEFAULT_PATH, Store
from xlang.task import get_task


@dataclass
class RunConfig:
    task: str
    lang: str
    arch: str
    model: str
    turns: int = 8
    samples: int = 1
    docs: str = "contracts"
    profiler: str = "local"
    store: str = DEFAULT_PATH
    max_cost: float | None = None
    concurrency: int = 4
    stop_on_ok: bool = False
    shape: dict = field(default_factory=dict)  # size overrides
    suite: str | None = None  # a shape suite of the task (xlang.suites): every verdict checks and times its shapes
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    seed: int = 0
    run_id: str | None = None
    workdir: str | None = None  # build artifacts (default: <store folder>/artifacts)
    prompt_variants: str | None = None  # "base,plan,terse" or NAME=FILE entries (default: base)
    context: str = "trimmed"  # xlang.agent.prompt.CONTEXT_POLICIES
    target_speedup: float | None = None  # stop a sample once correct with the target instructions at this speedup
    peers: bool = True  # time the task's peers (public kernels) beside the vendor in each runtime verdict
    timing_rest_ms: float = 0.0  # idle GPU before each timed call, every side alike (EvalOptions.timing_rest_ms)
    notes: str = "none"  # fix notes after a failed turn: none | bm25 | bm25+kernel (xlang.fixit.notes)
    notes_store: str | None = None  # the notes (JSONL, `xlang fixit export` writes notes.jsonl)
    notes_k: int = 3  # notes retrieved per failed turn

    def sampling(self) -> dict:
        return {k: v for k, v in (("temperature", self.temperature), ("max_tokens", self.max_tokens),
                                  ("top_p", self.top_p)) if v is not None}


@dataclass
class TurnEvent:
    """What the progress callback receives after each stored turn."""
    run_id: str
    sample_idx: int
    turn_idx: int
    turns: int
    category: str | None
    detail: str
    speedup: float | None
    cost_usd: float
    tokens: int | None
    error: str | None = None


@dataclass
class SampleResult:
    sample_idx: int
    status: str
    note: str = ""
    best_turn: int | None = None
    best_category: str | None = None
    best_speedup: float | None = None
    turns: int = 0


@dataclass
class RunResult:
    run_id: str
    store: str
    status: str
    samples: list[SampleResult]
    cost_usd: float
    runtime_note: str


class Budget:
    def __init__(self, limit: float | None, spent: float = 0.0):
        self.limit, self.spent = limit, spent
        self._lock = threading.Lock()

    def exhausted(self) -> bool:
        with self._lock:
            return self.limit is not None and self.spent >= self.limit

    def add(self, cost: float) -> None:
        with self._lock:
            self.spent += cost or 0.0


def _versions(source: Source) -> dict:
    out = {"python": platform.python_version(), **{k: v for k, v in toolchain_versions().items()
                                                    if k in ("nvcc", "ptxas", "driver")}}
    languages = [d for b in backends().values() for d in b.distributions]  # each language's toolchain packages
    for dist in dict.fromkeys(["xlang", *languages, "litellm"]):
        if dist == "litellm" and source.kind != "llm":
            continue
        version = package_version(dist)
        if version is not None:
            out[dist] = version
    return out


class Run:
    def __init__(self, cfg: RunConfig, on_turn: Callable[[TurnEvent], None] | None = None,
                 on_stage: Callable[[int, int, int, str], None] | None = None):
        if cfg.turns < 1 or cfg.samples < 1 or cfg.concurrency < 1:
            raise XlangError("--turns, --samples and --concurrency must be at least 1")
        if cfg.docs not in P.DOCS_LEVELS:
            raise XlangError(f"unknown docs level '{cfg.docs}' (known: {', '.join(P.DOCS_LEVELS)})")
        if cfg.context not in P.CONTEXT_POLICIES:
            raise XlangError(f"unknown context policy '{cfg.context}' (known: {', '.join(P.CONTEXT_POLICIES)})")
        if cfg.target_speedup is not None and cfg.target_speedup <= 0:
            raise XlangError("--target-speedup must be positive")
        self.variants = P.parse_prompt_variants(cfg.prompt_variants)
        self.notes = None
        if cfg.notes != "none" or cfg.notes_store:
            check_level(cfg.notes, cfg.notes_store)
            if cfg.notes_k < 1:
                raise XlangError("--notes-k must be at least 1")
            self.notes = NoteIndex.from_file(cfg.notes_store) if cfg.notes != "none" else None
        self.cfg = cfg
        self.on_turn = on_turn or (lambda e: None)
        self.on_stage = on_stage  # (sample, turn, turns, what it is doing now): progress displays
        self.task = get_task(cfg.task)
        self.arch = get_arch(cfg.arch)
        self.backend = get_backend(cfg.lang)
        self.shape = self.task.shape(cfg.shape)
        if cfg.suite is not None:
            self.task.suite(cfg.suite)  # an unknown suite: one line listing the task's, before any work
        self.required = self.task.required_for(self.arch)
        self.source = make_source(cfg.model, self.task, cfg.lang, self.arch, self.backend, cfg.sampling())
        self.source.check()  # missing API key: one line, before any work
        self.runtime: Runtime = make_runtime(cfg.profiler, self.arch)
        self.first_prompt = P.first_prompt(self.task, self.arch, self.backend, self.shape, self.required, cfg.docs)

    # ----------------------------------------------------------------------------------------------------
    def execute(self) -> RunResult:
        cfg = self.cfg
        store = Store(cfg.store)
        try:
            run_id = cfg.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.task}-{cfg.lang}-{cfg.arch}-" \
                                   f"{uuid.uuid4().hex[:6]}"
            n_samples = self.source.samples(cfg.samples)
            created = store.create_run(
                run_id, task=cfg.task, lang=cfg.lang, arch=cfg.arch, model=cfg.model, source=self.source.kind,
                docs_level=cfg.docs, turns_limit=self._turns_limit(), samples=n_samples, shape=self.shape,
                sampling=cfg.sampling(), seed=cfg.seed, profiler=cfg.profiler,
                config={"stop_on_ok": cfg.stop_on_ok, "max_cost": cfg.max_cost, "concurrency": cfg.concurrency,
                        "required": list(self.required), "runtime": self.runtime.name,
                        "runtime_note": self.runtime.note, "prompt_variants": list(self.variants),
                        "target_speedup": cfg.target_speedup, "peers": cfg.peers,
                        "timing_rest_ms": cfg.timing_rest_ms, **self.source.config(),
                        **({"suite": cfg.suite} if cfg.suite else {}),
                        "toolchain": toolchain_identity(cfg.lang, self.runtime),
                        **({"notes_store": str(Path(cfg.notes_store).resolve()), "notes_k": cfg.notes_k,
                            "notes_count": len(self.notes.notes)} if self.notes else {})},
                versions=_versions(self.source), context=cfg.context, notes_level=cfg.notes)
            if not created:
                old = store.run(run_id)
                if (old["task"], old["lang"], old["arch"], old["model"]) != (cfg.task, cfg.lang, cfg.arch, cfg.model):
                    raise XlangError(f"run {run_id} exists with {old['task']}/{old['lang']}/{old['arch']}/"
                                     f"{old['model']}: resume it with the same task, language, arch and model")
            self.budget = Budget(cfg.max_cost, store.run_cost(run_id))
            self.store, self.run_id = store, run_id
            workers = min(cfg.concurrency, n_samples) or 1
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="xlang-sample") as pool:
                try:
                    results = list(pool.map(self._sample_safe, range(n_samples)))
                except KeyboardInterrupt:
                    # Ctrl-C: the samples' builds in progress are interrupted (their compilers may have died of
                    # it), and nothing they would conclude now is stored; the pool waits for them to see it.
                    note_interrupt()
                    raise
            statuses = {r.status for r in results}
            status = "error" if "error" in statuses else "budget" if "budget" in statuses else "done"
            store.finish_run(run_id, status)
            return RunResult(run_id, str(store.path), status, results, store.run_cost(run_id),
                             self.runtime.note)
        finally:
            store.close()

    def _sample_safe(self, k: int) -> SampleResult:
        try:
            return self._sample(k)
        except XlangError:
            raise
        except Exception as e:  # noqa: BLE001 - one sample's failure must not lose the others
            note = f"{type(e).__name__}: {e}"
            self.store.update_sample(self.run_id, k, status="error", note=note[:4000], finished_at=time.time())
            return SampleResult(k, "error", note)

    def _sample(self, k: int) -> SampleResult:
        cfg, store, run_id = self.cfg, self.store, self.run_id
        seed = cfg.seed + k
        names = list(self.variants)
        variant = names[k % len(names)]
        first_prompt = P.with_variant(self.first_prompt, self.variants[variant])
        store.start_sample(run_id, k, seed, prompt_variant=variant)
        row = next(s for s in store.samples(run_id) if s["sample_idx"] == k)
        stored = store.turns(run_id=run_id, sample_idx=k)
        if row["status"] in ("done", "missing"):
            return SampleResult(k, row["status"], row["note"] or "", row["best_turn"], row["best_category"],
                                row["best_speedup"], len(stored))
        missing = self.source.missing(k)
        if missing:
            store.update_sample(run_id, k, status="missing", note=missing, finished_at=time.time())
            return SampleResult(k, "missing", missing)
        turns = min(cfg.turns, self.source.turns(k, cfg.turns)) if self.source.kind != "replay" \
            else self.source.turns(k, cfg.turns)
        history = [{"turn_idx": t["turn_idx"], "reply": t["reply"], "feedback": t["feedback"],
                    "category": t["category"], "speedup": t["speedup"]} for t in stored]
        best_key, best = min(((F.rank_key(t["category"], t["speedup"], t.get("verdict")),
                               (t["turn_idx"], t["category"], t["speedup"])) for t in stored if t["category"]),
                             default=(None, None))
        reached = next((t["turn_idx"] for t in stored if self._reached(t.get("verdict"))), None)
        status, note = "done", ""
        if stored and stored[-1]["error"]:
            history.pop()  # a failed provider call is retried on resume (its row stays as the record)
        for turn_idx in range(len(stored) + 1, turns + 1):
            if cfg.stop_on_ok and best and best[1] in (V.OK, V.STATIC_OK) and self.source.kind != "replay":
                break
            if reached is not None and self.source.kind != "replay":
                note = f"target speedup {cfg.target_speedup}x reached at turn {reached}"
                break
            if self.budget.exhausted():
                status, note = "budget", f"--max-cost {cfg.max_cost} USD reached (spent {self.budget.spent:.4f})"
                break
            wall0 = time.monotonic()
            messages = P.build_messages(first_prompt, history, cfg.context)
            if self.source.kind == "llm":
                self._stage(k, turn_idx, turns, f"waiting for {cfg.model}")
            reply = self.source.reply(messages, k, turn_idx, seed)
            self.budget.add(reply.cost_usd)
            common = dict(messages=messages, reply=reply.text, prompt_tokens=reply.prompt_tokens,
                          completion_tokens=reply.completion_tokens, total_tokens=reply.total_tokens,
                          cost_usd=reply.cost_usd, llm_seconds=reply.seconds, model=reply.model,
                          sampling=cfg.sampling(), seed=seed, reasoning_tokens=reply.reasoning_tokens,
                          reasoning=reply.reasoning)
            if reply.error:
                store.add_turn(run_id, k, turn_idx, error=reply.error, wall_seconds=time.monotonic() - wall0, **common)
                self._emit(k, turn_idx, turns, None, reply.error, None, reply, reply.error)
                status, note = "error", f"turn {turn_idx}: {reply.error}"
                break
            if reply.code is not None:
                code, no_code_note = reply.code, ""
            else:
                ex = P.extract_code(reply.text, self.backend)
                code, no_code_note = ex.code, ex.note
            workdir = Path(cfg.workdir or Path(cfg.store).parent / "artifacts") / run_id / f"s{k}" / f"t{turn_idx}"
            mark = interrupts_seen()
            try:
                j = assess(code, cfg.lang, self.task, self.arch, self.shape, self.runtime, workdir, no_code_note,
                           {"seed": seed, "no_peers": not cfg.peers, "timing_rest_ms": cfg.timing_rest_ms,
                            **({"suite": cfg.suite} if cfg.suite else {})},
                           on_stage=lambda what: self._stage(k, turn_idx, turns, what))
            except XlangError:
                raise
            except Exception as e:  # noqa: BLE001 - the judge's own failure: the turn is kept, with no verdict
                # Stored as harness_error with the candidate's code, so that the sample goes on, the run finishes,
                # and `xlang rejudge` can judge the candidate again once the judge is fixed (a sample left in
                # error would fail the same way on every resume: unfinished forever).
                j = Assessment(V.not_judged(V.Verdict(V.HARNESS_ERROR, lang=cfg.lang, task=cfg.task, arch=cfg.arch,
                                                      shape=dict(self.shape)),
                                            f"the judge failed: {type(e).__name__}: {str(e)[:1500]}"), None)
            if interrupted_since(mark):  # judged while Ctrl-C stopped the run: not stored, done again on resume
                raise BuildInterrupted(f"sample {k} turn {turn_idx} was interrupted: not stored")
            v = j.verdict
            key = F.rank_key(v.category, v.speedup, v.to_dict())
            if best is None or key < best_key:
                best, best_key = (turn_idx, v.category, v.speedup), key
            fb = F.feedback_text(v, turn_idx=turn_idx, turns=turns, backend=self.backend, arch=self.arch,
                                 extract_note=no_code_note, best=best, code=code)
            shown = self._notes_for(v) if v.category not in (V.OK, V.STATIC_OK) else []
            if shown:
                fb += "\n\n" + notes_feedback(shown, cfg.notes, self.backend.fences[0] if self.backend.fences else "")
            if reached is None and self._reached(v.to_dict()):
                reached = turn_idx
            build = j.build.to_dict() if j.build else None
            if build is not None:
                build["resources"] = (v.build or {}).get("resources")
            with store.transaction():
                store.add_turn(run_id, k, turn_idx, code=code, build=build,
                               verdict=v.to_dict(), category=v.category, feedback=fb, speedup=v.speedup,
                               build_seconds=j.build_seconds, eval_seconds=j.eval_seconds,
                               wall_seconds=time.monotonic() - wall0, notes=[h.record() for h in shown] or None,
                               **common)
                store.update_sample(run_id, k, best_turn=best[0], best_category=best[1], best_speedup=best[2])
            history.append({"turn_idx": turn_idx, "reply": reply.text, "feedback": fb, "category": v.category,
                            "speedup": v.speedup})
            self._emit(k, turn_idx, turns, v.category, v.detail, v.speedup, reply, None)
        if not note and reached is not None and self.source.kind != "replay":
            note = f"target speedup {cfg.target_speedup}x reached at turn {reached}"
        fields = dict(status=status, note=note or None, finished_at=time.time())
        if best:
            fields.update(best_turn=best[0], best_category=best[1], best_speedup=best[2])
        store.update_sample(run_id, k, **fields)
        return SampleResult(k, status, note, *(best or (None, None, None)),
                            turns=len(store.turns(run_id=run_id, sample_idx=k)))

    def _notes_for(self, v: V.Verdict) -> list:
        """The fix notes retrieved for a failed verdict (none without --notes)."""
        if self.notes is None:
            return []
        return self.notes.search(error=v.detail or "", category=v.category, task=self.task.name, lang=self.cfg.lang,
                                 arch=self.arch.name, k=self.cfg.notes_k)

    def _turns_limit(self) -> int:
        """The run's turn limit as the tables count it: a reference run has one turn whatever --turns says."""
        return min(self.cfg.turns, self.source.turns(0, self.cfg.turns)) if self.source.kind in ("reference", "file") \
            else self.cfg.turns

    def _reached(self, verdict: dict | None) -> bool:
        """The target speedup is reached: correct with the target instructions, at least that fast."""
        if self.cfg.target_speedup is None or not verdict:
            return False
        sc = V.scores(verdict)
        return sc["correct_with_target"] and (sc["speedup"] or 0.0) >= self.cfg.target_speedup

    def _stage(self, k, turn_idx, turns, what):
        if self.on_stage is not None:
            try:
                self.on_stage(k, turn_idx, turns, what)
            except Exception:  # noqa: BLE001 - display problems never stop a run
                pass

    def _emit(self, k, turn_idx, turns, category, detail, speedup, reply, error):
        try:
            self.on_turn(TurnEvent(self.run_id, k, turn_idx, turns, category, detail or "", speedup, reply.cost_usd,
                                   reply.total_tokens, error))
        except Exception:  # noqa: BLE001 - display problems never stop a run
            pass


def run(cfg: RunConfig, on_turn: Callable[[TurnEvent], None] | None = None,
        on_stage: Callable[[int, int, int, str], None] | None = None) -> RunResult:
    return Run(cfg, on_turn, on_stage).execute()
