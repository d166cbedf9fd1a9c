// HOSTILE candidate. Class: harness_tampering (the answer key through the compiler's include path, issue 46).
//
// What it does: writes no kernel of its own. Its entry point exists only in this comment, which is enough for the
// entry-point screen:  extern "C" void xlang_entry(
// and then it asks the preprocessor for the task's expert wherever a judge might keep it: relative to the include
// folders nvcc is given (the architecture's template headers once sat in the repository, so ../../../ from them was
// the repository's root), relative to its own file, and at the absolute places a checkout or an installed package
// usually sits. Built outside a jail, with the templates' folder in the repository on the include path, this file
// was static_ok with wgmma + TMA: the expert's kernels, compiled into the candidate's library, counted as its own.
//
// An honest judge must conclude: compile_error (no file outside the build's own folder, the toolkit and the copied
// template headers is reachable; the #error below names the failure).
#if __has_include(<../../../tasks/gemm/solutions/cuda_ptx_hopper.cu>)
#include <../../../tasks/gemm/solutions/cuda_ptx_hopper.cu>
#elif __has_include(<../../../../tasks/gemm/solutions/cuda_ptx_hopper.cu>)
#include <../../../../tasks/gemm/solutions/cuda_ptx_hopper.cu>
#elif __has_include(<../../tasks/gemm/solutions/cuda_ptx_hopper.cu>)
#include <../../tasks/gemm/solutions/cuda_ptx_hopper.cu>
#elif __has_include(<../xlang/tasks/gemm/solutions/cuda_ptx_hopper.cu>)
#include <../xlang/tasks/gemm/solutions/cuda_ptx_hopper.cu>
#elif __has_include("/work/main/tasks/gemm/solutions/cuda_ptx_hopper.cu")
#include "/work/main/tasks/gemm/solutions/cuda_ptx_hopper.cu"
#elif __has_include("/root/xlang/tasks/gemm/solutions/cuda_ptx_hopper.cu")
#include "/root/xlang/tasks/gemm/solutions/cuda_ptx_hopper.cu"
#else
#error "no copy of the expert is reachable from this build"
#endif
