#!/bin/bash
# Can a jailed process be limited to one GPU by its device node? bwrap with /dev/nvidiactl, the uvm nodes and ONE
# /dev/nvidiaN (N = the GPU's minor number) instead of every /dev/nvidia*: does CUDA in it see that GPU (with
# CUDA_VISIBLE_DEVICES unset, = the NVML index, = 0), and can it still open the other one? Prints one line per case.
# Run on a machine with >= 2 GPUs from the repository root (bubblewrap from .whl installed in /tmp/site).
BWRAP=$(python3 -c "from xlang.sandbox import bwrap_path; print(bwrap_path())")
nvidia-smi --query-gpu=index,minor_number,pci.bus_id --format=csv,noheader
ls -la /dev/nvidia* | head -20
common=(--ro-bind / / --dev /dev --proc /proc --unshare-pid --die-with-parent)
for n in /dev/nvidia*; do case $n in /dev/nvidia[0-9]*) ;; *) common+=(--dev-bind $n $n);; esac; done
[ -d /dev/nvidia-caps ] && common+=(--dev-bind /dev/nvidia-caps /dev/nvidia-caps)
for minor in 0 1; do
  for cvd in unset $minor 0; do
    env_args=(-u CUDA_VISIBLE_DEVICES); [ $cvd != unset ] && env_args=(CUDA_VISIBLE_DEVICES=$cvd)
    out=$(timeout 60 $BWRAP "${common[@]}" --dev-bind /dev/nvidia$minor /dev/nvidia$minor -- \
        env "${env_args[@]}" python3 -c "
import torch
n = torch.cuda.device_count()
x = torch.ones(1024, 1024, device='cuda') @ torch.ones(1024, 1024, device='cuda'); torch.cuda.synchronize()
import pynvml; pynvml.nvmlInit(); print('count', n, 'bus', torch.cuda.get_device_properties(0).pci_bus_id, 'nvml', pynvml.nvmlDeviceGetCount())
" 2>&1 | tail -1)
    echo "node nvidia$minor CUDA_VISIBLE_DEVICES=$cvd: $out"
  done
done
