/* CPU backend, x86: decode attention's S = Q.K^T over a q8_0 / q4_0 K on 8-bit query codes
 * (contract, scheme and error bound: ../attention_q8.h), written once on 256-bit registers and
 * included by quant_vnni.c (AVX512-VNNI + VL: vpdpbusd, AQ8_VNNI 1, 4 query rows in registers) and
 * quant_avx2.c (vpmaddubsw + vpmaddwd, AQ8_VNNI 0, 2 rows: 16 registers), after quant_q8.h, whose
 * Q8_DPBUSD(acc, u8, s8) they define. Not a public header; no include guard on purpose.
 *
 * K codes as unsigned bytes (q4_0: the nibbles 0..15; q8_0 on VNNI: code + 128 by an XOR; on AVX2:
 * |code|, the query taking the code's sign), the offset's share (-off * the query codes' sums) as the
 * integer start value. Main path (aq8_tile8, VNNI and AVX2's q4_0): 8 keys a step, each block of the 8
 * keys transposed in registers so that lane l is key l: 8 dot products of 4 codes against the query
 * word broadcast, then one conversion and one FMA by the 8 keys' d_k times dq per (row, block); no
 * horizontal sums. Tails (fewer than 8 keys) and AVX2's q8_0 (aq8_tile: 4 keys a step, a block per
 * register per key, the 8 integer lanes converted and FMA'd by d_k dq into one accumulator per (row,
 * key), the four horizontal sums of a row together at the end). */

#define AQ8_INLINE static inline __attribute__((always_inline))

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

/* Rows [r0, r0 + R) against keys [j, j + NK) (R <= AQ8_ROWS, NK 4 or 1: constants after inlining);
 * q4: K is q4_0 (else q8_0). */
AQ8_INLINE void aq8_tile(const int q4, const int R, const int NK, const uint8_t *K, int64_t rb, const kvs_att_q8 *Q,
                         int64_t r0, int64_t j, float scale, float *S, int64_t lds) {
    const int64_t d = Q->d, nb = d / 32, bb = q4 ? 18 : 34;
    __m256 acc[AQ8_ROWS][4];
    for (int r = 0; r < R; r++)
        for (int u = 0; u < NK; u++) acc[r][u] = _mm256_setzero_ps();
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
            const __m256i cv = _mm256_loadu_si256((const __m256i *)(Q->corr + row * (d / 4) + b * 8));
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
    __m256 acc[AQ8_ROWS];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    if (Q->pf && r0 == 0) /* once per key (the first row group) */
        for (int64_t o = 0; o < 8 * Q->pf_rb; o += 64) _mm_prefetch((const char *)(Q->pf + j * Q->pf_rb + o), _MM_HINT_T0);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *k0 = K + j * rb + b * bb;
        __m256i cu[8], cs[8]; /* cu[g]: unsigned codes of word g (values 4g .. 4g+3), cs: signed (AVX2 q8_0) */
        const __m128i h16 = _mm_setr_epi16((short)(k0[0] | k0[1] << 8), (short)(k0[rb] | k0[rb + 1] << 8),
                                           (short)(k0[2 * rb] | k0[2 * rb + 1] << 8), (short)(k0[3 * rb] | k0[3 * rb + 1] << 8),
                                           (short)(k0[4 * rb] | k0[4 * rb + 1] << 8), (short)(k0[5 * rb] | k0[5 * rb + 1] << 8),
                                           (short)(k0[6 * rb] | k0[6 * rb + 1] << 8), (short)(k0[7 * rb] | k0[7 * rb + 1] << 8));
        const __m256 dk = _mm256_cvtph_ps(h16);
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
            for (int g = 0; g < 8; g++)
                cu[g] = AQ8_VNNI ? _mm256_xor_si256(cs[g], _mm256_set1_epi8((char)0x80)) : _mm256_sign_epi8(cs[g], cs[g]);
        }
        for (int r = 0; r < R; r++) {
            const int64_t row = r0 + r;
            const int32_t *qw = (const int32_t *)(const void *)(Q->q + row * d + b * 32);
            __m256i p = _mm256_set1_epi32(Q->corrb[row * nb + b]);
            for (int g = 0; g < 8; g++) {
                /* q4_0: word g < 4 holds values 4g..4g+3 (low nibbles), g >= 4 values 16 + 4(g-4) .. */
                int32_t w;
                memcpy(&w, q4 ? (const void *)((const int8_t *)qw + (g < 4 ? 4 * g : 16 + 4 * (g - 4))) : (const void *)(qw + g), 4);
                __m256i y = _mm256_set1_epi32(w);
                if (!q4 && !AQ8_VNNI) y = _mm256_sign_epi8(y, cs[g]);
                p = Q8_DPBUSD(p, cu[g], y);
            }
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dk, _mm256_set1_ps(Q->dq[row * nb + b])), acc[r]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
    for (int r = 0; r < R; r++) _mm256_storeu_ps(S + (r0 + r) * lds + j, _mm256_mul_ps(acc[r], vs));
}

#define AQ8_KEYS(Q4, R)                                                                                \
    do {                                                                                               \
        int64_t j = 0;                                                                                 \
        if ((Q4) || AQ8_VNNI) /* AVX2's q8_0 (the sign trick per row and word) keeps 4 keys a step */   \
            for (; j + 8 <= n; j += 8) aq8_tile8((Q4), (R), K, rb, Q, r0, j, scale, S, lds);           \
        for (; j + 4 <= n; j += 4) aq8_tile((Q4), (R), 4, K, rb, Q, r0, j, scale, S, lds);             \
        for (; j < n; j++) aq8_tile((Q4), (R), 1, K, rb, Q, r0, j, scale, S, lds);                     \
    } while (0)

static void aq8_rows(const int q4, const uint8_t *K, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n, float scale,
                     float *S, int64_t lds) {
    for (int64_t r0 = 0; r0 < M; r0 += AQ8_ROWS) {
        const int64_t R = M - r0 < AQ8_ROWS ? M - r0 : AQ8_ROWS;
        if (q4) {
            switch (R) {
            case 1: AQ8_KEYS(1, 1); break;
#if AQ8_ROWS > 2
            case 2: AQ8_KEYS(1, 2); break;
            case 3: AQ8_KEYS(1, 3); break;
            default: AQ8_KEYS(1, 4); break;
#else
            default: AQ8_KEYS(1, 2); break;
#endif
            }
        } else {
            switch (R) {
            case 1: AQ8_KEYS(0, 1); break;
#if AQ8_ROWS > 2
            case 2: AQ8_KEYS(0, 2); break;
            case 3: AQ8_KEYS(0, 3); break;
            default: AQ8_KEYS(0, 4); break;
#else
            default: AQ8_KEYS(0, 2); break;
#endif
            }
        }
    }
}

/* 1 when dt (Q4_0, Q8_0) has the 8-bit kernel and it ran, else 0. */
static int aq8_qk(kvs_dtype dt, const void *K, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n, float scale,
                  float *S, int64_t lds) {
    if (dt != KVS_Q4_0 && dt != KVS_Q8_0) return 0;
    aq8_rows(dt == KVS_Q4_0, (const uint8_t *)K, rb, Q, M, n, scale, S, lds);
    return 1;
}
