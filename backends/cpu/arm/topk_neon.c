/* CPU backend, aarch64 NEON kernels of top-k (prototypes and contracts: ../topk.h, the same as the
 * AVX-512 and AVX2 ones): candidate collection, candidate keys, the above-threshold copy and the
 * value gather. NEON has neither a compress nor a gather instruction: the selected lanes are packed
 * by a byte shuffle (TBL) looked up from the 4-bit compare mask, so the loops stay branch-free, and
 * the gathers are 4 scalar loads into one register. Tails shorter than a vector go to the portable
 * code. Plain NEON (Armv8.0); ops_topk.c calls it for the variant "neon" or automatically on aarch64. */
#include "../cpu_kernels.h"
#include "../topk.h"

#if KVS_CPU_HAVE_NEON
#include <arm_neon.h>

/* topk_tbl[m]: the byte shuffle moving the 32-bit lanes whose bit is set in m (4 bits) to the front,
 * lowest first (the rest of the vector is don't-care: later stores overwrite it). */
#define L0 0, 1, 2, 3
#define L1 4, 5, 6, 7
#define L2 8, 9, 10, 11
#define L3 12, 13, 14, 15
static const uint8_t topk_tbl[16][16] = {
    {L0, L0, L0, L0}, {L0, L0, L0, L0}, {L1, L0, L0, L0}, {L0, L1, L0, L0},
    {L2, L0, L0, L0}, {L0, L2, L0, L0}, {L1, L2, L0, L0}, {L0, L1, L2, L0},
    {L3, L0, L0, L0}, {L0, L3, L0, L0}, {L1, L3, L0, L0}, {L0, L1, L3, L0},
    {L2, L3, L0, L0}, {L0, L2, L3, L0}, {L1, L2, L3, L0}, {L0, L1, L2, L3},
};
#undef L0
#undef L1
#undef L2
#undef L3

/* 4-bit mask of the lanes of a compare result (all-ones lanes) */
static inline unsigned topk_mask4(uint32x4_t c) {
    static const uint32_t bit[4] = {1, 2, 4, 8};
    return vaddvq_u32(vandq_u32(c, vld1q_u32(bit)));
}

static inline int32x4_t topk_pack_s32(int32x4_t v, unsigned m) {
    return vreinterpretq_s32_u8(vqtbl1q_u8(vreinterpretq_u8_s32(v), vld1q_u8(topk_tbl[m])));
}
static inline uint32x4_t topk_pack_u32(uint32x4_t v, unsigned m) {
    return vreinterpretq_u32_u8(vqtbl1q_u8(vreinterpretq_u8_u32(v), vld1q_u8(topk_tbl[m])));
}

/* The float f whose key is t (t >= TOPK_KEY_NINF, so f is a number): key(x) >= t  <=>  x >= f for
 * every non-NaN x, and NaN (key 0) fails both, so the scan can compare floats directly. */
static inline float topk_key_float(uint32_t t) {
    return kvs_bits_f32((t & 0x80000000u) ? (t & 0x7fffffffu) : ~t);
}

/* Four vectors a round, their compares independent of the store chain; whole 4-lane stores (ci
 * holds n + 16 entries). */
int64_t kvs_cpu_topk_collect_neon(const float *x, int64_t n, int64_t base, uint32_t t0, int32_t *ci) {
    if (t0 == 0) return kvs_cpu_topk_collect_c(x, n, base, t0, ci);
    const float32x4_t vf0 = vdupq_n_f32(topk_key_float(t0));
    static const int32_t iota[4] = {0, 1, 2, 3};
    const int32x4_t step = vdupq_n_s32(4);
    int32x4_t vidx = vaddq_s32(vdupq_n_s32((int32_t)base), vld1q_s32(iota));
    int64_t m = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        unsigned sel[4];
        for (int u = 0; u < 4; u++) sel[u] = topk_mask4(vcgeq_f32(vld1q_f32(x + i + 4 * u), vf0));
        for (int u = 0; u < 4; u++) {
            vst1q_s32(ci + m, topk_pack_s32(vidx, sel[u]));
            m += __builtin_popcount(sel[u]);
            vidx = vaddq_s32(vidx, step);
        }
    }
    m += kvs_cpu_topk_collect_c(x + i, n - i, base + i, t0, ci + m);
    return m;
}

/* topk_key on 4 lanes. */
static inline uint32x4_t topk_key4(float32x4_t v) {
    const uint32x4_t sign = vdupq_n_u32(0x80000000u);
    uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t num = vceqq_f32(v, v); /* all-ones unless NaN */
    u = vbicq_u32(u, vceqq_u32(u, sign)); /* -0 -> +0 */
    const uint32x4_t neg = vreinterpretq_u32_s32(vshrq_n_s32(vreinterpretq_s32_u32(u), 31));
    const uint32x4_t key = veorq_u32(u, vorrq_u32(neg, sign));
    return vandq_u32(key, num);
}

/* x[ci[i .. i+4)] in one register */
static inline float32x4_t topk_gather4(const float *x, const int32_t *ci) {
    float32x4_t v = vdupq_n_f32(x[ci[0]]);
    v = vld1q_lane_f32(x + ci[1], v, 1);
    v = vld1q_lane_f32(x + ci[2], v, 2);
    return vld1q_lane_f32(x + ci[3], v, 3);
}

void kvs_cpu_topk_keys_neon(const float *x, const int32_t *ci, int64_t c, uint32_t *ck, uint32_t *lo_out,
                            uint32_t *hi_out) {
    uint32x4_t lo = vdupq_n_u32(UINT32_MAX), hi = vdupq_n_u32(0);
    int64_t i = 0;
    for (; i + 4 <= c; i += 4) {
        const uint32x4_t key = topk_key4(topk_gather4(x, ci + i));
        vst1q_u32(ck + i, key);
        lo = vminq_u32(lo, key);
        hi = vmaxq_u32(hi, key);
    }
    uint32_t lo1 = vminvq_u32(lo), hi1 = vmaxvq_u32(hi);
    for (; i < c; i++) {
        const uint32_t kk = topk_key(x[ci[i]]);
        ck[i] = kk;
        lo1 = kk < lo1 ? kk : lo1;
        hi1 = kk > hi1 ? kk : hi1;
    }
    *lo_out = lo1;
    *hi_out = hi1;
}

int64_t kvs_cpu_topk_above_neon(const uint32_t *ck, const int32_t *ci, int64_t c, uint32_t t, uint32_t *sk,
                                int32_t *si) {
    const uint32x4_t vt = vdupq_n_u32(t);
    int64_t m = 0, i = 0;
    for (; i + 4 <= c; i += 4) {
        const uint32x4_t key = vld1q_u32(ck + i);
        const unsigned sel = topk_mask4(vcgeq_u32(key, vt)); /* unsigned compare */
        vst1q_u32(sk + m, topk_pack_u32(key, sel));
        vst1q_s32(si + m, topk_pack_s32(vld1q_s32(ci + i), sel));
        m += __builtin_popcount(sel);
    }
    return m + kvs_cpu_topk_above_c(ck + i, ci + i, c - i, t, sk + m, si + m);
}

void kvs_cpu_topk_values_neon(const float *x, const int32_t *out_idx, int64_t k, float *out_val) {
    int64_t i = 0;
    for (; i + 4 <= k; i += 4) vst1q_f32(out_val + i, topk_gather4(x, out_idx + i));
    for (; i < k; i++) out_val[i] = x[out_idx[i]];
}
#endif
