#!/usr/bin/env bash
# Restore the carried CuTe DSL (nvidia-cutlass-dsl 4.8.1, cp312, one CUDA flavour; with `pack.sh --peers` also
# flash-attn-4 4.0.0b36 (flash_attn.cute), quack-kernels 0.6.5, einops, apache-tvm-ffi, torch-c-dlpack-ext) into a
# site folder on the GPU machine and export PYTHONPATH. Source it (so the export sticks) at the start of a device call:
#
#   source scripts/cutedsl_on_gpu/unpack.sh [CARRY_DIR=.cutedsl] [SITE=/tmp/site]
#
# CARRY_DIR holds (made by scripts/cutedsl_on_gpu/pack.sh; scripts/cutedsl_on_gpu/README.md has the figures):
#   *.tar.xz / *.whl / *.zip   the small files (python sources, small libs), extracted as they are
#   *.xz + MANIFEST      shared objects, xz-compressed; MANIFEST lines: "<file.xz> <path inside SITE> [<bytes>]":
#                        with <bytes>, consecutive files cut in MANIFEST order from ONE stream (bin1.xz holds both
#                        big CuTe DSL .so, 237 MB, so the second compresses against the first); without, the whole stream.
# Needs only python3 (tarfile, zipfile, lzma): no pip, no network. ~256 MiB of memory for the xz dictionary.
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
            if hasattr(tarfile, "data_filter"):
                t.extractall(site, filter="fully_trusted")
            else:
                t.extractall(site)
man = os.path.join(src, "MANIFEST")
streams = {}
for line in open(man).read().split("\n") if os.path.exists(man) else []:
    if not line.strip():
        continue
    parts = line.split()
    xz, dst = parts[0], os.path.join(site, parts[1])
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if len(parts) == 2:  # the whole stream is one file
        with lzma.open(os.path.join(src, xz)) as i, open(dst, "wb") as o:
            shutil.copyfileobj(i, o, 1 << 24)
    else:  # the next <bytes> of a stream shared by several files
        left = int(parts[2])
        if xz not in streams:
            streams[xz] = lzma.open(os.path.join(src, xz))
        i = streams[xz]
        with open(dst, "wb") as o:
            while left:
                b = i.read(min(left, 1 << 24))
                if not b:
                    raise SystemExit(f"unpack.sh: {xz} ended early, {left} bytes short of {parts[1]}")
                o.write(b)
                left -= len(b)
    os.chmod(dst, 0o755)
for xz, i in streams.items():
    if i.read(1):
        raise SystemExit(f"unpack.sh: {xz} holds more than MANIFEST lists")
    i.close()
print(f"unpack.sh: restored {src} into {site} in {time.time() - t0:.1f} s", file=sys.stderr)
PY
export PYTHONPATH="$_cd_site:$_cd_site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
echo "export PYTHONPATH=$PYTHONPATH"
