"""The xlang command line (typer). Heavy libraries are imported inside the commands that need them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from xlang.errors import XlangError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="How well can each kernel language reach a GPU architecture's own instructions?")
console = Console()


@app.command("tasks")
def tasks_command():
    """List the tasks: contract, default shape, tolerance, baseline."""
    from xlang.task import all_tasks, format_shape

    table = Table(title="tasks")
    for col in ("task", "what", "entry point", "default shape", "tolerance", "baseline"):
        table.add_column(col)
    for t in all_tasks():
        table.add_row(t.name, t.title, t.contract.python_signature().removeprefix("def ").removesuffix(" -> None"),
                      format_shape(t.default_shape), f"atol={t.tolerance['atol']} rtol={t.tolerance['rtol']}",
                      t.baseline_name)
    console.print(table)


@app.command("archs")
def archs_command():
    """List the architectures: target, figures, instruction families, default requirement."""
    from xlang.archs import archs, families

    table = Table(title="architectures")
    for col in ("arch", "target", "SMs", "smem/block KiB", "L2 MiB", "bf16 TFLOP/s", "TB/s", "families (required*)"):
        table.add_column(col)
    for a in archs().values():
        f = a.figures
        fams = ", ".join(n + ("*" if n in a.default_required else "") for n in a.families)
        table.add_row(a.name, a.sm, str(f["sms"]), str(f["smem_per_block_kib"]), str(f["l2_mib"]),
                      str(f["peak_dense_bf16_tflops"]), str(f["mem_bandwidth_tbs"]), fams)
    console.print(table)
    fam_table = Table(title="instruction families")
    for col in ("family", "PTX", "SASS", "what"):
        fam_table.add_column(col)
    for fam in families().values():
        fam_table.add_row(fam.name, fam.ptx.pattern, fam.sass.pattern, fam.doc)
    console.print(fam_table)


def _resolve(file: Path | None, lang: str, task_name: str, arch_name: str, shape: str | None):
    from xlang.archs import get_arch
    from xlang.backend import get_backend
    from xlang.task import get_task, parse_shape

    arch = get_arch(arch_name)
    task = get_task(task_name)
    backend = get_backend(lang)
    if file is not None and not file.is_file():
        raise XlangError(f"no such file: {file}")
    return arch, task, backend, task.shape(parse_shape(shape))


def print_census(build) -> None:
    census = build.census
    table = Table(title=f"{build.lang} · {build.task} · {build.arch}: SASS instruction census")
    table.add_column("kernel")
    fams = [f for f in census.families if census.families[f] or f in census.required]
    for f in fams:
        table.add_column(f + ("*" if f in census.required else ""), justify="right")
    for k in census.kernels:
        table.add_row(k.name[:60], *[str(k.families.get(f, 0)) for f in fams])
    table.add_row("PTX evidence", *[str(census.ptx.get(f, 0)) for f in fams], style="dim")
    console.print(table)
    verdict = ("[green]present[/green]: " + ", ".join(census.present)) if census.ok else \
        ("[red]missing[/red]: " + ", ".join(census.missing))
    console.print(f"required families (*) {verdict}   build {build.seconds:.2f} s")


@app.command("build")
def build_command(
    file: Path = typer.Argument(..., help="candidate source file"),
    lang: str = typer.Option(..., "--lang", "-l", help="triton | cuda_ptx | cutedsl"),
    task: str = typer.Option(..., "--task", "-t"),
    arch: str = typer.Option(..., "--arch", "-a", help="h100 | h200 | b200"),
    shape: Optional[str] = typer.Option(None, help="size overrides, e.g. M=4096,N=4096,K=4096"),
    require: Optional[str] = typer.Option(None, help="required families, comma-separated (default: the task's)"),
    as_json: bool = typer.Option(False, "--json", help="print the build result as JSON"),
):
    """Compile a candidate for an architecture (no GPU needed) and print its SASS census and verdict."""
    from xlang.archs import parse_required
    from xlang.backend import build_candidate

    arch_obj, task_obj, backend, shape_obj = _resolve(file, lang, task, arch, shape)
    required = parse_required(arch_obj, require, task_obj.required_for(arch_obj))
    result = build_candidate(file, lang, task_obj, arch_obj, shape_obj, required)
    if as_json:
        print(json.dumps(result.to_dict(), indent=1))
    elif not result.ok:
        console.print(f"[red]compile_error[/red] ({lang}, {arch_obj.sm}):\n{result.error}", markup=True,
                      highlight=False)
    else:
        print_census(result)
    if not result.ok:
        raise typer.Exit(1)
    if result.census.missing:
        raise typer.Exit(3)


from xlang.agent import commands as _agent_commands
_agent_commands.register(app)
from xlang import compare_commands as _compare_commands  # noqa: E402
_compare_commands.register(app)
from xlang.profiler import commands as _profiler_commands
_profiler_commands.register(app)


def main() -> None:
    try:
        app()
    except XlangError as e:
        Console(stderr=True).print(f"[red]error:[/red] {e}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
