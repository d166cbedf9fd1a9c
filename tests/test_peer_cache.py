"""A peer's kept cache (xlang/profiler/judge/peer_cache.py, issue 49 item 3): quack tunes once per GPU, package
versions, shape and dtypes, and later verdicts' peer processes get the judge's copy. On the CPU: the key, where it
lives (the judge's folder, in no jail's view), damaged or foreign entries (removed or refused: the peer tunes
again), what a peer process left (read without following links), and tuned-now / reused from the files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from xlang.profiler.judge import peer_cache
from xlang.profiler.judge import peers as judge_peers
from xlang.task import get_task

CONFIG = "Q2LJ7/gemm_tuned.autotune.json"  # how quack lays out its tuned timings under QUACK_CACHE_DIR
KERNEL = "f00d/1234.o"  # and a compiled kernel object
FILES = {CONFIG: b'{"key": "k", "configs_timings": [["config: a", [0.8, 0.7, 0.9]]]}', KERNEL: b"\x7fELF kernel"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XLANG_CACHE", str(tmp_path / "xlang-cache"))
    return tmp_path / "xlang-cache" / "peer-cache"


def _key(**change):
    fields = {"peer_name": "quack", "device_name": "NVIDIA H200", "package_versions": {"quack-kernels": "0.6.5"},
              "shape": {"M": 8192, "N": 7168, "K": 5120}, "dtypes": {"A": "bf16", "B": "bf16", "C": "bf16"}}
    return peer_cache.entry_key(**{**fields, **change})


def test_the_key_changes_with_the_gpu_the_versions_the_shape_and_the_dtypes():
    base = _key()
    assert base == _key()  # the same inputs, the same entry
    others = [_key(device_name="NVIDIA H100 80GB HBM3"), _key(package_versions={"quack-kernels": "0.6.6"}),
              _key(shape={"M": 8192, "N": 7168, "K": 4096}), _key(dtypes={"A": "fp8e4m3", "B": "bf16", "C": "bf16"}),
              _key(peer_name="fa4")]
    assert len({base, *others}) == len(others) + 1


def test_the_gemm_peer_tunes_and_names_its_cache():
    quack = get_task("gemm").peer("quack")
    assert quack.cache_env == "QUACK_CACHE_DIR" and quack.cache_files[0] == ".autotune.json"


def test_an_entry_round_trips_and_is_the_judges_alone(cache):
    key = _key()
    assert peer_cache.load(key) is None
    assert peer_cache.store(key, FILES, {"peer": "quack"})
    assert peer_cache.load(key) == FILES
    assert peer_cache.root() == cache
    for p in [cache, *cache.rglob("*")]:  # no one but the judge may read it or plant anything in it
        st = os.lstat(p)
        assert st.st_uid == os.geteuid() and not st.st_mode & 0o077, p


def test_no_jail_shows_the_cache(cache, tmp_path):
    from xlang.sandbox import Jail

    peer_cache.store(_key(), FILES, {})
    home = tmp_path / "peer-home"
    home.mkdir()
    roots = Jail(home=home, uid=65534).bound_roots()
    assert roots and not any(Path(r) in [cache, *cache.parents] for r in roots)  # neither it nor a folder above


def test_a_damaged_entry_is_removed_and_reads_as_absent(cache):
    key = _key()
    peer_cache.store(key, FILES, {})
    (cache / key / "files" / KERNEL).write_bytes(b"changed")  # a digest that no longer matches
    assert peer_cache.load(key) is None and not (cache / key).exists()
    peer_cache.store(key, FILES, {})
    (cache / key / "manifest.json").write_text("{not json")
    assert peer_cache.load(key) is None and not (cache / key).exists()
    peer_cache.store(key, FILES, {})
    manifest = json.loads((cache / key / "manifest.json").read_text())
    manifest["files"]["../../escape.o"] = manifest["files"].pop(KERNEL)
    (cache / key / "manifest.json").write_text(json.dumps(manifest))
    assert peer_cache.load(key) is None and not (cache / key).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a file to another uid needs root")
def test_an_entry_another_uid_could_have_written_is_never_read(cache):
    key = _key()
    peer_cache.store(key, FILES, {})
    os.chown(cache / key / "files" / CONFIG, 65534, 65534)  # e.g. a candidate's uid
    assert peer_cache.load(key) is None
    peer_cache.store(key, FILES, {})
    (cache / key).chmod(0o777)  # writable by anyone: whatever is in it may have been planted
    assert peer_cache.load(key) is None
    peer_cache.store(key, FILES, {})
    os.chown(cache / key / "manifest.json", 65534, 65534)
    assert peer_cache.load(key) is None


def test_a_link_in_an_entry_is_never_followed(cache, tmp_path):
    key = _key()
    peer_cache.store(key, FILES, {})
    secret = tmp_path / "secret.o"
    secret.write_bytes(b"not the peer's")
    path = cache / key / "files" / KERNEL
    path.unlink()
    path.symlink_to(secret)
    assert peer_cache.load(key) is None


def test_the_peer_gets_copies_and_what_it_left_is_read_without_links(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    folder = peer_cache.seed(home, FILES)
    assert folder == home / peer_cache.HOME_FOLDER and (folder / CONFIG).read_bytes() == FILES[CONFIG]
    outside = tmp_path / "judge-secret.o"
    outside.write_bytes(b"judge's own")
    (folder / "planted.o").symlink_to(outside)
    (folder / "f00d" / "1234.lock").write_text("")  # quack's locks are not kept
    left = peer_cache.harvest(home, (".autotune.json", ".o"))
    assert left == FILES


def test_tuned_now_or_reused_is_told_by_the_files():
    new_config = {"OTHER/gemm_tuned.autotune.json": b"{}"}
    assert peer_cache.tuning_state(None, FILES, ".autotune.json") == "tuned_now"
    assert peer_cache.tuning_state(FILES, FILES, ".autotune.json") == "reused"
    assert peer_cache.tuning_state(FILES, {**FILES, **new_config}, ".autotune.json") == "tuned_now"  # its key differed
    assert peer_cache.tuning_state(None, {KERNEL: FILES[KERNEL]}, ".autotune.json") == "not_kept"


def test_the_first_verdict_keeps_what_it_tuned_and_a_later_one_reuses_it(cache, tmp_path, monkeypatch):
    """The judge's side of two verdicts (the peer process replaced by the files quack writes)."""
    task = get_task("gemm")
    quack = task.peer("quack")
    monkeypatch.setattr(peer_cache, "job_key", lambda task, peer, shape: _key())
    shape = task.default_shape

    first = judge_peers._KeptCache(task, quack, shape)
    home1 = tmp_path / "home1"
    home1.mkdir()
    env = first.home_env(home1)
    assert env == {"QUACK_CACHE_DIR": str(home1 / peer_cache.HOME_FOLDER)}
    for rel, data in FILES.items():  # what quack writes while it tunes
        (Path(env["QUACK_CACHE_DIR"]) / rel).parent.mkdir(parents=True, exist_ok=True)
        (Path(env["QUACK_CACHE_DIR"]) / rel).write_bytes(data)
    record = first.after(home1)["tuning"]
    assert record["state"] == "tuned_now" and record["stored"] and record["given_files"] == 0

    later = judge_peers._KeptCache(task, quack, shape)
    home2 = tmp_path / "home2"
    home2.mkdir()
    later.home_env(home2)
    assert (home2 / peer_cache.HOME_FOLDER / CONFIG).read_bytes() == FILES[CONFIG]  # given before it starts
    record = later.after(home2)["tuning"]
    assert record["state"] == "reused" and not record["stored"] and record["given_files"] == 2
