"""What a peer keeps between verdicts (its autotuned configs, its compiled kernels), in a folder the judge owns.

A peer that tunes (quack's GEMM: every config compiled and timed on the first call, 30 s or more) would do it
in every verdict: each peer process gets a fresh home, and the package's own disk cache lives there. Instead the
first verdict of a (peer, GPU, package versions, shape, dtypes) tunes, and after its process has closed the judge
keeps the files the package wrote into its cache folder (Peer.cache_env, the suffixes in Peer.cache_files) under
XLANG_CACHE/peer-cache/<key>/; a later verdict's peer process gets copies in its fresh home before it starts, so
the package finds its tuned config (and its compiled kernels) and does not tune again. The tuning happens in the
first, untimed calls either way (judge/timing.py time_calls); the timed calls use the tuned config.

The folder is the judge's: no jail binds it (sandbox.Jail shows system, site and runner-package folders and the
process's own home), and an entry is used only when the folder and every file in it belong to the judge's uid,
are no links and are writable by no one else. A damaged entry (a manifest that does not parse, a file whose
digest differs) is removed, and the peer tunes again.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from xlang.backend import cache_dir
from xlang.untrusted import remove_untrusted_tree, replace_file, untrusted_files, write_new

FORMAT = 1
MANIFEST = "manifest.json"
MAX_FILE_BYTES = 64 << 20  # a compiled kernel object is well under this; a config file a few KiB
MAX_ENTRY_BYTES = 512 << 20
HOME_FOLDER = "peer-cache"  # the package's cache folder inside the peer process's home


def root() -> Path:
    return cache_dir("peer-cache")


def versions(peer) -> dict:
    """The installed versions of the peer's distributions (a new version tunes again)."""
    from xlang.agent.buildinfo import package_version

    return {dist: package_version(dist) for dist in peer.distributions}


def entry_key(peer_name: str, device_name: str | None, package_versions: dict, shape: dict, dtypes: dict) -> str:
    """The entry's name: what a tuned config depends on (the GPU by name, the peer's package versions, the shape
    and the tensors' dtypes)."""
    fields = [FORMAT, peer_name, device_name, sorted(package_versions.items()), sorted(shape.items()),
              sorted(dtypes.items())]
    return hashlib.sha256(json.dumps(fields, default=str).encode()).hexdigest()[:32]


def job_key(task, peer, shape: dict) -> str:
    """entry_key for this judge's GPU (torch's name for device 0: the judge has CUDA torch when it times peers)."""
    import torch  # the judge's process only, which has imported it already

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return entry_key(peer.name, device, versions(peer), shape, {t.name: t.dtype for t in task.contract.tensors})


def _judge_owned(path: Path) -> bool:
    """A folder or file the judge may trust: its own uid's, no link, and no access for anyone else (a jail
    without bubblewrap runs a candidate's uid on the host's folders: it can neither read nor plant anything)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not stat.S_ISLNK(st.st_mode) and not st.st_mode & 0o077


def _safe_rel(rel: str) -> bool:
    p = Path(rel)
    return bool(rel) and not p.is_absolute() and ".." not in p.parts and p.parts[0] != MANIFEST


def load(key: str, base: Path | None = None) -> dict[str, bytes] | None:
    """The kept files of an entry ({relative path: bytes}), or None: none kept, not the judge's (left alone), or
    damaged (removed, so the next verdict tunes and keeps a fresh one)."""
    folder = (base or root()) / key
    if not folder.is_dir():
        return None
    if not all(_judge_owned(p) for p in (folder.parent, folder, folder / MANIFEST)):
        return None
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        assert manifest.get("format") == FORMAT and isinstance(manifest.get("files"), dict)
        files = {}
        for rel, digest in manifest["files"].items():
            path = folder / "files" / rel
            assert _safe_rel(rel) and all(_judge_owned(p) for p in [path, *path.parents][:len(Path(rel).parts) + 1])
            data = path.read_bytes()
            assert hashlib.sha256(data).hexdigest() == digest
            files[rel] = data
        return files
    except (OSError, ValueError, AssertionError, AttributeError):
        remove_untrusted_tree(folder)
        return None


def store(key: str, files: dict[str, bytes], about: dict, base: Path | None = None) -> bool:
    """Keep an entry (replacing one of the same key): each file, then the manifest naming it with its digest,
    written last so that a half-written entry has none and reads as absent."""
    top = base or root()
    folder = top / key
    kept = {rel: data for rel, data in files.items() if _safe_rel(rel)}
    if not kept or sum(len(d) for d in kept.values()) > MAX_ENTRY_BYTES:
        return False
    try:
        top.mkdir(parents=True, exist_ok=True, mode=0o700)
        top.chmod(0o700)  # made before (an older run, another umask): no one else may look in
        if folder.exists():
            remove_untrusted_tree(folder)
        folder.mkdir(mode=0o700)
        for rel, data in kept.items():
            dest = folder / "files" / rel
            for d in reversed([dest.parent, *dest.parent.parents][:len(Path(rel).parts)]):
                d.mkdir(mode=0o700, exist_ok=True)
            write_new(dest, data, mode=0o600)
        replace_file(folder / MANIFEST, json.dumps({"format": FORMAT, **about, "files": {
            rel: hashlib.sha256(data).hexdigest() for rel, data in kept.items()}}, indent=1), mode=0o600)
        return True
    except OSError:
        return False


def seed(home: Path, files: dict[str, bytes] | None) -> Path:
    """Before the peer's process starts: its cache folder in its fresh home, with the kept files. -> the folder
    (what Peer.cache_env names)."""
    folder = home / HOME_FOLDER
    folder.mkdir(exist_ok=True)
    for rel, data in (files or {}).items():
        dest = folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_new(dest, data)
    return folder


def harvest(home: Path, suffixes: tuple[str, ...]) -> dict[str, bytes]:
    """After the peer's process has closed: the files of the kept kinds it left in its cache folder, read without
    following a link and within the size limits."""
    out: dict[str, bytes] = {}
    for suffix in suffixes:
        for rel, data in untrusted_files(home / HOME_FOLDER, suffix, limit=MAX_FILE_BYTES):
            if _safe_rel(rel):
                out[rel] = data
    return out


def tuning_state(seeded: dict[str, bytes] | None, left: dict[str, bytes], config_suffix: str) -> str:
    """What the peer did, from the files themselves: 'reused' (it was given the kept configs and wrote no new
    one), 'tuned_now' (it wrote a config file it was not given: nothing was kept, or the package's own key
    differed), 'not_kept' (no config file at all: it did not tune, or did not get that far)."""
    given = {r: d for r, d in (seeded or {}).items() if r.endswith(config_suffix)}
    found = {r: d for r, d in left.items() if r.endswith(config_suffix)}
    if not found:
        return "not_kept"
    return "reused" if given and found == given else "tuned_now"
