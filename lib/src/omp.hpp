// Internal: OpenMP pragmas that vanish, without warnings, in a build without OpenMP.
#pragma once

#if defined(_OPENMP)
#include <omp.h>
#define DCTCHOP_OMP(directive) _Pragma(#directive)
#else
#define DCTCHOP_OMP(directive)
#endif
