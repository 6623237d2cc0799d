/* CPU backend: the fused GEMV kernels of every block type, written once over a small vector
 * vocabulary and included by x86/quant_avx2.c (8 lanes), x86/quant_avx512.c (16 lanes) and
 * arm/quant_neon.c (4 lanes) after they define it (and their target pragma). Not a public header; no
 * include guard on purpose (one inclusion per ISA file).
 *
 * Each type has a decoder qf_<type>(block, v0, d, m) -> the QF_L weights v0 .. v0+QF_L-1 of the
 * block (v0 a multiple of QF_L) as f32 lanes, computed with the same f32 operations as the reference
 * decoder (core/quant/quant_blocks.h: scale * sub-scale, then * q, then - min), so the register holds
 * the reference values bit for bit; d and m are the block's f16 scale and min / dmin, decoded once
 * per block by the caller (0 where the type has none). qf_dot_<type>_n<N> dots a W row with N x rows
 * (N = 1..4, a constant so the accumulators stay in registers): one FMA per x row per register.
 *
 * Vocabulary the includer defines: QF_L (lanes), qf_vf / qf_vi (f32 / i32 vectors), QF_U8(p) and
 * QF_I8(p) (QF_L bytes at p zero- / sign-extended to i32 lanes), QF_SRL(v, n) (logical right shift by
 * a run-time count), QF_SRLV(v, c) (per-lane shift counts), QF_AND, QF_OR, QF_SLL(v, n), QF_ADDI,
 * QF_SUBI, QF_SETI(c), QF_IOTA (lanes 0..QF_L-1), QF_LUT16(idx, t) (t[idx] per lane, t a table vector
 * of kvs_iq4_values), QF_TABLE (that table vector), QF_CVT (i32 -> f32), QF_SETF, QF_MULF, QF_ADDF,
 * QF_SUBF, QF_FMA(a, b, c) (a*b + c), QF_LOADF(p), QF_STOREF(p, v), QF_ZERO, QF_HSUM(v) (horizontal
 * sum). qf_decode stores the same registers: the GEMM tiles' decoder (checked bit-exactly against
 * gguf-py's vectors by test quant-blocks, which so checks every register decoder of this file). */

/* 4-bit code of the 32-value nibble order (low nibbles of qs[0..16), then high nibbles) */
static inline __attribute__((always_inline)) qf_vi qf_nib32(const uint8_t *qs, int v0) {
    return v0 < 16 ? QF_AND(QF_U8(qs + v0), QF_SETI(15)) : QF_SRL(QF_U8(qs + v0 - 16), 4);
}

/* bit (v0 + lane) of the little-endian u32 at p */
static inline __attribute__((always_inline)) qf_vi qf_bits32(const uint8_t *p, int v0) {
    return QF_AND(QF_SRLV(QF_SETI((int)kvs_qu32(p)), QF_ADDI(QF_IOTA, QF_SETI(v0))), QF_SETI(1));
}

static inline __attribute__((always_inline)) qf_vf qf_q4_0(const uint8_t *b, int v0, float d, float m) {
    (void)m; /* unused by the types without a min */
    return QF_MULF(QF_SETF(d), QF_CVT(QF_SUBI(qf_nib32(b + 2, v0), QF_SETI(8))));
}

static inline __attribute__((always_inline)) qf_vf qf_q4_1(const uint8_t *b, int v0, float d, float m) {
    return QF_ADDF(QF_MULF(QF_SETF(d), QF_CVT(qf_nib32(b + 4, v0))), QF_SETF(m));
}

static inline __attribute__((always_inline)) qf_vf qf_q5_0(const uint8_t *b, int v0, float d, float m) {
    (void)m; /* unused by the types without a min */
    const qf_vi q = QF_OR(qf_nib32(b + 6, v0), QF_SLL(qf_bits32(b + 2, v0), 4));
    return QF_MULF(QF_SETF(d), QF_CVT(QF_SUBI(q, QF_SETI(16))));
}

static inline __attribute__((always_inline)) qf_vf qf_q5_1(const uint8_t *b, int v0, float d, float m) {
    const qf_vi q = QF_OR(qf_nib32(b + 8, v0), QF_SLL(qf_bits32(b + 4, v0), 4));
    return QF_ADDF(QF_MULF(QF_SETF(d), QF_CVT(q)), QF_SETF(m));
}

static inline __attribute__((always_inline)) qf_vf qf_q8_0(const uint8_t *b, int v0, float d, float m) {
    (void)m; /* unused by the types without a min */
    return QF_MULF(QF_SETF(d), QF_CVT(QF_I8(b + 2 + v0)));
}

static inline __attribute__((always_inline)) qf_vf qf_iq4_nl(const uint8_t *b, int v0, float d, float m) {
    (void)m; /* unused by the types without a min */
    return QF_MULF(QF_SETF(d), QF_CVT(QF_LUT16(qf_nib32(b + 2, v0), QF_TABLE)));
}

/* q2_K / q3_K: value v = 128g + 32s + l takes bits 2s.. of qs[32g + l]; sub-block v / 16 */
static inline __attribute__((always_inline)) qf_vi qf_2bits(const uint8_t *qs, int v0) {
    return QF_AND(QF_SRL(QF_U8(qs + 32 * (v0 / 128) + v0 % 32), 2 * ((v0 / 32) % 4)), QF_SETI(3));
}

static inline __attribute__((always_inline)) qf_vf qf_q2_k(const uint8_t *b, int v0, float d, float dmin) {
    const int sc = b[v0 / 16];
    const float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
    return QF_SUBF(QF_MULF(QF_SETF(dl), QF_CVT(qf_2bits(b + 16, v0))), QF_SETF(ml));
}

static inline __attribute__((always_inline)) qf_vf qf_q3_k(const uint8_t *b, int v0, float d, float m) {
    (void)m; /* unused by the types without a min */
    const int j = v0 / 16;
    const int s = (((b[96 + j % 8] >> (4 * (j / 8))) & 15) | ((b[104 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
    const qf_vi hb = QF_AND(QF_SRL(QF_U8(b + v0 % 32), v0 / 32), QF_SETI(1));
    const qf_vi q = QF_SUBI(QF_OR(qf_2bits(b + 32, v0), QF_SLL(hb, 2)), QF_SETI(4)); /* low | 4*h, - 4 */
    return QF_MULF(QF_SETF(d * (float)s), QF_CVT(q));
}

static inline __attribute__((always_inline)) qf_vf qf_q4_k(const uint8_t *b, int v0, float d, float dmin) {
    const int j = v0 / 32;
    int sc, mn;
    kvs_q_scale_min_k4(b + 4, j, &sc, &mn);
    const qf_vi q = QF_AND(QF_SRL(QF_U8(b + 16 + 32 * (j / 2) + v0 % 32), 4 * (j % 2)), QF_SETI(15));
    return QF_SUBF(QF_MULF(QF_SETF(d * (float)sc), QF_CVT(q)), QF_SETF(dmin * (float)mn));
}

static inline __attribute__((always_inline)) qf_vf qf_q5_k(const uint8_t *b, int v0, float d, float dmin) {
    const int j = v0 / 32;
    int sc, mn;
    kvs_q_scale_min_k4(b + 4, j, &sc, &mn);
    qf_vi q = QF_AND(QF_SRL(QF_U8(b + 48 + 32 * (j / 2) + v0 % 32), 4 * (j % 2)), QF_SETI(15));
    q = QF_OR(q, QF_SLL(QF_AND(QF_SRL(QF_U8(b + 16 + v0 % 32), j), QF_SETI(1)), 4));
    return QF_SUBF(QF_MULF(QF_SETF(d * (float)sc), QF_CVT(q)), QF_SETF(dmin * (float)mn));
}

static inline __attribute__((always_inline)) qf_vf qf_q6_k(const uint8_t *b, int v0, float d, float m) {
    (void)m; /* unused by the types without a min */
    const int g = v0 / 128, s = (v0 % 128) / 32, l = v0 % 32;
    const qf_vi lo = QF_AND(QF_SRL(QF_U8(b + 64 * g + 32 * (s & 1) + l), 4 * (s >> 1)), QF_SETI(15));
    const qf_vi hi = QF_AND(QF_SRL(QF_U8(b + 128 + 32 * g + l), 2 * s), QF_SETI(3));
    const qf_vi q = QF_SUBI(QF_OR(lo, QF_SLL(hi, 4)), QF_SETI(32));
    return QF_MULF(QF_SETF(d * (float)(int8_t)b[192 + v0 / 16]), QF_CVT(q));
}

static inline __attribute__((always_inline)) qf_vf qf_iq4_xs(const uint8_t *b, int v0, float d, float m) {
    (void)m; /* unused by the types without a min */
    const int j = v0 / 32;
    const int s = (((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((b[2] | b[3] << 8) >> (2 * j)) & 3) << 4) - 32;
    return QF_MULF(QF_SETF(d * (float)s), QF_CVT(QF_LUT16(qf_nib32(b + 8 + 16 * j, v0 % 32), QF_TABLE)));
}

#if defined(__clang__)
#define QF_UNROLL _Pragma("unroll")
#else
#define QF_UNROLL _Pragma("GCC unroll 32")
#endif

/* acc[i] = W_row . x_i, i < N: every QF_L weights decoded once, FMA into two accumulators per row. */
#define QF_DEFINE_DOT(T, BLK, BYTES, DOFF, MOFF, N)                                                  \
    static void qf_dot_##T##_n##N(const uint8_t *w, const float *x, int64_t k, float *acc) {         \
        qf_vf a[N][2];                                                                               \
        for (int i = 0; i < N; i++) a[i][0] = a[i][1] = QF_ZERO;                                     \
        for (int64_t b = 0; b < k / (BLK); b++, w += (BYTES)) {                                      \
            const float d = kvs_qf16(w + (DOFF)), m = (MOFF) >= 0 ? kvs_qf16(w + (MOFF)) : 0.0f;     \
            /* unrolled: the offsets and shifts of every chunk become constants */                  \
            QF_UNROLL for (int v0 = 0; v0 < (BLK); v0 += QF_L) {                                     \
                const qf_vf wv = qf_##T(w, v0, d, m);                                                \
                const int p = (v0 / QF_L) & 1;                                                       \
                for (int i = 0; i < N; i++)                                                          \
                    a[i][p] = QF_FMA(wv, QF_LOADF(x + i * k + b * (BLK) + v0), a[i][p]);              \
            }                                                                                        \
        }                                                                                            \
        for (int i = 0; i < N; i++) acc[i] = QF_HSUM(QF_ADDF(a[i][0], a[i][1]));                      \
    }
/* dst[0 .. nb * BLK) = nb blocks decoded (the GEMM tiles): the same registers, stored. */
#define QF_DEFINE_DECODE(T, BLK, BYTES, DOFF, MOFF)                                                  \
    static void qf_decode_##T(const uint8_t *w, int64_t nb, float *dst) {                            \
        for (int64_t b = 0; b < nb; b++, w += (BYTES), dst += (BLK)) {                               \
            const float d = kvs_qf16(w + (DOFF)), m = (MOFF) >= 0 ? kvs_qf16(w + (MOFF)) : 0.0f;     \
            QF_UNROLL for (int v0 = 0; v0 < (BLK); v0 += QF_L) QF_STOREF(dst + v0, qf_##T(w, v0, d, m)); \
        }                                                                                            \
    }
#define QF_DEFINE_TYPE(T, BLK, BYTES, DOFF, MOFF)                                                    \
    QF_DEFINE_DECODE(T, BLK, BYTES, DOFF, MOFF)                                                      \
    QF_DEFINE_DOT(T, BLK, BYTES, DOFF, MOFF, 1)                                                      \
    QF_DEFINE_DOT(T, BLK, BYTES, DOFF, MOFF, 2)                                                      \
    QF_DEFINE_DOT(T, BLK, BYTES, DOFF, MOFF, 3)                                                      \
    QF_DEFINE_DOT(T, BLK, BYTES, DOFF, MOFF, 4)                                                      \
    static const qf_dot_fn qf_dots_##T[4] = {qf_dot_##T##_n1, qf_dot_##T##_n2, qf_dot_##T##_n3,       \
                                             qf_dot_##T##_n4};

typedef void (*qf_dot_fn)(const uint8_t *w, const float *x, int64_t k, float *acc);
QF_DEFINE_TYPE(q4_0, 32, 18, 0, -1)
QF_DEFINE_TYPE(q4_1, 32, 20, 0, 2)
QF_DEFINE_TYPE(q5_0, 32, 22, 0, -1)
QF_DEFINE_TYPE(q5_1, 32, 24, 0, 2)
QF_DEFINE_TYPE(q8_0, 32, 34, 0, -1)
QF_DEFINE_TYPE(iq4_nl, 32, 18, 0, -1)
QF_DEFINE_TYPE(q2_k, 256, 84, 80, 82)
QF_DEFINE_TYPE(q3_k, 256, 110, 108, -1)
QF_DEFINE_TYPE(q4_k, 256, 144, 0, 2)
QF_DEFINE_TYPE(q5_k, 256, 176, 0, 2)
QF_DEFINE_TYPE(q6_k, 256, 210, 208, -1)
QF_DEFINE_TYPE(iq4_xs, 256, 136, 0, -1)

/* QuantSpec's qh8 8-bit values of nb blocks (upper q4_1 blocks at hi, 20 bytes each; lower blocks at
 * lo, 16 bytes each; format: core/quant/quant_blocks.h) with kvs_qb_qh8's f32 operations in its
 * order, (d * hi + m) + (d * 0.0625f) * (lo - 7.5f), so the values are its values bit for bit. */
static void qf_decode_qh8(const uint8_t *hi, const uint8_t *lo, int64_t nb, float *dst) {
    for (int64_t b = 0; b < nb; b++, hi += 20, lo += 16, dst += 32) {
        const float d = kvs_qf16(hi), m = kvs_qf16(hi + 2);
        const qf_vf vd = QF_SETF(d), vm = QF_SETF(m), vs = QF_SETF(d * 0.0625f), half = QF_SETF(7.5f);
        for (int v0 = 0; v0 < 32; v0 += QF_L) {
            const qf_vf x4 = QF_ADDF(QF_MULF(vd, QF_CVT(qf_nib32(hi + 4, v0))), vm);
            QF_STOREF(dst + v0, QF_ADDF(x4, QF_MULF(vs, QF_SUBF(QF_CVT(qf_nib32(lo, v0)), half))));
        }
    }
}

/* Decodes n values (n % block == 0) of a block-type row segment; 0 for other dtypes (nothing done). */
static int qf_decode(kvs_dtype dt, const uint8_t *w, int64_t n, float *dst) {
    switch (dt) {
    case KVS_Q4_0: qf_decode_q4_0(w, n / 32, dst); return 1;
    case KVS_Q4_1: qf_decode_q4_1(w, n / 32, dst); return 1;
    case KVS_Q5_0: qf_decode_q5_0(w, n / 32, dst); return 1;
    case KVS_Q5_1: qf_decode_q5_1(w, n / 32, dst); return 1;
    case KVS_Q8_0: qf_decode_q8_0(w, n / 32, dst); return 1;
    case KVS_IQ4_NL: qf_decode_iq4_nl(w, n / 32, dst); return 1;
    case KVS_Q2_K: qf_decode_q2_k(w, n / 256, dst); return 1;
    case KVS_Q3_K: qf_decode_q3_k(w, n / 256, dst); return 1;
    case KVS_Q4_K: qf_decode_q4_k(w, n / 256, dst); return 1;
    case KVS_Q5_K: qf_decode_q5_k(w, n / 256, dst); return 1;
    case KVS_Q6_K: qf_decode_q6_k(w, n / 256, dst); return 1;
    case KVS_IQ4_XS: qf_decode_iq4_xs(w, n / 256, dst); return 1;
    default: return 0;
    }
}

/* The fused GEMV of dt (a block type) for n = 1..4 x rows; NULL for other dtypes. */
static qf_dot_fn qf_dot_for(kvs_dtype dt, int64_t n) {
    const int i = (int)n - 1;
    switch (dt) {
    case KVS_Q4_0: return qf_dots_q4_0[i];
    case KVS_Q4_1: return qf_dots_q4_1[i];
    case KVS_Q5_0: return qf_dots_q5_0[i];
    case KVS_Q5_1: return qf_dots_q5_1[i];
    case KVS_Q8_0: return qf_dots_q8_0[i];
    case KVS_IQ4_NL: return qf_dots_iq4_nl[i];
    case KVS_Q2_K: return qf_dots_q2_k[i];
    case KVS_Q3_K: return qf_dots_q3_k[i];
    case KVS_Q4_K: return qf_dots_q4_k[i];
    case KVS_Q5_K: return qf_dots_q5_k[i];
    case KVS_Q6_K: return qf_dots_q6_k[i];
    case KVS_IQ4_XS: return qf_dots_iq4_xs[i];
    default: return NULL;
    }
}
