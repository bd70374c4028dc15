/* Internal: functions built for several ISAs and picked at load time
 * (GCC's target_clones, an ifunc), so one binary runs everywhere and uses
 * the widest vectors the CPU has.
 *
 * ST_CLONES_BY_EXTENSION: AVX-512F, AVX2, the baseline: the collectives'
 * sums and copies and the bf16 array conversions (no multiply-adds).
 * ST_CLONES_BY_LEVEL: x86-64-v4, -v3, the baseline: the engine's kernels.
 * GCC's "avx2" target leaves out FMA, so that clone (the one Zen 3 and
 * pre-AVX-512 Xeons run) did every a * b + c as a multiply and an add.
 *
 * clang before 16 leaves a cloned function with external linkage without
 * its plain symbol (callers in other files do not link): there, one build. */
#ifndef SHMTRAIN_MULTIVERSION_H
#define SHMTRAIN_MULTIVERSION_H

#if defined(__clang__) && __clang_major__ < 16
#define ST_CLONES_BY_EXTENSION
#define ST_CLONES_BY_LEVEL
#else
#define ST_CLONES_BY_EXTENSION __attribute__((target_clones("avx512f", "avx2", "default")))
#define ST_CLONES_BY_LEVEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

#endif
