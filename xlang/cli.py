"""The xlang command line (typer). Heavy libraries are imported inside the commands that need them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
import typer.main
from rich.console import Console
from rich.table import Table

from xlang.errors import XlangError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="How well can each kernel language reach a GPU architecture's own instructions?")
TASK_HELP = "task name (xlang tasks lists them), e.g. gemm"


def _version(value: bool) -> None:
    if value:
        from xlang import HARNESS_VERSION, __version__

        typer.echo(f"xlang {__version__} (harness {HARNESS_VERSION})")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="print the version and exit")):
    """How well can each kernel language reach a GPU architecture's own instructions?"""


def _spaced(text: str) -> str:
    """'M=1,N=2' -> 'M=1, N=2': a narrow column wraps between sizes instead of cutting one."""
    return text.replace(",", ", ")


@app.command("tasks")
def tasks_command(as_json: bool = typer.Option(False, "--json", help="print the tasks as JSON"),
                  suites: bool = typer.Option(False, "--suites", help="also list every shape of each suite")):
    """List the tasks: contract, default shape, tolerance, baseline, peers, shape suites (--suite NAME)."""
    from xlang.task import all_tasks, format_shape
    from xlang.terminal import keep_words, make_console

    rows = [{"task": t.name, "what": t.title,
             "entry_point": t.contract.python_signature().removeprefix("def ").removesuffix(" -> None"),
             "default_shape": dict(t.default_shape), "atol": t.tolerance["atol"], "rtol": t.tolerance["rtol"],
             "output_tolerance": {k: dict(v) for k, v in t.output_tolerance.items()},
             "error_bound": t.error_bound_rule if t.error_bound is not None else None,
             "baseline": t.baseline_name,
             "peers": [{"name": p.name, "display": p.display, "packages": list(p.distributions),
                        "installed": p.missing() is None} for p in t.peers],
             "suites": [{**s.describe(), "count": len(s.shapes)} for s in t.suites().values()]} for t in all_tasks()]
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    console = make_console()
    table = Table(title="tasks", show_lines=True)
    table.add_column("task", no_wrap=True)
    for col in ("what", "default shape", "tolerance", "baseline"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["task"], r["what"], _spaced(format_shape(r["default_shape"])),
                      f"atol={r['atol']} rtol={r['rtol']}" + "".join(
                          f"; {k}: atol={v['atol']} rtol={v['rtol']}" for k, v in r["output_tolerance"].items())
                      + (" + a bound per element (--json)" if r["error_bound"] else ""),
                      r["baseline"])
    console.print(keep_words(table, console))
    entries = Table(title="entry points (inputs, outputs, then sizes)")
    entries.add_column("task", no_wrap=True)
    entries.add_column("entry point")
    for r in rows:
        entries.add_row(r["task"], r["entry_point"])
    console.print(keep_words(entries, console))
    peers = Table(title="peers (public kernels timed beside the vendor, when installed)")
    for col in ("task", "peer", "packages", "here"):
        peers.add_column(col, no_wrap=col == "task")
    for r in rows:
        for p in r["peers"]:
            peers.add_row(r["task"], p["display"], ", ".join(p["packages"]),
                          "installed" if p["installed"] else "not installed")
    console.print(keep_words(peers, console))
    listed = Table(title="shape suites (--suite NAME in eval, run, compare; sources: xlang tasks --suites)")
    for col in ("task", "suite", "shapes", "what"):
        listed.add_column(col, no_wrap=col in ("task", "suite"))
    for r in rows:
        for s in r["suites"]:
            listed.add_row(r["task"], s["name"], str(s["count"]), s["title"])
    console.print(keep_words(listed, console))
    if suites:
        for r in rows:
            for s in r["suites"]:
                console.print(f"{r['task']} suite {s['name']}: {s['source']}", highlight=False, markup=False,
                              overflow="fold")
                shapes = Table(title=f"{r['task']} suite {s['name']} ({s['count']} shapes)")
                shapes.add_column("label")
                shapes.add_column("shape")
                for x in s["shapes"]:
                    shapes.add_row(x["label"], _spaced(format_shape(x["shape"])))
                console.print(keep_words(shapes, console))


@app.command("langs")
def langs_command(as_json: bool = typer.Option(False, "--json", help="print the languages as JSON")):
    """List the kernel languages (backends/ folders and plugins): file suffix, the tools and Python packages
    their builds need, and whether those are installed here."""
    from xlang.backend import backends
    from xlang.terminal import keep_words, make_console
    from xlang.toolchain import find_tool

    rows = []
    for b in backends().values():
        versions = b.versions()
        rows.append({"lang": b.name, "title": b.title, "suffix": b.suffix,
                     "packages": {d: v for d, v in versions.items() if d in b.distributions},
                     "tools": {t: str(find_tool(t) or "") for t in b.tools},
                     "installed": not b.absent_packages() and all(find_tool(t) for t in b.tools)})
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    console = make_console()
    table = Table(title="languages")
    for col in ("lang", "what", "file", "needs", "ready here"):
        table.add_column(col)
    for r in rows:
        needs = [f"{d} {v}" for d, v in r["packages"].items()] + [f"{t} {'found' if p else 'missing'}"
                                                                   for t, p in r["tools"].items()]
        table.add_row(r["lang"], r["title"], r["suffix"], ", ".join(needs), "yes" if r["installed"] else "no")
    console.print(keep_words(table, console))


@app.command("archs")
def archs_command(as_json: bool = typer.Option(False, "--json", help="print architectures and families as JSON")):
    """List the architectures: target, figures, instruction families, default requirement."""
    from xlang.archs import archs, families
    from xlang.terminal import keep_words, make_console

    arch_rows = [{"arch": a.name, "target": a.sm, "figures": dict(a.figures), "families": list(a.families),
                  "required": list(a.default_required)} for a in archs().values()]
    fam_rows = [{"family": f.name, "ptx": f.ptx.pattern, "sass": f.sass.pattern, "what": f.doc}
                for f in families().values()]
    if as_json:
        print(json.dumps({"archs": arch_rows, "families": fam_rows}, indent=1))
        return
    console = make_console()
    table = Table(title="architectures")
    for col in ("arch", "target", "SMs", "smem/block KiB", "L2 MiB", "bf16 TFLOP/s", "TB/s"):
        table.add_column(col, no_wrap=col in ("arch", "target"))
    for r in arch_rows:
        f = r["figures"]
        table.add_row(r["arch"], r["target"], str(f["sms"]), str(f["smem_per_block_kib"]), str(f["l2_mib"]),
                      str(f["peak_dense_bf16_tflops"]), str(f["mem_bandwidth_tbs"]))
    console.print(keep_words(table, console))
    fams = Table(title="instruction families per architecture (* required by default)")
    fams.add_column("arch", no_wrap=True)
    fams.add_column("families")
    for r in arch_rows:
        fams.add_row(r["arch"], ", ".join(n + ("*" if n in r["required"] else "") for n in r["families"]))
    console.print(keep_words(fams, console))
    what = Table(title="instruction families")
    what.add_column("family", no_wrap=True)
    what.add_column("what")
    for r in fam_rows:
        what.add_row(r["family"], r["what"])
    console.print(keep_words(what, console))
    # Patterns are single tokens: one per line, never wrapped inside; a long one is split at its top-level
    # alternatives ('|' outside parentheses), one per line.
    console.print("\n[bold]patterns[/bold] (regular expressions over PTX text and SASS opcodes)")
    for r in fam_rows:
        lines = [r["family"]]
        for kind in ("ptx", "sass"):
            alts = _alternatives(r[kind]) if len(r[kind]) + 8 > console.width else [r[kind]]
            lines += [f"  {kind.upper():<4}  {alts[0]}"] + [f"        |{a}" for a in alts[1:]]
        console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def _alternatives(pattern: str) -> list[str]:
    """'a(b|c)|d' -> ['a(b|c)', 'd']: the top-level alternatives of a regular expression."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(pattern):
        escaped = i > 0 and pattern[i - 1] == "\\"
        if ch in "([" and not escaped:
            depth += 1
        elif ch in ")]" and not escaped:
            depth -= 1
        elif ch == "|" and depth == 0 and not escaped:
            parts.append(pattern[start:i])
            start = i + 1
    return parts + [pattern[start:]]


def _resolve(file: Path | None, lang: str, task_name: str, arch_name: str, shape: str | None):
    from xlang.archs import get_arch
    from xlang.backend import get_backend, read_source, require_build_tools
    from xlang.task import get_task, parse_shape

    arch = get_arch(arch_name)
    task = get_task(task_name)
    backend = get_backend(lang)
    text = read_source(file) if file is not None else None
    require_build_tools([lang])
    return arch, task, backend, task.shape(parse_shape(shape)), text


def print_census(build, console) -> None:
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
    how = "from the build cache" if build.cached else f"build {build.seconds:.2f} s"
    console.print(f"required families (*) {verdict}   {how}")
    if getattr(build, "host_round_trip", None):
        console.print("host round trip (evidence; only the run decides): " + "; ".join(build.host_round_trip),
                      style="yellow", highlight=False, markup=False)


@app.command("build")
def build_command(
    file: Path = typer.Argument(..., help="candidate source file"),
    lang: str = typer.Option(..., "--lang", "-l", help="the kernel language: a folder under backends/ or a plugin"),
    task: str = typer.Option(..., "--task", "-t", help=TASK_HELP),
    arch: str = typer.Option(..., "--arch", "-a", help="h100 | h200 | b200"),
    shape: Optional[str] = typer.Option(None, help="size overrides, e.g. M=4096,N=4096,K=4096"),
    require: Optional[str] = typer.Option(None, help="required families, comma-separated (default: the task's)"),
    as_json: bool = typer.Option(False, "--json", help="print the build result as JSON"),
    timeout: float = typer.Option(60.0, help="wall-clock limit of the build (import and entry point; nvcc), seconds"),
    keep: bool = typer.Option(False, "--keep", help="keep the build folder (cubins, PTX, logs) and print its path"),
    no_cache: bool = typer.Option(False, "--no-cache", help="build even when an identical build is cached"),
):
    """Compile a candidate for an architecture (no GPU needed) and print its SASS census and verdict."""
    import tempfile

    from xlang.archs import parse_required
    from xlang.backend import build_candidate
    from xlang.sandbox import remove_tree
    from xlang.terminal import make_console

    if timeout <= 0:
        raise XlangError("--timeout must be positive (seconds)")
    arch_obj, task_obj, backend, shape_obj, text = _resolve(file, lang, task, arch, shape)
    required = parse_required(arch_obj, require, task_obj.required_for(arch_obj))
    console = make_console()
    workdir = Path(tempfile.mkdtemp(prefix=f"xlang-{lang}-{arch_obj.name}-"))
    try:
        result = build_candidate(text, lang, task_obj, arch_obj, shape_obj, required, workdir=workdir,
                                 timeout_s=timeout, cache=not no_cache)
        if as_json:
            print(json.dumps(result.to_dict(), indent=1))
        elif not result.ok:
            console.print(f"[red]compile_error[/red] ({lang}, {arch_obj.sm}):", highlight=False)
            console.print(result.error or "", markup=False, highlight=False)
        else:
            print_census(result, console)
        if keep:
            typer.echo(f"build folder: {workdir}", err=as_json)
    finally:
        if not keep:
            remove_tree(workdir)  # the candidate's child folder too: no recursion, no link followed
    if not result.ok:
        raise typer.Exit(1)
    if result.census.missing:
        raise typer.Exit(3)


from xlang.agent import commands as _agent_commands  # noqa: E402
_agent_commands.register(app)
from xlang import compare_commands as _compare_commands  # noqa: E402
_compare_commands.register(app)
from xlang.profiler import commands as _profiler_commands  # noqa: E402
_profiler_commands.register(app)
from xlang.fixit import commands as _fixit_commands  # noqa: E402
_fixit_commands.register(app)
from xlang import rejudge as _rejudge  # noqa: E402
_rejudge.register(app)
from xlang import diff_commands as _diff  # noqa: E402
_diff.register(app)

TRACEBACK_ENV = "XLANG_TRACEBACK"
INTERRUPTED = "interrupted (Ctrl-C); what finished is stored: the same command resumes a compare or run"


def _flags_take_no_value(command) -> None:
    """Help shows no value type (typer's '<bool>') beside a flag such as --json or --help: it takes none."""
    ctx = command.context_class(command)
    for param in [*command.params, command.get_help_option(ctx)]:
        if param is not None and getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _flags_take_no_value(sub)


def _from_interrupt(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def main(argv: list[str] | None = None) -> None:
    """The `xlang` entry point: bad input and unusable environments are one line on stderr, never a traceback
    (exit 2; 1 for an internal error, whose traceback XLANG_TRACEBACK=1 shows)."""
    import os

    def fail(message: str, code: int):
        Console(stderr=True, width=None if sys.stderr.isatty() else 400).print(
            f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
        sys.exit(code)

    try:
        from xlang.scaleout import normalise_argv  # `--ray` alone: a local Ray (typer has no optional values)

        command = typer.main.get_command(app)
        _flags_take_no_value(command)
        command(args=normalise_argv(sys.argv[1:] if argv is None else argv), prog_name="xlang")
    except XlangError as e:
        fail(str(e), 2)
    except KeyboardInterrupt:
        fail(INTERRUPTED, 130)
    except SystemExit as e:  # typer turns Ctrl-C into a silent exit 130
        if e.code == 130 and _from_interrupt(e):
            fail(INTERRUPTED, 130)
        raise
    except Exception as e:  # noqa: BLE001 - last resort: a user sees one line, a developer opts into the trace
        if os.environ.get(TRACEBACK_ENV):
            raise
        if isinstance(e, OSError) and e.strerror:
            fail(f"{e.strerror}" + (f": {e.filename}" if e.filename else ""), 2)
        fail(f"internal error ({type(e).__name__}: {e}); run with {TRACEBACK_ENV}=1 for the traceback", 1)


if __name__ == "__main__":
    main()
