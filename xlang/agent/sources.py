"""Model sources: where each turn's reply comes from.

  <litellm model>     any litellm model string (openai/..., anthropic/..., hosted_vllm/..., ollama/...)
  reference           the expert solution tasks/<task>/solutions/<lang>[_<generation>]<suffix>: one turn, no LLM;
                      a missing solution makes the sample 'missing' (no turn), not a failure
  file:PATH           one candidate file, as one turn (`xlang rejudge FOLDER`); no LLM
  replay:DB[#RUN]     the replies of a stored run (when RUN is not given, the newest run of this task and
                      language on this architecture, else on any architecture), replayed turn for turn so frozen candidates are judged again
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from xlang.agent.llm import Reply
from xlang.errors import XlangError


class Source(ABC):
    kind = "llm"
    label = ""

    def check(self) -> None:
        """Pre-flight, before any work (e.g. the API key)."""

    def samples(self, requested: int) -> int:
        return requested

    def turns(self, sample_idx: int, requested: int) -> int:
        return requested

    def missing(self, sample_idx: int) -> str | None:
        """A note when this source has nothing for the sample (reported as missing, not as a failure)."""
        return None

    @abstractmethod
    def reply(self, messages: list[dict], sample_idx: int, turn_idx: int, seed: int | None) -> Reply:
        """The model's reply to these messages (reference and replay sources ignore the messages)."""

    def config(self) -> dict:
        return {}


class LLMSource(Source):
    kind = "llm"

    def __init__(self, model: str, sampling: dict):
        from xlang.agent.llm import LLMClient

        self.label = model
        self.client = LLMClient(model, sampling)

    def check(self) -> None:
        from xlang.agent.llm import check_environment

        check_environment(self.label)

    def reply(self, messages, sample_idx, turn_idx, seed):
        return self.client.complete(messages, seed)


class ReferenceSource(Source):
    kind = "reference"
    label = "reference"

    def __init__(self, task, lang: str, arch, backend):
        self.solution = task.solution(lang, arch.generation, backend.suffix)
        self.path = self.solution.path if self.solution else None
        self.expected = (f"tasks/{task.name}/solutions/{lang}_{arch.generation}{backend.suffix} or "
                         f"{lang}{backend.suffix}")
        self.fence = backend.fences[0] if backend.fences else ""

    def turns(self, sample_idx, requested):
        return 1

    def missing(self, sample_idx):
        return None if self.path else f"no expert solution ({self.expected} not found)"

    def reply(self, messages, sample_idx, turn_idx, seed):
        code = self.solution.text
        return Reply(f"```{self.fence}\n{code}\n```", model="reference", code=code, prompt_tokens=0,
                     completion_tokens=0, total_tokens=0)

    def config(self):
        return {"solution": str(self.path) if self.path else None}


class FileSource(Source):
    """A candidate file judged as the one turn of a run (xlang rejudge FOLDER)."""
    kind = "file"

    def __init__(self, spec: str, backend):
        from xlang.backend import read_source

        self.label = spec
        self.path = Path(spec.removeprefix("file:"))
        self.code = read_source(self.path)
        self.fence = backend.fences[0] if backend.fences else ""

    def turns(self, sample_idx, requested):
        return 1

    def reply(self, messages, sample_idx, turn_idx, seed):
        return Reply(f"```{self.fence}\n{self.code}\n```", model="file", code=self.code, prompt_tokens=0,
                     completion_tokens=0, total_tokens=0)

    def config(self):
        return {"file": str(self.path.resolve())}


class ReplaySource(Source):
    kind = "replay"

    def __init__(self, spec: str, task, lang: str, arch=None):
        from xlang.store import Store

        body = spec.removeprefix("replay:")
        db, _, run_id = body.partition("#")
        if not db or not Path(db).is_file():
            raise XlangError(f"replay: no such results database '{db}'")
        self.label = spec
        store = Store(db, readonly=True)
        try:
            if run_id:
                run = store.run(run_id)
                if run is None:
                    raise XlangError(f"replay: no run '{run_id}' in {db}")
            else:
                runs = (arch and store.runs(task=task.name, lang=lang, arch=arch.name)) or \
                    store.runs(task=task.name, lang=lang)
                if not runs:
                    raise XlangError(f"replay: no run of task {task.name} in {lang} in {db}")
                run = runs[-1]
            if (run["task"], run["lang"]) != (task.name, lang):
                raise XlangError(f"replay: run {run['run_id']} is {run['task']} in {run['lang']}, "
                                 f"not {task.name} in {lang}")
            self.run = run
            self.sample_rows = {s["sample_idx"]: s for s in store.samples(run["run_id"])}
            self.by_sample: dict[int, dict[int, dict]] = {}
            for t in store.turns(run_id=run["run_id"]):
                self.by_sample.setdefault(t["sample_idx"], {})[t["turn_idx"]] = t
        finally:
            store.close()
        self.db, self.run_id = db, run["run_id"]

    def samples(self, requested):
        n = max(self.sample_rows or self.by_sample or {-1: None}) + 1
        return max(n, 0)

    def turns(self, sample_idx, requested):
        turns = self.by_sample.get(sample_idx, {})
        return max(turns) if turns else 0

    def missing(self, sample_idx):
        row = self.sample_rows.get(sample_idx)
        if row and row["status"] == "missing":
            return row.get("note") or "missing in the replayed run"
        if not self.by_sample.get(sample_idx):
            return f"no stored turns for sample {sample_idx} in run {self.run_id}"
        return None

    def reply(self, messages, sample_idx, turn_idx, seed):
        t = self.by_sample.get(sample_idx, {}).get(turn_idx)
        if t is None:
            return Reply(None, error=f"replay: run {self.run_id} has no turn {turn_idx} for sample {sample_idx}")
        code = t["code"] if t.get("model") in ("reference", "file") else None
        return Reply(t["reply"], model=t.get("model"), prompt_tokens=0, completion_tokens=0, total_tokens=0,
                     cost_usd=0.0, error=t.get("error"), code=code)

    def config(self):
        return {"replay_of": {"db": str(Path(self.db).resolve()), "run_id": self.run_id,
                              "model": self.run["model"], "arch": self.run["arch"]}}


def make_source(model: str, task, lang: str, arch, backend, sampling: dict) -> Source:
    if model == "reference":
        return ReferenceSource(task, lang, arch, backend)
    if model.startswith("replay:"):
        return ReplaySource(model, task, lang, arch)
    if model.startswith("file:"):
        return FileSource(model, backend)
    return LLMSource(model, sampling)
