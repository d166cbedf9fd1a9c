"""Run an expert's xlang_entry on CPU tensors with a REAL cute.compile for sm_90a (not the static build's no-op
stand-in) and the compiled object's launch replaced by a recorder: shows that the compiled function accepts exactly
the arguments xlang_entry passes it (the DSL marshals them, or raises). No GPU, nothing launched; one check a process
(the patches are process-global).

    python3 tests/kernels/cutedsl/marshal_check.py TASK EXPERT.py SIZES     # prints 'marshalled N' per call; exit 0
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def main(task_name: str, path: str, sizes: str) -> int:
    os.environ["CUTE_DSL_ARCH"] = "sm_90a"
    sys.path.insert(0, str(ROOT))
    import cutlass.cute.runtime as cute_runtime
    from cutlass.base_dsl import jit_executor

    import backends.cutedsl.static_build as static_build
    from xlang.candidate import entry_arguments, load_module
    from xlang.task import get_task, parse_shape

    tensor_init = cute_runtime._Tensor.__init__

    def gpu_view_init(self, t, *args, **kwargs):  # CPU tensors seen as device tensors, as in the static build
        return tensor_init(self, static_build._with_gpu_view(t) if static_build._is_cpu_torch_tensor(t) else t,
                           *args, **kwargs)

    cute_runtime._Tensor.__init__ = gpu_view_init
    static_build._stub_torch_cuda()
    calls = []
    for cls in vars(jit_executor).values():  # every executor class that launches (more than one in 4.8.1)
        if isinstance(cls, type) and "run_compiled_program" in vars(cls):
            cls.run_compiled_program = lambda self, exe_args: calls.append(len(exe_args))
    task = get_task(task_name)
    shape = task.shape(parse_shape(sizes))
    load_module(Path(path), "marshal_checked_expert").xlang_entry(*entry_arguments(task, shape, "cpu"))
    for n in calls:
        print("marshalled", n)
    return 0 if calls else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
