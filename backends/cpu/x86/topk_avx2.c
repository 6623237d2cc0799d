/* CPU backend, x86 AVX2 kernels of top-k (prototypes and contracts: ../topk.h, the same as the
 * AVX-512 ones): candidate collection, candidate keys, the above-threshold copy and the value
 * gather. This file alone is compiled with -mavx2 -mfma -mf16c (backends/cpu/meson.build);
 * ops_topk.c calls it only when kvs_cpu_avx2() says the CPU has those extensions. AVX2 has no
 * compress instruction: the selected lanes are packed by a permutation looked up from the 8-bit
 * compare mask (8 lane numbers as bytes), so the loops stay branch-free. Tails shorter than a
 * vector go to the portable code. */
#include "../cpu_kernels.h"
#include "../topk.h"

#if KVS_CPU_HAVE_AVX2 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* topk_lut[m]: the numbers of the set bits of m, lowest first, one per byte (byte 0 first). */
static const uint64_t topk_lut[256] = {
    0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000001ull, 0x0000000000000100ull,
    0x0000000000000002ull, 0x0000000000000200ull, 0x0000000000000201ull, 0x0000000000020100ull,
    0x0000000000000003ull, 0x0000000000000300ull, 0x0000000000000301ull, 0x0000000000030100ull,
    0x0000000000000302ull, 0x0000000000030200ull, 0x0000000000030201ull, 0x0000000003020100ull,
    0x0000000000000004ull, 0x0000000000000400ull, 0x0000000000000401ull, 0x0000000000040100ull,
    0x0000000000000402ull, 0x0000000000040200ull, 0x0000000000040201ull, 0x0000000004020100ull,
    0x0000000000000403ull, 0x0000000000040300ull, 0x0000000000040301ull, 0x0000000004030100ull,
    0x0000000000040302ull, 0x0000000004030200ull, 0x0000000004030201ull, 0x0000000403020100ull,
    0x0000000000000005ull, 0x0000000000000500ull, 0x0000000000000501ull, 0x0000000000050100ull,
    0x0000000000000502ull, 0x0000000000050200ull, 0x0000000000050201ull, 0x0000000005020100ull,
    0x0000000000000503ull, 0x0000000000050300ull, 0x0000000000050301ull, 0x0000000005030100ull,
    0x0000000000050302ull, 0x0000000005030200ull, 0x0000000005030201ull, 0x0000000503020100ull,
    0x0000000000000504ull, 0x0000000000050400ull, 0x0000000000050401ull, 0x0000000005040100ull,
    0x0000000000050402ull, 0x0000000005040200ull, 0x0000000005040201ull, 0x0000000504020100ull,
    0x0000000000050403ull, 0x0000000005040300ull, 0x0000000005040301ull, 0x0000000504030100ull,
    0x0000000005040302ull, 0x0000000504030200ull, 0x0000000504030201ull, 0x0000050403020100ull,
    0x0000000000000006ull, 0x0000000000000600ull, 0x0000000000000601ull, 0x0000000000060100ull,
    0x0000000000000602ull, 0x0000000000060200ull, 0x0000000000060201ull, 0x0000000006020100ull,
    0x0000000000000603ull, 0x0000000000060300ull, 0x0000000000060301ull, 0x0000000006030100ull,
    0x0000000000060302ull, 0x0000000006030200ull, 0x0000000006030201ull, 0x0000000603020100ull,
    0x0000000000000604ull, 0x0000000000060400ull, 0x0000000000060401ull, 0x0000000006040100ull,
    0x0000000000060402ull, 0x0000000006040200ull, 0x0000000006040201ull, 0x0000000604020100ull,
    0x0000000000060403ull, 0x0000000006040300ull, 0x0000000006040301ull, 0x0000000604030100ull,
    0x0000000006040302ull, 0x0000000604030200ull, 0x0000000604030201ull, 0x0000060403020100ull,
    0x0000000000000605ull, 0x0000000000060500ull, 0x0000000000060501ull, 0x0000000006050100ull,
    0x0000000000060502ull, 0x0000000006050200ull, 0x0000000006050201ull, 0x0000000605020100ull,
    0x0000000000060503ull, 0x0000000006050300ull, 0x0000000006050301ull, 0x0000000605030100ull,
    0x0000000006050302ull, 0x0000000605030200ull, 0x0000000605030201ull, 0x0000060503020100ull,
    0x0000000000060504ull, 0x0000000006050400ull, 0x0000000006050401ull, 0x0000000605040100ull,
    0x0000000006050402ull, 0x0000000605040200ull, 0x0000000605040201ull, 0x0000060504020100ull,
    0x0000000006050403ull, 0x0000000605040300ull, 0x0000000605040301ull, 0x0000060504030100ull,
    0x0000000605040302ull, 0x0000060504030200ull, 0x0000060504030201ull, 0x0006050403020100ull,
    0x0000000000000007ull, 0x0000000000000700ull, 0x0000000000000701ull, 0x0000000000070100ull,
    0x0000000000000702ull, 0x0000000000070200ull, 0x0000000000070201ull, 0x0000000007020100ull,
    0x0000000000000703ull, 0x0000000000070300ull, 0x0000000000070301ull, 0x0000000007030100ull,
    0x0000000000070302ull, 0x0000000007030200ull, 0x0000000007030201ull, 0x0000000703020100ull,
    0x0000000000000704ull, 0x0000000000070400ull, 0x0000000000070401ull, 0x0000000007040100ull,
    0x0000000000070402ull, 0x0000000007040200ull, 0x0000000007040201ull, 0x0000000704020100ull,
    0x0000000000070403ull, 0x0000000007040300ull, 0x0000000007040301ull, 0x0000000704030100ull,
    0x0000000007040302ull, 0x0000000704030200ull, 0x0000000704030201ull, 0x0000070403020100ull,
    0x0000000000000705ull, 0x0000000000070500ull, 0x0000000000070501ull, 0x0000000007050100ull,
    0x0000000000070502ull, 0x0000000007050200ull, 0x0000000007050201ull, 0x0000000705020100ull,
    0x0000000000070503ull, 0x0000000007050300ull, 0x0000000007050301ull, 0x0000000705030100ull,
    0x0000000007050302ull, 0x0000000705030200ull, 0x0000000705030201ull, 0x0000070503020100ull,
    0x0000000000070504ull, 0x0000000007050400ull, 0x0000000007050401ull, 0x0000000705040100ull,
    0x0000000007050402ull, 0x0000000705040200ull, 0x0000000705040201ull, 0x0000070504020100ull,
    0x0000000007050403ull, 0x0000000705040300ull, 0x0000000705040301ull, 0x0000070504030100ull,
    0x0000000705040302ull, 0x0000070504030200ull, 0x0000070504030201ull, 0x0007050403020100ull,
    0x0000000000000706ull, 0x0000000000070600ull, 0x0000000000070601ull, 0x0000000007060100ull,
    0x0000000000070602ull, 0x0000000007060200ull, 0x0000000007060201ull, 0x0000000706020100ull,
    0x0000000000070603ull, 0x0000000007060300ull, 0x0000000007060301ull, 0x0000000706030100ull,
    0x0000000007060302ull, 0x0000000706030200ull, 0x0000000706030201ull, 0x0000070603020100ull,
    0x0000000000070604ull, 0x0000000007060400ull, 0x0000000007060401ull, 0x0000000706040100ull,
    0x0000000007060402ull, 0x0000000706040200ull, 0x0000000706040201ull, 0x0000070604020100ull,
    0x0000000007060403ull, 0x0000000706040300ull, 0x0000000706040301ull, 0x0000070604030100ull,
    0x0000000706040302ull, 0x0000070604030200ull, 0x0000070604030201ull, 0x0007060403020100ull,
    0x0000000000070605ull, 0x0000000007060500ull, 0x0000000007060501ull, 0x0000000706050100ull,
    0x0000000007060502ull, 0x0000000706050200ull, 0x0000000706050201ull, 0x0000070605020100ull,
    0x0000000007060503ull, 0x0000000706050300ull, 0x0000000706050301ull, 0x0000070605030100ull,
    0x0000000706050302ull, 0x0000070605030200ull, 0x0000070605030201ull, 0x0007060503020100ull,
    0x0000000007060504ull, 0x0000000706050400ull, 0x0000000706050401ull, 0x0000070605040100ull,
    0x0000000706050402ull, 0x0000070605040200ull, 0x0000070605040201ull, 0x0007060504020100ull,
    0x0000000706050403ull, 0x0000070605040300ull, 0x0000070605040301ull, 0x0007060504030100ull,
    0x0000070605040302ull, 0x0007060504030200ull, 0x0007060504030201ull, 0x0706050403020100ull,
};

/* The permutation moving the lanes selected by mask (8 bits) to the front, in order. */
static inline __m256i topk_pack(unsigned mask) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)&topk_lut[mask]));
}

/* The float f whose key is t (t >= TOPK_KEY_NINF, so f is a number): key(x) >= t  <=>  x >= f for
 * every non-NaN x, and NaN (key 0) fails both, so the scan can compare floats directly. */
static inline float topk_key_float(uint32_t t) {
    return kvs_bits_f32((t & 0x80000000u) ? (t & 0x7fffffffu) : ~t);
}

/* Four vectors a round, their compares independent of the store chain; whole 8-lane stores (ci
 * holds n + 16 entries). */
int64_t kvs_cpu_topk_collect_avx2(const float *x, int64_t n, int64_t base, uint32_t t0, int32_t *ci) {
    if (t0 == 0) return kvs_cpu_topk_collect_c(x, n, base, t0, ci);
    const __m256 vf0 = _mm256_set1_ps(topk_key_float(t0));
    const __m256i step = _mm256_set1_epi32(8);
    __m256i vidx = _mm256_add_epi32(_mm256_set1_epi32((int32_t)base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    int64_t m = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        unsigned sel[4];
        for (int u = 0; u < 4; u++)
            sel[u] = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i + 8 * u), vf0, _CMP_GE_OQ));
        for (int u = 0; u < 4; u++) {
            _mm256_storeu_si256((__m256i *)(ci + m), _mm256_permutevar8x32_epi32(vidx, topk_pack(sel[u])));
            m += __builtin_popcount(sel[u]);
            vidx = _mm256_add_epi32(vidx, step);
        }
    }
    m += kvs_cpu_topk_collect_c(x + i, n - i, base + i, t0, ci + m);
    return m;
}

/* topk_key on 8 lanes. */
static inline __m256i topk_key8(__m256 v) {
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
    __m256i u = _mm256_castps_si256(v);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    u = _mm256_andnot_si256(_mm256_cmpeq_epi32(u, sign), u); /* -0 -> +0 */
    const __m256i key = _mm256_xor_si256(u, _mm256_or_si256(_mm256_srai_epi32(u, 31), sign));
    return _mm256_andnot_si256(nan, key);
}

void kvs_cpu_topk_keys_avx2(const float *x, const int32_t *ci, int64_t c, uint32_t *ck, uint32_t *lo_out,
                            uint32_t *hi_out) {
    __m256i lo = _mm256_set1_epi32(-1), hi = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 8 <= c; i += 8) {
        const __m256 v = _mm256_i32gather_ps(x, _mm256_loadu_si256((const __m256i *)(ci + i)), 4);
        const __m256i key = topk_key8(v);
        _mm256_storeu_si256((__m256i *)(ck + i), key);
        lo = _mm256_min_epu32(lo, key);
        hi = _mm256_max_epu32(hi, key);
    }
    uint32_t l[8], h[8], lo1 = UINT32_MAX, hi1 = 0;
    _mm256_storeu_si256((__m256i *)l, lo);
    _mm256_storeu_si256((__m256i *)h, hi);
    for (int t = 0; t < 8; t++) {
        lo1 = l[t] < lo1 ? l[t] : lo1;
        hi1 = h[t] > hi1 ? h[t] : hi1;
    }
    for (; i < c; i++) {
        const uint32_t kk = topk_key(x[ci[i]]);
        ck[i] = kk;
        lo1 = kk < lo1 ? kk : lo1;
        hi1 = kk > hi1 ? kk : hi1;
    }
    *lo_out = lo1;
    *hi_out = hi1;
}

int64_t kvs_cpu_topk_above_avx2(const uint32_t *ck, const int32_t *ci, int64_t c, uint32_t t, uint32_t *sk,
                                int32_t *si) {
    const __m256i vt = _mm256_set1_epi32((int)t);
    int64_t m = 0, i = 0;
    for (; i + 8 <= c; i += 8) {
        const __m256i key = _mm256_loadu_si256((const __m256i *)(ck + i));
        /* key >= t (unsigned) <=> max(key, t) == key */
        const unsigned sel =
            (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_max_epu32(key, vt), key)));
        const __m256i perm = topk_pack(sel);
        _mm256_storeu_si256((__m256i *)(sk + m), _mm256_permutevar8x32_epi32(key, perm));
        _mm256_storeu_si256((__m256i *)(si + m),
                            _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(ci + i)), perm));
        m += __builtin_popcount(sel);
    }
    return m + kvs_cpu_topk_above_c(ck + i, ci + i, c - i, t, sk + m, si + m);
}

void kvs_cpu_topk_values_avx2(const float *x, const int32_t *out_idx, int64_t k, float *out_val) {
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm256_storeu_ps(out_val + i, _mm256_i32gather_ps(x, _mm256_loadu_si256((const __m256i *)(out_idx + i)), 4));
    for (; i < k; i++) out_val[i] = x[out_idx[i]];
}
#endif
