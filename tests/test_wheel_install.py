"""Issue 50: an installed (non-editable) xlang judges Triton and CuTe DSL candidates in its jail.

The way a new user, a Ray worker or a CI image gets xlang: `python -m build` a wheel from this tree, install it
into a fresh venv (with the system site folders, where torch, triton and the CuTe DSL already are: installing
them again would download gigabytes) and judge experts statically at the strongest isolation. Before the fix
the jail hid the venv's site folder and prefix (they hold the installed package), so the jailed child could not
even start its interpreter ("setpriv: failed to execute .../python3").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from xlang import sandbox

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sandbox.bwrap_path() is None, reason="bubblewrap is not available"),
    pytest.mark.skipif(os.geteuid() != 0, reason="isolation bwrap+uid needs root for the uid change"),
]


def _tree_copy(dest: Path) -> Path:
    """The tree as git sees it (tracked and untracked-but-not-ignored files): no stale build/ or caches."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    archive = dest.parent / "tree.tar"
    with tarfile.open(archive, "w") as tar:
        for name in filter(None, files):
            if (ROOT / name).is_file():
                tar.add(ROOT / name, arcname=name)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return dest


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    src = _tree_copy(base / "src")
    out = subprocess.run([sys.executable, "-m", "build", "--wheel", "-o", str(base / "dist"), str(src)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    wheel, = (base / "dist").glob("xlang-*.whl")
    env_dir = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)], check=True, timeout=300)
    py = env_dir / "bin" / "python"
    out = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return env_dir


def _installed_package(venv: Path) -> Path:
    out = subprocess.run([str(venv / "bin" / "python"), "-c", "import xlang; print(xlang.__file__)"],
                         capture_output=True, text=True, check=True, cwd=venv)
    return Path(out.stdout.strip()).parent


def _eval(venv: Path, candidate: Path, lang: str, task: str, cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(XLANG_ISOLATION="bwrap+uid", XLANG_CACHE=str(cwd / "cache"))
    out = subprocess.run([str(venv / "bin" / "xlang"), "eval", str(candidate), "--lang", lang, "--task", task,
                          "--arch", "h100", "--json"], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    assert out.returncode == 4, (out.returncode, out.stdout[-3000:], out.stderr[-3000:])  # 4: static only
    return json.loads(out.stdout)


def test_the_wheel_is_what_the_venv_imports(venv):
    package = _installed_package(venv)
    assert package.is_relative_to(venv), package  # not the editable checkout of the outer environment
    assert (package / "tasks" / "gemm" / "solutions" / "triton.py").is_file()
    assert not (package.parent / "tasks").exists() and not (package.parent / "backends").exists()


@pytest.mark.parametrize("lang, expert, families", [
    ("triton", "triton.py", {"wgmma", "tma"}),
    ("cutedsl", "cutedsl_hopper.py", {"wgmma", "tma"}),
])
def test_an_installed_xlang_judges_an_expert_statically(venv, tmp_path, lang, expert, families):
    package = _installed_package(venv)
    candidate = tmp_path / f"candidate_{lang}.py"
    shutil.copy(package / "tasks" / "gemm" / "solutions" / expert, candidate)
    verdict = _eval(venv, candidate, lang, "gemm", tmp_path)
    assert verdict["category"] == "static_ok", verdict["detail"]
    # XLANG_ISOLATION=bwrap+uid (_eval) makes a weaker jail an error: a static_ok was judged at that level
    assert families <= set(verdict["build"]["census"]["present"]), verdict["build"]["census"]


def test_the_jail_of_an_installed_xlang_hides_its_experts(venv, tmp_path):
    """The site folder is in the jail's view now; the package inside it (its experts) must not be."""
    package = _installed_package(venv)
    expert = package / "tasks" / "gemm" / "solutions" / "triton.py"
    probe = (f"try:\n    open({str(expert)!r}).read(1)\nexcept OSError:\n    pass\n"
             "else:\n    raise SystemExit('LEAK: the installed expert is readable in the jail')\n")
    candidate = tmp_path / "candidate.py"
    candidate.write_text(probe + expert.read_text())
    verdict = _eval(venv, candidate, "triton", "gemm", tmp_path)
    assert verdict["category"] == "static_ok", verdict["detail"]
