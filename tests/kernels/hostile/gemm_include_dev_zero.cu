// HOSTILE candidate. Class: robustness (a compiler that grows without bound, issue 46).
//
// What it does: extern "C" void xlang_entry( appears in this comment only; the file then includes /dev/zero, an
// endless stream of NUL bytes, so the preprocessor reads (and keeps in memory) for as long as it is allowed to.
// Outside a jail with limits this made the compiler grow without bound, as the judge's user (root on the GPU
// machine).
//
// An honest judge must conclude: compile_error, within the build's time limit, with the compiler's memory capped
// (it is killed or refused more memory long before the machine runs short).
#include "/dev/zero"
