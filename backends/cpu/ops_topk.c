/* CPU backend: per-row and global top-k (contract: kvs_topk, kvs_topk_global in include/kvsieve/ops.h).
 *
 * Every score maps to an unsigned 32-bit key whose integer order is the required score order:
 * NaN -> 0 (below everything, -INFINITY included), -0 and +0 -> the same key, negative x -> ~bits,
 * positive x -> bits with the sign bit set. Equal keys rank by the lower index, so the result is a
 * pure function of x.
 *
 * Threshold select (as in sample-select / GPU radix-select top-k):
 *  1. a sample of the keys (blocks of 16 spread over x) gives (by radix select) a threshold t0 a margin below the k-th key
 *     of the sample;
 *  2. one streaming pass collects the candidates key >= t0 with their indices, in index order
 *     (AVX-512 compress stores where available, a branch-free loop otherwise); should fewer than k
 *     survive (an unlucky sample), the pass is repeated with a wider margin, then with t0 = 0;
 *  3. a radix select over the candidates finds the exact k-th key T; the candidates above T, and
 *     the lowest-index ones equal to T, are the answer, already in index order (order_by_index);
 *  4. else they are sorted by key, descending, with a stable LSD radix sort (8-bit digits; digits
 *     equal for every entry skipped), so ties keep index order.
 * Global top-k runs step 2 on contiguous chunks in parallel and concatenates them in order. */
#include <stdlib.h>

#include "cpu_kernels.h"

#if KVS_CPU_HAVE_AVX512
#include <immintrin.h>
#endif

static inline uint32_t topk_key(float v) {
    uint32_t u = kvs_f32_bits(v);
    uint32_t isnan = (u & 0x7fffffffu) > 0x7f800000u;
    u = u == 0x80000000u ? 0u : u; /* -0 == +0 */
    uint32_t key = u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
    return isnan ? 0u : key;
}

/* ---- step 2: candidate collection ------------------------------------------------------ */

/* Appends (key, base + i) for every x[i] with key >= t0; returns the count. Buffers hold n + 1. */
static int64_t topk_collect_generic(const float *x, int64_t n, int64_t base, uint32_t t0, uint32_t *ck,
                                    int32_t *ci) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t kk = topk_key(x[i]);
        ck[m] = kk;
        ci[m] = (int32_t)(base + i);
        m += kk >= t0;
    }
    return m;
}

#if KVS_CPU_HAVE_AVX512
__attribute__((target("avx512f")))
static int64_t topk_collect_avx512(const float *x, int64_t n, int64_t base, uint32_t t0, uint32_t *ck,
                                   int32_t *ci) {
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i negz = _mm512_set1_epi32((int)0x80000000u), sign = negz;
    const __m512i vt0 = _mm512_set1_epi32((int)t0), step = _mm512_set1_epi32(16);
    __m512i vidx = _mm512_add_epi32(_mm512_set1_epi32((int32_t)base),
                                    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    int64_t m = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512((const void *)(x + i));
        __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, absmask), inf);
        __mmask16 nz = _mm512_cmpeq_epi32_mask(u, negz);
        u = _mm512_mask_mov_epi32(u, nz, _mm512_setzero_si512());
        __m512i flip = _mm512_or_si512(_mm512_srai_epi32(u, 31), sign);
        __m512i key = _mm512_maskz_mov_epi32((__mmask16)~nan, _mm512_xor_si512(u, flip));
        __mmask16 sel = _mm512_cmpge_epu32_mask(key, vt0);
        if (sel) {
            _mm512_mask_compressstoreu_epi32(ck + m, sel, key);
            _mm512_mask_compressstoreu_epi32(ci + m, sel, vidx);
            m += __builtin_popcount((unsigned)sel);
        }
        vidx = _mm512_add_epi32(vidx, step);
    }
    m += topk_collect_generic(x + i, n - i, base + i, t0, ck + m, ci + m);
    return m;
}
#endif

static int64_t topk_collect(const float *x, int64_t n, int64_t base, uint32_t t0, uint32_t *ck, int32_t *ci) {
#if KVS_CPU_HAVE_AVX512
    if (kvs_cpu_avx512()) return topk_collect_avx512(x, n, base, t0, ck, ci);
#endif
    return topk_collect_generic(x, n, base, t0, ck, ci);
}

/* ---- step 1: threshold from a sample ------------------------------------------------------ */

/* The r-th largest (0-based) of a[0..n) by radix select, 8 bits a level (a is reused as the
 * survivor list). */
static uint32_t topk_rselect(uint32_t *a, int64_t n, int64_t r) {
    uint32_t prefix = 0;
    for (int sh = 24; sh >= 0; sh -= 8) {
        /* four interleaved histograms: concentrated keys would otherwise serialise on one
         * counter's store-to-load latency */
        uint32_t c4[4][256], cnt[256];
        memset(c4, 0, sizeof c4);
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) {
            c4[0][(a[i] >> sh) & 0xff]++;
            c4[1][(a[i + 1] >> sh) & 0xff]++;
            c4[2][(a[i + 2] >> sh) & 0xff]++;
            c4[3][(a[i + 3] >> sh) & 0xff]++;
        }
        for (; i < n; i++) c4[0][(a[i] >> sh) & 0xff]++;
        for (int b = 0; b < 256; b++) cnt[b] = c4[0][b] + c4[1][b] + c4[2][b] + c4[3][b];
        int64_t acc = 0;
        int b = 255;
        for (; b > 0; b--) {
            if (acc + cnt[b] > r) break;
            acc += cnt[b];
        }
        r -= acc;
        prefix |= (uint32_t)b << sh;
        if (sh == 0) break;
        if (cnt[b] == (uint32_t)n) continue; /* every survivor has this digit */
        int64_t m = 0;
        for (i = 0; i < n; i++) {
            a[m] = a[i];
            m += ((a[i] >> sh) & 0xff) == (uint32_t)b;
        }
        n = m;
    }
    return prefix;
}

/* A key t0 that, with high probability, at least k of the n keys reach and not many more
 * (attempt 0; later attempts widen the margin). Returns 0 (take everything) for short inputs, when
 * k is a large fraction of n, or from attempt 2 on. */
static uint32_t topk_threshold(const float *x, int64_t n, int64_t k, uint32_t *sample, int attempt) {
    if (n <= 768 || k * 4 > n || attempt >= 2) return 0u;
    /* s samples in blocks of 16 consecutive entries spread evenly over x: the sample touches few
     * cache lines, and the collection pass then streams x once at full bandwidth */
    int64_t s = n / 64;
    if (s < 256) s = 256;
    if (s > 2048) s = 2048;
    const int64_t nblk = s / 16, stride = n / nblk;
    for (int64_t b = 0; b < nblk; b++)
        for (int64_t t = 0; t < 16; t++) sample[b * 16 + t] = topk_key(x[b * stride + t]);
    double r = (double)k * (double)s / (double)n;
    double rr = attempt == 0 ? r + 2.5 * sqrt(r) + 4.0 : 2.0 * r + 8.0 * sqrt(r) + 32.0;
    if (rr >= (double)s) return 0u;
    return topk_rselect(sample, s, (int64_t)rr);
}

/* ---- step 3: stable LSD radix sort, key descending ------------------------------------------- */

static void topk_sort(uint32_t *key, int32_t *idx, uint32_t *tk, int32_t *ti, int64_t n) {
    if (n <= 48) { /* insertion sort: stable, descending */
        for (int64_t i = 1; i < n; i++) {
            uint32_t kk = key[i];
            int32_t ii = idx[i];
            int64_t j = i;
            while (j > 0 && key[j - 1] < kk) {
                key[j] = key[j - 1];
                idx[j] = idx[j - 1];
                j--;
            }
            key[j] = kk;
            idx[j] = ii;
        }
        return;
    }
    uint32_t cnt[4][256];
    memset(cnt, 0, sizeof cnt);
    for (int64_t i = 0; i < n; i++) {
        uint32_t d = ~key[i];
        cnt[0][d & 0xff]++;
        cnt[1][(d >> 8) & 0xff]++;
        cnt[2][(d >> 16) & 0xff]++;
        cnt[3][d >> 24]++;
    }
    uint32_t *ks = key, *kd = tk;
    int32_t *is = idx, *id = ti;
    for (int pass = 0; pass < 4; pass++) {
        uint32_t *c = cnt[pass];
        int skip = 0;
        for (int b = 0; b < 256; b++)
            if (c[b] == (uint32_t)n) skip = 1;
        if (skip) continue;
        uint32_t sum = 0;
        for (int b = 0; b < 256; b++) {
            uint32_t v = c[b];
            c[b] = sum;
            sum += v;
        }
        const int sh = 8 * pass;
        for (int64_t i = 0; i < n; i++) {
            uint32_t pos = c[((~ks[i]) >> sh) & 0xff]++;
            kd[pos] = ks[i];
            id[pos] = is[i];
        }
        uint32_t *t1 = ks; ks = kd; kd = t1;
        int32_t *t2 = is; is = id; id = t2;
    }
    if (ks != key) {
        memcpy(key, ks, (size_t)n * sizeof *key);
        memcpy(idx, is, (size_t)n * sizeof *idx);
    }
}

/* ---- step 4 ------------------------------------------------------------------------------ */

/* The k-th largest key among ck[0..c) (c >= k) by radix select over a copy in tk, and how many
 * entries equal to it belong to the top k. */
static uint32_t topk_kth(const uint32_t *ck, int64_t c, int64_t k, uint32_t *tk, int64_t *n_eq) {
    memcpy(tk, ck, (size_t)c * sizeof *tk);
    uint32_t T = topk_rselect(tk, c, k - 1);
    int64_t gt = 0;
    for (int64_t i = 0; i < c; i++) gt += ck[i] > T;
    *n_eq = k - gt;
    return T;
}

/* Candidates ck/ci[0..c) in index order, c >= k. Writes the top k to out_idx/out_val.
 * sk/si/tk/ti: scratch of c entries each. */
static void topk_finish(const float *x, const uint32_t *ck, const int32_t *ci, int64_t c, int64_t k, int by_index,
                        uint32_t *sk, int32_t *si, uint32_t *tk, int32_t *ti, int32_t *out_idx, float *out_val) {
    int64_t m = 0;
    if (c == k) {
        memcpy(sk, ck, (size_t)c * sizeof *sk);
        memcpy(si, ci, (size_t)c * sizeof *si);
        m = c;
    } else {
        int64_t n_eq;
        uint32_t T = topk_kth(ck, c, k, tk, &n_eq);
        int64_t eq = 0;
        for (int64_t i = 0; i < c && m < k; i++) { /* the top k, in index order */
            uint32_t kk = ck[i];
            int take = kk > T || (kk == T && eq < n_eq);
            eq += kk == T && take;
            sk[m] = kk;
            si[m] = ci[i];
            m += take;
        }
    }
    if (!by_index) topk_sort(sk, si, tk, ti, k);
    memcpy(out_idx, si, (size_t)k * sizeof *si);
    if (out_val)
        for (int64_t i = 0; i < k; i++) out_val[i] = x[out_idx[i]];
}

/* Words of scratch one row needs: sample + candidates (key, idx) + 2 sort copies. */
static size_t topk_work_words(int64_t n) { return (size_t)(8192 + 6 * (n + 1) + 64); }

/* Single-threaded top-k of x[0..n), 1 <= k <= n. */
static void topk_row(const float *x, int64_t n, int64_t k, int by_index, uint32_t *work, int32_t *out_idx,
                     float *out_val) {
    uint32_t *sample = work;
    uint32_t *ck = work + 8192;
    int32_t *ci = (int32_t *)(ck + n + 1);
    uint32_t *sk = (uint32_t *)(ci + n + 1);
    int32_t *si = (int32_t *)(sk + n + 1);
    uint32_t *tk = (uint32_t *)(si + n + 1);
    int32_t *ti = (int32_t *)(tk + n + 1);
    int64_t c = 0;
    for (int attempt = 0; c < k; attempt++)
        c = topk_collect(x, n, 0, topk_threshold(x, n, k, sample, attempt), ck, ci);
    topk_finish(x, ck, ci, c, k, by_index, sk, si, tk, ti, out_idx, out_val);
}

kvs_status kvs_cpu_topk(kvs_device *dev, const kvs_topk_args *a) {
    const float *x = kvs_tensor_host_ptr(a->x);
    int32_t *oi = kvs_tensor_host_ptr(a->idx);
    float *ov = a->val ? kvs_tensor_host_ptr(a->val) : NULL;
    const int32_t *row_len = kvs_i32(a->p.row_len);
    const int64_t n = a->n, k = a->k;
    int nt = kvs_cpu_nt(dev, (double)a->rows * (double)n * 4.0);
    (void)nt; /* unused without OpenMP */
    if (nt > a->rows) nt = (int)a->rows;
    size_t per = topk_work_words(n);
    uint32_t *scr = malloc((size_t)nt * per * sizeof(uint32_t));
    if (!scr) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_topk (cpu): cannot allocate scratch");
    KVS_OMP(parallel num_threads(nt))
    {
        uint32_t *work = scr + (size_t)kvs_omp_tid() * per;
        KVS_OMP(for schedule(dynamic, 4))
        for (int64_t r = 0; r < a->rows; r++) {
            int64_t len = n;
            if (row_len) {
                len = row_len[r];
                if (len < 0) len = 0;
                if (len > n) len = n;
            }
            int64_t kk = k < len ? k : len;
            int32_t *ri = oi + r * k;
            float *rv = ov ? ov + r * k : NULL;
            if (kk > 0) topk_row(x + r * n, len, kk, a->p.order_by_index, work, ri, rv);
            for (int64_t t = kk; t < k; t++) {
                ri[t] = -1;
                if (rv) rv[t] = -INFINITY;
            }
        }
    }
    free(scr);
    return KVS_OK;
}

kvs_status kvs_cpu_topk_global(kvs_device *dev, const kvs_topk_args *a) {
    const float *x = kvs_tensor_host_ptr(a->x);
    int32_t *oi = kvs_tensor_host_ptr(a->idx);
    float *ov = a->val ? kvs_tensor_host_ptr(a->val) : NULL;
    const int64_t n = a->n, k = a->k;
    int nt = kvs_cpu_nt(dev, (double)n * 4.0);
    (void)nt; /* unused without OpenMP */
    if (n < 65536) nt = 1;
    if (nt > 512) nt = 512;
    uint32_t sample[8192];
    /* candidates in per-thread regions (chunk + 1 entries each), then compacted */
    const int64_t chunk = (n + nt - 1) / nt;
    size_t region = (size_t)chunk + 1;
    uint32_t *ck = malloc((size_t)nt * region * sizeof *ck);
    int32_t *ci = malloc((size_t)nt * region * sizeof *ci);
    int64_t cnt[512];
    if (!ck || !ci) {
        free(ck);
        free(ci);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_topk_global (cpu): cannot allocate scratch");
    }
    int64_t c = 0;
    for (int attempt = 0; c < k; attempt++) {
        uint32_t t0 = topk_threshold(x, n, k, sample, attempt);
        KVS_OMP(parallel for num_threads(nt) schedule(static, 1))
        for (int t = 0; t < nt; t++) {
            int64_t c0 = (int64_t)t * chunk, c1 = c0 + chunk < n ? c0 + chunk : n;
            if (c0 > c1) c0 = c1;
            cnt[t] = topk_collect(x + c0, c1 - c0, c0, t0, ck + (size_t)t * region, ci + (size_t)t * region);
        }
        c = 0;
        for (int t = 0; t < nt; t++) {
            if ((size_t)c != (size_t)t * region) {
                memmove(ck + c, ck + (size_t)t * region, (size_t)cnt[t] * sizeof *ck);
                memmove(ci + c, ci + (size_t)t * region, (size_t)cnt[t] * sizeof *ci);
            }
            c += cnt[t];
        }
    }
    uint32_t *sk = malloc((size_t)(2 * c + 2) * sizeof *sk);
    int32_t *si = malloc((size_t)(2 * c + 2) * sizeof *si);
    if (!sk || !si) {
        free(ck); free(ci); free(sk); free(si);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_topk_global (cpu): cannot allocate scratch");
    }
    topk_finish(x, ck, ci, c, k, a->p.order_by_index, sk, si, sk + c + 1, si + c + 1, oi, ov);
    free(ck); free(ci); free(sk); free(si);
    return KVS_OK;
}
