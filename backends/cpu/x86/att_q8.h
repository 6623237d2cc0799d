/* CPU backend, x86: decode attention's S = Q.K^T over a q8_0 / q4_0 K on 8-bit query codes and
 * O += P.V over a q8_0 / q4_0 V on 8-bit weights (aq8_pv, at the end; contracts, schemes and error
 * bounds: ../attention_q8.h), written once on 256-bit registers (AVX512-VNNI adds 16-key Q.K^T and
 * the P.V chunk kernel on 512-bit registers: aq8_tile16, aq8_pv_chunk512) and
 * included by quant_vnni.c (AVX512-VNNI + VL: vpdpbusd, AQ8_VNNI 1, 4 query rows in registers) and
 * quant_avx2.c (vpmaddubsw + vpmaddwd, AQ8_VNNI 0, 2 rows: 16 registers), after quant_q8.h, whose
 * Q8_DPBUSD(acc, u8, s8) they define. Not a public header; no include guard on purpose.
 *
 * K codes as unsigned bytes (q4_0: the nibbles 0..15; q8_0: code + 128 by an XOR, on AVX2 then split
 * into its two nibbles, q.u = 16 q.hi + q.lo), the offset's share (-off * the query codes' sums) as
 * the integer start value. Main path (aq8_tile8; VNNI's aq8_tile16 above it): 8 keys a step, each
 * block of the 8 keys transposed in registers so that lane l is key l: 8 dot products of 4 codes
 * against the query word broadcast, then one conversion and one FMA by the 8 keys' d_k times dq per
 * (row, block); no horizontal sums; on AVX2 the 8 keys' d_k by one vpgatherdd and the K rows
 * prefetched (the next tile's into L2, AQ8_KPF keys on into L1). Tails (fewer than 8 keys; aq8_tile:
 * 4 keys a step, a block per register per key, the 8 integer lanes converted and FMA'd by d_k dq into
 * one accumulator per (row, key), the four horizontal sums of a row together at the end; AVX2's
 * q8_0 there by the sign trick, |c| against sign(q, c), with no offset). */

#define AQ8_INLINE static inline __attribute__((always_inline))
#define AQ8_PV_MAXD 256 /* the largest head_dim and tile (keys) of the 16-key Q.K^T and the integer P.V */
#define AQ8_PV_MAXN 256
#ifndef AQ8_KPF /* how many keys ahead the 16-key Q.K^T prefetches K rows into L1 (measured at n_kv
                 * 16k, one thread: 64 beats 32 by 5-10% and 128 by 0-12%) */
#define AQ8_KPF 64
#endif

AQ8_INLINE int32_t aq8_ld32(const void *p) {
    int32_t w;
    memcpy(&w, p, 4);
    return w;
}

/* out[0..3] = the lane sums of a, b, c, d */
AQ8_INLINE void aq8_hsum4(__m256 a, __m256 b, __m256 c, __m256 d, float *out) {
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}

AQ8_INLINE float aq8_hsum(__m256 s) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* Rows [r0, r0 + R) against keys [j, j + NK) (R <= 4, NK 4 or 1: constants after inlining);
 * q4: K is q4_0 (else q8_0). */
AQ8_INLINE void aq8_tile(const int q4, const int R, const int NK, const uint8_t *K, int64_t rb, const kvs_att_q8 *Q,
                         int64_t r0, int64_t j, float scale, float *S, int64_t lds) {
    const int64_t d = Q->d, nb = d / 32, bb = q4 ? 18 : 34;
    __m256 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int u = 0; u < NK; u++) acc[r][u] = _mm256_setzero_ps();
    if (Q->pf && r0 == 0 && NK == 4) /* the V rows, once per key (tails) */
        for (int64_t o = 0; o < 4 * Q->pf_rb; o += 64) _mm_prefetch((const char *)(Q->pf + j * Q->pf_rb + o), _MM_HINT_T1);
    for (int64_t b = 0; b < nb; b++) {
        __m256i cu[4], cs[4];
        float dk[4];
        for (int u = 0; u < NK; u++) {
            const uint8_t *blk = K + (j + u) * rb + b * bb;
            dk[u] = _cvtsh_ss((unsigned short)(blk[0] | blk[1] << 8));
            if (q4) {
                const __m128i v = _mm_loadu_si128((const __m128i *)(blk + 2));
                cu[u] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
                cs[u] = cu[u];
            } else {
                cs[u] = _mm256_loadu_si256((const __m256i *)(blk + 2));
                cu[u] = AQ8_VNNI ? _mm256_xor_si256(cs[u], _mm256_set1_epi8((char)0x80)) : _mm256_sign_epi8(cs[u], cs[u]);
            }
        }
        for (int r = 0; r < R; r++) {
            const int64_t row = r0 + r;
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(Q->q + row * d + b * 32));
            /* AVX2's q8_0 here dots signed codes (the sign trick): no offset, corr unused */
            const __m256i cv = (!q4 && !AQ8_VNNI) ? _mm256_setzero_si256()
                                                  : _mm256_loadu_si256((const __m256i *)(Q->corr + row * (d / 4) + b * 8));
            const float dq = Q->dq[row * nb + b];
            for (int u = 0; u < NK; u++) {
                const __m256i y = (!q4 && !AQ8_VNNI) ? _mm256_sign_epi8(qv, cs[u]) : qv;
                const __m256i p = Q8_DPBUSD(cv, cu[u], y);
                acc[r][u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dk[u] * dq), acc[r][u]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        float *s = S + (r0 + r) * lds + j;
        if (NK == 4) {
            float o[4];
            aq8_hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3], o);
            for (int u = 0; u < 4; u++) s[u] = scale * o[u];
        } else {
            s[0] = scale * aq8_hsum(acc[r][0]);
        }
    }
}

/* t[g] lane l = dword g of x[l] (an 8 x 8 transpose of 32-bit words) */
AQ8_INLINE void aq8_transpose8(const __m256i *x, __m256i *t) {
    __m256i a[8], u[8];
    for (int k = 0; k < 4; k++) {
        a[2 * k] = _mm256_unpacklo_epi32(x[2 * k], x[2 * k + 1]);
        a[2 * k + 1] = _mm256_unpackhi_epi32(x[2 * k], x[2 * k + 1]);
    }
    for (int k = 0; k < 2; k++) { /* keys 4k .. 4k+3 */
        u[4 * k + 0] = _mm256_unpacklo_epi64(a[4 * k], a[4 * k + 2]);     /* dwords 0, 4 */
        u[4 * k + 1] = _mm256_unpackhi_epi64(a[4 * k], a[4 * k + 2]);     /* 1, 5 */
        u[4 * k + 2] = _mm256_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]); /* 2, 6 */
        u[4 * k + 3] = _mm256_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]); /* 3, 7 */
    }
    for (int g = 0; g < 4; g++) {
        t[g] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x20);
        t[g + 4] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x31);
    }
}

/* Rows [r0, r0 + R) against the 8 keys [j, j + 8), K transposed per block so that lane l of every
 * vector is key j + l: each row's block is 8 dot products of 4 codes (the query's dword g broadcast)
 * accumulated in the key's lane, no horizontal sums; then one conversion and one FMA by the 8 keys'
 * d_k times dq per (row, block). q4_0: the 16 code bytes of 8 keys are transposed as 4 dwords (two
 * keys a register), then split into low nibbles (values 4g..4g+3) and high ones (16 + 4g ..). */
AQ8_INLINE void aq8_tile8(const int q4, const int R, const uint8_t *K, int64_t rb, const kvs_att_q8 *Q, int64_t r0,
                          int64_t j, float scale, float *S, int64_t lds) {
    const int64_t d = Q->d, nb = d / 32, bb = q4 ? 18 : 34;
    __m256 acc[4];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    if (Q->pf && r0 == 0) /* once per key (the first row group) */
        for (int64_t o = 0; o < 8 * Q->pf_rb; o += 64) _mm_prefetch((const char *)(Q->pf + j * Q->pf_rb + o), _MM_HINT_T1);
#if !AQ8_VNNI
    if (r0 == 0) { /* once per key: the next tile's K rows into L2, the rows AQ8_KPF keys on into L1
                    * (ATT_BK keys on: prefetches never fault) */
        for (int64_t o = 0; o < 8 * rb; o += 64) _mm_prefetch((const char *)(K + (j + 256) * rb + o), _MM_HINT_T1);
        for (int64_t o = 0; o < 8 * rb; o += 64) _mm_prefetch((const char *)(K + (j + AQ8_KPF) * rb + o), _MM_HINT_T0);
    }
    const __m256i kidx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)rb));
#endif
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *k0 = K + j * rb + b * bb;
        __m256i cu[8], cs[8]; /* cu[g]: unsigned codes of word g (values 4g .. 4g+3), cs: signed (q8_0) */
#if !AQ8_VNNI
        /* the 8 keys' d_k of block b: one vpgatherdd of the dword at each block's start (the f16
         * scale and two code bytes), the low halves packed. (qemu-user before 8.2.7 / 9.0.3 decodes
         * a VSIB index in ymm4 as "no index", every lane loading k0: wrong there when the compiler
         * picks ymm4, as GCC 12 -O2 does; README, "Quantized KV cache".) */
        const __m256i g32 = _mm256_and_si256(_mm256_i32gather_epi32((const int *)(const void *)k0, kidx, 1), _mm256_set1_epi32(0xffff));
        const __m256 dk = _mm256_cvtph_ps(_mm256_castsi256_si128(
            _mm256_permute4x64_epi64(_mm256_packus_epi32(g32, _mm256_setzero_si256()), 0x08)));
#else
        const __m128i h16 = _mm_setr_epi16((short)(k0[0] | k0[1] << 8), (short)(k0[rb] | k0[rb + 1] << 8),
                                           (short)(k0[2 * rb] | k0[2 * rb + 1] << 8), (short)(k0[3 * rb] | k0[3 * rb + 1] << 8),
                                           (short)(k0[4 * rb] | k0[4 * rb + 1] << 8), (short)(k0[5 * rb] | k0[5 * rb + 1] << 8),
                                           (short)(k0[6 * rb] | k0[6 * rb + 1] << 8), (short)(k0[7 * rb] | k0[7 * rb + 1] << 8));
        const __m256 dk = _mm256_cvtph_ps(h16);
#endif
        if (q4) {
            __m256i x[4], a[4];
            for (int m = 0; m < 4; m++)
                x[m] = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(k0 + (m + 4) * rb + 2)),
                                        _mm_loadu_si128((const __m128i *)(k0 + m * rb + 2)));
            a[0] = _mm256_unpacklo_epi32(x[0], x[1]), a[1] = _mm256_unpackhi_epi32(x[0], x[1]);
            a[2] = _mm256_unpacklo_epi32(x[2], x[3]), a[3] = _mm256_unpackhi_epi32(x[2], x[3]);
            const __m256i t[4] = {_mm256_unpacklo_epi64(a[0], a[2]), _mm256_unpackhi_epi64(a[0], a[2]),
                                  _mm256_unpacklo_epi64(a[1], a[3]), _mm256_unpackhi_epi64(a[1], a[3])};
            const __m256i m4 = _mm256_set1_epi8(15);
            for (int g = 0; g < 4; g++) {
                cu[g] = _mm256_and_si256(t[g], m4);
                cu[g + 4] = _mm256_and_si256(_mm256_srli_epi16(t[g], 4), m4);
            }
        } else {
            __m256i x[8];
            for (int l = 0; l < 8; l++) x[l] = _mm256_loadu_si256((const __m256i *)(k0 + l * rb + 2));
            aq8_transpose8(x, cs);
#if AQ8_VNNI
            for (int g = 0; g < 8; g++) cu[g] = _mm256_xor_si256(cs[g], _mm256_set1_epi8((char)0x80));
#else
            /* AVX2: u = c + 128 (0..255) split into nibbles, q.u = 16 q.hi + q.lo; each nibble's
             * vpmaddubsw pairs (<= 2 * 15 * 127) summed over the 8 words in 16 bits (<= 30480:
             * exact), two vpmaddwd (x 1, x 16) a row; corrb holds -128 sum q */
            __m256i hl[4], hh[4];
            const __m256i m4 = _mm256_set1_epi8(15), x80 = _mm256_set1_epi8((char)0x80);
            for (int g = 0; g < 8; g++) {
                const __m256i u = _mm256_xor_si256(cs[g], x80);
                const __m256i lo = _mm256_and_si256(u, m4), hi = _mm256_and_si256(_mm256_srli_epi16(u, 4), m4);
                for (int r = 0; r < R; r++) {
                    const __m256i y = _mm256_set1_epi32(aq8_ld32(Q->q + (r0 + r) * d + b * 32 + 4 * g));
                    const __m256i pl = _mm256_maddubs_epi16(lo, y), ph = _mm256_maddubs_epi16(hi, y);
                    hl[r] = g ? _mm256_add_epi16(hl[r], pl) : pl;
                    hh[r] = g ? _mm256_add_epi16(hh[r], ph) : ph;
                }
            }
            for (int r = 0; r < R; r++) {
                const int64_t row = r0 + r;
                const __m256i p = _mm256_add_epi32(_mm256_set1_epi32(Q->corrb[row * nb + b]),
                                                   _mm256_add_epi32(_mm256_madd_epi16(hl[r], _mm256_set1_epi16(1)),
                                                                    _mm256_madd_epi16(hh[r], _mm256_set1_epi16(16))));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dk, _mm256_set1_ps(Q->dq[row * nb + b])), acc[r]);
            }
            continue;
#endif
        }
        for (int r = 0; r < R; r++) {
            const int64_t row = r0 + r;
            const int32_t *qw = (const int32_t *)(const void *)(Q->q + row * d + b * 32);
            __m256i p = _mm256_set1_epi32(Q->corrb[row * nb + b]);
#if !AQ8_VNNI
            if (q4) { /* vpmaddubsw's pairs (|c q + c' q'| <= 2 * 15 * 127) summed over the 8 words in
                       * 16 bits (<= 30480: exact), then one vpmaddwd: the same sums */
                __m256i h = _mm256_maddubs_epi16(cu[0], _mm256_set1_epi32(aq8_ld32(qw)));
                for (int g = 1; g < 8; g++) h = _mm256_add_epi16(h, _mm256_maddubs_epi16(cu[g], _mm256_set1_epi32(aq8_ld32(qw + g))));
                p = _mm256_add_epi32(p, _mm256_madd_epi16(h, _mm256_set1_epi16(1)));
            } else
#endif
            for (int g = 0; g < 8; g++) {
                /* q4_0: word g < 4 holds values 4g..4g+3 (low nibbles), g >= 4 values 16 + 4(g-4) .. */
                int32_t w;
                memcpy(&w, q4 ? (const void *)((const int8_t *)qw + (g < 4 ? 4 * g : 16 + 4 * (g - 4))) : (const void *)(qw + g), 4);
                p = Q8_DPBUSD(p, cu[g], _mm256_set1_epi32(w));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dk, _mm256_set1_ps(Q->dq[row * nb + b])), acc[r]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
    for (int r = 0; r < R; r++) _mm256_storeu_ps(S + (r0 + r) * lds + j, _mm256_mul_ps(acc[r], vs));
}

#if AQ8_VNNI
/* The f16 block scales of 16 q4_0 rows (row0, row stride rb; nb <= 4 blocks of 18 bytes a row:
 * head_dim <= 128) without a gather: each row's words 0, 9, 18, 27 (the scales, all within its first
 * 56 bytes) by one masked load (words past the row's nb blocks not read), two rows at a time put by
 * one vpermt2w into a register of 8 keys ([block][8 keys]), the two halves then into z[0] = blocks 0
 * and 1, z[1] = blocks 2 and 3, each [block][16 keys] (word 16 (b % 2) + key; blocks >= nb: 0). */
AQ8_INLINE void aq8_q4_scales16(const uint8_t *row0, int64_t rb, int64_t nb, __m512i z[2]) {
    const __mmask32 lm = (__mmask32)(0x08040201u & (0xFFFFFFFFu >> (32 - 9 * nb + 8))); /* words 9b, b < nb */
    /* pair step: word 8b + k <- row (k odd: the second) word 9b */
    const __m512i ip = _mm512_set_epi16(59, 27, 59, 27, 59, 27, 59, 27, 50, 18, 50, 18, 50, 18, 50, 18,
                                        41, 9, 41, 9, 41, 9, 41, 9, 32, 0, 32, 0, 32, 0, 32, 0);
    __m512i y[2];
    for (int h = 0; h < 2; h++) {
        __m512i t[4];
        for (int p = 0; p < 4; p++) {
            const uint8_t *a = row0 + (8 * h + 2 * p) * rb;
            t[p] = _mm512_maskz_permutex2var_epi16((__mmask32)(0x03030303u << (2 * p)), _mm512_maskz_loadu_epi16(lm, a), ip,
                                                   _mm512_maskz_loadu_epi16(lm, a + rb));
        }
        y[h] = _mm512_or_si512(_mm512_ternarylogic_epi32(t[0], t[1], t[2], 0xFE), t[3]);
    }
    /* word 16 b' + j <- y[j / 8] word 8 (b' + 2 i) + j % 8 (z[i], b' = 0, 1) */
    const __m512i i0 = _mm512_set_epi16(47, 46, 45, 44, 43, 42, 41, 40, 15, 14, 13, 12, 11, 10, 9, 8,
                                        39, 38, 37, 36, 35, 34, 33, 32, 7, 6, 5, 4, 3, 2, 1, 0);
    z[0] = _mm512_permutex2var_epi16(y[0], i0, y[1]);
    z[1] = _mm512_permutex2var_epi16(y[0], _mm512_add_epi16(i0, _mm512_set1_epi16(16)), y[1]);
}

/* acc + vpdpbusd(a, the dword at p broadcast) with the broadcast embedded in the instruction's memory
 * operand (compilers load it into a register first: one more uop a step) */
AQ8_INLINE __m512i aq8_dpbusd_bcst(__m512i acc, __m512i a, const void *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*(const int32_t *)p));
    return acc;
}

/* aq8_tile8 on 512-bit registers (AVX512-VNNI): the 16 keys [j, j + 16), lane p of every vector key
 * j + kperm[p]: q4_0, lane p key p (4 keys a register from 128-bit loads, dwords transposed within
 * the 128-bit lanes); q8_0, keys m and m + 8 side by side (two 256-bit halves), dwords transposed
 * within 128-bit lanes, then the lanes regrouped: keys 0-3, 8-11, 4-7, 12-15. The K block scales
 * of the 16 keys: one vpgatherdd per block (in lane order; no separate pass over the tile). One
 * store per row, put back in key order. */
AQ8_INLINE void aq8_tile16(const int q4, const int R, const uint8_t *K, int64_t rb, int64_t d, const kvs_att_q8 *Q,
                           int64_t r0, int64_t j, float scale, float *S, int64_t lds) {
    const int64_t nb = d / 32, bb = q4 ? 18 : 34;
    const __m512i kperm = q4 ? _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
                             : _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
    const __m512i kidx = _mm512_mullo_epi32(kperm, _mm512_set1_epi32((int)rb)); /* lane p: key kperm[p]'s row */
    __m512 acc[AQ8_ROWS];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    if (r0 == 0) { /* once per key (the first row group): this tile's V rows into L2 (a q8_0 tile's
                    * 34 KiB would push out of L1 what is read now), the next tile's K rows into L2,
                    * the K rows AQ8_KPF keys on into L1 (ATT_BK keys on: prefetches never fault) */
        if (Q->pf)
            for (int64_t o = 0; o < 16 * Q->pf_rb; o += 64) _mm_prefetch((const char *)(Q->pf + j * Q->pf_rb + o), _MM_HINT_T1);
        for (int64_t o = 0; o < 16 * rb; o += 64) _mm_prefetch((const char *)(K + (j + 256) * rb + o), _MM_HINT_T1);
        for (int64_t o = 0; o < 16 * rb; o += 64) _mm_prefetch((const char *)(K + (j + AQ8_KPF) * rb + o), _MM_HINT_T0);
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *k0 = K + j * rb + b * bb + 2;
        __m512i cu[8];
        if (q4) {
            __m512i x[4];
            for (int m = 0; m < 4; m++) {
                __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(k0 + m * rb)));
                v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(k0 + (m + 4) * rb)), 1);
                v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(k0 + (m + 8) * rb)), 2);
                x[m] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(k0 + (m + 12) * rb)), 3);
            }
            const __m512i a0 = _mm512_unpacklo_epi32(x[0], x[1]), a1 = _mm512_unpackhi_epi32(x[0], x[1]);
            const __m512i a2 = _mm512_unpacklo_epi32(x[2], x[3]), a3 = _mm512_unpackhi_epi32(x[2], x[3]);
            const __m512i t[4] = {_mm512_unpacklo_epi64(a0, a2), _mm512_unpackhi_epi64(a0, a2),
                                  _mm512_unpacklo_epi64(a1, a3), _mm512_unpackhi_epi64(a1, a3)};
            const __m512i m4 = _mm512_set1_epi8(15);
            for (int g = 0; g < 4; g++) { /* the high nibbles as 16 x (no vpsrlw: port 0 is vpdpbusd's) */
                cu[g] = _mm512_and_si512(t[g], m4);
                cu[g + 4] = _mm512_andnot_si512(m4, t[g]);
            }
        } else {
            __m512i x[8], a[8], u[8];
            for (int m = 0; m < 8; m++)
                x[m] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(k0 + m * rb))),
                                          _mm256_loadu_si256((const __m256i *)(k0 + (m + 8) * rb)), 1);
            for (int k = 0; k < 4; k++) {
                a[2 * k] = _mm512_unpacklo_epi32(x[2 * k], x[2 * k + 1]);
                a[2 * k + 1] = _mm512_unpackhi_epi32(x[2 * k], x[2 * k + 1]);
            }
            for (int k = 0; k < 2; k++) { /* lanes: dword q of keys 4k.., q + 4 of 4k.., q of 8+4k.., q + 4 of 8+4k.. */
                u[4 * k + 0] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
                u[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
                u[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
                u[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
            }
            const __m512i x80 = _mm512_set1_epi8((char)0x80);
            for (int g = 0; g < 4; g++) { /* keys 0-3, 8-11, 4-7, 12-15 */
                cu[g] = _mm512_xor_si512(_mm512_shuffle_i64x2(u[g], u[4 + g], 0x88), x80);
                cu[g + 4] = _mm512_xor_si512(_mm512_shuffle_i64x2(u[g], u[4 + g], 0xdd), x80);
            }
        }
        /* the 16 keys' d_k of block b in lane order: one gather of the dword at each block's start
         * (the f16 scale and two code bytes) */
        const __m512 dkv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(kidx, k0 - 2, 1)));
        for (int r = 0; r < R; r++) {
            const int64_t row = r0 + r;
            const int8_t *qb = Q->q + row * d + b * 32;
            __m512i p[2] = {_mm512_set1_epi32(Q->corrb[row * nb + b]), _mm512_setzero_si512()}; /* two chains */
            for (int g = 0; g < 8; g++) {
                /* q4_0: word g < 4 holds values 4g..4g+3 (low nibbles), g >= 4 values 16 + 4(g-4) ..:
                 * word g of the query either way; its broadcast embedded in the vpdpbusd. q4_0: the
                 * low nibbles into p[0], the high ones (16 x) into p[1], whose sum (|.| <= 4 * 4 * 240
                 * * 127) is then shifted back exactly */
                const int ch = q4 ? g >> 2 : g & 1;
                p[ch] = aq8_dpbusd_bcst(p[ch], cu[g], qb + 4 * g);
            }
            if (q4) p[1] = _mm512_srai_epi32(p[1], 4);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(p[0], p[1])), _mm512_mul_ps(dkv, _mm512_set1_ps(Q->dq[row * nb + b])), acc[r]);
        }
    }
    const __m512 vs = _mm512_set1_ps(scale);
    for (int r = 0; r < R; r++) /* lane p is key kperm[p]: kperm is its own inverse */
        _mm512_storeu_ps(S + (r0 + r) * lds + j, _mm512_permutexvar_ps(kperm, _mm512_mul_ps(acc[r], vs)));
}
#define AQ8_KEYS16(Q4, R) for (; big && j + 16 <= n; j += 16) aq8_tile16((Q4), (R), K, rb, Q->d, Q, r0, j, scale, S, lds)
#else
#define AQ8_KEYS16(Q4, R) (void)big
#endif

#define AQ8_KEYS(Q4, R)                                                                                \
    do {                                                                                               \
        int64_t j = 0;                                                                                 \
        AQ8_KEYS16(Q4, R);                                                                             \
        for (; j + 8 <= n; j += 8) aq8_tile8((Q4), (R), K, rb, Q, r0, j, scale, S, lds);           \
        for (; j + 4 <= n; j += 4) aq8_tile((Q4), (R), 4, K, rb, Q, r0, j, scale, S, lds);             \
        for (; j < n; j++) aq8_tile((Q4), (R), 1, K, rb, Q, r0, j, scale, S, lds);                     \
    } while (0)

static void aq8_rows(const int q4, const uint8_t *K, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n, float scale,
                     float *S, int64_t lds, int big) {
    /* 4 rows a group: the transposed keys are shared by more rows */
    const int64_t RG = 4;
    for (int64_t r0 = 0; r0 < M; r0 += RG) {
        const int64_t R = M - r0 < RG ? M - r0 : RG;
        if (q4) {
            switch (R) {
            case 1: AQ8_KEYS(1, 1); break;
            case 2: AQ8_KEYS(1, 2); break;
            case 3: AQ8_KEYS(1, 3); break;
            default: AQ8_KEYS(1, 4); break;
            }
        } else {
            switch (R) {
            case 1: AQ8_KEYS(0, 1); break;
            case 2: AQ8_KEYS(0, 2); break;
            case 3: AQ8_KEYS(0, 3); break;
            default: AQ8_KEYS(0, 4); break;
            }
        }
    }
}

/* 1 when dt (Q4_0, Q8_0) has the 8-bit kernel and it ran, else 0. */
static int aq8_qk(kvs_dtype dt, const void *K, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n, float scale,
                  float *S, int64_t lds) {
    if (dt != KVS_Q4_0 && dt != KVS_Q8_0) return 0;
    /* VNNI: the 16-key kernel (it gathers its K block scales) where the tile holds 16 keys */
    const int big = AQ8_VNNI && n >= 16;
    aq8_rows(dt == KVS_Q4_0, (const uint8_t *)K, rb, Q, M, n, scale, S, lds, big);
    return 1;
}

/* ---- O += P.V on 8-bit weights (contract, chunking and error bound: ../attention_q8.h) ----------
 * Per tile: |d_v| of every (key, block) as f32 (0 past n), a byte mask 0xFF for a negative d_v (its
 * codes enter XORed: q4_0 15 - c, q8_0 -c - 1, so that every weight is |W| >= 0) and the codes'
 * offset o (q4_0: 8, 7 for a negative d_v; q8_0: 0, -1), so that V = |d_v| (x - o) with x the
 * (XORed) code. Per (row, block, chunk of AQ8_PV_CH keys): |W| = P |d_v|, s = max |W| / wmax,
 * w = rint(|W| / s) in 0..wmax (u8), corr = sum w o. The main loop: 4 keys' codes of one block
 * interleaved in registers (lane = column, its 4 bytes the 4 keys), shared by the rows; each row's 4
 * weights broadcast as one dword; Q8_DPBUSD accumulates 32 columns in 4 int32 vectors over the
 * chunk; then O += s (acc - corr) in f32. */
#define AQ8_PV_CH 64

typedef struct aq8_pvt { /* one tile's V side (nb blocks, keys padded with zeros to a multiple of 32) */
    float adv[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
    uint8_t nm[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
    int8_t off[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
} aq8_pvt;

typedef struct aq8_pvw { /* one row group's weights */
    uint8_t w[AQ8_PV_MAXD / 32][AQ8_ROWS][AQ8_PV_MAXN];
    float s[AQ8_PV_MAXD / 32][AQ8_ROWS][AQ8_PV_MAXN / AQ8_PV_CH];
    int32_t corr[AQ8_PV_MAXD / 32][AQ8_ROWS][AQ8_PV_MAXN / AQ8_PV_CH];
} aq8_pvw;

static const uint8_t aq8_zero[64];

/* The V side of the tile; 0 when a block scale is not finite (the caller then takes the f32 kernel) */
__attribute__((noinline)) static int aq8_pv_tile(const int q4, const uint8_t *V, int64_t rb, int64_t n, int64_t nb, aq8_pvt *t) {
    /* (VNNI: zeros up to AQ8_PV_MAXN keys; its weights take whole tiles, aq8_pv_weights) */
    const int64_t bb = q4 ? 18 : 34, np = AQ8_VNNI ? AQ8_PV_MAXN : (n + 31) & ~(int64_t)31;
    uint16_t h16[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
    int64_t j0 = 0;
#if AQ8_VNNI
    if (q4 && nb <= 4) /* 16 keys at a time (aq8_q4_scales16) */
        for (; j0 + 16 <= n; j0 += 16) {
            __m512i z[2];
            aq8_q4_scales16(V + j0 * rb, rb, nb, z);
            for (int64_t b = 0; b < nb; b++)
                _mm256_storeu_si256((__m256i *)&h16[b][j0], b & 1 ? _mm512_extracti64x4_epi64(z[b >> 1], 1) : _mm512_castsi512_si256(z[b >> 1]));
        }
#endif
    for (int64_t j = j0; j < n; j++) { /* the scales, key by key */
        const uint8_t *row = V + j * rb;
        for (int64_t b = 0; b < nb; b++) memcpy(&h16[b][j], row + b * bb, 2);
    }
    for (int64_t b = 0; b < nb; b++) {
        __m256i bad = _mm256_setzero_si256();
        for (int64_t j = n; j < np; j++) h16[b][j] = 0;
#if AQ8_VNNI
        /* 32 keys a step (np a multiple of 32): the same values as the 8-key steps below */
        __mmask32 bad32 = 0;
        for (int64_t j = 0; j < np; j += 32) {
            const __m512i h = _mm512_loadu_si512((const void *)&h16[b][j]);
            const __mmask32 neg = _mm512_movepi16_mask(h);
            const __m512i ah = _mm512_and_si512(h, _mm512_set1_epi16(0x7fff));
            bad32 |= _mm512_cmpgt_epi16_mask(ah, _mm512_set1_epi16(0x7bff));
            _mm512_storeu_ps(&t->adv[b][j], _mm512_cvtph_ps(_mm512_castsi512_si256(ah)));
            _mm512_storeu_ps(&t->adv[b][j + 16], _mm512_cvtph_ps(_mm512_extracti64x4_epi64(ah, 1)));
            const __m256i m8 = _mm256_movm_epi8(neg);
            _mm256_storeu_si256((__m256i *)&t->nm[b][j], m8);
            _mm256_storeu_si256((__m256i *)&t->off[b][j], q4 ? _mm256_add_epi8(m8, _mm256_set1_epi8(8)) : m8);
        }
        if (bad32) return 0; /* inf / NaN scale */
        (void)bad;
        continue;
#endif
        for (int64_t j = 0; j < np; j += 8) {
            const __m128i h = _mm_loadu_si128((const __m128i *)&h16[b][j]);
            const __m128i neg = _mm_srai_epi16(h, 15);                                   /* 0xFFFF: negative */
            const __m128i ah = _mm_and_si128(h, _mm_set1_epi16(0x7fff));                  /* |d_v| */
            bad = _mm256_or_si256(bad, _mm256_castsi128_si256(_mm_cmpgt_epi16(ah, _mm_set1_epi16(0x7bff))));
            _mm256_storeu_ps(&t->adv[b][j], _mm256_cvtph_ps(ah));
            const __m128i m8 = _mm_packs_epi16(neg, neg); /* 8 bytes 0xFF / 0 */
            _mm_storel_epi64((__m128i *)&t->nm[b][j], m8);
            /* q4_0: 8 + neg (neg = -1 or 0); q8_0: neg */
            _mm_storel_epi64((__m128i *)&t->off[b][j], q4 ? _mm_add_epi8(m8, _mm_set1_epi8(8)) : m8);
        }
        if (!_mm256_testz_si256(bad, bad)) return 0; /* inf / NaN scale */
    }
    return 1;
}

/* Quantizes the weights of rows p[r * ldp] (r < R) against the tile t (n keys, nb blocks) into w. */
__attribute__((noinline)) static void aq8_pv_weights(const int q4, const int R, const float *P, int64_t ldp, const aq8_pvt *t, int64_t n, int64_t nb, int wmax,
                           aq8_pvw *w) {
    (void)q4; /* (one weight layout for both types) */
#if AQ8_VNNI
    /* 512-bit: a whole tile of AQ8_PV_MAXN keys (t zero-padded, P zeroed past n), 16 keys a vector:
     * W of a (row, block) in 16 registers, the 4 chunk maxima reduced together (one division each
     * for inv and s), 4 vectors of rint(W inv) packed to one 64-byte chunk of u8 weights. Keys past
     * n get weight 0. The same arithmetic, element by element, as the 256-bit code below. */
    const __m512i kidx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i p4 = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512 vw = _mm512_set1_ps((float)wmax), tiny = _mm512_set1_ps(0x1p-100f);
    for (int r = 0; r < R; r++) {
        const float *p = P + r * ldp;
        __m512 pp[AQ8_PV_MAXN / 16]; /* P with the keys past n zeroed (S holds anything there) */
        for (int v = 0; v < AQ8_PV_MAXN / 16; v++) {
            const int64_t j = 16 * v;
            const __mmask16 m = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32((int)n), _mm512_add_epi32(_mm512_set1_epi32((int)j), kidx));
            pp[v] = _mm512_maskz_loadu_ps(m, p + (j < n ? j : 0));
        }
        for (int64_t b = 0; b < nb; b++) {
            __m512 W[AQ8_PV_MAXN / 16], mc[4];
            for (int v = 0; v < AQ8_PV_MAXN / 16; v++) W[v] = _mm512_mul_ps(pp[v], _mm512_loadu_ps(&t->adv[b][16 * v]));
            for (int c = 0; c < 4; c++)
                mc[c] = _mm512_max_ps(_mm512_max_ps(W[4 * c], W[4 * c + 1]), _mm512_max_ps(W[4 * c + 2], W[4 * c + 3]));
            /* 128-bit lane c of mx: chunk c's maximum in all 4 lanes */
            const __m512 u01 = _mm512_max_ps(_mm512_shuffle_f32x4(mc[0], mc[1], 0x44), _mm512_shuffle_f32x4(mc[0], mc[1], 0xee));
            const __m512 u23 = _mm512_max_ps(_mm512_shuffle_f32x4(mc[2], mc[3], 0x44), _mm512_shuffle_f32x4(mc[2], mc[3], 0xee));
            __m512 mx = _mm512_max_ps(_mm512_shuffle_f32x4(u01, u23, 0x88), _mm512_shuffle_f32x4(u01, u23, 0xdd));
            mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, 0x4e));
            mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, 0xb1));
            /* weights below 2^-100 (all of the chunk's) are dropped: inv would overflow */
            const __mmask16 ok = _mm512_cmp_ps_mask(mx, tiny, _CMP_GE_OQ);
            const __m512 inv = _mm512_maskz_div_ps(ok, vw, mx);
            const __m512 sv = _mm512_maskz_div_ps(ok, mx, vw);
            _mm_storeu_ps(w->s[b][r], _mm512_castps512_ps128(_mm512_permutexvar_ps(p4, sv)));
            __m512i cs[4];
            for (int c = 0; c < 4; c++) {
                const __m512 vi = _mm512_permutexvar_ps(_mm512_set1_epi32(4 * c), inv); /* chunk c's inv */
                __m512i q[4];
                for (int u = 0; u < 4; u++) q[u] = _mm512_cvtps_epi32(_mm512_mul_ps(W[4 * c + u], vi));
                /* lane l of the pack: dwords of vectors 0..3 (keys 16u + 4l ..); p4 puts them in key order */
                const __m512i w8 = _mm512_permutexvar_epi32(
                    p4, _mm512_packus_epi16(_mm512_packus_epi32(q[0], q[1]), _mm512_packus_epi32(q[2], q[3])));
                _mm512_storeu_si512((void *)&w->w[b][r][64 * c], w8);
                cs[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w8, _mm512_loadu_si512((const void *)&t->off[b][64 * c]));
            }
            /* the 4 chunks' sums of w o together */
            const __m512i s01 = _mm512_add_epi32(_mm512_shuffle_i32x4(cs[0], cs[1], 0x44), _mm512_shuffle_i32x4(cs[0], cs[1], 0xee));
            const __m512i s23 = _mm512_add_epi32(_mm512_shuffle_i32x4(cs[2], cs[3], 0x44), _mm512_shuffle_i32x4(cs[2], cs[3], 0xee));
            __m512i sx = _mm512_add_epi32(_mm512_shuffle_i32x4(s01, s23, 0x88), _mm512_shuffle_i32x4(s01, s23, 0xdd));
            sx = _mm512_add_epi32(sx, _mm512_shuffle_epi32(sx, 0x4e));
            sx = _mm512_add_epi32(sx, _mm512_shuffle_epi32(sx, 0xb1));
            _mm_storeu_si128((__m128i *)w->corr[b][r], _mm512_castsi512_si128(_mm512_permutexvar_epi32(p4, sx)));
        }
    }
#else
    const int64_t np = (n + 31) & ~(int64_t)31;
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int r = 0; r < R; r++) {
        const float *p = P + r * ldp;
        float pp[AQ8_PV_MAXN]; /* P with the keys past n zeroed (S holds anything there) */
        for (int64_t j = 0; j < np; j += 8) {
            const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int)j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx);
            _mm256_storeu_ps(pp + j, _mm256_maskload_ps(p + (j < n ? j : 0), m));
        }
        for (int64_t b = 0; b < nb; b++)
            for (int64_t c0 = 0, c = 0; c0 < np; c0 += AQ8_PV_CH, c++) {
                const int64_t c1 = c0 + AQ8_PV_CH < np ? c0 + AQ8_PV_CH : np;
                __m256 mx = _mm256_setzero_ps();
                for (int64_t j = c0; j < c1; j += 8)
                    mx = _mm256_max_ps(mx, _mm256_mul_ps(_mm256_loadu_ps(pp + j), _mm256_loadu_ps(&t->adv[b][j])));
                __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
                h = _mm_max_ps(h, _mm_movehl_ps(h, h));
                h = _mm_max_ss(h, _mm_movehdup_ps(h));
                const float m = _mm_cvtss_f32(h);
                /* weights below 2^-100 (all of the chunk's) are dropped: inv would overflow */
                const float inv = m >= 0x1p-100f ? (float)wmax / m : 0.0f;
                w->s[b][r][c] = m >= 0x1p-100f ? m / (float)wmax : 0.0f;
                const __m256 vi = _mm256_set1_ps(inv);
                __m256i cs = _mm256_setzero_si256();
                for (int64_t j = c0; j < c1; j += 32) {
                    __m256i q[4];
                    for (int u = 0; u < 4; u++)
                        q[u] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(pp + j + 8 * u),
                                                                              _mm256_loadu_ps(&t->adv[b][j + 8 * u])),
                                                                vi));
                    const __m256i w8 = _mm256_permutevar8x32_epi32(
                        _mm256_packus_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), perm);
                    _mm256_storeu_si256((__m256i *)&w->w[b][r][j], w8);
                    cs = Q8_DPBUSD(cs, w8, _mm256_loadu_si256((const __m256i *)&t->off[b][j]));
                }
                __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(cs), _mm256_extracti128_si256(cs, 1));
                s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
                s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
                w->corr[b][r][c] = _mm_cvtsi128_si32(s4);
            }
    }
#endif
}

/* The codes of keys j .. j+3 of block b (vb: the block's codes in row 0, row stride rb; keys >= n
 * read as zeros), XORed with their negation masks, interleaved: cv[u] lane = column, its 4 bytes the
 * 4 keys (q4_0: columns 4u'.. of the nibbles, see aq8_pv_chunk; q8_0: columns [0-3 | 16-19], ...). */
AQ8_INLINE void aq8_pv_codes(const int q4, const uint8_t *vb, int64_t rb, int64_t n, int64_t j, const aq8_pvt *t,
                             int64_t b, __m256i cv[4]) {
    const uint8_t *k0 = vb + j * rb, *k1 = k0 + rb, *k2 = k1 + rb, *k3 = k2 + rb;
    if (j + 4 > n) { /* the last keys: rows past the tile may not exist */
        k1 = j + 1 < n ? k1 : aq8_zero;
        k2 = j + 2 < n ? k2 : aq8_zero;
        k3 = j + 3 < n ? k3 : aq8_zero;
    }
    int32_t nmw;
    memcpy(&nmw, &t->nm[b][j], 4);
    const __m256i m = _mm256_set1_epi32(nmw);
    if (q4) {
        const __m128i x0 = _mm_loadu_si128((const __m128i *)k0), x1 = _mm_loadu_si128((const __m128i *)k1);
        const __m128i x2 = _mm_loadu_si128((const __m128i *)k2), x3 = _mm_loadu_si128((const __m128i *)k3);
        const __m128i a = _mm_unpacklo_epi8(x0, x1), e = _mm_unpackhi_epi8(x0, x1);
        const __m128i f = _mm_unpacklo_epi8(x2, x3), g = _mm_unpackhi_epi8(x2, x3);
        const __m256i y01 = _mm256_xor_si256(_mm256_set_m128i(_mm_unpackhi_epi16(a, f), _mm_unpacklo_epi16(a, f)), m);
        const __m256i y23 = _mm256_xor_si256(_mm256_set_m128i(_mm_unpackhi_epi16(e, g), _mm_unpacklo_epi16(e, g)), m);
        const __m256i m4 = _mm256_set1_epi8(15);
        cv[0] = _mm256_and_si256(y01, m4);
        cv[1] = _mm256_and_si256(y23, m4);
        cv[2] = _mm256_and_si256(_mm256_srli_epi16(y01, 4), m4);
        cv[3] = _mm256_and_si256(_mm256_srli_epi16(y23, 4), m4);
    } else {
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)k0), x1 = _mm256_loadu_si256((const __m256i *)k1);
        const __m256i x2 = _mm256_loadu_si256((const __m256i *)k2), x3 = _mm256_loadu_si256((const __m256i *)k3);
        const __m256i a = _mm256_unpacklo_epi8(x0, x1), e = _mm256_unpackhi_epi8(x0, x1);
        const __m256i f = _mm256_unpacklo_epi8(x2, x3), g = _mm256_unpackhi_epi8(x2, x3);
        /* columns [0-3 | 16-19], [4-7 | 20-23], [8-11 | 24-27], [12-15 | 28-31] */
        cv[0] = _mm256_xor_si256(_mm256_unpacklo_epi16(a, f), m);
        cv[1] = _mm256_xor_si256(_mm256_unpackhi_epi16(a, f), m);
        cv[2] = _mm256_xor_si256(_mm256_unpacklo_epi16(e, g), m);
        cv[3] = _mm256_xor_si256(_mm256_unpackhi_epi16(e, g), m);
    }
}

/* Rows [0, R) of O (row stride d), block b's 32 columns, += the keys [j0, j1) of chunk c (j1 a
 * multiple of 4, keys >= n read as zeros with weight 0). AVX2's q4_0: vpmaddubsw's pairs (w x <=
 * 2 * 255 * 15 = 7650) summed over 4 steps (16 keys) in 16 bits (<= 30600: exact), then one
 * vpmaddwd: the same integer sums as Q8_DPBUSD per step. */
AQ8_INLINE void aq8_pv_chunk(const int q4, const int R, const uint8_t *V, int64_t rb, int64_t n, int64_t b, int64_t c,
                             int64_t j0, int64_t j1, const aq8_pvt *t, const aq8_pvw *w, float *O, int64_t d) {
    const int64_t bb = q4 ? 18 : 34;
    __m256i acc[AQ8_ROWS][4];
    for (int r = 0; r < R; r++)
        for (int u = 0; u < 4; u++) acc[r][u] = _mm256_set1_epi32(-w->corr[b][r][c]);
    const uint8_t *vb = V + b * bb + 2;
    if (q4 && !AQ8_VNNI) {
        const __m256i one = _mm256_set1_epi16(1);
        for (int64_t js = j0; js < j1; js += 16) {
            const int64_t je = js + 16 < j1 ? js + 16 : j1;
            __m256i h[AQ8_ROWS][4];
            for (int r = 0; r < R; r++)
                for (int u = 0; u < 4; u++) h[r][u] = _mm256_setzero_si256();
            for (int64_t j = js; j < je; j += 4) {
                __m256i cv[4];
                aq8_pv_codes(q4, vb, rb, n, j, t, b, cv);
                for (int r = 0; r < R; r++) {
                    int32_t ww;
                    memcpy(&ww, &w->w[b][r][j], 4);
                    const __m256i wv = _mm256_set1_epi32(ww);
                    for (int u = 0; u < 4; u++) {
                        const __m256i pr = _mm256_maddubs_epi16(wv, cv[u]);
                        h[r][u] = _mm256_add_epi16(h[r][u], pr);
                    }
                }
            }
            for (int r = 0; r < R; r++)
                for (int u = 0; u < 4; u++) acc[r][u] = _mm256_add_epi32(acc[r][u], _mm256_madd_epi16(h[r][u], one));
        }
    } else {
        for (int64_t j = j0; j < j1; j += 4) {
            __m256i cv[4];
            aq8_pv_codes(q4, vb, rb, n, j, t, b, cv);
            for (int r = 0; r < R; r++) {
                int32_t ww;
                memcpy(&ww, &w->w[b][r][j], 4);
                const __m256i wv = _mm256_set1_epi32(ww);
                for (int u = 0; u < 4; u++) acc[r][u] = Q8_DPBUSD(acc[r][u], wv, cv[u]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        const __m256 s = _mm256_set1_ps(w->s[b][r][c]);
        __m256 f[4];
        for (int u = 0; u < 4; u++) f[u] = _mm256_cvtepi32_ps(acc[r][u]);
        if (!q4) {
            const __m256 f0 = f[0], f1 = f[1], f2 = f[2], f3 = f[3];
            f[0] = _mm256_permute2f128_ps(f0, f1, 0x20);
            f[1] = _mm256_permute2f128_ps(f2, f3, 0x20);
            f[2] = _mm256_permute2f128_ps(f0, f1, 0x31);
            f[3] = _mm256_permute2f128_ps(f2, f3, 0x31);
        }
        float *o = O + r * d + b * 32;
        for (int u = 0; u < 4; u++) _mm256_storeu_ps(o + 8 * u, _mm256_fmadd_ps(f[u], s, _mm256_loadu_ps(o + 8 * u)));
    }
}

#if AQ8_VNNI
/* aq8_pv_chunk on 512-bit registers (AVX512-VNNI): 2 vectors of 16 columns per row. The 4 keys'
 * codes of the block put into 128-bit lanes (q4_0: lane k = key k's 16 bytes; q8_0: two registers
 * of two keys' 32 bytes), one dword permutation (lane m, dword k = key k's bytes 4m .. 4m+3) and a
 * 4 x 4 byte transpose in every lane (vpshufb): dword i = byte i of the 4 keys, in key order
 * (q4_0: then split into its nibbles, columns i and 16 + i). */
/* The q8_0 interleave of 4 keys' 32 codes each (A: keys 0 | 1, B: keys 2 | 3, 32 bytes a key) XOR the
 * keys' negation mask m: dword t of cv[h] = the 4 keys' codes of column 16 h + t, in key order. */
AQ8_INLINE void aq8_interleave4(__m512i A, __m512i B, __m512i m, __m512i cv[2]) {
    const __m512i bt = _mm512_set4_epi32(0x0f0b0703, 0x0e0a0602, 0x0d090501, 0x0c080400); /* 4 x 4 byte transpose */
    const __m512i p8a = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
    const __m512i p8b = _mm512_add_epi32(p8a, _mm512_set1_epi32(4));
    cv[0] = _mm512_xor_si512(_mm512_shuffle_epi8(_mm512_permutex2var_epi32(A, p8a, B), bt), m);
    cv[1] = _mm512_xor_si512(_mm512_shuffle_epi8(_mm512_permutex2var_epi32(A, p8b, B), bt), m);
}

/* acc[r] += the 4 weights of keys j .. j+3 (row r, block b) dotted with cv, rows r < R. */
AQ8_INLINE void aq8_pv_dot4(const int R, __m512i acc[][2], const __m512i cv[2], const aq8_pvw *w, int64_t b, int64_t j) {
    for (int r = 0; r < R; r++) {
        int32_t ww;
        memcpy(&ww, &w->w[b][r][j], 4);
        const __m512i wv = _mm512_set1_epi32(ww);
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], wv, cv[0]);
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], wv, cv[1]);
    }
}

/* O[r][32 b + t] += s_r acc[r] (columns in natural order), rows r < R, chunk c's scale s. */
AQ8_INLINE void aq8_pv_store512(const int R, __m512i acc[][2], const aq8_pvw *w, int64_t b, int64_t c, float *O, int64_t d) {
    for (int r = 0; r < R; r++) {
        const __m512 s = _mm512_set1_ps(w->s[b][r][c]);
        float *o = O + r * d + b * 32;
        _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][0]), s, _mm512_loadu_ps(o)));
        _mm512_storeu_ps(o + 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][1]), s, _mm512_loadu_ps(o + 16)));
    }
}

AQ8_INLINE void aq8_pv_chunk512(const int q4, const int R, const uint8_t *V, int64_t rb, int64_t n, int64_t b, int64_t c,
                                int64_t j0, int64_t j1, const aq8_pvt *t, const aq8_pvw *w, float *O, int64_t d) {
    const int64_t bb = q4 ? 18 : 34;
    __m512i acc[AQ8_ROWS][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_set1_epi32(-w->corr[b][r][c]);
    const uint8_t *vb = V + b * bb + 2;
    const __m512i bt = _mm512_set4_epi32(0x0f0b0703, 0x0e0a0602, 0x0d090501, 0x0c080400); /* 4 x 4 byte transpose */
    const __m512i p4 = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (int64_t j = j0; j < j1; j += 4) {
        const uint8_t *k0 = vb + j * rb, *k1 = k0 + rb, *k2 = k1 + rb, *k3 = k2 + rb;
        if (j + 4 > n) { /* the last keys: rows past the tile may not exist */
            k1 = j + 1 < n ? k1 : aq8_zero;
            k2 = j + 2 < n ? k2 : aq8_zero;
            k3 = j + 3 < n ? k3 : aq8_zero;
        }
        int32_t nmw;
        memcpy(&nmw, &t->nm[b][j], 4);
        const __m512i m = _mm512_set1_epi32(nmw);
        __m512i cv[2];
        if (q4) {
            __m512i x = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)k0));
            x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)k1), 1);
            x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)k2), 2);
            x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)k3), 3);
            const __m512i y = _mm512_xor_si512(_mm512_shuffle_epi8(_mm512_permutexvar_epi32(p4, x), bt), m);
            const __m512i m4 = _mm512_set1_epi8(15);
            cv[0] = _mm512_and_si512(y, m4);
            cv[1] = _mm512_and_si512(_mm512_srli_epi16(y, 4), m4);
        } else {
            const __m512i A = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)k0)),
                                                 _mm256_loadu_si256((const __m256i *)k1), 1);
            const __m512i B = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)k2)),
                                                 _mm256_loadu_si256((const __m256i *)k3), 1);
            aq8_interleave4(A, B, m, cv);
        }
        aq8_pv_dot4(R, acc, cv, w, b, j);
    }
    aq8_pv_store512(R, acc, w, b, c, O, d);
}
#define AQ8_PV_CHUNK aq8_pv_chunk512
#else
#define AQ8_PV_CHUNK aq8_pv_chunk
#endif

/* The integer P.V (../attention_q8.h); 0 (nothing done) for other dtypes, d > 256, n > 256, or a tile
 * with a non-finite P or V block scale (the caller's f32 kernel keeps their NaN / inf semantics). */
static int aq8_pv(kvs_dtype dt, const void *V_, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n, int64_t d,
                  float *O) {
    if ((dt != KVS_Q4_0 && dt != KVS_Q8_0) || d > AQ8_PV_MAXD || n > AQ8_PV_MAXN || d % 32 || n <= 0) return 0;
    const uint8_t *V = V_;
    const int q4 = dt == KVS_Q4_0;
    const int64_t nb = d / 32, n4 = (n + 3) & ~(int64_t)3;
    /* vpmaddubsw sums two u8 x s8 products in 16 bits: q8_0's codes (up to 128 in size) take 7-bit weights */
    const int wmax = (!q4 && !AQ8_VNNI) ? 127 : 255;
    for (int64_t r = 0; r < M; r++) { /* NaN in P (NaN logits): the f32 kernel */
        const float *p = P + r * ldp;
        __m256 un = _mm256_setzero_ps();
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            const __m256 x = _mm256_loadu_ps(p + j);
            un = _mm256_or_ps(un, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        }
        if (!_mm256_testz_ps(un, un)) return 0;
        for (; j < n; j++)
            if (p[j] != p[j]) return 0;
    }
    aq8_pvt t;
    if (!aq8_pv_tile(q4, V, rb, n, nb, &t)) return 0;
    aq8_pvw w;
    for (int64_t r0 = 0; r0 < M; r0 += AQ8_ROWS) {
        const int R = M - r0 < AQ8_ROWS ? (int)(M - r0) : AQ8_ROWS;
        aq8_pv_weights(q4, R, P + r0 * ldp, ldp, &t, n, nb, wmax, &w);
        float *o = O + r0 * d;
        for (int64_t b = 0; b < nb; b++)
            for (int64_t c0 = 0, c = 0; c0 < n4; c0 += AQ8_PV_CH, c++) {
                const int64_t c1 = c0 + AQ8_PV_CH < n4 ? c0 + AQ8_PV_CH : n4;
#define AQ8_PVC(Q4, RR) AQ8_PV_CHUNK((Q4), (RR), V, rb, n, b, c, c0, c1, &t, &w, o, d)
                if (R == AQ8_ROWS) {
                    if (q4) AQ8_PVC(1, AQ8_ROWS);
                    else AQ8_PVC(0, AQ8_ROWS);
                } else if (R == 1) {
                    if (q4) AQ8_PVC(1, 1);
                    else AQ8_PVC(0, 1);
#if AQ8_ROWS > 2
                } else if (R == 2) {
                    if (q4) AQ8_PVC(1, 2);
                    else AQ8_PVC(0, 2);
                } else {
                    if (q4) AQ8_PVC(1, 3);
                    else AQ8_PVC(0, 3);
#endif
                }
#undef AQ8_PVC
            }
    }
    return 1;
}

/* ---- qh8 (the 8-bit read of QuantSpec's hierarchical cache) and q4_1 (its 4-bit view) ---------
 * (contract and error bounds: ../attention_q8.h, "qh8 and q4_1".) Each tile is first repacked into
 * the blocks the kernels above read, in the caller's scratch (L1/L2-resident: 256 keys x 4 blocks
 * of 34 bytes at head_dim 128), with the per-(block, key) constant cst that the repacked value
 * leaves out:
 *   qh8:  x8 = m + (d/16)(u - 7.5) = (d/16) x + cst, x = u - 128 (a q8_0 code: u XOR 0x80),
 *         cst = m + 120.5 d/16; the q8_0 block keeps qh8's f16 d (16 times the step), so Q.K^T
 *         runs with scale / 16 and P.V on 16 O (both exact powers of two);
 *   q4_1: x = d c + m = d (c - 8) + cst, the nibbles c unchanged (a q4_0 block), cst = m + 8 d.
 * The constant's share is added in f32: S[r][j] += scale sum_b cst_jb dq_rb sum_{i in b} qq_ri
 * (the query codes' block sums) and O[r][b*32 + t] += sum_j P[r][j] cst_jb. */

/* Repacks the n rows (n <= AQ8_PV_MAXN) of a qh8 tile (lo != NULL: upper q4_1 plane at K, row
 * stride rb, lower plane at lo, row stride nb * 16) or of a q4_1 tile (lo NULL) into q8_0 / q4_0
 * rows at dst (row stride nb * 34 / nb * 18) and cst[b * AQ8_PV_MAXN + j] (f32; keys n .. n + 7
 * set to 0). */
static void aq8h_repack(const uint8_t *K, const uint8_t *lo, int64_t rb, int64_t n, int64_t nb, uint8_t *dst,
                        float *cst) {
    const int h8 = lo != NULL;
    const int64_t ob = h8 ? 34 : 18, orb = nb * ob;
    uint16_t dh[AQ8_PV_MAXD / 32][AQ8_PV_MAXN + 8], mh[AQ8_PV_MAXD / 32][AQ8_PV_MAXN + 8];
    const __m128i m4 = _mm_set1_epi8(15), x80 = _mm_set1_epi8((char)0x80);
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *k = K + j * rb, *l = h8 ? lo + j * nb * 16 : NULL;
        uint8_t *o = dst + j * orb;
        /* the next tile's rows (AQ8_PV_MAXN = the attention's 256-key tile; prefetches never fault) */
        for (int64_t e = 0; e < rb; e += 64) _mm_prefetch((const char *)(k + AQ8_PV_MAXN * rb + e), _MM_HINT_T1);
        if (h8)
            for (int64_t e = 0; e < nb * 16; e += 64) _mm_prefetch((const char *)(l + AQ8_PV_MAXN * nb * 16 + e), _MM_HINT_T1);
        for (int64_t b = 0; b < nb; b++, k += 20, o += ob) {
            memcpy(&dh[b][j], k, 2);
            memcpy(&mh[b][j], k + 2, 2);
            memcpy(o, k, 2); /* the f16 d */
            const __m128i hi = _mm_loadu_si128((const __m128i *)(k + 4));
            if (h8) {
                const __m128i lv = _mm_loadu_si128((const __m128i *)(l + 16 * b));
                /* u(i) = 16 hi(i) + lo(i): values 0..15 from the low nibbles, 16..31 from the high ones */
                const __m128i u0 = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(hi, m4), 4), _mm_and_si128(lv, m4));
                const __m128i u1 = _mm_or_si128(_mm_andnot_si128(m4, hi), _mm_and_si128(_mm_srli_epi16(lv, 4), m4));
                _mm_storeu_si128((__m128i *)(o + 2), _mm_xor_si128(u0, x80));
                _mm_storeu_si128((__m128i *)(o + 18), _mm_xor_si128(u1, x80));
            } else {
                _mm_storeu_si128((__m128i *)(o + 2), hi);
            }
        }
    }
    const __m256 cd = _mm256_set1_ps(h8 ? 7.53125f : 8.0f); /* 120.5 / 16, 8 */
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t j = n; j < ((n + 7) & ~(int64_t)7); j++) dh[b][j] = mh[b][j] = 0;
        for (int64_t j = 0; j < n; j += 8) {
            const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)&dh[b][j]));
            const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)&mh[b][j]));
            _mm256_storeu_ps(cst + b * AQ8_PV_MAXN + j, _mm256_fmadd_ps(cd, dv, mv)); /* as aq8h_pv_inplace: the same bits */
        }
    }
}

/* qh8 P.V in place up to this many rows (one pass of aq8h_pv_chunk512 per group of 4 rows forms the
 * codes again; past it the tile is repacked once) */
#ifndef AQ8H_PV_INPLACE_ROWS
#define AQ8H_PV_INPLACE_ROWS 4
#endif

/* The scratch a qh8 / q4_1 tile of nb blocks a row takes (bytes): the repacked rows (up to
 * AQ8_PV_MAXN), then cst [nb][AQ8_PV_MAXN]: 256 x 38 nb bytes, within 256 x head_dim floats. */
#define AQ8H_CST_OFF(nb) (AQ8_PV_MAXN * (nb) * 34)
#define AQ8H_SCRATCH(nb) (AQ8H_CST_OFF(nb) + (nb) * AQ8_PV_MAXN * 4)

#if AQ8_VNNI
/* The 16 keys [j, j + 16) of a q4_1 (L NULL) or qh8 (L: the lower plane, row stride nb * 16) tile
 * against rows [r0, r0 + R), read in place (VNNI; no repacking): the upper planes' 16 code bytes of
 * 16 keys transposed as q4_0's in aq8_tile16 (lane p = key p), for qh8 the lower plane's likewise,
 * and the 8-bit codes u = 16 hi + lo of 4 values a lane formed by one vpternlogd per vector (q4_1:
 * the nibbles c); vpdpbusd with the query word (u <= 255 unsigned, q codes signed; no offset), then
 * per (row, block) acc += p * (step_k dq) + cst'_k (dq sum qq): step sk = d (q4_1) or d / 16 (qh8),
 * cst' ck = m (q4_1) or m - 7.5 d / 16 (qh8), both [block][key] f32 (x = step * code + cst'); qs
 * [r][b] = dq_rb sum_i qq_ri. */
AQ8_INLINE void aq8h_tile16(const int h8, const int R, const uint8_t *K, const uint8_t *L, int64_t rb,
                            const kvs_att_q8 *Q, int64_t r0, int64_t j, float scale, float *S, int64_t lds,
                            const float (*sk)[AQ8_PV_MAXN], const float (*ck)[AQ8_PV_MAXN], const float *qs) {
    const int64_t d = Q->d, nb = d / 32, lb = nb * 16;
    __m512 acc[4];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    if (r0 == 0) { /* once per key: this tile's V rows, the next tile's K rows (never faults) */
        if (Q->pf)
            for (int64_t o = 0; o < 16 * Q->pf_rb; o += 64) _mm_prefetch((const char *)(Q->pf + j * Q->pf_rb + o), _MM_HINT_T0);
        for (int64_t o = 0; o < 16 * rb; o += 64) _mm_prefetch((const char *)(K + (j + 256) * rb + o), _MM_HINT_T1);
        if (h8)
            for (int64_t o = 0; o < 16 * lb; o += 64) _mm_prefetch((const char *)(L + (j + 256) * lb + o), _MM_HINT_T1);
    }
    const __m512i m4 = _mm512_set1_epi8(15), hm = _mm512_set1_epi8((char)0xF0);
    for (int64_t b = 0; b < nb; b++) {
        __m512i t[4], tl[4], cu[8];
        for (int pl = 0; pl < 1 + h8; pl++) {
            const uint8_t *k0 = pl ? L + j * lb + b * 16 : K + j * rb + b * 20 + 4;
            const int64_t st = pl ? lb : rb;
            __m512i x[4];
            for (int m = 0; m < 4; m++) {
                __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(k0 + m * st)));
                v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(k0 + (m + 4) * st)), 1);
                v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(k0 + (m + 8) * st)), 2);
                x[m] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(k0 + (m + 12) * st)), 3);
            }
            const __m512i a0 = _mm512_unpacklo_epi32(x[0], x[1]), a1 = _mm512_unpackhi_epi32(x[0], x[1]);
            const __m512i a2 = _mm512_unpacklo_epi32(x[2], x[3]), a3 = _mm512_unpackhi_epi32(x[2], x[3]);
            __m512i *tt = pl ? tl : t;
            tt[0] = _mm512_unpacklo_epi64(a0, a2), tt[1] = _mm512_unpackhi_epi64(a0, a2);
            tt[2] = _mm512_unpacklo_epi64(a1, a3), tt[3] = _mm512_unpackhi_epi64(a1, a3);
        }
        for (int g = 0; g < 4; g++) {
            if (h8) { /* hm ? a : b (vpternlogd 0xCA) */
                cu[g] = _mm512_ternarylogic_epi32(hm, _mm512_slli_epi16(t[g], 4), tl[g], 0xCA);
                cu[g + 4] = _mm512_ternarylogic_epi32(hm, t[g], _mm512_srli_epi16(tl[g], 4), 0xCA);
            } else {
                cu[g] = _mm512_and_si512(t[g], m4);
                cu[g + 4] = _mm512_and_si512(_mm512_srli_epi16(t[g], 4), m4);
            }
        }
        const __m512 skv = _mm512_loadu_ps(&sk[b][j]), ckv = _mm512_loadu_ps(&ck[b][j]);
        for (int r = 0; r < R; r++) {
            const int64_t row = r0 + r;
            const int8_t *qb = Q->q + row * d + b * 32;
            __m512i p[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
            for (int g = 0; g < 8; g++) { /* word g < 4: values 4g.., g >= 4: values 16 + 4(g - 4).. */
                int32_t w;
                memcpy(&w, qb + (g < 4 ? 4 * g : 16 + 4 * (g - 4)), 4);
                p[g & 1] = _mm512_dpbusd_epi32(p[g & 1], cu[g], _mm512_set1_epi32(w));
            }
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(p[0], p[1])),
                                     _mm512_mul_ps(skv, _mm512_set1_ps(Q->dq[row * nb + b])), acc[r]);
            acc[r] = _mm512_fmadd_ps(ckv, _mm512_set1_ps(qs[row * nb + b]), acc[r]);
        }
    }
    const __m512 vs = _mm512_set1_ps(scale);
    for (int r = 0; r < R; r++) _mm512_storeu_ps(S + (r0 + r) * lds + j, _mm512_mul_ps(acc[r], vs));
}
#endif

/* Q.K^T over a qh8 (K_lo given) or q4_1 K (see aq8h_repack): on VNNI the keys in groups of 16 read in
 * place (aq8h_tile16), the rest (AVX2: all) through the repacked blocks and aq8_qk, then the constants. */
static int aq8h_qk(kvs_dtype dt, const void *K_, const void *K_lo, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n,
                   float scale, float *S, int64_t lds, void *scratch) {
    const int64_t d = Q->d, nb = d / 32;
    if (dt != KVS_Q4_1 || d > AQ8_PV_MAXD || d % 32 || n > AQ8_PV_MAXN || n <= 0) return 0;
    const int h8 = K_lo != NULL;
    const uint8_t *K = K_, *Kl = K_lo;
    int64_t j0 = 0; /* keys [0, j0) done in place */
#if AQ8_VNNI
    if (n >= 16) {
        float qs[64 * (AQ8_PV_MAXD / 32)]; /* dq_rb sum_i qq_ri, 64 rows a pass */
        float sk[AQ8_PV_MAXD / 32][AQ8_PV_MAXN], ck[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
        uint16_t dh[AQ8_PV_MAXD / 32][AQ8_PV_MAXN], mh[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
        j0 = n & ~(int64_t)15;
        for (int64_t j = 0; j < j0; j++)
            for (int64_t b = 0; b < nb; b++) {
                memcpy(&dh[b][j], K + j * rb + b * 20, 2);
                memcpy(&mh[b][j], K + j * rb + b * 20 + 2, 2);
            }
        const __m512 c16 = _mm512_set1_ps(0.0625f), c75 = _mm512_set1_ps(7.5f);
        for (int64_t b = 0; b < nb; b++)
            for (int64_t j = 0; j < j0; j += 16) {
                __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&dh[b][j]));
                const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&mh[b][j]));
                if (h8) dv = _mm512_mul_ps(dv, c16);
                _mm512_storeu_ps(&sk[b][j], dv);
                _mm512_storeu_ps(&ck[b][j], h8 ? _mm512_fnmadd_ps(c75, dv, mv) : mv);
            }
        for (int64_t g0 = 0; g0 < M; g0 += 64) {
            const int64_t G = M - g0 < 64 ? M - g0 : 64;
            for (int64_t r = 0; r < G; r++)
                for (int64_t b = 0; b < nb; b++) {
                    const int8_t *qb = Q->q + (g0 + r) * d + b * 32;
                    int32_t sq = 0;
                    for (int i = 0; i < 32; i++) sq += qb[i];
                    qs[(g0 + r) % 64 * nb + b] = Q->dq[(g0 + r) * nb + b] * (float)sq;
                }
            const float *qsr = qs - g0 * nb; /* indexed by the absolute row (qs holds rows g0 ..) */
            for (int64_t r0 = g0; r0 < g0 + G; r0 += 4) {
                const int64_t R = g0 + G - r0 < 4 ? g0 + G - r0 : 4;
#define AQ8H_T16(H8, RR)                                                                               \
    for (int64_t j = 0; j < j0; j += 16) aq8h_tile16((H8), (RR), K, Kl, rb, Q, r0, j, scale, S, lds, sk, ck, qsr)
                if (h8) {
                    switch (R) {
                    case 1: AQ8H_T16(1, 1); break;
                    case 2: AQ8H_T16(1, 2); break;
                    case 3: AQ8H_T16(1, 3); break;
                    default: AQ8H_T16(1, 4); break;
                    }
                } else {
                    switch (R) {
                    case 1: AQ8H_T16(0, 1); break;
                    case 2: AQ8H_T16(0, 2); break;
                    case 3: AQ8H_T16(0, 3); break;
                    default: AQ8H_T16(0, 4); break;
                    }
                }
#undef AQ8H_T16
            }
        }
        if (j0 == n) return 1;
    }
#endif
    /* the keys [j0, n): repacked, through aq8_qk, then the constants */
    const int64_t nt = n - j0;
    uint8_t *rp = scratch;
    float *cst = (float *)(void *)(rp + AQ8H_CST_OFF(nb));
    aq8h_repack(K + j0 * rb, h8 ? Kl + j0 * nb * 16 : NULL, rb, nt, nb, rp, cst);
    if (!aq8_qk(h8 ? KVS_Q8_0 : KVS_Q4_0, rp, nb * (h8 ? 34 : 18), Q, M, nt, h8 ? scale * 0.0625f : scale, S + j0, lds))
        return 0;
    for (int64_t r = 0; r < M; r++) {
        __m256 t[AQ8_PV_MAXD / 32];
        float ts[AQ8_PV_MAXD / 32];
        for (int64_t b = 0; b < nb; b++) { /* scale dq_rb sum_i qq_ri */
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(Q->q + r * d + b * 32));
            const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), qv);
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
            ts[b] = scale * (Q->dq[r * nb + b] * (float)_mm_cvtsi128_si32(s4));
            t[b] = _mm256_set1_ps(ts[b]);
        }
        float *s = S + r * lds + j0;
        int64_t j = 0;
        for (; j + 8 <= nt; j += 8) {
            __m256 a = _mm256_loadu_ps(s + j);
            for (int64_t b = 0; b < nb; b++) a = _mm256_fmadd_ps(_mm256_loadu_ps(cst + b * AQ8_PV_MAXN + j), t[b], a);
            _mm256_storeu_ps(s + j, a);
        }
        for (; j < nt; j++) {
            float a = s[j];
            for (int64_t b = 0; b < nb; b++) a = fmaf(cst[b * AQ8_PV_MAXN + j], ts[b], a);
            s[j] = a;
        }
    }
    return 1;
}

#if AQ8_VNNI
/* aq8_pv_chunk512's q8_0 path for a qh8 V read in place: the 32 codes of a key formed from its
 * upper (V, rows of rb bytes, block b at 20 b + 4) and lower (L, rows of d / 2 bytes) nibbles,
 * u XOR 0x80 = u - 128 as q8_0's signed code, then the same interleave, dpbusd and column order. */
AQ8_INLINE void aq8h_pv_chunk512(const int R, const uint8_t *V, const uint8_t *L, int64_t rb, int64_t n, int64_t b,
                                 int64_t c, int64_t j0, int64_t j1, const aq8_pvt *t, const aq8_pvw *w, float *O, int64_t d) {
    const int64_t lb = d / 2;
    __m512i acc[AQ8_ROWS][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_set1_epi32(-w->corr[b][r][c]);
    const uint8_t *hb = V + b * 20 + 4, *lbp = L + b * 16;
    const __m128i hm = _mm_set1_epi8((char)0xF0), x80 = _mm_set1_epi8((char)0x80);
    for (int64_t j = j0; j < j1; j += 4) {
        __m256i cd[4];
        for (int u = 0; u < 4; u++) {
            const int ok = j + u < n; /* the last keys: rows past the tile may not exist (weight 0) */
            const __m128i hv = _mm_loadu_si128((const __m128i *)(ok ? hb + (j + u) * rb : aq8_zero));
            const __m128i lv = _mm_loadu_si128((const __m128i *)(ok ? lbp + (j + u) * lb : aq8_zero));
            const __m128i u0 = _mm_ternarylogic_epi32(hm, _mm_slli_epi16(hv, 4), lv, 0xCA); /* values 0..15 */
            const __m128i u1 = _mm_ternarylogic_epi32(hm, hv, _mm_srli_epi16(lv, 4), 0xCA); /* 16..31 */
            cd[u] = _mm256_set_m128i(_mm_xor_si128(u1, x80), _mm_xor_si128(u0, x80));
        }
        int32_t nmw;
        memcpy(&nmw, &t->nm[b][j], 4);
        const __m512i m = _mm512_set1_epi32(nmw);
        __m512i cv[2];
        aq8_interleave4(_mm512_inserti64x4(_mm512_castsi256_si512(cd[0]), cd[1], 1),
                        _mm512_inserti64x4(_mm512_castsi256_si512(cd[2]), cd[3], 1), m, cv);
        aq8_pv_dot4(R, acc, cv, w, b, j);
    }
    aq8_pv_store512(R, acc, w, b, c, O, d);
}
#endif

/* O += P.V over a q4_1 V, or on VNNI a qh8 one, in place (no repacking): a q4_1 value d c + m =
 * d (c - 8) + cst is q4_0's code c on scale d plus cst = m + 8 d, a qh8 value (d/16)(u - 128) + cst
 * q8_0's code u - 128 on scale d/16 plus cst = m + 120.5 d/16; the tile's table is aq8_pv_tile's for
 * that type with the scales read from the 20-byte upper blocks (delta = |d|, qh8 |d| / 16), the
 * weights aq8_pv_weights's; q4_1: the q4_0 chunk kernel reads the nibbles of block b at V + 20 b + 4
 * when handed V + 2 b + 2 (it reads V' + 18 b + 2); qh8: aq8h_pv_chunk512. Then the constants.
 * 0 (nothing done: the caller's repacked path) for NaN in P or a non-finite d or m. */
static int aq8h_pv_inplace(const int h8, const uint8_t *V, const uint8_t *L, int64_t rb, const float *P, int64_t ldp,
                           int64_t M, int64_t n, int64_t d, float *O) {
    (void)L; /* (AVX2: q4_1 only) */
    /* np: the keys the table is filled for, zeros past n: on VNNI the whole AQ8_PV_MAXN, as
     * aq8_pv_tile's, since aq8_pv_weights reads whole tiles (0 x an unset adv could be NaN: the
     * weights then depended on stack contents, and the output varied from run to run) */
    const int64_t nb = d / 32, n4 = (n + 3) & ~(int64_t)3, np = AQ8_VNNI ? AQ8_PV_MAXN : (n + 31) & ~(int64_t)31;
    for (int64_t r = 0; r < M; r++) { /* NaN in P (NaN logits): the f32 kernel */
        const float *p = P + r * ldp;
        __m256 un = _mm256_setzero_ps();
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            const __m256 x = _mm256_loadu_ps(p + j);
            un = _mm256_or_ps(un, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        }
        if (!_mm256_testz_ps(un, un)) return 0;
        for (; j < n; j++)
            if (p[j] != p[j]) return 0;
    }
    aq8_pvt t;
    float cst[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
    {
        uint16_t h16[AQ8_PV_MAXD / 32][AQ8_PV_MAXN], m16[AQ8_PV_MAXD / 32][AQ8_PV_MAXN];
        for (int64_t j = 0; j < n; j++)
            for (int64_t b = 0; b < nb; b++) {
                memcpy(&h16[b][j], V + j * rb + b * 20, 2);
                memcpy(&m16[b][j], V + j * rb + b * 20 + 2, 2);
            }
        for (int64_t b = 0; b < nb; b++) {
            __m256i bad = _mm256_setzero_si256();
            for (int64_t j = n; j < np; j++) h16[b][j] = m16[b][j] = 0;
            for (int64_t j = 0; j < np; j += 8) {
                const __m128i h = _mm_loadu_si128((const __m128i *)&h16[b][j]), mh = _mm_loadu_si128((const __m128i *)&m16[b][j]);
                const __m128i neg = _mm_srai_epi16(h, 15);
                const __m128i ah = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
                const __m128i am = _mm_and_si128(mh, _mm_set1_epi16(0x7fff));
                bad = _mm256_or_si256(bad, _mm256_castsi128_si256(_mm_or_si128(_mm_cmpgt_epi16(ah, _mm_set1_epi16(0x7bff)),
                                                                                _mm_cmpgt_epi16(am, _mm_set1_epi16(0x7bff)))));
                /* qh8: delta = |d| / 16, cst = m + 120.5 d / 16; q4_1: |d|, m + 8 d */
                _mm256_storeu_ps(&t.adv[b][j], _mm256_mul_ps(_mm256_cvtph_ps(ah), _mm256_set1_ps(h8 ? 0.0625f : 1.0f)));
                _mm256_storeu_ps(&cst[b][j], _mm256_fmadd_ps(_mm256_set1_ps(h8 ? 7.53125f : 8.0f), _mm256_cvtph_ps(h), _mm256_cvtph_ps(mh)));
                const __m128i m8 = _mm_packs_epi16(neg, neg);
                /* qh8 (the q8_0 kernel's codes): keys in natural order, offset 0 / -1; q4_1 (q4_0's):
                 * offset 8 / 7 */
                _mm_storel_epi64((__m128i *)&t.nm[b][j], m8);
                _mm_storel_epi64((__m128i *)&t.off[b][j], h8 ? m8 : _mm_add_epi8(m8, _mm_set1_epi8(8)));
            }
            if (!_mm256_testz_si256(bad, bad)) return 0;
        }
    }
    aq8_pvw w;
    for (int64_t r0 = 0; r0 < M; r0 += AQ8_ROWS) {
        const int R = M - r0 < AQ8_ROWS ? (int)(M - r0) : AQ8_ROWS;
        aq8_pv_weights(!h8, R, P + r0 * ldp, ldp, &t, n, nb, 255, &w);
        float *o = O + r0 * d;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *Vb = V + 2 * b + 2; /* the chunk kernel reads Vb + 18 b + 2 = V + 20 b + 4 */
            for (int64_t c0 = 0, c = 0; c0 < n4; c0 += AQ8_PV_CH, c++) {
                const int64_t c1 = c0 + AQ8_PV_CH < n4 ? c0 + AQ8_PV_CH : n4;
#if AQ8_VNNI
#define AQ8H_PVC(RR)                                                                                   \
    do {                                                                                               \
        if (h8) aq8h_pv_chunk512((RR), V, L, rb, n, b, c, c0, c1, &t, &w, o, d);                       \
        else AQ8_PV_CHUNK(1, (RR), Vb, rb, n, b, c, c0, c1, &t, &w, o, d);                             \
    } while (0)
#else
#define AQ8H_PVC(RR) AQ8_PV_CHUNK(1, (RR), Vb, rb, n, b, c, c0, c1, &t, &w, o, d)
#endif
                if (R == AQ8_ROWS) AQ8H_PVC(AQ8_ROWS);
                else if (R == 1) AQ8H_PVC(1);
#if AQ8_ROWS > 2
                else if (R == 2) AQ8H_PVC(2);
                else AQ8H_PVC(3);
#endif
#undef AQ8H_PVC
            }
        }
    }
    for (int64_t r = 0; r < M; r++) { /* sum_j P[r][j] cst_jb, added to the block's 32 columns */
        const float *p = P + r * ldp;
        for (int64_t b = 0; b < nb; b++) {
            __m256 a = _mm256_setzero_ps();
            int64_t j = 0;
            for (; j + 8 <= n; j += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(p + j), _mm256_loadu_ps(&cst[b][j]), a);
            float sc = aq8_hsum(a);
            for (; j < n; j++) sc = fmaf(p[j], cst[b][j], sc);
            const __m256 sv = _mm256_set1_ps(sc);
            float *oo = O + r * d + b * 32;
            for (int u = 0; u < 4; u++) _mm256_storeu_ps(oo + 8 * u, _mm256_add_ps(_mm256_loadu_ps(oo + 8 * u), sv));
        }
    }
    return 1;
}

/* O += P.V over a qh8 (V_lo given) or q4_1 V: the repacked tile through pv (the ISA's q8_0 / q4_0
 * P.V with its f32 fallback), then the constants. 0 (nothing done) for other types and sizes. */
static int aq8h_pv(kvs_dtype dt, const void *V, const void *V_lo, int64_t rb, const float *P, int64_t ldp, int64_t M,
                   int64_t n, int64_t d, float *O, void *scratch,
                   int (*pv)(kvs_dtype, const void *, int64_t, const float *, int64_t, int64_t, int64_t, int64_t, float *)) {
    const int64_t nb = d / 32;
    if (dt != KVS_Q4_1 || d > AQ8_PV_MAXD || d % 32 || n > AQ8_PV_MAXN || n <= 0) return 0;
    const int h8 = V_lo != NULL;
    if ((!h8 || (AQ8_VNNI && M <= AQ8H_PV_INPLACE_ROWS)) && aq8h_pv_inplace(h8, V, V_lo, rb, P, ldp, M, n, d, O)) return 1;
    uint8_t *rp = scratch;
    float *cst = (float *)(void *)(rp + AQ8H_CST_OFF(nb));
    aq8h_repack(V, V_lo, rb, n, nb, rp, cst);
    const __m256 x16 = _mm256_set1_ps(16.0f), i16 = _mm256_set1_ps(0.0625f);
    if (h8) /* the kernel multiplies by the q8_0 block's d = 16 steps: O scaled by 16 around it (exact) */
        for (int64_t e = 0; e < M * d; e += 8) _mm256_storeu_ps(O + e, _mm256_mul_ps(_mm256_loadu_ps(O + e), x16));
    const int ok = pv(h8 ? KVS_Q8_0 : KVS_Q4_0, rp, nb * (h8 ? 34 : 18), P, ldp, M, n, d, O);
    if (h8)
        for (int64_t e = 0; e < M * d; e += 8) _mm256_storeu_ps(O + e, _mm256_mul_ps(_mm256_loadu_ps(O + e), i16));
    if (!ok) return 0; /* (not reached: pv takes every tile of these sizes) */
    for (int64_t r = 0; r < M; r++) {
        const float *p = P + r * ldp;
        for (int64_t b = 0; b < nb; b++) { /* sum_j P[r][j] cst_jb, added to the block's 32 columns */
            const float *cb = cst + b * AQ8_PV_MAXN;
            __m256 a = _mm256_setzero_ps();
            int64_t j = 0;
            for (; j + 8 <= n; j += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(p + j), _mm256_loadu_ps(cb + j), a);
            float sc = aq8_hsum(a);
            for (; j < n; j++) sc = fmaf(p[j], cb[j], sc);
            const __m256 sv = _mm256_set1_ps(sc);
            float *o = O + r * d + b * 32;
            for (int u = 0; u < 4; u++) _mm256_storeu_ps(o + 8 * u, _mm256_add_ps(_mm256_loadu_ps(o + 8 * u), sv));
        }
    }
    return 1;
}
