/* CPU backend: per-row and global top-k (contract: kvs_topk, kvs_topk_global in include/kvsieve/ops.h).
 *
 * Every score maps to an unsigned 32-bit key whose integer order is the required score order:
 * NaN -> 0 (below everything, -INFINITY included), -0 and +0 -> the same key, negative x -> ~bits,
 * positive x -> bits with the sign bit set. Equal keys rank by the lower index, so the result is a
 * pure function of x.
 *
 * Threshold select (as in sample-select / GPU radix-select top-k):
 *  1. a sample of the keys (blocks of 16 spread over x) gives a threshold t0 a margin below the
 *     expected k-th key (topk_select: histogram rounds over the sample's key range);
 *  2. one streaming pass collects the indices of the candidates key >= t0, in index order
 *     (AVX-512: a float compare and a branch-free compress of the indices into registers; AVX2:
 *     the same with a permutation looked up from the compare mask; NEON: a byte shuffle looked up
 *     from the 4-bit compare mask;
 *     elsewhere a branch-free loop); should fewer than k survive (an unlucky sample), the pass is
 *     repeated with a wider margin, then with t0 = 0;
 *  3. the candidates' keys are read back (a gather of a few thousand entries the scan just left in
 *     cache) and histogrammed over 2048 equal buckets of their narrow key range, which finds the
 *     bucket bT of the k-th key;
 *  4. sorted output: the candidates in buckets >= bT (k and a few more) are radix-sorted, stable and
 *     key descending: digits over the bits inside a bucket, then one pass by bucket whose counts the
 *     histogram gave; ties stay in index order;
 *     order_by_index: the exact k-th key T by selection inside bucket bT, then one pass in index
 *     order takes every key above T and the lowest-index ones equal to T.
 * Global top-k runs step 2 on contiguous chunks in parallel and concatenates them in order. */
#include <stdlib.h>

#include "cpu_kernels.h"
#include "topk.h"


/* ---- step 2: candidate collection ------------------------------------------------------ */

/* Appends base + i for every x[i] with key >= t0; returns the count. ci holds n + 16 entries.
 * Only indices are stored: the few candidates' keys are read back from x by topk_keys, which
 * keeps the streaming loop to a compare and one compress. */
int64_t kvs_cpu_topk_collect_c(const float *x, int64_t n, int64_t base, uint32_t t0, int32_t *ci) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        ci[m] = (int32_t)(base + i);
        m += topk_key(x[i]) >= t0;
    }
    return m;
}


static int64_t topk_collect(int avx, const float *x, int64_t n, int64_t base, uint32_t t0, int32_t *ci) {
    (void)avx; /* unused without SIMD kernels */
#if KVS_CPU_HAVE_AVX512
    if (avx == KVS_ISA_AVX512) return kvs_cpu_topk_collect_avx512(x, n, base, t0, ci);
    if (avx == KVS_ISA_AVX2) return kvs_cpu_topk_collect_avx2(x, n, base, t0, ci);
#endif
#if KVS_CPU_HAVE_NEON
    if (avx == KVS_ISA_NEON) return kvs_cpu_topk_collect_neon(x, n, base, t0, ci);
#endif
    return kvs_cpu_topk_collect_c(x, n, base, t0, ci);
}

/* ck[i] = key of x[ci[i]] for the c (>= 1) candidates, and their key range [lo, hi]. */
static void topk_keys_generic(const float *x, const int32_t *ci, int64_t c, uint32_t *ck, uint32_t *lo_out,
                              uint32_t *hi_out) {
    uint32_t lo = UINT32_MAX, hi = 0;
    for (int64_t i = 0; i < c; i++) {
        uint32_t kk = topk_key(x[ci[i]]);
        ck[i] = kk;
        lo = kk < lo ? kk : lo;
        hi = kk > hi ? kk : hi;
    }
    *lo_out = lo;
    *hi_out = hi;
}


static void topk_keys(int avx, const float *x, const int32_t *ci, int64_t c, uint32_t *ck, uint32_t *lo, uint32_t *hi) {
    (void)avx; /* unused without SIMD kernels */
#if KVS_CPU_HAVE_AVX512
    if (avx == KVS_ISA_AVX512) {
        kvs_cpu_topk_keys_avx512(x, ci, c, ck, lo, hi);
        return;
    }
    if (avx == KVS_ISA_AVX2) {
        kvs_cpu_topk_keys_avx2(x, ci, c, ck, lo, hi);
        return;
    }
#endif
#if KVS_CPU_HAVE_NEON
    if (avx == KVS_ISA_NEON) {
        kvs_cpu_topk_keys_neon(x, ci, c, ck, lo, hi);
        return;
    }
#endif
    topk_keys_generic(x, ci, c, ck, lo, hi);
}

/* ---- step 1: threshold from a sample ------------------------------------------------------ */

/* Histogram of key[0..n) (n >= 1, every key in [lo, hi]) over equal buckets of width 2^sh
 * spanning [lo, hi], at most nb of them; returns sh. hist must hold nb entries. */
KVS_CLONES
static int topk_hist(const uint32_t *key, int64_t n, int nb, uint32_t lo, uint32_t hi, uint32_t *hist) {
    int sh = 0;
    while (((hi - lo) >> sh) >= (uint32_t)nb) sh++;
    memset(hist, 0, (size_t)nb * sizeof *hist);
    for (int64_t i = 0; i < n; i++) hist[(key[i] - lo) >> sh]++;
    return sh;
}

/* The r-th largest (0-based) of a[0..n) (r < n); a is reused as the survivor list. Each round
 * histograms the survivors over at most 1024 equal buckets of their key range and keeps the
 * bucket holding the answer, so the range shrinks 1024-fold a round (at most 4 rounds); a few
 * survivors are finished by insertion sort. */
KVS_CLONES
static uint32_t topk_select(uint32_t *a, int64_t n, int64_t r) {
    for (;;) {
        if (n <= 48) {
            for (int64_t i = 1; i < n; i++) {
                uint32_t kk = a[i];
                int64_t j = i;
                for (; j > 0 && a[j - 1] < kk; j--) a[j] = a[j - 1];
                a[j] = kk;
            }
            return a[r];
        }
        uint32_t hist[1024], lo = UINT32_MAX, hi = 0;
        for (int64_t i = 0; i < n; i++) {
            lo = a[i] < lo ? a[i] : lo;
            hi = a[i] > hi ? a[i] : hi;
        }
        const int sh = topk_hist(a, n, 1024, lo, hi, hist);
        int64_t acc = 0;
        int b = (int)((hi - lo) >> sh);
        while (acc + (int64_t)hist[b] <= r) acc += hist[b--];
        if (sh == 0) return lo + (uint32_t)b;
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++) {
            a[m] = a[i];
            m += (int)((a[i] - lo) >> sh) == b;
        }
        n = m;
        r -= acc;
    }
}

/* A key t0 that, with high probability, at least k of the n keys reach and not many more
 * (attempt 0; later attempts widen the margin). Returns 0 (take everything) for short inputs, when
 * k is a large fraction of n, or from attempt 2 on. The bucket holding the sample's rr-th largest
 * key gives t0 (its lower edge: never above that key). */
KVS_CLONES
static uint32_t topk_threshold(const float *x, int64_t n, int64_t k, uint32_t *sample, int attempt) {
    if (n <= 768 || k * 4 > n || attempt >= 2) return 0u;
    /* s samples in blocks of 16 consecutive entries spread evenly over x: the sample touches few
     * cache lines, and the collection pass then streams x once at full bandwidth */
    int64_t s = n / 64;
    if (s < 256) s = 256;
    if (s > 8192) s = 8192; /* the sample buffer holds 8192 */
    const int64_t nblk = s / 16, stride = n / nblk;
    s = nblk * 16; /* every sampled slot is written */
    for (int64_t b = 0; b < nblk; b++)
        for (int64_t t = 0; t < 16; t++) sample[b * 16 + t] = topk_key(x[b * stride + t]);
    double r = (double)k * (double)s / (double)n;
    double rr = attempt == 0 ? r + 2.5 * sqrt(r) + 4.0 : 2.0 * r + 8.0 * sqrt(r) + 32.0;
    if (rr >= (double)s) return 0u;
    uint32_t t0 = topk_select(sample, s, (int64_t)rr);
    /* No score has a key in [1, TOPK_KEY_NINF): raising t0 there selects the same entries (every
     * number), and keeps it a key whose float (-inf) the scan can compare against: the float of a
     * key in that range is a NaN, which no compare reaches. 0 ("everything", NaN included) is only
     * returned above. */
    return t0 < TOPK_KEY_NINF ? TOPK_KEY_NINF : t0;
}

/* ---- step 4: sort ---------------------------------------------------------------------------- */

/* Stable sort of key/idx[0..n), key descending (equal keys keep their order). Every key lies in
 * [lo, hi] and falls in bucket (key - lo) >> sh of the caller's histogram; pos[b] is where bucket b
 * starts in the sorted order (buckets descending; pos is used up). LSD radix: the bits inside a
 * bucket in digits of at most 11 bits (one pass for the top 1024 of 64k uniform scores), then one
 * counting pass by bucket whose counts the histogram already gave. tk/ti: scratch of n entries.
 * Result in key/idx. */
static void topk_sort(uint32_t *key, int32_t *idx, uint32_t *tk, int32_t *ti, int64_t n, uint32_t lo, int sh,
                      uint32_t *pos) {
    uint32_t *ks = key, *kd = tk;
    int32_t *is = idx, *id = ti;
    if (sh > 0) {
        /* D = the bits inside the bucket, inverted so that ascending D is descending key */
        const uint32_t lmask = (1u << sh) - 1u; /* sh <= 21: the histogram has at most 2048 buckets */
        const int passes = (sh + 10) / 11, w = (sh + passes - 1) / passes;
        const uint32_t mask = (1u << w) - 1u;
        uint32_t cnt[3][2048];
        memset(cnt, 0, (size_t)passes * sizeof cnt[0]);
        for (int64_t i = 0; i < n; i++) {
            uint32_t d = ~(key[i] - lo) & lmask;
            cnt[0][d & mask]++;
            if (passes > 1) cnt[1][(d >> w) & mask]++;
            if (passes > 2) cnt[2][(d >> 2 * w) & mask]++;
        }
        for (int p = 0; p < passes; p++) {
            uint32_t *c = cnt[p], sum = 0;
            for (uint32_t b = 0; b <= mask; b++) {
                uint32_t v = c[b];
                c[b] = sum;
                sum += v;
            }
            const int dsh = p * w;
            for (int64_t i = 0; i < n; i++) {
                uint32_t at = c[((~(ks[i] - lo) & lmask) >> dsh) & mask]++;
                kd[at] = ks[i];
                id[at] = is[i];
            }
            uint32_t *t1 = ks; ks = kd; kd = t1;
            int32_t *t2 = is; is = id; id = t2;
        }
    }
    /* by bucket, into key/idx when the digit passes left the data in the scratch */
    if (ks == key) {
        memcpy(tk, key, (size_t)n * sizeof *key);
        memcpy(ti, idx, (size_t)n * sizeof *idx);
        ks = tk;
        is = ti;
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t at = pos[(ks[i] - lo) >> sh]++;
        key[at] = ks[i];
        idx[at] = is[i];
    }
}

/* Copies the entries with key >= t, in order, to sk/si (each holding c + 16); returns the count. */
int64_t kvs_cpu_topk_above_c(const uint32_t *ck, const int32_t *ci, int64_t c, uint32_t t, uint32_t *sk,
                                  int32_t *si) {
    int64_t m = 0;
    for (int64_t i = 0; i < c; i++) {
        sk[m] = ck[i];
        si[m] = ci[i];
        m += ck[i] >= t;
    }
    return m;
}

/* out_val[i] = x[out_idx[i]] for i < k. */
static void topk_values_generic(const float *x, const int32_t *out_idx, int64_t k, float *out_val) {
    for (int64_t i = 0; i < k; i++) out_val[i] = x[out_idx[i]];
}


static int64_t topk_above(int avx, const uint32_t *ck, const int32_t *ci, int64_t c, uint32_t t, uint32_t *sk, int32_t *si) {
    (void)avx; /* unused without SIMD kernels */
#if KVS_CPU_HAVE_AVX512
    if (avx == KVS_ISA_AVX512) return kvs_cpu_topk_above_avx512(ck, ci, c, t, sk, si);
    if (avx == KVS_ISA_AVX2) return kvs_cpu_topk_above_avx2(ck, ci, c, t, sk, si);
#endif
#if KVS_CPU_HAVE_NEON
    if (avx == KVS_ISA_NEON) return kvs_cpu_topk_above_neon(ck, ci, c, t, sk, si);
#endif
    return kvs_cpu_topk_above_c(ck, ci, c, t, sk, si);
}

static void topk_values(int avx, const float *x, const int32_t *out_idx, int64_t k, float *out_val) {
    (void)avx; /* unused without SIMD kernels */
#if KVS_CPU_HAVE_AVX512
    if (avx == KVS_ISA_AVX512) {
        kvs_cpu_topk_values_avx512(x, out_idx, k, out_val);
        return;
    }
    if (avx == KVS_ISA_AVX2) {
        kvs_cpu_topk_values_avx2(x, out_idx, k, out_val);
        return;
    }
#endif
#if KVS_CPU_HAVE_NEON
    if (avx == KVS_ISA_NEON) {
        kvs_cpu_topk_values_neon(x, out_idx, k, out_val);
        return;
    }
#endif
    topk_values_generic(x, out_idx, k, out_val);
}

/* ---- step 3: the k-th key and the answer ------------------------------------------------------ */

#define TOPK_NB 2048 /* buckets over the candidates' key range */

/* Candidates ci[0..c) (indices into x) in index order, c >= k; their keys go to ck. Writes the top
 * k to out_idx/out_val, sorted by score descending (ties by index) or in index order.
 *
 * The candidates' keys span [lo, hi], a narrow range once the threshold is tight. One histogram
 * over TOPK_NB equal buckets of that range finds the bucket bT holding the k-th key.
 * Sorted output: the entries of buckets >= bT (k and a few more) are taken in index order and
 * radix-sorted (stable, so ties stay in index order); the first k are the answer.
 * order_by_index: a radix select over bucket bT's few entries gives the exact k-th key T; the
 * answer is every key > T and the lowest-index n_eq keys == T, taken in one pass in index order.
 * ck/sk/si/tk/ti: scratch of c + 16 entries each. */
KVS_CLONES
static void topk_finish(int avx, const float *x, const int32_t *ci, int64_t c, int64_t k, int by_index, uint32_t *ck,
                        uint32_t *sk, int32_t *si, uint32_t *tk, int32_t *ti, int32_t *out_idx, float *out_val) {
    uint32_t hist[TOPK_NB], lo, hi;
    topk_keys(avx, x, ci, c, ck, &lo, &hi);
    const int sh = topk_hist(ck, c, TOPK_NB, lo, hi, hist);
    /* bucket bT holds the k-th largest; `above` entries lie in higher buckets */
    int64_t above = 0;
    int bT = (int)((hi - lo) >> sh);
    uint32_t pos[TOPK_NB]; /* where each bucket from bT up starts in the sorted order */
    for (; above + (int64_t)hist[bT] < k; bT--) {
        pos[bT] = (uint32_t)above;
        above += hist[bT];
    }
    pos[bT] = (uint32_t)above;
    if (by_index) {
        /* the exact k-th key T from bucket bT's few entries, then one pass in index order */
        uint32_t T;
        int64_t gt = above; /* entries > T */
        if (sh == 0) {
            T = lo + (uint32_t)bT; /* bucket bT holds only T */
        } else {
            uint32_t *copy = (uint32_t *)ti;
            int64_t nb = 0;
            for (int64_t i = 0; i < c; i++) {
                tk[nb] = copy[nb] = ck[i];
                nb += (int)((ck[i] - lo) >> sh) == bT;
            }
            T = topk_select(tk, nb, k - above - 1);
            for (int64_t i = 0; i < nb; i++) gt += copy[i] > T;
        }
        const int64_t n_eq = k - gt;
        int64_t m = 0, eq = 0;
        for (int64_t i = 0; i < c && m < k; i++) {
            uint32_t kk = ck[i];
            int is_eq = kk == T;
            int take = (kk > T) | (is_eq & (eq < n_eq));
            eq += is_eq & take;
            out_idx[m] = ci[i];
            m += take;
        }
    } else {
        const uint32_t base = lo + ((uint32_t)bT << sh); /* lower edge of bucket bT */
        const int64_t m = topk_above(avx, ck, ci, c, base, sk, si);
        topk_sort(sk, si, tk, ti, m, lo, sh, pos);
        memcpy(out_idx, si, (size_t)k * sizeof *si);
    }
    if (out_val) topk_values(avx, x, out_idx, k, out_val);
}

/* Words of scratch one row needs: sample + candidates (key, idx) + 2 sort copies. */
static size_t topk_work_words(int64_t n) { return (size_t)(8192 + 6 * (n + 16) + 64); }

/* Single-threaded top-k of x[0..n), 1 <= k <= n. */
KVS_CLONES
static void topk_row(int avx, const float *x, int64_t n, int64_t k, int by_index, uint32_t *work, int32_t *out_idx,
                     float *out_val) {
    uint32_t *sample = work;
    uint32_t *ck = work + 8192;
    int32_t *ci = (int32_t *)(ck + n + 16);
    uint32_t *sk = (uint32_t *)(ci + n + 16);
    int32_t *si = (int32_t *)(sk + n + 16);
    uint32_t *tk = (uint32_t *)(si + n + 16);
    int32_t *ti = (int32_t *)(tk + n + 16);
    int64_t c = 0;
    for (int attempt = 0; c < k; attempt++)
        c = topk_collect(avx, x, n, 0, topk_threshold(x, n, k, sample, attempt), ci);
    topk_finish(avx, x, ci, c, k, by_index, ck, sk, si, tk, ti, out_idx, out_val);
}

typedef struct topk_ctx {
    const kvs_topk_args *a;
    int avx;
    const float *x;
    int32_t *oi;
    float *ov;
    uint32_t *scr; /* per thread: per words */
    size_t per;
} topk_ctx;

/* row r, in thread tid's work area */
static void topk_one(void *cv, int tid, int64_t r) {
    const topk_ctx *c = cv;
    const kvs_topk_args *a = c->a;
    const int32_t *row_len = kvs_i32(a->p.row_len);
    const int64_t n = a->n, k = a->k;
    int64_t len = n;
    if (row_len) {
        len = row_len[r];
        if (len < 0) len = 0;
        if (len > n) len = n;
    }
    int64_t kk = k < len ? k : len;
    int32_t *ri = c->oi + r * k;
    float *rv = c->ov ? c->ov + r * k : NULL;
    if (kk > 0) topk_row(c->avx, c->x + r * n, len, kk, a->p.order_by_index, c->scr + (size_t)tid * c->per, ri, rv);
    for (int64_t t = kk; t < k; t++) {
        ri[t] = -1;
        if (rv) rv[t] = -INFINITY;
    }
}

kvs_status kvs_cpu_topk(kvs_device *dev, const kvs_topk_args *a) {
    topk_ctx c = {.a = a, .avx = kvs_cpu_isa(dev, KVS_OP_topk) /* KVS_ISA_* */, .x = kvs_tensor_host_ptr(a->x),
                  .oi = kvs_tensor_host_ptr(a->idx), .ov = a->val ? kvs_tensor_host_ptr(a->val) : NULL,
                  .per = topk_work_words(a->n)};
    int nt = kvs_cpu_nt(dev, (double)a->rows * (double)a->n * 4.0);
    if (nt > a->rows) nt = (int)a->rows;
    /* the device's grow-only scratch: a fresh allocation per call would fault its pages in again */
    c.scr = kvs_cpu_scratch(dev, (size_t)nt * c.per * sizeof(uint32_t));
    if (!c.scr) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_topk (cpu): cannot allocate scratch");
    kvs_par_for(nt, a->rows, 4, topk_one, &c);
    return KVS_OK;
}

/* topk_global's candidates of chunk t of x (keys above threshold t0) into its region of ci */
typedef struct topk_collect_ctx {
    int avx;
    uint32_t t0;
    const float *x;
    int64_t n, chunk;
    size_t region;
    int32_t *ci;
    int64_t *cnt;
} topk_collect_ctx;

static void topk_collect_chunk(void *cv, int tid, int64_t t) {
    const topk_collect_ctx *c = cv;
    (void)tid;
    int64_t c0 = t * c->chunk, c1 = c0 + c->chunk < c->n ? c0 + c->chunk : c->n;
    if (c0 > c1) c0 = c1;
    c->cnt[t] = topk_collect(c->avx, c->x + c0, c1 - c0, c0, c->t0, c->ci + (size_t)t * c->region);
}

kvs_status kvs_cpu_topk_global(kvs_device *dev, const kvs_topk_args *a) {
    const int avx = kvs_cpu_isa(dev, KVS_OP_topk_global); /* KVS_ISA_* */
    const float *x = kvs_tensor_host_ptr(a->x);
    int32_t *oi = kvs_tensor_host_ptr(a->idx);
    float *ov = a->val ? kvs_tensor_host_ptr(a->val) : NULL;
    const int64_t n = a->n, k = a->k;
    int nt = kvs_cpu_nt(dev, (double)n * 4.0);
    (void)nt; /* unused without OpenMP */
    if (n < 65536) nt = 1;
    if (nt > 512) nt = 512;
    uint32_t sample[8192];
    /* candidates in per-thread regions (chunk + 16 entries each: whole-vector stores), then
     * compacted */
    const int64_t chunk = (n + nt - 1) / nt;
    size_t region = (size_t)chunk + 16;
    int32_t *ci = kvs_cpu_scratch(dev, (size_t)nt * region * sizeof *ci); /* grow-only, kept */
    int64_t cnt[512];
    if (!ci) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_topk_global (cpu): cannot allocate scratch");
    int64_t c = 0;
    topk_collect_ctx cc = {.avx = avx, .x = x, .n = n, .chunk = chunk, .region = region, .ci = ci, .cnt = cnt};
    for (int attempt = 0; c < k; attempt++) {
        cc.t0 = topk_threshold(x, n, k, sample, attempt);
        kvs_par_for(nt, nt, 0, topk_collect_chunk, &cc); /* one chunk a thread */
        c = 0;
        for (int t = 0; t < nt; t++) {
            if ((size_t)c != (size_t)t * region) memmove(ci + c, ci + (size_t)t * region, (size_t)cnt[t] * sizeof *ci);
            c += cnt[t];
        }
    }
    uint32_t *sk = malloc((size_t)(3 * c + 48) * sizeof *sk);
    int32_t *si = malloc((size_t)(2 * c + 32) * sizeof *si);
    if (!sk || !si) {
        free(sk); free(si);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_topk_global (cpu): cannot allocate scratch");
    }
    topk_finish(avx, x, ci, c, k, a->p.order_by_index, sk + 2 * c + 32, sk, si, sk + c + 16, si + c + 16, oi, ov);
    free(sk); free(si);
    return KVS_OK;
}
