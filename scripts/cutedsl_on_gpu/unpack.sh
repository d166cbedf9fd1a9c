#!/usr/bin/env bash
# Restore the carried CuTe DSL (nvidia-cutlass-dsl 4.8.1, cp312, one CUDA flavour) into a site folder
# on the GPU machine and export PYTHONPATH. Source it (so the export sticks) at the start of a device call:
#
#   source scripts/cutedsl_on_gpu/unpack.sh [CARRY_DIR=.cutedsl] [SITE=/tmp/site]
#
# CARRY_DIR holds (made by scripts/cutedsl_on_gpu/pack.sh):
#   *.tar.xz / *.whl / *.zip   the small files (python sources, small libs), extracted as they are
#   *.xz + MANIFEST      big shared objects, xz-compressed; MANIFEST lines: "<file.xz> <path inside SITE>"
# Needs only python3 (zipfile, lzma): no pip, no network.
_cd_src="${1:-.cutedsl}"
_cd_site="${2:-/tmp/site}"
mkdir -p "$_cd_site"
python3 - "$_cd_src" "$_cd_site" <<'PY' || { echo "unpack.sh: FAILED" >&2; return 1 2>/dev/null || exit 1; }
import lzma, os, shutil, sys, tarfile, time, zipfile
src, site = sys.argv[1], sys.argv[2]
t0 = time.time()
for f in sorted(os.listdir(src)):
    if f.endswith((".whl", ".zip")):
        zipfile.ZipFile(os.path.join(src, f)).extractall(site)
    elif f.endswith(".tar.xz"):
        with tarfile.open(os.path.join(src, f)) as t:
            t.extractall(site)
man = os.path.join(src, "MANIFEST")
for line in open(man).read().split("\n") if os.path.exists(man) else []:
    if not line.strip():
        continue
    xz, dst = line.split()
    dst = os.path.join(site, dst)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with lzma.open(os.path.join(src, xz)) as i, open(dst, "wb") as o:
        shutil.copyfileobj(i, o, 1 << 24)
    os.chmod(dst, 0o755)
print(f"unpack.sh: restored {src} into {site} in {time.time() - t0:.1f} s", file=sys.stderr)
PY
export PYTHONPATH="$_cd_site:$_cd_site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
echo "export PYTHONPATH=$PYTHONPATH"
