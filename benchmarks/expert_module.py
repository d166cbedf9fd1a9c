"""A task's expert solution imported as a module, as the reference model submits it (a variant task, such as a
causal one, gets its base file with the variant's constants set): for benchmark scripts that call the expert's
own functions (its launch with other block sizes) outside the judge."""
import tempfile
from pathlib import Path

from xlang.candidate import load_module
from xlang.task import get_task


def load_expert(task_name: str, lang: str = "triton", generation: str = "hopper", suffix: str = ".py"):
    solution = get_task(task_name).solution(lang, generation, suffix)
    path = Path(tempfile.mkdtemp()) / f"{task_name}_{lang}{suffix}"
    path.write_text(solution.text)
    return load_module(path, name=f"{task_name}_{lang}")
