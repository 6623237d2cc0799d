/* CPU backend, x86 AVX2 kernels of top-k (prototypes and contracts: ../topk.h, the same as the
 * AVX-512 ones): candidate collection, candidate keys, the above-threshold copy and the value
 * gather. This file alone is compiled with -mavx2 -mfma -mf16c (backends/cpu/meson.build);
 * ops_topk.c calls it only when kvs_cpu_avx2() says the CPU has those extensions. AVX2 has no
 * compress instruction: the selected lanes are packed by a permutation looked up from the 8-bit
 * compare mask (8 lane numbers as nibbles), so the loops stay branch-free. Tails shorter than a
 * vector go to the portable code. */
#include "../cpu_kernels.h"
#include "../topk.h"

#if KVS_CPU_HAVE_AVX2 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* topk_lut[m]: the numbers of the set bits of m, lowest first, one per nibble (nibble 0 first). */
static const uint32_t topk_lut[256] = {
    0x00000000, 0x00000000, 0x00000001, 0x00000010, 0x00000002, 0x00000020, 0x00000021, 0x00000210,
    0x00000003, 0x00000030, 0x00000031, 0x00000310, 0x00000032, 0x00000320, 0x00000321, 0x00003210,
    0x00000004, 0x00000040, 0x00000041, 0x00000410, 0x00000042, 0x00000420, 0x00000421, 0x00004210,
    0x00000043, 0x00000430, 0x00000431, 0x00004310, 0x00000432, 0x00004320, 0x00004321, 0x00043210,
    0x00000005, 0x00000050, 0x00000051, 0x00000510, 0x00000052, 0x00000520, 0x00000521, 0x00005210,
    0x00000053, 0x00000530, 0x00000531, 0x00005310, 0x00000532, 0x00005320, 0x00005321, 0x00053210,
    0x00000054, 0x00000540, 0x00000541, 0x00005410, 0x00000542, 0x00005420, 0x00005421, 0x00054210,
    0x00000543, 0x00005430, 0x00005431, 0x00054310, 0x00005432, 0x00054320, 0x00054321, 0x00543210,
    0x00000006, 0x00000060, 0x00000061, 0x00000610, 0x00000062, 0x00000620, 0x00000621, 0x00006210,
    0x00000063, 0x00000630, 0x00000631, 0x00006310, 0x00000632, 0x00006320, 0x00006321, 0x00063210,
    0x00000064, 0x00000640, 0x00000641, 0x00006410, 0x00000642, 0x00006420, 0x00006421, 0x00064210,
    0x00000643, 0x00006430, 0x00006431, 0x00064310, 0x00006432, 0x00064320, 0x00064321, 0x00643210,
    0x00000065, 0x00000650, 0x00000651, 0x00006510, 0x00000652, 0x00006520, 0x00006521, 0x00065210,
    0x00000653, 0x00006530, 0x00006531, 0x00065310, 0x00006532, 0x00065320, 0x00065321, 0x00653210,
    0x00000654, 0x00006540, 0x00006541, 0x00065410, 0x00006542, 0x00065420, 0x00065421, 0x00654210,
    0x00006543, 0x00065430, 0x00065431, 0x00654310, 0x00065432, 0x00654320, 0x00654321, 0x06543210,
    0x00000007, 0x00000070, 0x00000071, 0x00000710, 0x00000072, 0x00000720, 0x00000721, 0x00007210,
    0x00000073, 0x00000730, 0x00000731, 0x00007310, 0x00000732, 0x00007320, 0x00007321, 0x00073210,
    0x00000074, 0x00000740, 0x00000741, 0x00007410, 0x00000742, 0x00007420, 0x00007421, 0x00074210,
    0x00000743, 0x00007430, 0x00007431, 0x00074310, 0x00007432, 0x00074320, 0x00074321, 0x00743210,
    0x00000075, 0x00000750, 0x00000751, 0x00007510, 0x00000752, 0x00007520, 0x00007521, 0x00075210,
    0x00000753, 0x00007530, 0x00007531, 0x00075310, 0x00007532, 0x00075320, 0x00075321, 0x00753210,
    0x00000754, 0x00007540, 0x00007541, 0x00075410, 0x00007542, 0x00075420, 0x00075421, 0x00754210,
    0x00007543, 0x00075430, 0x00075431, 0x00754310, 0x00075432, 0x00754320, 0x00754321, 0x07543210,
    0x00000076, 0x00000760, 0x00000761, 0x00007610, 0x00000762, 0x00007620, 0x00007621, 0x00076210,
    0x00000763, 0x00007630, 0x00007631, 0x00076310, 0x00007632, 0x00076320, 0x00076321, 0x00763210,
    0x00000764, 0x00007640, 0x00007641, 0x00076410, 0x00007642, 0x00076420, 0x00076421, 0x00764210,
    0x00007643, 0x00076430, 0x00076431, 0x00764310, 0x00076432, 0x00764320, 0x00764321, 0x07643210,
    0x00000765, 0x00007650, 0x00007651, 0x00076510, 0x00007652, 0x00076520, 0x00076521, 0x00765210,
    0x00007653, 0x00076530, 0x00076531, 0x00765310, 0x00076532, 0x00765320, 0x00765321, 0x07653210,
    0x00007654, 0x00076540, 0x00076541, 0x00765410, 0x00076542, 0x00765420, 0x00765421, 0x07654210,
    0x00076543, 0x00765430, 0x00765431, 0x07654310, 0x00765432, 0x07654320, 0x07654321, 0x76543210,
};

/* The permutation moving the lanes selected by mask (8 bits) to the front, in order. */
static inline __m256i topk_pack(unsigned mask) {
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)topk_lut[mask]),
                                              _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                            _mm256_set1_epi32(7));
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
