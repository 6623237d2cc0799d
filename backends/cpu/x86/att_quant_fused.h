/* CPU backend, x86: attention's P.V product over a block-quantized V (the quantized KV cache of
 * issue 17), written once over quant_fused.h's vector vocabulary and included after it by
 * quant_avx2.c (8 lanes) and quant_avx512.c (16 lanes). Not a public header; no include guard on
 * purpose (one inclusion per ISA file).
 *
 * qf_pv_<type>(V, rb, P, ldp, M, n, d, O): O[r][:] += sum_{j < n} P[r*ldp + j] * V_j[:] for r < M,
 * V_j the j-th row (d values, d % 32 == 0, whole 32-value blocks, row stride rb bytes). Blocks of up
 * to 4 rows x 4 vectors of O stay in registers over all n keys; each V vector is decoded into a
 * register by the type's decoder of quant_fused.h (the reference values bit for bit) and multiplied
 * into every row by FMA: V is read once per 4 query rows, never stored as f32. The QK side needs no
 * kernel of its own: it is quant_fused.h's GEMV (qf_dot) with the packed query rows as x. */

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
