"""Files a candidate could have touched: how the judge writes its own (never through a link, never over a file
that was there, so a candidate that planted a link cannot make the judge write elsewhere) and reads or copies the
candidate's (only regular files, never through a link, bounded in size and count)."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

# ---- what the judge writes: never through a link, never over a file that was there --------------------

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_new(path: str | Path, data: bytes | str, mode: int = 0o644) -> Path:
    """Write a file the judge owns: created here (O_CREAT | O_EXCL: a name planted before, a symlink included,
    fails instead of being written through) and never following a link. Every file the judge writes goes
    through here or replace_file."""
    fd = os.open(path, _NEW, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return Path(path)


def replace_file(path: str | Path, data: bytes | str, mode: int = 0o644) -> Path:
    """Write path whole, atomically: a fresh file beside it (write_new) renamed over it. A rename replaces a
    symlink at path instead of following it."""
    path = Path(path)
    for attempt in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{attempt}.tmp")
        try:
            write_new(tmp, data, mode)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no fresh temporary name beside {path}")
    os.replace(tmp, path)
    return path


def append_judge_file(path: str | Path, text: str) -> None:
    """Append to a file the judge created (write_new): never through a link, never creating one."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "a") as f:
        f.write(text)


def copy_untrusted_file(src: Path, dest: Path, limit: int = 256 << 20) -> bool:
    """Copy a file a candidate could have written into a new judge-owned file: read without following a
    link (read_untrusted_bytes), written with write_new. False when src is not a regular file."""
    data = read_untrusted_bytes(src, limit)
    if data is None:
        return False
    write_new(dest, data)
    return True


_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


def copy_untrusted_tree(src: Path, dest: Path, max_files: int = 4000, max_bytes: int = 512 << 20) -> int:
    """Copy the regular files of a folder a candidate wrote (its JIT cache) into a new judge-owned folder:
    walked by file descriptors without following any link (os.fwalk), each name checked (letters, digits,
    '_.+-'; no '..', no hidden names), files opened O_NOFOLLOW below their folder's descriptor; what is not
    a plain file or folder is left out. Returns how many files were copied (0 when src is no folder)."""
    copied, total = 0, 0
    try:
        walk = os.fwalk(src, follow_symlinks=False)
        dest.mkdir(mode=0o755)
        for folder, dirs, files, dir_fd in walk:
            rel = Path(folder).relative_to(src)
            dirs[:] = [d for d in dirs if _SAFE_NAME.fullmatch(d) and _real_dir(d, dir_fd)]  # no link to one
            for d in dirs:
                (dest / rel / d).mkdir(mode=0o755)
            for name in files:
                if not _SAFE_NAME.fullmatch(name) or copied >= max_files:
                    continue
                data = _read_at(dir_fd, name, max_bytes - total)
                if data is None:
                    continue
                write_new(dest / rel / name, data)
                copied, total = copied + 1, total + len(data)
    except (OSError, ValueError):
        pass
    return copied


def _real_dir(name: str, dir_fd: int) -> bool:
    import stat

    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def untrusted_files(folder: Path, suffix: str, limit: int = 64 << 20, max_files: int = 2000):
    """(relative path, bytes) of each regular file named *suffix under a folder a candidate may still be
    changing (its JIT cache while it runs): walked and read by descriptors, never through a link."""
    found = 0
    try:
        for top, dirs, files, dir_fd in os.fwalk(folder, follow_symlinks=False):
            for name in files:
                if name.endswith(suffix) and found < max_files:
                    data = _read_at(dir_fd, name, limit)
                    if data is not None:
                        found += 1
                        yield str(Path(top).relative_to(folder) / name), data
    except (OSError, ValueError):
        return


def _read_at(dir_fd: int | None, name: str | Path, limit: int) -> bytes | None:
    """A regular file `name` (in `dir_fd`, or a path), opened without following a link, at most `limit` bytes;
    None when missing, a link or anything but a regular file."""
    import stat

    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(max(0, limit))
    finally:
        os.close(fd)


def read_untrusted_below(folder: Path, rel: str, limit: int) -> bytes | None:
    """A file at `rel` below `folder` (a candidate's), every component opened without following a link."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or any(p in ("..", ".", "") for p in parts):
        return None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                return None
            os.close(fd)
            fd = nxt
        return _read_at(fd, parts[-1], limit)
    finally:
        os.close(fd)



def read_untrusted(path: Path, limit: int = 1 << 20) -> str | None:
    """A text file a candidate could have written: read_untrusted_bytes, decoded."""
    data = read_untrusted_bytes(path, limit)
    return None if data is None else data.decode("utf-8", "replace")


def inside(path: str | Path, folder: Path) -> Path | None:
    """path, resolved, when it is a regular file inside folder and no symlink on the way; else None."""
    p = Path(path)
    try:
        if p.is_symlink() or not p.is_file():
            return None
        real = p.resolve(strict=True)
        if real.is_relative_to(folder.resolve()) and not any(q.is_symlink() for q in real.parents):
            return real
    except OSError:
        return None
    return None


def read_untrusted_bytes(path: Path, limit: int) -> bytes | None:
    """A file a candidate could have written (a build report, a cubin its JIT wrote, a tool's log in its home):
    never through a symlink, only a regular file, at most `limit` bytes. None when missing or anything else."""
    return _read_at(None, path, limit)
