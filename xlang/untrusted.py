"""Files a candidate could have touched: how the judge writes its own (never through a link, never over a file
that was there, so a candidate that planted a link cannot make the judge write elsewhere) and reads or copies the
candidate's (only regular files, never through a link, bounded in size and count)."""

from __future__ import annotations

import os
import re
import stat
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


# ---- walking a folder a candidate wrote: iterative, bounded, never through a link --------------------------

# A candidate's folders are read by the judge after its code ran (its JIT cache after a build, in a stage while it
# runs): a folder chain thousands deep must not exhaust the judge's recursion or descriptors, and a million empty
# files must not keep it listing. A Triton cache is two levels deep (cache/<hash>/<files>) and an expert's build
# holds a few dozen files (docs/robustness.md has the figures): these are far above what a real cache needs.
WALK_MAX_DEPTH = 16
WALK_MAX_ENTRIES = 20_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class OverLimit(Exception):
    """A candidate's folder (or a build's report) is beyond what the judge reads: deeper, larger or with more
    entries than its limits. The message says which limit, for the verdict."""


def walk_untrusted(top: Path, max_depth: int = WALK_MAX_DEPTH, max_entries: int = WALK_MAX_ENTRIES,
                   strict: bool = False):
    """Top-down walk of a folder a candidate wrote, without recursion and without following any link: yields
    (relative folder, its descriptor, sub-folder names, regular-file names) like os.fwalk; the caller may prune
    the sub-folder list in place. Every folder is opened O_NOFOLLOW | O_NONBLOCK below its parent's descriptor
    (a link or a FIFO planted where a folder was is never opened through), entries are classified by lstat
    alone, and what is neither a folder nor a regular file is left out. At most `max_depth` levels below top and
    `max_entries` entries in all: past them the walk stops, or raises OverLimit when `strict`. A top that is not a
    folder (missing, a link, a FIFO) yields nothing. One descriptor per level is open at a time."""
    try:
        fd = os.open(top, _DIR_FLAGS)
    except OSError:
        return
    stack = [(fd, Path("."), None)]  # (descriptor, relative path, sub-folders left to visit: None = not listed)
    seen = 0
    try:
        while stack:
            fd, rel, todo = stack[-1]
            if todo is None:
                dirs, files = [], []
                with os.scandir(fd) as entries:
                    for entry in entries:
                        seen += 1
                        if seen > max_entries:
                            if strict:
                                raise OverLimit(f"more than {max_entries} entries")
                            return
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                dirs.append(entry.name)
                            elif entry.is_file(follow_symlinks=False):
                                files.append(entry.name)
                        except OSError:
                            continue
                yield rel, fd, dirs, files
                todo = list(reversed(dirs)) if len(stack) <= max_depth else []
                if len(stack) > max_depth and dirs and strict:
                    raise OverLimit(f"folders more than {max_depth} levels deep")
                stack[-1] = (fd, rel, todo)
            if not todo:
                os.close(fd)
                stack.pop()
                continue
            name = todo.pop()
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:  # gone, or swapped for a link or anything else since it was listed
                continue
            stack.append((child, rel / name, None))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


def copy_untrusted_tree(src: Path, dest: Path, max_files: int = 4000, max_bytes: int = 512 << 20,
                        strict: bool = False) -> int:
    """Copy the regular files of a folder a candidate wrote (its JIT cache) into a new judge-owned folder:
    walked by walk_untrusted (no recursion, no link followed, bounded depth and entries), each name checked
    (letters, digits, '_.+-'; no '..', no hidden names), files opened O_NOFOLLOW | O_NONBLOCK below their
    folder's descriptor; what is not a plain file or folder is left out. Returns how many files were copied (0
    when src is no folder). Past a limit (files, bytes, depth, entries) the copy stops there, or raises OverLimit
    when `strict` (a build's JIT cache: the build is refused, never judged on part of it)."""
    copied, total = 0, 0
    try:
        walk = walk_untrusted(src, strict=strict)
        dest.mkdir(mode=0o755)
        for rel, dir_fd, dirs, files in walk:
            dirs[:] = [d for d in dirs if _SAFE_NAME.fullmatch(d)]
            for d in dirs:
                (dest / rel / d).mkdir(mode=0o755)
            for name in files:
                if not _SAFE_NAME.fullmatch(name):
                    continue
                if copied >= max_files:
                    if strict:
                        raise OverLimit(f"more than {max_files} files")
                    return copied
                data = _read_at(dir_fd, name, max_bytes - total + 1)
                if data is None:
                    continue
                if total + len(data) > max_bytes:
                    if strict:
                        raise OverLimit(f"more than {max_bytes >> 20} MiB")
                    return copied
                write_new(dest / rel / name, data)
                copied, total = copied + 1, total + len(data)
    except (OSError, ValueError):
        pass
    return copied


def untrusted_files(folder: Path, suffix: str, limit: int = 64 << 20, max_files: int = 2000):
    """(relative path, bytes) of each regular file named *suffix under a folder a candidate may still be
    changing (its JIT cache while it runs): walked by walk_untrusted and read by descriptors, never through a
    link; what lies past its limits is not read."""
    found = 0
    try:
        for rel, dir_fd, _dirs, files in walk_untrusted(folder):
            for name in files:
                if name.endswith(suffix) and found < max_files:
                    data = _read_at(dir_fd, name, limit)
                    if data is not None:
                        found += 1
                        yield str(rel / name), data
    except (OSError, ValueError):
        return


def remove_untrusted_tree(path: Path) -> None:
    """Remove a folder a candidate wrote, whatever it planted: no recursion and no link followed (a link is
    removed, never what it names), however deep its folders go. Each sub-folder is first moved up beside the
    others (a rename inside the folder), so no more than two descriptors are open and the depth stays one.
    Missing: nothing to do; a link or a file at `path`: unlinked."""
    path = Path(path)
    try:
        top = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return
    except OSError:  # a link, a FIFO or a file where the folder was
        os.unlink(path)
        return
    try:
        queue, n = ["."], 0
        while queue:
            name = queue.pop()
            fd = os.open(name, _DIR_FLAGS, dir_fd=top)
            try:
                with os.scandir(fd) as entries:
                    listed = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
                for entry, is_dir in listed:
                    if is_dir:
                        n += 1
                        moved = f".xlang-rm-{n}"
                        while True:  # a fresh name at the top (the candidate may have used ours)
                            try:
                                os.stat(moved, dir_fd=top, follow_symlinks=False)
                                n += 1
                                moved = f".xlang-rm-{n}"
                            except FileNotFoundError:
                                break
                        os.rename(entry, moved, src_dir_fd=fd, dst_dir_fd=top)
                        queue.append(moved)
                    else:
                        os.unlink(entry, dir_fd=fd)
            finally:
                os.close(fd)
            if name != ".":
                os.rmdir(name, dir_fd=top)
        # the top's own entries were moved or removed first; anything moved into it after that went the same way
    finally:
        os.close(top)
    os.rmdir(path)


def _read_at(dir_fd: int | None, name: str | Path, limit: int) -> bytes | None:
    """A regular file `name` (in `dir_fd`, or a path), opened without following a link, at most `limit` bytes;
    None when missing, a link or anything but a regular file."""
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
