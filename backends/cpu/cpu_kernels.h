/* CPU backend: helpers shared by the ops_*.c files (not installed, not part of the API).
 *
 * - KVS_OMP(...): an OpenMP pragma when compiled with OpenMP, nothing otherwise.
 * - kvs_par_for / kvs_par_team / kvs_team_for: the ops' parallel loops, which make no OpenMP call
 *   when the op runs on one thread.
 * - KVS_CLONES: GCC function multiversioning (avx512f / avx2 / baseline, chosen at load time by
 *   ifunc) for hot loops; the project is never compiled with -march=native.
 * - Inline f16/bf16 <-> f32 conversions written as branch-free bit arithmetic, so that loops using
 *   them vectorise; bit-identical to kvs_f16_to_f32 / kvs_f32_to_f16 / kvs_f32_to_bf16 (core/tensor.c)
 *   for every input, NaN payloads included.
 * - A vectorisable exp for softmax-style arguments.
 */
#ifndef KVS_BACKENDS_CPU_KERNELS_H
#define KVS_BACKENDS_CPU_KERNELS_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define KVS_PRAGMA_(x) _Pragma(#x)
#ifdef _OPENMP
#define KVS_OMP(x) KVS_PRAGMA_(omp x)
static inline int kvs_omp_tid(void) { return omp_get_thread_num(); }
static inline int kvs_omp_team(void) { return omp_get_num_threads(); }
#else
#define KVS_OMP(x)
static inline int kvs_omp_tid(void) { return 0; }
static inline int kvs_omp_team(void) { return 1; }
#endif
/* A parallel region may get fewer threads than num_threads asks for (a call from inside the
 * caller's own parallel region, OMP_THREAD_LIMIT, OMP_DYNAMIC): work is shared with omp for, never
 * split by thread id, and per-thread partials are reduced over kvs_omp_team() threads. */

/* Parallel loops that cost nothing on one thread. An OpenMP region costs 0.3-0.6 us even with
 * num_threads(1) (the runtime's team set-up and final barrier; about 85 futex calls per diffusion
 * step of the toy model), a sixth of a small model's decode step. So an op outlines its loop body
 * into a function and runs it through these helpers: with nt == 1 (or without OpenMP) a plain loop
 * on the calling thread, in iteration order, without any OpenMP call; else the same OpenMP
 * constructs as before. Both paths run the same function in the same per-thread order, so results
 * are bit for bit those of a region of nt threads.
 *
 * - kvs_par_for(nt, n, dyn, fn, ctx): fn(ctx, tid, i) for i in [0, n) over up to nt threads
 *   (`omp parallel for`): schedule(static) when dyn == 0, schedule(dynamic, dyn) when dyn > 0; tid
 *   = the running thread's number (its scratch).
 * - kvs_par_team(nt, fn, ctx): fn(ctx, tid, team) on each of the team threads the region got
 *   (`omp parallel`); with nt == 1 one call fn(ctx, 0, 1).
 * - kvs_team_for(tid, team, n, dyn, fn, ctx): inside a team function, a loop shared by the team
 *   (`omp for` with the schedule above, ending with a barrier); a plain loop when team == 1. */
typedef void (*kvs_par_fn)(void *ctx, int tid, int64_t i);
typedef void (*kvs_team_fn)(void *ctx, int tid, int team);

static inline void kvs_par_for(int nt, int64_t n, int dyn, kvs_par_fn fn, void *ctx) {
#ifdef _OPENMP
    if (nt > 1) {
        if (dyn > 0) {
            KVS_OMP(parallel for num_threads(nt) schedule(dynamic, dyn))
            for (int64_t i = 0; i < n; i++) fn(ctx, kvs_omp_tid(), i);
        } else {
            KVS_OMP(parallel for num_threads(nt) schedule(static))
            for (int64_t i = 0; i < n; i++) fn(ctx, kvs_omp_tid(), i);
        }
        return;
    }
#endif
    (void)nt;
    (void)dyn;
    for (int64_t i = 0; i < n; i++) fn(ctx, 0, i);
}

static inline void kvs_par_team(int nt, kvs_team_fn fn, void *ctx) {
#ifdef _OPENMP
    if (nt > 1) {
        KVS_OMP(parallel num_threads(nt))
        fn(ctx, kvs_omp_tid(), kvs_omp_team());
        return;
    }
#endif
    (void)nt;
    fn(ctx, 0, 1);
}

static inline void kvs_team_for(int tid, int team, int64_t n, int dyn, kvs_par_fn fn, void *ctx) {
#ifdef _OPENMP
    if (team > 1) {
        if (dyn > 0) {
            KVS_OMP(for schedule(dynamic, dyn))
            for (int64_t i = 0; i < n; i++) fn(ctx, tid, i);
        } else {
            KVS_OMP(for schedule(static))
            for (int64_t i = 0; i < n; i++) fn(ctx, tid, i);
        }
        return;
    }
#endif
    (void)team;
    (void)dyn;
    for (int64_t i = 0; i < n; i++) fn(ctx, tid, i);
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__) &&          \
    !defined(KVS_NO_CLONES)
#define KVS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KVS_CLONES
#endif

/* Hand-written AVX-512 kernels (attention tiles, GEMV, GEMM, top-k; backends/cpu/x86/): compiled
 * with target attributes, chosen per call by kvs_cpu_use_avx512(): the op's forced variant, else
 * whether this CPU has AVX-512F and F16C (kvs_cpu_avx512). The tests force the portable variants to
 * run the portable kernels on AVX-512 machines. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(KVS_NO_CLONES)
#define KVS_CPU_HAVE_AVX512 1
#else
#define KVS_CPU_HAVE_AVX512 0
#endif

static inline int kvs_cpu_avx512(void) {
#if KVS_CPU_HAVE_AVX512
    static int cached = -1; /* benign race: every thread computes the same value */
    if (cached < 0) {
        __builtin_cpu_init();
#if defined(__clang__) && __clang_major__ < 16
        /* clang < 16 has no "f16c" query (tools/fuzz.sh builds with clang 14); every AVX-512F CPU
         * has F16C */
        cached = __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
        cached = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c") ? 1 : 0;
#endif
    }
    return cached;
#else
    return 0;
#endif
}

/* Hand-written AVX2 kernels (x86/AREA_avx2.c): compiled with per-file flags -mavx2 -mfma -mf16c
 * (meson), so nothing outside those files assumes them; usable when the CPU has AVX2, FMA and
 * F16C (Haswell and later, every AMD Zen). */
#define KVS_CPU_HAVE_AVX2 KVS_CPU_HAVE_AVX512

static inline int kvs_cpu_avx2(void) {
#if KVS_CPU_HAVE_AVX2
    static int cached = -1; /* benign race: every thread computes the same value */
    if (cached < 0) {
        __builtin_cpu_init();
#if defined(__clang__) && __clang_major__ < 16
        cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
#else
        cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c")
                     ? 1
                     : 0;
#endif
    }
    return cached;
#else
    return 0;
#endif
}

/* AVX512-VNNI with the BW and VL extensions (Ice Lake, Sapphire Rapids, AMD Zen 4 and later): the
 * 8-bit activation GEMV's vpdpbusd / vpdpwssd on 256-bit registers (x86/quant_vnni.c). */
static inline int kvs_cpu_avx512_vnni(void) {
#if KVS_CPU_HAVE_AVX512
    static int cached = -1; /* benign race: every thread computes the same value */
    if (cached < 0) {
        __builtin_cpu_init();
        cached = kvs_cpu_avx512() && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl")
                     ? 1
                     : 0;
    }
    return cached;
#else
    return 0;
#endif
}

/* 1: matmul's decoding GEMV of block-type weights quantizes x to 8 bits by default on x86 (the
 * automatic variant choice; matmul.h, kvs_cpu_q8_kernel), as llama.cpp's CPU path does; 0: f32
 * activations unless a -q8 / -vnni variant is forced. */
#define KVS_CPU_Q8_DEFAULT 1

#include "arm/neon.h" /* aarch64: KVS_CPU_HAVE_NEON, kvs_cpu_arm_features (0 elsewhere) */

/* The instruction set an op's kernels use on dev: one of these per call, each op keeping one set of
 * kernels per ISA (x86/AREA_avx512.c, x86/AREA_avx2.c, arm/AREA_neon.c, the portable C in ops_*.c). */
enum { KVS_ISA_C = 0, KVS_ISA_AVX2 = 1, KVS_ISA_AVX512 = 2, KVS_ISA_NEON = 3 };

/* The forced variant's ISA (its AVX512 / AVX2 / NEON bit, when this CPU can run it), else the best the
 * CPU has: AVX-512 > AVX2 > portable C on x86-64, NEON on aarch64 (every aarch64 CPU has it). The NEON
 * extensions (dot product, fp16 FMLAL) are chosen on top by kvs_cpu_use_neon (arm/neon.h). */
static inline int kvs_cpu_isa(const kvs_device *dev, kvs_op_id op) {
    int v = kvs_device_variant(dev, op);
    const int neon = (kvs_cpu_arm_features() & KVS_ARM_NEON) != 0;
    if (v) {
        if ((v & KVS_CPU_V_AVX512) && kvs_cpu_avx512()) return KVS_ISA_AVX512;
        if ((v & KVS_CPU_V_AVX2) && kvs_cpu_avx2()) return KVS_ISA_AVX2;
        if ((v & KVS_CPU_V_NEON) && neon) return KVS_ISA_NEON;
        return KVS_ISA_C;
    }
    return kvs_cpu_avx512() ? KVS_ISA_AVX512 : kvs_cpu_avx2() ? KVS_ISA_AVX2 : neon ? KVS_ISA_NEON : KVS_ISA_C;
}

/* 1 when attention reads a q8_0 / q4_0 / q4_1 / qh8 K or V on 8-bit query codes and weights
 * (attention_q8.h): under a forced -vnni / -q8 variant, and under the automatic choice on x86
 * (KVS_CPU_Q8_DEFAULT, as matmul's 8-bit activations) when the CPU has AVX512-VNNI (+BW, VL: the VNNI
 * kernels) or its ISA is AVX2 (the AVX2 kernels); 0 under every other forced variant (avx512, avx2:
 * the f32 query, bit-compatible with the earlier releases), on an AVX-512 CPU without VNNI, on
 * aarch64 and in portable builds. The other K / V types keep the f32 query either way. */
static inline int kvs_cpu_att_q8(const kvs_device *dev) {
    const int v = kvs_device_variant(dev, KVS_OP_attention);
    if (v) return (v & KVS_CPU_V_Q8) != 0;
    const int isa = kvs_cpu_isa(dev, KVS_OP_attention);
    return KVS_CPU_Q8_DEFAULT && (isa == KVS_ISA_AVX512 ? kvs_cpu_avx512_vnni() : isa == KVS_ISA_AVX2);
}

/* 1 when op should run its AVX-512 kernels on dev: the forced variant's choice, else the CPU's. */
static inline int kvs_cpu_use_avx512(const kvs_device *dev, kvs_op_id op) {
    return kvs_cpu_isa(dev, op) == KVS_ISA_AVX512;
}

#if defined(__GNUC__)
#define KVS_RESTRICT __restrict__
#else
#define KVS_RESTRICT
#endif

/* Threads for a job of about `total_ops` cheap operations: one thread for small jobs (an OpenMP
 * fork costs a few microseconds), else the device's count; always 1 without OpenMP (per-thread
 * scratch is sized by this count). */
static inline int kvs_cpu_nt(const kvs_device *dev, double total_ops) {
#ifdef _OPENMP
    int nt = kvs_cpu_threads(dev);
    if (total_ops < 32768.0) return 1;
    return nt < 1 ? 1 : nt;
#else
    (void)dev;
    (void)total_ops;
    return 1;
#endif
}

static inline float kvs_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t kvs_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* f16 -> f32, exact (normals by an exponent re-bias multiply, subnormals by a magic subtraction). */
static inline float kvs_h2f(uint16_t h) {
    uint32_t w = (uint32_t)h << 16;
    uint32_t sign = w & 0x80000000u;
    uint32_t two_w = w + w;
    /* normal/inf/nan: shift exponent+mantissa into place, re-bias by 2^-112 */
    float normal = kvs_bits_f32((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    /* subnormal: mantissa as the low bits of a float in [0.5, 1), minus 0.5 */
    float denorm = kvs_bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
    uint32_t r = sign | (two_w < (1u << 27) ? kvs_f32_bits(denorm) : kvs_f32_bits(normal));
    /* inf/NaN: exact bit pattern (the multiply above would quieten signalling NaNs) */
    uint32_t special = sign | 0x7f800000u | ((w & 0x03ff0000u) >> 3);
    return kvs_bits_f32(two_w >= 0xF8000000u ? special : r);
}

/* f32 -> f16, round to nearest even; overflow -> inf; NaN -> quiet NaN keeping the top payload
 * bits (as kvs_f32_to_f16). Relies on IEEE round-to-nearest float arithmetic (no fast-math). */
static inline uint16_t kvs_f2h(float f) {
    uint32_t w = kvs_f32_bits(f);
    uint32_t shl1_w = w + w;
    uint32_t sign = w & 0x80000000u;
    float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = kvs_bits_f32((bias >> 1) + 0x07800000u) + base;
    uint32_t bits = kvs_f32_bits(base);
    uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
    uint32_t nan = 0x7E00u | ((w & 0x7FFFFFu) >> 13);
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? nan : nonsign));
}

/* d[i] = s[i] (f16 -> f32) for i < n through F16C, 16 values a step (x86/matmul_avx2.c). Only where
 * kvs_cpu_avx2() or kvs_cpu_avx512() holds (both imply F16C); equal to kvs_h2f except that
 * signalling NaNs may come out quiet, so it serves arithmetic (GEMM panels, attention tiles), not
 * kvs_copy, whose results are bit-exact. Builds without x86 kernels get the plain loop. */
#if KVS_CPU_HAVE_AVX2
void kvs_cpu_h2f_row_f16c(const uint16_t *s, float *d, int64_t n);
#else
static inline void kvs_cpu_h2f_row_f16c(const uint16_t *s, float *d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = kvs_h2f(s[i]);
}
#endif

static inline float kvs_bf2f(uint16_t h) { return kvs_bits_f32((uint32_t)h << 16); }

static inline uint16_t kvs_f2bf(float f) {
    uint32_t x = kvs_f32_bits(f);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x40u;
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : r);
}

/* exp(x), relative error ~1 ulp (measured max 1e-7); x < -87 (and -inf) gives exactly 0 (true
 * value < 2^-125, irrelevant next to a softmax maximum of 1), x > 88.7228 gives +inf, NaN stays NaN.
 * Branch-free so loops vectorise (libm's expf is not vectorised without -ffast-math). */
static inline float kvs_expf(float x) {
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding and subtracting rounds to an integer */
    float n = (xc * 1.44269504088896341f + magic) - magic;
    float r = xc - n * 0.693145751953125f;     /* ln2 high part (exact in 16 bits) */
    r = r - n * 1.428606765330187045e-06f;     /* ln2 low part */
    /* e^r, |r| <= 0.347: Taylor to degree 7 (truncation < 6e-9 relative) */
    float p = 1.98412698412698413e-04f;
    p = p * r + 1.38888888888888889e-03f;
    p = p * r + 8.33333333333333333e-03f;
    p = p * r + 4.16666666666666667e-02f;
    p = p * r + 1.66666666666666667e-01f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t ni = (int32_t)n;
    float scale = kvs_bits_f32((uint32_t)(ni + 127) << 23);
    float y = p * scale;
    y = x > 88.72283f ? INFINITY : y; /* true overflow (exp(88.7228) ~ FLT_MAX) */
    return x < -87.0f ? 0.0f : y;
}

/* Reads an I32 device tensor (CPU: host memory). */
static inline const int32_t *kvs_i32(const kvs_tensor *t) {
    return t ? (const int32_t *)kvs_tensor_host_ptr(t) : NULL;
}

#endif
