/* CPU backend, aarch64 NEON kernels of the block-quantized weights (contracts: ../matmul.h), the
 * aarch64 member of the per-ISA family beside x86/quant_avx2.c and x86/quant_avx512.c:
 * - GEMV (n <= 4 x rows): ../quant_fused.h's kernels with 4 lanes: 4 weights decoded into a register
 *   (the reference decoder's f32 operations: the reference values bit for bit), one FMA per x row;
 * - the GEMM tiles (kvs_matmul's BLAS path, kvs_embedding): the same register decoders, stored.
 * Chosen per call by ops_quant.c (variants "neon*", or automatically on aarch64). Q8_0 with the dot
 * product extension takes the SDOT GEMV instead (arm/matmul_neon.c, chosen in ops_dense.c). Plain
 * NEON (Armv8.0): no target attribute needed. */
#include <string.h>

#include "../cpu_kernels.h"

#if KVS_CPU_HAVE_NEON
#include <arm_neon.h>

#include "../matmul.h"
#include "quant/quant_blocks.h"

/* 4 bytes at p as u32 / s32 lanes (a 4-byte load: never past the block) */
static inline __attribute__((always_inline)) int32x4_t qn_u8(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    const uint16x8_t h = vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(w)));
    return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(h)));
}
static inline __attribute__((always_inline)) int32x4_t qn_i8(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    const int16x8_t h = vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(w)));
    return vmovl_s16(vget_low_s16(h));
}
/* logical right shifts (NEON shifts left by a signed count: right is negative) */
static inline __attribute__((always_inline)) int32x4_t qn_srl(int32x4_t v, int n) {
    return vreinterpretq_s32_u32(vshlq_u32(vreinterpretq_u32_s32(v), vdupq_n_s32(-n)));
}
static inline __attribute__((always_inline)) int32x4_t qn_srlv(int32x4_t v, int32x4_t c) {
    return vreinterpretq_s32_u32(vshlq_u32(vreinterpretq_u32_s32(v), vnegq_s32(c)));
}
/* t[idx] per lane (idx in 0..15) for the iq4 table, which fits in int8: one TBL on bytes */
static inline __attribute__((always_inline)) int32x4_t qn_lut16(int32x4_t idx, const int8_t *t) {
    const uint16x4_t i16 = vmovn_u32(vreinterpretq_u32_s32(idx));
    const uint8x8_t i8 = vmovn_u16(vcombine_u16(i16, i16));
    const int8x8_t r = vqtbl1_s8(vld1q_s8(t), i8);
    return vmovl_s16(vget_low_s16(vmovl_s8(r)));
}
static const int8_t iq4_table8[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const int32_t qn_iota[4] = {0, 1, 2, 3};

#define QF_L 4
typedef float32x4_t qf_vf;
typedef int32x4_t qf_vi;
#define QF_U8(p) qn_u8(p)
#define QF_I8(p) qn_i8(p)
#define QF_SRL(v, n) qn_srl((v), (n))
#define QF_SLL(v, n) vshlq_s32((v), vdupq_n_s32(n))
#define QF_SRLV(v, c) qn_srlv((v), (c))
#define QF_AND(a, b) vandq_s32((a), (b))
#define QF_OR(a, b) vorrq_s32((a), (b))
#define QF_ADDI(a, b) vaddq_s32((a), (b))
#define QF_SUBI(a, b) vsubq_s32((a), (b))
#define QF_SETI(c) vdupq_n_s32(c)
#define QF_IOTA vld1q_s32(qn_iota)
#define QF_TABLE iq4_table8
#define QF_LUT16(idx, t) qn_lut16((idx), (t))
#define QF_CVT(v) vcvtq_f32_s32(v)
#define QF_SETF(f) vdupq_n_f32(f)
#define QF_MULF(a, b) vmulq_f32((a), (b))
#define QF_ADDF(a, b) vaddq_f32((a), (b))
#define QF_SUBF(a, b) vsubq_f32((a), (b))
#define QF_FMA(a, b, c) vfmaq_f32((c), (a), (b))
#define QF_LOADF(p) vld1q_f32(p)
#define QF_STOREF(p, v) vst1q_f32((p), (v))
#define QF_ZERO vdupq_n_f32(0.0f)
#define QF_HSUM(v) vaddvq_f32(v)
#include "../quant_fused.h"

void kvs_cpu_qdecode_neon(kvs_dtype dt, const void *src, int64_t n, float *dst) {
    if (!qf_decode(dt, src, n, dst)) kvs_qb_decode_n(dt, src, n / kvs_dtype_block(dt), dst);
}

void kvs_cpu_qh8_decode_neon(const void *hi, const void *lo, int64_t nblocks, float *dst) {
    qf_decode_qh8(hi, lo, nblocks, dst);
}

void kvs_cpu_qdot_rows_neon(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc) {
    qf_dot_fn f = qf_dot_for(dt, n);
    if (f) f(wrow, x, k, acc);
    else kvs_cpu_qdot_rows_portable(wrow, dt, x, k, n, acc); /* not reached: every block type has one */
}
#endif
