"""A task's expert (or a candidate file) for benchmark scripts that run it outside the judge: imported as a module,
as the reference model submits it (a variant task, such as a causal one, gets its base file with the variant's
constants set), for scripts that call the expert's own functions (its launch with other block sizes); or built
for Hopper and loaded as the callable entry point, with the calls it is compared against."""
import sys
import tempfile
from pathlib import Path

from xlang.candidate import allocate_outputs, arguments, load_module
from xlang.task import get_task


def load_expert(task_name: str, lang: str = "triton", generation: str = "hopper", suffix: str = ".py"):
    solution = get_task(task_name).solution(lang, generation, suffix)
    path = Path(tempfile.mkdtemp()) / f"{task_name}_{lang}{suffix}"
    path.write_text(solution.text)
    return load_module(path, name=f"{task_name}_{lang}")


def build_expert(lang: str, task, file: str | None = None, shape: dict | None = None):
    """FILE (or the task's expert) built for Hopper at `shape` (default: the task's) -> the BuildResult (through the
    build cache: a second build of the same text is a cache hit)."""
    from xlang.archs import get_arch
    from xlang.backend import build_candidate, get_backend

    arch, backend = get_arch("h100"), get_backend(lang)
    text = open(file).read() if file else task.solution(lang, arch.generation, backend.suffix).text
    return build_candidate(text, lang, task, arch, shape or task.shape({}))


def build_entry(lang: str, task, file: str | None = None, shape: dict | None = None):
    """build_expert -> its entry point; a build failure prints the error and exits 1."""
    from xlang.backend import get_backend

    build = build_expert(lang, task, file, shape)
    if not build.ok:
        print("build failed:\n" + (build.error or ""))
        sys.exit(1)
    return get_backend(lang).load_entry(build)


def default_shape_calls(task, entry, label: str = "expert"):
    """At the task's default shape (inputs of seed 1): [(label, the entry's call), ("vendor", the vendor's call),
    (each installed peer's display name, its call)], and the shape."""
    shape = task.shape({})
    inputs = task.make_inputs(shape, 1, "cuda")
    args = arguments(task, shape, {**inputs, **allocate_outputs(task, shape, "cuda")})
    calls = [(label, lambda: entry(*args)), ("vendor", task.baseline(inputs, shape))]
    return calls + [(p.display, p.call(inputs, shape)) for p in task.peers if not p.missing()], shape
