"""Build a Gluon candidate for an explicit architecture with no GPU: Triton's recording driver, unchanged.

@gluon.jit functions are triton.runtime.jit.JITFunction subclasses, so backends/triton/static_build.py's recording
of JITFunction.run sees every Gluon launch and keeps its cubin and PTX. Gluon host code builds TMA descriptors with
triton.experimental.gluon.nvidia.hopper.TensorDescriptor (on the CPU tensors the build passes; nothing is encoded
until a real launch). The report follows the static-build protocol (xlang.python_backend.PythonModuleBackend).

Usage (child): static_build SOURCE TASK ARCH SHAPE_JSON OUT_DIR  -> OUT_DIR/static_build.json
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from xlang.resources import import_module

    return import_module("backends.triton.static_build").main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
