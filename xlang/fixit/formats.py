"""Training-record layouts of Fixit and KernelGen rows, and the token counts the length filter uses.

  ptxbench  PTXBench's SFT layout. Fixit (fix-based): five messages, system / user: the task prompt / assistant: the
            failed candidate / user: what the judge said / assistant: `<think>` the reasoning teacher's trace
            `</think>` then the fixed kernel. KernelGen (direct generation): system / user: the task prompt /
            assistant: `<think>` trace `</think>` then the kernel. Every message carries step_loss_mask: 1 on the
            last assistant message alone (the only one trained on), 0 on the others.
  chat      TRL's chat layout (the layout of `xlang fixit export` before formats existed): three messages, system /
            user: task, failed code and feedback / assistant: the explanation (or, with a reasoning teacher, the
            `<think>` trace) and the fixed kernel; KernelGen: system / user: task / assistant: kernel.
  sharegpt  LLaMA-Factory's ShareGPT layout of the ptxbench messages: {"system", "conversations": [{"from": "human" |
            "gpt", "value"}]}; dataset_info() is the entry of its dataset_info.json. LLaMA-Factory trains on every
            assistant turn unless the dataset's `mask_history` is set: the entry sets it, so only the last turn is
            trained on, as the ptxbench mask says.

Token counts (the --max-tokens filter): a tokenizer spec `litellm:MODEL` counts with litellm.token_counter (the
model's own tokenizer where litellm has it, else tiktoken's cl100k_base, with litellm's per-message overhead);
`hf:PATH` with a Hugging Face tokenizer.json (the `tokenizers` package: the messages' contents, no chat template).
"""

from __future__ import annotations

from xlang.errors import XlangError
from xlang.fixit import common as C
from xlang.fixit.common import fixit_user

FORMATS = ("ptxbench", "chat", "sharegpt")
DEFAULT_TOKENIZER = "litellm:gpt-4o"


def _code(lang: str, code: str) -> str:
    return f"```{C.fence(lang)}\n{(code or '').rstrip()}\n```"


def think(trace: str, lang: str, code: str) -> str:
    """The trained answer: the trace in <think> tags, then the kernel in one code block."""
    return f"<think>\n{trace.strip()}\n</think>\n\n{_code(lang, code)}"


def _msg(role: str, content: str, mask: int | None) -> dict:
    return {"role": role, "content": content} if mask is None else {"role": role, "content": content,
                                                                    "step_loss_mask": mask}


def trace_of(row: dict, reasoning_model: str | None) -> str | None:
    """The row's reasoning trace by that teacher, None when it has none."""
    if not reasoning_model:
        return None
    entry = (row.get("reasoning") or {}).get(reasoning_model)
    return entry["text"] if entry else None


def fix_messages(pair: dict, reasoning_model: str | None, layout: str) -> list[dict] | None:
    """A pair's messages in a layout (ptxbench and sharegpt: the five messages; chat: three); None when the layout
    needs a trace the pair lacks (ptxbench / sharegpt) or an answer it cannot give (chat: no trace and no
    explanation is still a record: the fixed code alone)."""

    trace = trace_of(pair, reasoning_model)
    if layout == "chat":
        if trace is not None:
            answer = think(trace, pair["lang"], pair["fixed_code"])
        else:
            head = (pair.get("explanation") or "").strip()
            answer = (f"{head}\n\n" if head else "") + _code(pair["lang"], pair["fixed_code"])
        return [_msg("system", pair["system"], None), _msg("user", fixit_user(pair), None),
                _msg("assistant", answer, None)]
    if trace is None:
        return None
    return [_msg("system", pair["system"], 0), _msg("user", pair["task_prompt"], 0),
            _msg("assistant", _code(pair["lang"], pair["failed_code"]), 0),
            _msg("user", pair["feedback"] or pair["error"] or f"{pair['category']}", 0),
            _msg("assistant", think(trace, pair["lang"], pair["fixed_code"]), 1)]


def direct_messages(kern: dict, reasoning_model: str | None, layout: str) -> list[dict] | None:
    trace = trace_of(kern, reasoning_model)
    if layout == "chat":
        answer = think(trace, kern["lang"], kern["code"]) if trace is not None else _code(kern["lang"], kern["code"])
        return [_msg("system", kern["system"], None), _msg("user", kern["task_prompt"], None),
                _msg("assistant", answer, None)]
    if trace is None:
        return None
    return [_msg("system", kern["system"], 0), _msg("user", kern["task_prompt"], 0),
            _msg("assistant", think(trace, kern["lang"], kern["code"]), 1)]


def sharegpt(messages: list[dict]) -> dict:
    """ShareGPT (LLaMA-Factory) of a message list whose first message is the system prompt."""
    roles = {"user": "human", "assistant": "gpt"}
    return {"system": messages[0]["content"],
            "conversations": [{"from": roles[m["role"]], "value": m["content"]} for m in messages[1:]]}


def dataset_info(name: str, file_name: str) -> dict:
    """The dataset_info.json entry LLaMA-Factory reads for a ShareGPT file (mask_history: train on the last turn)."""
    return {name: {"file_name": file_name, "formatting": "sharegpt", "mask_history": True,
                   "columns": {"messages": "conversations", "system": "system"},
                   "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "human",
                            "assistant_tag": "gpt"}}}


def check_formats(formats) -> list[str]:
    out = list(dict.fromkeys(formats))
    bad = [f for f in out if f not in FORMATS]
    if bad or not out:
        raise XlangError(f"--format {', '.join(bad) or '(none)'}: one or more of {', '.join(FORMATS)}")
    return out


class TokenCounter:
    """Counts the tokens of a message list with the tokenizer a spec names (module docstring)."""

    def __init__(self, spec: str = DEFAULT_TOKENIZER):
        kind, _, name = spec.partition(":")
        if kind not in ("litellm", "hf") or not name:
            raise XlangError(f"--tokenizer {spec}: expected litellm:MODEL or hf:PATH (a tokenizer.json)")
        self.spec, self.kind, self.name = spec, kind, name
        if kind == "hf":
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise XlangError("--tokenizer hf:PATH needs the tokenizers package (pip install tokenizers)") from None
            try:
                self._hf = Tokenizer.from_file(name)
            except Exception as e:  # noqa: BLE001 - a missing or malformed file: one clear line
                raise XlangError(f"--tokenizer {spec}: cannot load the tokenizer ({e})") from None

    def count(self, messages: list[dict]) -> int:
        plain = [{"role": m["role"], "content": m["content"]} for m in messages]
        if self.kind == "hf":
            return sum(len(self._hf.encode(m["content"]).ids) for m in plain)
        from xlang.agent.llm import litellm_module

        return int(litellm_module().token_counter(model=self.name, messages=plain))
