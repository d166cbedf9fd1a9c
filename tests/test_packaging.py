"""An install exposes only the `xlang` import name, and carries every xlang package and resource folder."""

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_holds_only_xlang_with_tasks_backends_and_docs_inside(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True)
    (wheel,) = tmp_path.glob("xlang-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"xlang"}
    for must in ("xlang/archs.toml", "xlang/tasks/gemm/__init__.py", "xlang/tasks/_attention.py",
                 "xlang/backends/triton/backend.py", "xlang/backends/cuda_ptx/prompt.md",
                 "xlang/backends/cutedsl/backend.py"):
        assert must in names, must


def test_every_xlang_subpackage_is_declared():
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "xlang").rglob("__init__.py")
               if "__pycache__" not in p.parts}
    assert on_disk <= declared, f"add to pyproject [tool.setuptools] packages: {sorted(on_disk - declared)}"


def test_readme_two_commands_pick_the_cpu_torch_on_a_cpu_box():
    """README's "Two commands" are the only commands there, and each picks the CPU build of torch by itself on a
    machine without a GPU (a CPU user who copies only them must not get the CUDA build): issue 37; only where the
    CPU index answers within a few seconds, never retrying it for minutes where it cannot be reached (issue 48)."""
    import re

    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert len(commands) == 2, commands
    for cmd in commands:
        assert cmd.count("\n") == 1 and "pip install -e" in cmd, cmd
        assert "nvidia-smi" in cmd and "--extra-index-url https://download.pytorch.org/whl/cpu" in cmd, cmd
        probe = re.search(r"urlopen\('(https://download\.pytorch\.org/whl/cpu/?)', timeout=(\d+)\)", cmd)
        assert probe and int(probe.group(2)) <= 5, cmd  # the index is used only when it answered this probe
