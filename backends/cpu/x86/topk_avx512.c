/* CPU backend, x86 AVX-512 kernels of top-k (prototypes and contracts: ../topk.h): candidate
 * collection, candidate keys, the above-threshold copy and the value gather. Compiled with target
 * attributes; chosen per call by ops_topk.c. Tails shorter than a vector go to the portable C
 * kernels. */
#include "../cpu_kernels.h"
#include "../topk.h"

#if KVS_CPU_HAVE_AVX512
#include <immintrin.h>

/* The float f whose key is t (t >= TOPK_KEY_NINF, so f is a number): key(x) >= t  <=>  x >= f for
 * every non-NaN x, and NaN (key 0) fails both, so the scan can compare floats directly. */
static inline float topk_key_float(uint32_t t) {
    return kvs_bits_f32((t & 0x80000000u) ? (t & 0x7fffffffu) : ~t);
}

/* Branch-free: the selected lanes' indices are compressed into a register and stored whole (ci
 * holds n + 16 entries), so a selection pattern the branch predictor cannot learn costs nothing.
 * Four vectors a round, their compares independent of the store chain. */
__attribute__((target("avx512f")))
int64_t kvs_cpu_topk_collect_avx512(const float *x, int64_t n, int64_t base, uint32_t t0, int32_t *ci) {
    if (t0 == 0) return kvs_cpu_topk_collect_c(x, n, base, t0, ci);
    const __m512 vf0 = _mm512_set1_ps(topk_key_float(t0));
    const __m512i step = _mm512_set1_epi32(16);
    __m512i vidx = _mm512_add_epi32(_mm512_set1_epi32((int32_t)base),
                                    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    int64_t m = 0, i = 0;
    for (; i + 64 <= n; i += 64) {
        __mmask16 sel[4];
        for (int u = 0; u < 4; u++) {
            _mm_prefetch((const char *)(x + i + 1024 + 16 * u), _MM_HINT_T0);
            sel[u] = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i + 16 * u), vf0, _CMP_GE_OQ);
        }
        for (int u = 0; u < 4; u++) {
            _mm512_storeu_si512((void *)(ci + m), _mm512_maskz_compress_epi32(sel[u], vidx));
            m += __builtin_popcount((unsigned)sel[u]);
            vidx = _mm512_add_epi32(vidx, step);
        }
    }
    m += kvs_cpu_topk_collect_c(x + i, n - i, base + i, t0, ci + m);
    return m;
}

/* topk_key on 16 lanes. */
__attribute__((target("avx512f")))
static inline __m512i topk_key16(__m512 v) {
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512i u = _mm512_castps_si512(v);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    u = _mm512_mask_mov_epi32(u, _mm512_cmpeq_epi32_mask(u, sign), _mm512_setzero_si512()); /* -0 -> +0 */
    __m512i key = _mm512_xor_si512(u, _mm512_or_si512(_mm512_srai_epi32(u, 31), sign));
    return _mm512_mask_mov_epi32(key, nan, _mm512_setzero_si512());
}

__attribute__((target("avx512f")))
void kvs_cpu_topk_keys_avx512(const float *x, const int32_t *ci, int64_t c, uint32_t *ck, uint32_t *lo_out,
                             uint32_t *hi_out) {
    __m512i lo = _mm512_set1_epi32(-1), hi = _mm512_setzero_si512();
    for (int64_t i = 0; i < c; i += 16) {
        __mmask16 live = c - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (c - i)) - 1u);
        __m512i vi = _mm512_maskz_loadu_epi32(live, ci + i);
        __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, vi, x, 4);
        __m512i key = topk_key16(v);
        _mm512_mask_storeu_epi32(ck + i, live, key);
        lo = _mm512_mask_min_epu32(lo, live, lo, key);
        hi = _mm512_mask_max_epu32(hi, live, hi, key);
    }
    *lo_out = _mm512_reduce_min_epu32(lo);
    *hi_out = _mm512_reduce_max_epu32(hi);
}

__attribute__((target("avx512f")))
int64_t kvs_cpu_topk_above_avx512(const uint32_t *ck, const int32_t *ci, int64_t c, uint32_t t, uint32_t *sk,
                                 int32_t *si) {
    const __m512i vt = _mm512_set1_epi32((int)t);
    int64_t m = 0, i = 0;
    for (; i + 16 <= c; i += 16) {
        __m512i key = _mm512_loadu_si512((const void *)(ck + i));
        __mmask16 sel = _mm512_cmpge_epu32_mask(key, vt);
        _mm512_storeu_si512((void *)(sk + m), _mm512_maskz_compress_epi32(sel, key));
        _mm512_storeu_si512((void *)(si + m),
                            _mm512_maskz_compress_epi32(sel, _mm512_loadu_si512((const void *)(ci + i))));
        m += __builtin_popcount((unsigned)sel);
    }
    return m + kvs_cpu_topk_above_c(ck + i, ci + i, c - i, t, sk + m, si + m);
}

__attribute__((target("avx512f")))
void kvs_cpu_topk_values_avx512(const float *x, const int32_t *out_idx, int64_t k, float *out_val) {
    for (int64_t i = 0; i < k; i += 16) {
        __mmask16 live = k - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - i)) - 1u);
        __m512i vi = _mm512_maskz_loadu_epi32(live, out_idx + i);
        _mm512_mask_storeu_ps(out_val + i, live, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, vi, x, 4));
    }
}
#endif
