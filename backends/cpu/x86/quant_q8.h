/* CPU backend, x86: the 8-bit activation GEMV (contracts and the scheme: ../matmul.h, "8-bit
 * activations") for q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q4_K, q5_K and q6_K weights on 256-bit
 * registers (q2_K, q3_K, iq4_xs: the portable kernel), written once and
 * included by quant_avx2.c (AVX2: vpmaddubsw + vpmaddwd) and quant_vnni.c (AVX512-VNNI with VL:
 * vpdpbusd / vpdpwssd; there only the K types run these, the 32-value types have 512-bit kernels of
 * their own), which define before including it:
 *   Q8_DPBUSD(acc, u, s)  acc (8 x i32) += the sums of 4 adjacent u8 (u) x i8 (s) products;
 *   Q8_DPWSSD(acc, a, b)  acc (8 x i32) += the sums of 2 adjacent i16 x i16 products;
 * and optionally Q8_K_TYPES_ONLY 1 (quant_vnni.c): the 256-bit kernels of the 32-value types are
 * left out (q8_dot then takes the K types, q2_K / q3_K / iq4_xs and any other type to the portable
 * kernel), for a file whose own kernels run those types.
 * (AVX2's vpmaddubsw saturates pairs at i16: every use below stays inside it: |w| <= 128 for q8_0,
 * <= 63 otherwise, |x q| <= 127.)
 * Per block: the integer dot of the W codes with x's codes, times d_w d_x in f32 (FMA into eight f32
 * lanes per x row); q6_K's offset -32 and the K types' mins through x's integer sums of 16 values,
 * q4_1 / q5_1's min through x's s. Not a public header; no include guard on purpose (one inclusion per ISA file). */

/* The 32-value block layouts (quant/quant_blocks.h): bytes per block and the offset of the 4-bit
 * codes qs, per kvs_dtype T (a constant); shared with quant_vnni.c's 512-bit kernels. */
#define Q8_BLOCK_BYTES(T) \
    ((T) == KVS_Q8_0 ? 34 : (T) == KVS_Q4_1 ? 20 : (T) == KVS_Q5_0 ? 22 : (T) == KVS_Q5_1 ? 24 : 18)
#define Q8_QS_OFFSET(T) ((T) == KVS_Q4_1 ? 4 : (T) == KVS_Q5_0 ? 6 : (T) == KVS_Q5_1 ? 8 : 2)

static inline float q8_hsum(__m256 s) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

static inline float q8_f16(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8)); }

#define Q8_LOAD(p) _mm256_loadu_si256((const __m256i *)(p))

#if !Q8_K_TYPES_ONLY
/* One q8_0 block b of the W row (34 bytes at w) into the n rows' accumulators a. */
static inline __attribute__((always_inline)) void q8_blk_q8_0(const uint8_t *w, int64_t b, const kvs_q8_rows *x,
                                                               int64_t n, __m256 *a) {
    const int64_t k = x->k, nb = k / 32;
    const float dw = q8_f16(w);
    const __m256i wq = Q8_LOAD(w + 2), wa = _mm256_sign_epi8(wq, wq); /* |w| as u8, x takes w's sign */
    for (int64_t i = 0; i < n; i++) {
        const __m256i y = _mm256_sign_epi8(Q8_LOAD(x->q + i * k + b * 32), wq);
        const __m256i p = Q8_DPBUSD(_mm256_setzero_si256(), wa, y);
        a[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * x->d[i * nb + b]), a[i]);
    }
}

/* Blocks in pairs, each of the pair into its own accumulators: two FMA chains per row (one chain
 * bounded a one-row GEMV by the FMA latency per block); the same order for every n, so a row's
 * result does not depend on the rows beside it. */
static inline __attribute__((always_inline)) void q8_dot_q8_0(const uint8_t *w, const kvs_q8_rows *x, int64_t n,
                                                               float *acc) {
    const int64_t nb = x->k / 32;
    __m256 a[KVS_GEMV_MAX_N], a2[KVS_GEMV_MAX_N];
    for (int64_t i = 0; i < n; i++) a[i] = a2[i] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2, w += 68) {
        q8_blk_q8_0(w, b, x, n, a);
        q8_blk_q8_0(w + 34, b + 1, x, n, a2);
    }
    if (b < nb) q8_blk_q8_0(w, b, x, n, a);
    for (int64_t i = 0; i < n; i++) acc[i] = q8_hsum(_mm256_add_ps(a[i], a2[i]));
}

/* The 32-value types but q8_0: q4_1 / q5_1 codes as u8 (0..15, 0..31) with the min through x's s;
 * q4_0 / q5_0 codes minus their offset (8, 16) and iq4_nl's table values as i8, with q8_0's sign trick.
 * One block b (at w) into the n rows' accumulators a and min sums c. T: the kvs_dtype, a constant. */
static inline __attribute__((always_inline)) void q8_blk_b32(const uint8_t *w, int64_t b, const kvs_q8_rows *x,
                                                              int64_t n, __m256 *a, float *c, const kvs_dtype T) {
    const int64_t k = x->k, nb = k / 32;
    const int five = T == KVS_Q5_0 || T == KVS_Q5_1, has_min = T == KVS_Q4_1 || T == KVS_Q5_1;
    const int qoff = Q8_QS_OFFSET(T);
    const float off = T == KVS_Q4_0 ? 8.0f : T == KVS_Q5_0 ? 16.0f : 0.0f;
    const __m256i m4 = _mm256_set1_epi8(15);
    const float dw = q8_f16(w), mw = has_min ? q8_f16(w + 2) : 0.0f;
    const __m128i v = _mm_loadu_si128((const __m128i *)(w + qoff));
    __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
    if (five) { /* bit i of qh -> bit 4 of value i: byte i of qh's bytes spread 8 ways, tested per bit */
        const __m256i bsel = _mm256_set_epi8(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0,
                                             0, 0, 0, 0, 0, 0);
        const __m256i bbit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
        uint32_t qh;
        memcpy(&qh, w + (T == KVS_Q5_1 ? 4 : 2), 4);
        const __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), bsel);
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bbit), bbit);
        q = _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
    }
    /* signed codes (q4_0, q5_0: code - offset; iq4_nl: the table values): |w| as u8, x takes w's sign */
    const int sgn = !has_min;
    if (T == KVS_IQ4_NL) q = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvs_iq4_values)), q);
    else if (sgn) q = _mm256_sub_epi8(q, _mm256_set1_epi8((char)off));
    const __m256i wa = sgn ? _mm256_sign_epi8(q, q) : q;
    for (int64_t i = 0; i < n; i++) {
        __m256i y = Q8_LOAD(x->q + i * k + b * 32);
        if (sgn) y = _mm256_sign_epi8(y, q);
        const __m256i p = Q8_DPBUSD(_mm256_setzero_si256(), wa, y);
        a[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * x->d[i * nb + b]), a[i]);
        if (has_min) c[i] += mw * x->s[i * nb + b];
    }
}

/* Blocks in pairs into two accumulator sets (two FMA chains per row), as q8_dot_q8_0. */
static inline __attribute__((always_inline)) void q8_dot_b32(const uint8_t *w, const kvs_q8_rows *x, int64_t n,
                                                              float *acc, const kvs_dtype T) {
    const int64_t nb = x->k / 32;
    const int bb = Q8_BLOCK_BYTES(T);
    __m256 a[KVS_GEMV_MAX_N], a2[KVS_GEMV_MAX_N];
    float c[KVS_GEMV_MAX_N] = {0}; /* the min's share, summed per row */
    for (int64_t i = 0; i < n; i++) a[i] = a2[i] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2, w += 2 * bb) {
        q8_blk_b32(w, b, x, n, a, c, T);
        q8_blk_b32(w + bb, b + 1, x, n, a2, c, T);
    }
    if (b < nb) q8_blk_b32(w, b, x, n, a, c, T);
    for (int64_t i = 0; i < n; i++) acc[i] = q8_hsum(_mm256_add_ps(a[i], a2[i])) + c[i];
}

#endif /* !Q8_K_TYPES_ONLY */

/* q4_K, and q5_K (five = 1: qh[32] @16 gives bit 4 of value 32j + l as bit j of qh[l]; qs @48) */
static inline __attribute__((always_inline)) void q8_dot_k45(const uint8_t *w, const kvs_q8_rows *x, int64_t n,
                                                              float *acc, const int five) {
    const int64_t k = x->k, nsb = k / 256;
    const int bb = five ? 176 : 144, qoff = five ? 48 : 16;
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 a[KVS_GEMV_MAX_N], mm[KVS_GEMV_MAX_N];
    for (int64_t i = 0; i < n; i++) a[i] = mm[i] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++, w += bb) {
        const float d = q8_f16(w), dmin = q8_f16(w + 2);
        /* the 8 6-bit scales and mins (quant_blocks.h kvs_q_scale_min_k4), four bytes at a time:
         * j < 4 from the low 6 bits of bytes 0..3 / 4..7; j >= 4: the nibbles of bytes 8..11 with
         * the top 2 bits of bytes 0..3 / 4..7 above them */
        uint32_t a0, a1, a2;
        memcpy(&a0, w + 4, 4), memcpy(&a1, w + 8, 4), memcpy(&a2, w + 12, 4);
        const uint32_t sc_lo = a0 & 0x3f3f3f3fu, sc_hi = (a2 & 0x0f0f0f0fu) | ((a0 >> 6) & 0x03030303u) << 4;
        const uint32_t mn_lo = a1 & 0x3f3f3f3fu, mn_hi = ((a2 >> 4) & 0x0f0f0f0fu) | ((a1 >> 6) & 0x03030303u) << 4;
        /* s16[j]: scale j in every i16 lane (one byte shuffle of the 8 scales each) */
        const __m256i sc8 = _mm256_broadcastsi128_si256(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo));
        __m256i s16[8];
        for (int j = 0; j < 8; j++) s16[j] = _mm256_shuffle_epi8(sc8, _mm256_set1_epi16((short)(0x8000 | j)));
        const __m128i mn8 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)mn_hi, (int)mn_lo)); /* 8 x i16 */
        const __m256i mn16 = _mm256_set_m128i(_mm_unpackhi_epi16(mn8, mn8), _mm_unpacklo_epi16(mn8, mn8));
        /* one partial sum per 64 values and row: short dependency chains (vpdpwssd has a latency of 4-5) */
        __m256i ia[KVS_GEMV_MAX_N], pc[4][KVS_GEMV_MAX_N];
        for (int c = 0; c < 4; c++) {
            const __m256i v = Q8_LOAD(w + qoff + 32 * c);
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if (five) { /* bits 2c and 2c + 1 of qh[l] -> bit 4 (16-bit shifts; the masks drop what crosses bytes) */
                const __m256i h = Q8_LOAD(w + 16), m10 = _mm256_set1_epi8(0x10);
                const int j = 2 * c;
                lo = _mm256_or_si256(lo, _mm256_and_si256(j <= 4 ? _mm256_slli_epi16(h, 4 - j) : _mm256_srli_epi16(h, j - 4), m10));
                hi = _mm256_or_si256(hi, _mm256_and_si256(j + 1 <= 4 ? _mm256_slli_epi16(h, 3 - j) : _mm256_srli_epi16(h, j - 3), m10));
            }
            for (int64_t i = 0; i < n; i++) {
                const int8_t *y = x->q + i * k + sb * 256 + 64 * c;
                pc[c][i] = Q8_DPWSSD(_mm256_setzero_si256(), _mm256_maddubs_epi16(lo, Q8_LOAD(y)), s16[2 * c]);
                pc[c][i] = Q8_DPWSSD(pc[c][i], _mm256_maddubs_epi16(hi, Q8_LOAD(y + 32)), s16[2 * c + 1]);
            }
        }
        for (int64_t i = 0; i < n; i++)
            ia[i] = _mm256_add_epi32(_mm256_add_epi32(pc[0][i], pc[1][i]), _mm256_add_epi32(pc[2][i], pc[3][i]));
        for (int64_t i = 0; i < n; i++) {
            const float dx = x->d[i * nsb + sb];
            const __m256i bs = Q8_LOAD(x->bs + i * (k / 16) + sb * 16);
            a[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i]), _mm256_set1_ps(d * dx), a[i]);
            mm[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mn16, bs)), _mm256_set1_ps(dmin * dx), mm[i]);
        }
    }
    for (int64_t i = 0; i < n; i++) acc[i] = q8_hsum(_mm256_sub_ps(a[i], mm[i]));
}

static inline __attribute__((always_inline)) void q8_dot_q6_k(const uint8_t *w, const kvs_q8_rows *x, int64_t n,
                                                               float *acc) {
    const int64_t k = x->k, nsb = k / 256;
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    __m256 a[KVS_GEMV_MAX_N];
    for (int64_t i = 0; i < n; i++) a[i] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++, w += 210) {
        const float d = q8_f16(w + 208);
        const int8_t *sc = (const int8_t *)(w + 192);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc)); /* 16 x i16 */
        __m256i ia[KVS_GEMV_MAX_N], pc[4][KVS_GEMV_MAX_N]; /* partial sums per s: short chains */
        for (int g = 0; g < 2; g++) {
            const __m256i l0 = Q8_LOAD(w + 64 * g), l1 = Q8_LOAD(w + 64 * g + 32), h = Q8_LOAD(w + 128 + 32 * g);
            /* value 128g + 32s + l: low 4 bits from l0 / l1 (s even / odd; low / high nibble for
             * s < 2 / s >= 2), high 2 bits from bits 2s of h */
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30)),
                _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(h, 2), m30)),
            };
            for (int s = 0; s < 4; s++) {
                const int j = 8 * g + 2 * s; /* the 16-value groups j, j + 1 */
                const __m256i s16 = _mm256_set_m128i(_mm_set1_epi16(sc[j + 1]), _mm_set1_epi16(sc[j]));
                for (int64_t i = 0; i < n; i++)
                    pc[s][i] = Q8_DPWSSD(g ? pc[s][i] : _mm256_setzero_si256(),
                                         _mm256_maddubs_epi16(q[s], Q8_LOAD(x->q + i * k + sb * 256 + 128 * g + 32 * s)), s16);
            }
        }
        for (int64_t i = 0; i < n; i++)
            ia[i] = _mm256_add_epi32(_mm256_add_epi32(pc[0][i], pc[1][i]), _mm256_add_epi32(pc[2][i], pc[3][i]));
        for (int64_t i = 0; i < n; i++) {
            /* codes are q + 32: subtract 32 sum_j sc_j bs_j */
            const __m256i off = _mm256_madd_epi16(sc16, Q8_LOAD(x->bs + i * (k / 16) + sb * 16));
            const __m256i t = _mm256_sub_epi32(ia[i], _mm256_slli_epi32(off, 5));
            a[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(d * x->d[i * nsb + sb]), a[i]);
        }
    }
    for (int64_t i = 0; i < n; i++) acc[i] = q8_hsum(a[i]);
}

/* n as a constant (1..4): the per-row accumulators stay in registers, the row loops unrolled */
#define Q8_DEFINE_N(NAME, CALL)                                                                          \
    static void NAME(const uint8_t *w, const kvs_q8_rows *x, int64_t n, float *acc) {                    \
        switch (n) {                                                                                     \
        case 1: CALL(1); break;                                                                          \
        case 2: CALL(2); break;                                                                          \
        case 3: CALL(3); break;                                                                          \
        default: CALL(4); break;                                                                         \
        }                                                                                                \
    }
#define Q8_C_Q6_K(N) q8_dot_q6_k(w, x, N, acc)
#define Q8_C_Q4_K(N) q8_dot_k45(w, x, N, acc, 0)
#define Q8_C_Q5_K(N) q8_dot_k45(w, x, N, acc, 1)
Q8_DEFINE_N(q8_n_q6_k, Q8_C_Q6_K)
Q8_DEFINE_N(q8_n_q4_k, Q8_C_Q4_K)
Q8_DEFINE_N(q8_n_q5_k, Q8_C_Q5_K)
#if !Q8_K_TYPES_ONLY
#define Q8_C_Q8_0(N) q8_dot_q8_0(w, x, N, acc)
#define Q8_C_Q4_0(N) q8_dot_b32(w, x, N, acc, KVS_Q4_0)
#define Q8_C_Q4_1(N) q8_dot_b32(w, x, N, acc, KVS_Q4_1)
#define Q8_C_Q5_0(N) q8_dot_b32(w, x, N, acc, KVS_Q5_0)
#define Q8_C_Q5_1(N) q8_dot_b32(w, x, N, acc, KVS_Q5_1)
#define Q8_C_IQ4_NL(N) q8_dot_b32(w, x, N, acc, KVS_IQ4_NL)
Q8_DEFINE_N(q8_n_q8_0, Q8_C_Q8_0)
Q8_DEFINE_N(q8_n_q4_0, Q8_C_Q4_0)
Q8_DEFINE_N(q8_n_q4_1, Q8_C_Q4_1)
Q8_DEFINE_N(q8_n_q5_0, Q8_C_Q5_0)
Q8_DEFINE_N(q8_n_q5_1, Q8_C_Q5_1)
Q8_DEFINE_N(q8_n_iq4_nl, Q8_C_IQ4_NL)
#endif

static void q8_dot(const void *wrow, kvs_dtype dt, const kvs_q8_rows *x, int64_t n, float *acc) {
    switch (dt) {
#if !Q8_K_TYPES_ONLY
    case KVS_Q8_0: q8_n_q8_0(wrow, x, n, acc); break;
    case KVS_Q4_0: q8_n_q4_0(wrow, x, n, acc); break;
    case KVS_Q4_1: q8_n_q4_1(wrow, x, n, acc); break;
    case KVS_Q5_0: q8_n_q5_0(wrow, x, n, acc); break;
    case KVS_Q5_1: q8_n_q5_1(wrow, x, n, acc); break;
    case KVS_IQ4_NL: q8_n_iq4_nl(wrow, x, n, acc); break;
#endif
    case KVS_Q4_K: q8_n_q4_k(wrow, x, n, acc); break;
    case KVS_Q5_K: q8_n_q5_k(wrow, x, n, acc); break;
    case KVS_Q6_K: q8_n_q6_k(wrow, x, n, acc); break;
    default: kvs_cpu_q8dot_portable(wrow, dt, x, n, acc); break; /* q2_K, q3_K, iq4_xs */
    }
}
