/* CPU backend, aarch64: the run-time feature query, the choice of the NEON extensions (SDOT, FMLAL)
 * and the contracts of the NEON GEMV kernels that only ops_dense.c calls (arm/matmul_neon.c). The ISA
 * itself is chosen by kvs_cpu_isa (cpu_kernels.h, KVS_ISA_NEON); the other NEON kernels keep the
 * contracts of their op's header (attention.h's table, matmul.h's block-type kernels, topk.h,
 * wavelet.h). Elsewhere (x86-64, other CPUs) KVS_CPU_HAVE_NEON is 0 and nothing here is declared
 * except kvs_cpu_use_neon and kvs_cpu_arm_features, which then return 0.
 *
 * Features (getauxval(AT_HWCAP), Linux and Android): baseline NEON (Advanced SIMD, every aarch64
 * CPU; f16 <-> f32 conversions included); ASIMDDP, the int8 dot product SDOT (Armv8.2+, optional;
 * Cortex-A55/A75 and later, Apple M1, Neoverse N1); ASIMDHP + ASIMDFHM, half-precision arithmetic
 * with FMLAL (f16 x f16 products accumulated in f32; Armv8.2+, optional: Cortex-A55/A76 and later).
 * qemu-user's default CPU model ('max') has all three, so CI sweeps every variant under emulation. */
#ifndef KVS_BACKENDS_CPU_ARM_NEON_H
#define KVS_BACKENDS_CPU_ARM_NEON_H

#include <stdint.h>

#include "../cpu.h"

#if defined(__aarch64__) && defined(__ARM_NEON) && (defined(__GNUC__) || defined(__clang__)) &&        \
    !defined(KVS_NO_CLONES)
#define KVS_CPU_HAVE_NEON 1
#else
#define KVS_CPU_HAVE_NEON 0
#endif

/* The SDOT and FMLAL kernels need arm_neon.h to offer those intrinsics inside functions with a target
 * attribute: GCC does (checked with 12), clang from 16 on (clang 14 declares them only when the whole
 * file is compiled for the feature). Without them the extensions are never reported. */
#if KVS_CPU_HAVE_NEON && (!defined(__clang__) || __clang_major__ >= 16 ||                             \
                          (defined(__ARM_FEATURE_DOTPROD) && defined(__ARM_FEATURE_FP16_FML)))
#define KVS_CPU_HAVE_NEON_EXT 1
#else
#define KVS_CPU_HAVE_NEON_EXT 0
#endif

/* Q8_0 (GGUF, include/kvsieve/tensor.h): blocks of 32 values, f16 scale d + 32 int8 q = 34 bytes */
#ifndef KVS_Q8_BLOCK
#define KVS_Q8_BLOCK 32
#define KVS_Q8_BYTES 34
#endif

/* Feature bits of kvs_cpu_arm_features(). */
enum { KVS_ARM_NEON = 1, KVS_ARM_DOTPROD = 2, KVS_ARM_FP16FML = 4 };

#if KVS_CPU_HAVE_NEON
#include <sys/auxv.h>
#ifndef AT_HWCAP
#define AT_HWCAP 16
#endif
/* Linux's HWCAP bits for aarch64 (asm/hwcap.h; spelled out for libcs that lack the header). */
#define KVS_HWCAP_ASIMDHP (1ul << 10)
#define KVS_HWCAP_ASIMDDP (1ul << 20)
#define KVS_HWCAP_ASIMDFHM (1ul << 23)

/* target attributes: GCC spells them as an architecture, clang as features */
#if defined(__clang__)
#define KVS_TARGET_DOTPROD __attribute__((target("dotprod")))
#define KVS_TARGET_FP16FML __attribute__((target("fullfp16,fp16fml")))
#else
#define KVS_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#define KVS_TARGET_FP16FML __attribute__((target("arch=armv8.2-a+fp16fml")))
#endif
#endif

/* KVS_ARM_* bits of this CPU (0 when not built for aarch64). Read once (benign race: every thread
 * computes the same value). */
static inline int kvs_cpu_arm_features(void) {
#if KVS_CPU_HAVE_NEON
    static int cached = -1;
    if (cached < 0) {
        unsigned long hw = getauxval(AT_HWCAP);
        int f = KVS_ARM_NEON;
        if (KVS_CPU_HAVE_NEON_EXT && (hw & KVS_HWCAP_ASIMDDP)) f |= KVS_ARM_DOTPROD;
        if (KVS_CPU_HAVE_NEON_EXT && (hw & KVS_HWCAP_ASIMDHP) && (hw & KVS_HWCAP_ASIMDFHM)) f |= KVS_ARM_FP16FML;
        cached = f;
    }
    return cached;
#else
    return 0;
#endif
}

/* The KVS_ARM_* kernels op should use on dev: the forced variant's (KVS_CPU_V_NEON, plus
 * KVS_CPU_V_DOTPROD / KVS_CPU_V_FP16 for those extensions), else everything this CPU has; 0: the
 * portable kernels. */
static inline int kvs_cpu_use_neon(const kvs_device *dev, kvs_op_id op) {
    int have = kvs_cpu_arm_features();
    int v = kvs_device_variant(dev, op);
    if (!v) return have;
    if (!(v & KVS_CPU_V_NEON)) return 0;
    int want = KVS_ARM_NEON | (v & KVS_CPU_V_DOTPROD ? KVS_ARM_DOTPROD : 0) | (v & KVS_CPU_V_FP16 ? KVS_ARM_FP16FML : 0);
    return want & have;
}

#if KVS_CPU_HAVE_NEON
/* ---- matmul (arm/matmul_neon.c) ---- */

/* acc[i] = W_row . x_i for i < n (n <= KVS_GEMV_MAX_N); W row of k values (k % 16 == 0) in dtype dt
 * (f32, f16, bf16; the block types: kvs_cpu_qdot_rows_neon, matmul.h), x rows of k f32 values; f32
 * products and sums. */
void kvs_cpu_dot_rows_neon(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc);

/* Splits x rows [n][k] (k % 32 == 0) for the SDOT GEMV: per block of 32 values, scale s = amax / 127,
 * hi = round(x / s), lo = round((x - hi s) * 254 / s), both int8, so x = s (hi + lo / 254) within
 * s / 508 (about 15 bits of the block's largest value). qh, ql: [n][k]; sc: [n][k / 32]. Returns 0
 * when some x is not finite (the caller then takes the f32 kernel). */
int kvs_cpu_q8_split_x_neon(const float *x, int64_t k, int64_t n, int8_t *qh, int8_t *ql, float *sc);
/* acc[i] = W_row . x_i for a q8_0 W row of k values (k % 32 == 0) and x_i split by
 * kvs_cpu_q8_split_x_neon: integer SDOT products, f32 block sums. Needs KVS_ARM_DOTPROD. */
void kvs_cpu_dot_rows_q8_dotprod(const uint8_t *wrow, const int8_t *qh, const int8_t *ql, const float *sc, int64_t k,
                                 int64_t n, float *acc);

/* x rows [n][k] -> f16 (round to nearest even) in xh; returns 0 when some |x| exceeds the f16 range
 * or is not finite (the caller then takes the f32 kernel). */
int kvs_cpu_f16_x_neon(const float *x, int64_t count, uint16_t *xh);
/* acc[i] = W_row . xh_i for an f16 W row of k values (k % 16 == 0) and f16 x rows: FMLAL, exact f16
 * products summed in f32 (x rounded to f16 is the only error: relative 2^-11 per term). Needs
 * KVS_ARM_FP16FML. */
void kvs_cpu_dot_rows_f16_fml(const uint16_t *wrow, const uint16_t *xh, int64_t k, int64_t n, float *acc);

/* ---- attention (arm/attention_neon.c: the table kvs_cpu_att_neon, attention.h) ---- */

/* dst[t] = f16 src[t] as f32 for t < count (exact; hardware conversion); also the tile
 * conversion of kvs_cpu_att_neon. */
void kvs_cpu_f16_to_f32_neon(const uint16_t *src, float *dst, int64_t count);
#endif

#endif
