/* CPU backend, x86: attention's P.V product over a block-quantized V (the quantized KV cache of
 * issue 17), written once over quant_fused.h's vector vocabulary and included after it by
 * quant_avx2.c (8 lanes) and quant_avx512.c (16 lanes). Not a public header; no include guard on
 * purpose (one inclusion per ISA file).
 *
 * qf_pv_<type>(V, rb, P, ldp, M, n, d, O): O[r][:] += sum_{j < n} P[r*ldp + j] * V_j[:] for r < M,
 * V_j the j-th row (d values, d % 32 == 0, whole 32-value blocks, row stride rb bytes). Blocks of up
 * to 4 rows x 4 vectors of O stay in registers over all n keys; each V vector is decoded into a
 * register by the type's decoder of quant_fused.h (the reference values bit for bit) and multiplied
 * into every row by FMA: V is read once per 4 query rows, never stored as f32.
 *
 * qf_qk_<type>(K, rb, Q, d, M, n, scale, S, lds): S[r*lds + j] = scale * Q_r . K_j for r < M, j < n.
 * Four keys at a time against QF_QK_ROWS query rows (the includer's choice: 4 with 32 vector
 * registers, 2 with 16), one accumulator per (row, key), and the four horizontal sums of a row done
 * together by QF_HSUM4(a, b, c, d, out) (the includer's: out[0..3] = the lane sums of a, b, c, d), so
 * the reduction costs a quarter of one per key; a tail of fewer than 4 keys takes quant_fused.h's
 * qf_dot. */

#define QF_DEFINE_PV(T, BYTES, DOFF, MOFF)                                                            \
    static void qf_pv_##T(const uint8_t *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n, \
                          int64_t d, float *O) {                                                       \
        for (int64_t r0 = 0; r0 < M; r0 += 4) {                                                        \
            const int64_t R = M - r0 < 4 ? M - r0 : 4;                                                 \
            const float *p = P + r0 * ldp;                                                             \
            for (int64_t c = 0; c < d; c += 4 * QF_L) {                                                \
                const int C = d - c < 4 * QF_L ? (int)((d - c) / QF_L) : 4;                            \
                qf_vf acc[4][4];                                                                       \
                QF_UNROLL for (int r = 0; r < 4; r++) QF_UNROLL for (int u = 0; u < 4; u++)             \
                    acc[r][u] = (r < R && u < C) ? QF_LOADF(O + (r0 + r) * d + c + u * QF_L) : QF_ZERO; \
                for (int64_t j = 0; j < n; j++) {                                                      \
                    const uint8_t *row = V + j * rb;                                                   \
                    qf_vf w[4];                                                                        \
                    QF_UNROLL for (int u = 0; u < 4; u++) {                                            \
                        w[u] = QF_ZERO;                                                                \
                        if (u < C) {                                                                   \
                            const int64_t e = c + u * QF_L;                                            \
                            const uint8_t *b = row + (e / 32) * (BYTES);                               \
                            const float dd = kvs_qf16(b + (DOFF)), mm = (MOFF) >= 0 ? kvs_qf16(b + (MOFF)) : 0.0f; \
                            w[u] = qf_##T(b, (int)(e % 32), dd, mm);                                   \
                        }                                                                              \
                    }                                                                                  \
                    QF_UNROLL for (int r = 0; r < 4; r++) {                                            \
                        if (r >= R) break;                                                             \
                        const qf_vf pb = QF_SETF(p[r * ldp + j]);                                      \
                        QF_UNROLL for (int u = 0; u < 4; u++)                                          \
                            if (u < C) acc[r][u] = QF_FMA(pb, w[u], acc[r][u]);                        \
                    }                                                                                  \
                }                                                                                      \
                QF_UNROLL for (int r = 0; r < 4; r++) QF_UNROLL for (int u = 0; u < 4; u++)             \
                    if (r < R && u < C) QF_STOREF(O + (r0 + r) * d + c + u * QF_L, acc[r][u]);          \
            }                                                                                          \
        }                                                                                              \
    }

QF_DEFINE_PV(q4_0, 18, 0, -1)
QF_DEFINE_PV(q4_1, 20, 0, 2)
QF_DEFINE_PV(q8_0, 34, 0, -1)
QF_DEFINE_PV(iq4_nl, 18, 0, -1)

#define QF_DEFINE_QK(T, BYTES, DOFF, MOFF)                                                            \
    static void qf_qk_##T(const uint8_t *K, int64_t rb, const float *Q, int64_t d, int64_t M, int64_t n, \
                          float scale, float *S, int64_t lds) {                                         \
        for (int64_t r0 = 0; r0 < M; r0 += QF_QK_ROWS) {                                               \
            const int64_t R = M - r0 < QF_QK_ROWS ? M - r0 : QF_QK_ROWS;                               \
            const float *q = Q + r0 * d;                                                               \
            float *s = S + r0 * lds;                                                                   \
            int64_t j = 0;                                                                             \
            for (; j + 4 <= n; j += 4) {                                                               \
                qf_vf a[QF_QK_ROWS][4];                                                                \
                QF_UNROLL for (int r = 0; r < QF_QK_ROWS; r++) QF_UNROLL for (int u = 0; u < 4; u++)    \
                    a[r][u] = QF_ZERO;                                                                 \
                for (int64_t b = 0; b < d / 32; b++) {                                                 \
                    const uint8_t *kb[4];                                                              \
                    float dk[4], mk[4];                                                                \
                    QF_UNROLL for (int u = 0; u < 4; u++) {                                            \
                        kb[u] = K + (j + u) * rb + b * (BYTES);                                        \
                        dk[u] = kvs_qf16(kb[u] + (DOFF));                                              \
                        mk[u] = (MOFF) >= 0 ? kvs_qf16(kb[u] + (MOFF)) : 0.0f;                         \
                    }                                                                                  \
                    QF_UNROLL for (int v0 = 0; v0 < 32; v0 += QF_L) {                                  \
                        qf_vf w[4];                                                                    \
                        QF_UNROLL for (int u = 0; u < 4; u++) w[u] = qf_##T(kb[u], v0, dk[u], mk[u]);  \
                        QF_UNROLL for (int r = 0; r < QF_QK_ROWS; r++) {                               \
                            if (r >= R) break;                                                         \
                            const qf_vf qv = QF_LOADF(q + r * d + b * 32 + v0);                        \
                            QF_UNROLL for (int u = 0; u < 4; u++) a[r][u] = QF_FMA(w[u], qv, a[r][u]);  \
                        }                                                                              \
                    }                                                                                  \
                }                                                                                      \
                QF_UNROLL for (int r = 0; r < QF_QK_ROWS; r++) {                                       \
                    if (r >= R) break;                                                                 \
                    float o[4];                                                                        \
                    QF_HSUM4(a[r][0], a[r][1], a[r][2], a[r][3], o);                                   \
                    QF_UNROLL for (int u = 0; u < 4; u++) s[r * lds + j + u] = scale * o[u];           \
                }                                                                                      \
            }                                                                                          \
            for (; j < n; j++) {                                                                       \
                float acc[4];                                                                          \
                qf_dots_##T[R - 1](K + j * rb, q, d, acc);                                             \
                for (int64_t r = 0; r < R; r++) s[r * lds + j] = scale * acc[r];                       \
            }                                                                                          \
        }                                                                                              \
    }

QF_DEFINE_QK(q4_0, 18, 0, -1)
QF_DEFINE_QK(q4_1, 20, 0, 2)
QF_DEFINE_QK(q8_0, 34, 0, -1)
QF_DEFINE_QK(iq4_nl, 18, 0, -1)

/* 1 when dt has a fused Q.K^T (the quantized cache's block types) and it ran, else 0. */
static int qf_att_qk(kvs_dtype dt, const uint8_t *K, int64_t rb, const float *Q, int64_t d, int64_t M, int64_t n,
                     float scale, float *S, int64_t lds) {
    switch (dt) {
    case KVS_Q4_0: qf_qk_q4_0(K, rb, Q, d, M, n, scale, S, lds); return 1;
    case KVS_Q4_1: qf_qk_q4_1(K, rb, Q, d, M, n, scale, S, lds); return 1;
    case KVS_Q8_0: qf_qk_q8_0(K, rb, Q, d, M, n, scale, S, lds); return 1;
    case KVS_IQ4_NL: qf_qk_iq4_nl(K, rb, Q, d, M, n, scale, S, lds); return 1;
    default: return 0;
    }
}

/* 1 when dt has a fused P.V (the quantized cache's block types) and it ran, else 0. */
static int qf_att_pv(kvs_dtype dt, const uint8_t *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n,
                     int64_t d, float *O) {
    switch (dt) {
    case KVS_Q4_0: qf_pv_q4_0(V, rb, P, ldp, M, n, d, O); return 1;
    case KVS_Q4_1: qf_pv_q4_1(V, rb, P, ldp, M, n, d, O); return 1;
    case KVS_Q8_0: qf_pv_q8_0(V, rb, P, ldp, M, n, d, O); return 1;
    case KVS_IQ4_NL: qf_pv_iq4_nl(V, rb, P, ldp, M, n, d, O); return 1;
    default: return 0;
    }
}
