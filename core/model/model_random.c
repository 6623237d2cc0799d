/* kvs_model_create_random: a model of a given shape with random weights, built on the device without
 * a model file (kvsieve bench model). Block-type matrices are filled with random but valid blocks
 * directly (random code bytes, scales set to finite f16 values), never by quantizing floats, and
 * uploaded in chunks of whole rows: no host copy of a weight is ever held, so an 8B shape at q4_k
 * needs its 4.5 GB once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "quant/quant.h"

kvs_dtype kvs_quant_fallback(kvs_dtype t, int64_t k) {
    if (!kvs_dtype_is_quant(t) || k % kvs_dtype_block(t) == 0) return t;
    /* llama.cpp's llama-quantize (tensor_type_fallback): the K types and iq4_xs on rows that are not
     * whole super-blocks take a 32-value type of about the same bits */
    kvs_dtype f;
    switch (t) {
    case KVS_Q4_K: f = KVS_Q5_0; break;
    case KVS_Q5_K: f = KVS_Q5_1; break;
    case KVS_Q6_K: f = KVS_Q8_0; break;
    default: f = KVS_IQ4_NL; break; /* q2_K, q3_K, iq4_xs */
    }
    return k % kvs_dtype_block(f) == 0 ? f : KVS_F16;
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* Byte offsets of the f16 scale d and min / dmin (-1: none) in a block of dt (quant_blocks.h). */
static void scale_offsets(kvs_dtype dt, int *d_off, int *m_off) {
    *m_off = -1;
    *d_off = 0;
    switch (dt) {
    case KVS_Q4_1: case KVS_Q5_1: case KVS_Q4_K: case KVS_Q5_K: *m_off = 2; break;
    case KVS_Q2_K: *d_off = 80, *m_off = 82; break;
    case KVS_Q3_K: *d_off = 108; break;
    case KVS_Q6_K: *d_off = 208; break;
    default: break;
    }
}

/* Writes nb random blocks of dt with scale d (and min/dmin d) into dst. */
static void random_blocks(kvs_dtype dt, uint8_t *dst, int64_t nb, uint16_t d, uint64_t *rng) {
    const size_t bb = kvs_dtype_bytes(dt, kvs_dtype_block(dt));
    int d_off, m_off;
    scale_offsets(dt, &d_off, &m_off);
    const size_t n = (size_t)nb * bb;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t r = rng_next(rng);
        memcpy(dst + i, &r, 8);
    }
    for (; i < n; i++) dst[i] = (uint8_t)rng_next(rng);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = dst + (size_t)b * bb;
        p[d_off] = (uint8_t)d, p[d_off + 1] = (uint8_t)(d >> 8);
        if (m_off >= 0) p[m_off] = (uint8_t)d, p[m_off + 1] = (uint8_t)(d >> 8);
    }
}

/* RMS of dt's values when d = dmin = 1 (measured on random blocks): the values scale with d. */
static double unit_rms(kvs_dtype dt) {
    enum { NB = 64 };
    const int blk = kvs_dtype_block(dt);
    uint8_t *raw = malloc(kvs_dtype_bytes(dt, (int64_t)NB * blk));
    float *v = malloc(sizeof(float) * (size_t)NB * (size_t)blk);
    double s = 0;
    uint64_t rng = 0x1234567ull;
    if (raw && v) {
        random_blocks(dt, raw, NB, kvs_f32_to_f16(1.0f), &rng);
        if (kvs_dequant_row(dt, raw, (int64_t)NB * blk, v) == KVS_OK)
            for (int i = 0; i < NB * blk; i++) s += (double)v[i] * v[i];
        s = sqrt(s / (NB * blk));
    }
    free(raw);
    free(v);
    return s > 0 ? s : 1.0;
}

/* Fills W [rows][k] of dtype dt with random values of RMS about `rms` in chunks of whole rows. */
static kvs_status fill_random(kvs_tensor *W, double rms, uint64_t *rng) {
    const kvs_dtype dt = W->dtype;
    const int64_t k = W->ne[0], rows = kvs_tensor_nelements(W) / k;
    const size_t row_bytes = kvs_dtype_bytes(dt, k);
    int64_t chunk_rows = (int64_t)((4u << 20) / row_bytes);
    if (chunk_rows < 1) chunk_rows = 1;
    if (chunk_rows > rows) chunk_rows = rows;
    uint8_t *buf = malloc(row_bytes * (size_t)chunk_rows);
    if (!buf) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_model_create_random: out of host memory for %s", W->name);
    uint16_t d = 0;
    if (kvs_dtype_is_quant(dt)) d = kvs_f32_to_f16((float)(rms / unit_rms(dt)));
    kvs_status s = KVS_OK;
    for (int64_t r0 = 0; r0 < rows && s == KVS_OK; r0 += chunk_rows) {
        const int64_t nr = rows - r0 < chunk_rows ? rows - r0 : chunk_rows;
        const int64_t nv = nr * k;
        if (kvs_dtype_is_quant(dt)) {
            random_blocks(dt, buf, nv / kvs_dtype_block(dt), d, rng);
        } else {
            /* uniform [-a, a) has RMS a / sqrt(3) */
            const double a = rms * sqrt(3.0);
            for (int64_t i = 0; i < nv; i++) {
                const float f = (float)(a * ((double)(rng_next(rng) >> 11) * 0x1p-52 - 1.0));
                if (dt == KVS_F32) memcpy(buf + 4 * i, &f, 4);
                else {
                    const uint16_t h = dt == KVS_F16 ? kvs_f32_to_f16(f) : kvs_f32_to_bf16(f);
                    memcpy(buf + 2 * i, &h, 2);
                }
            }
        }
        s = kvs_tensor_upload(W, buf, (size_t)r0 * row_bytes, (size_t)nr * row_bytes);
    }
    free(buf);
    return s;
}

/* One weight: created (named), checked against the backend when a matrix, filled. A vector of
 * `value` when rms < 0 (norms: 1, biases: 0). */
static kvs_status make_weight(kvs_model *m, kvs_dtype dt, int64_t k, int64_t rows, double rms, const char *name,
                              uint64_t *rng, kvs_tensor **out) {
    const int matrix = rows > 1;
    if (matrix) dt = kvs_quant_fallback(dt, k);
    else dt = KVS_F32;
    const int64_t ne[2] = {k, rows};
    KVS_TRY(kvs_tensor_create(out, m->dev, dt, matrix ? 2 : 1, ne));
    kvs_tensor_set_name(*out, name);
    if (matrix) KVS_TRY(kvs_model_weight_supported(m, *out, name));
    m->weight_bytes += (int64_t)kvs_tensor_nbytes(*out);
    if (rms < 0) return kvs_tensor_fill(*out, -rms - 1.0);
    return fill_random(*out, rms, rng);
}

kvs_status kvs_model_create_random(kvs_model **out, kvs_device *dev, const kvs_model_hparams *hp, kvs_dtype type,
                                   uint64_t seed) {
    const char *op = "kvs_model_create_random";
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!dev || !hp) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL device or hparams", op);
    if (hp->n_layers < 1 || hp->dim < 1 || hp->n_heads < 1 || hp->n_kv_heads < 1 || hp->head_dim < 1 ||
        hp->ffn_dim < 1 || hp->vocab < 2 || hp->n_heads % hp->n_kv_heads != 0 || hp->rope_dim < 1 ||
        hp->rope_dim > hp->head_dim || hp->rope_dim % 2 || !(hp->rope_base > 1) || !(hp->rms_eps > 0) ||
        (int)hp->arch < 0 || hp->arch > KVS_ARCH_DREAM)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                         "%s: bad hparams (layers %d, dim %d, heads %d/%d, head_dim %d, rope_dim %d, ffn %d, vocab %d, "
                         "rope base %g, eps %g; every size >= 1, n_heads %% n_kv_heads == 0, rope_dim even <= head_dim)",
                         op, hp->n_layers, hp->dim, hp->n_heads, hp->n_kv_heads, hp->head_dim, hp->rope_dim, hp->ffn_dim,
                         hp->vocab, (double)hp->rope_base, (double)hp->rms_eps);
    if (kvs_arch_is_diffusion(hp->arch) && (hp->mask_id < 0 || hp->mask_id >= hp->vocab))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: a %s model needs a mask id inside the vocabulary (got %d)", op,
                         kvs_arch_name(hp->arch), hp->mask_id);
    if (type != KVS_F32 && type != KVS_F16 && type != KVS_BF16 && !kvs_dtype_is_quant(type))
        return kvs_error(KVS_ERR_DTYPE, "%s: weight type %s (want f32, f16, bf16 or a block type)", op, kvs_dtype_name(type));
    kvs_model *m = NULL;
    KVS_TRY(kvs_model_alloc(&m, dev, hp));
    uint64_t rng = seed ? seed : 0x9e3779b97f4a7c15ull;
    const int64_t dim = hp->dim, qd = (int64_t)hp->n_heads * hp->head_dim, kvd = (int64_t)hp->n_kv_heads * hp->head_dim;
    const int64_t ffn = hp->ffn_dim;
    /* RMS 1/sqrt(k) per matrix (unit-variance outputs for unit-variance inputs); embeddings 1 */
#define R_(k) (1.0 / sqrt((double)(k)))
    kvs_status s = make_weight(m, type, dim, hp->vocab, 1.0, "token_embd", &rng, &m->tok_embd);
    if (s == KVS_OK) s = make_weight(m, KVS_F32, dim, 1, -2.0, "output_norm", &rng, &m->out_norm);
    if (s == KVS_OK) {
        if (hp->tied_output) m->output = m->tok_embd, m->output_tied = 1;
        else s = make_weight(m, type, dim, hp->vocab, R_(dim), "output", &rng, &m->output);
    }
    char nm[64];
    for (int l = 0; l < hp->n_layers && s == KVS_OK; l++) {
        kvs_layer_tensors *t = &m->layers[l];
        struct { kvs_tensor **dst; const char *name; int64_t k, rows; double rms; int on; } it[] = {
            {&t->attn_norm, "attn_norm", dim, 1, -2.0, 1}, {&t->wq, "attn_q", dim, qd, R_(dim), 1},
            {&t->wk, "attn_k", dim, kvd, R_(dim), 1}, {&t->wv, "attn_v", dim, kvd, R_(dim), 1},
            {&t->wo, "attn_output", qd, dim, R_(qd), 1}, {&t->ffn_norm, "ffn_norm", dim, 1, -2.0, 1},
            {&t->w_gate, "ffn_gate", dim, ffn, R_(dim), 1}, {&t->w_down, "ffn_down", ffn, dim, R_(ffn), 1},
            {&t->w_up, "ffn_up", dim, ffn, R_(dim), 1},
            {&t->bq, "attn_q.bias", qd, 1, -1.0, hp->qkv_bias}, {&t->bk, "attn_k.bias", kvd, 1, -1.0, hp->qkv_bias},
            {&t->bv, "attn_v.bias", kvd, 1, -1.0, hp->qkv_bias},
            {&t->q_norm, "attn_q_norm", hp->head_dim, 1, -2.0, hp->qk_norm},
            {&t->k_norm, "attn_k_norm", hp->head_dim, 1, -2.0, hp->qk_norm},
        };
        for (size_t i = 0; i < sizeof it / sizeof it[0] && s == KVS_OK; i++) {
            if (!it[i].on) continue;
            snprintf(nm, sizeof nm, "blk.%d.%s", l, it[i].name);
            s = make_weight(m, type, it[i].k, it[i].rows, it[i].rms, nm, &rng, it[i].dst);
        }
    }
#undef R_
    if (s != KVS_OK) {
        kvs_model_destroy(&m);
        return s;
    }
    *out = m;
    return KVS_OK;
}

const kvs_tensor *kvs_model_tensor(const kvs_model *m, const char *name) {
    if (!m || !name) return NULL;
    if (strcmp(name, "token_embd") == 0) return m->tok_embd;
    if (strcmp(name, "output") == 0) return m->output;
    if (strcmp(name, "output_norm") == 0) return m->out_norm;
    int l = -1, n = 0;
    if (sscanf(name, "blk.%d.%n", &l, &n) != 1 || n == 0 || l < 0 || l >= m->hp.n_layers) return NULL;
    const kvs_layer_tensors *t = &m->layers[l];
    const char *r = name + n;
    struct { const char *nm; const kvs_tensor *t; } it[] = {
        {"attn_norm", t->attn_norm}, {"attn_q", t->wq}, {"attn_k", t->wk}, {"attn_v", t->wv},
        {"attn_output", t->wo}, {"ffn_norm", t->ffn_norm}, {"ffn_gate", t->w_gate}, {"ffn_down", t->w_down},
        {"ffn_up", t->w_up}, {"attn_q.bias", t->bq}, {"attn_k.bias", t->bk}, {"attn_v.bias", t->bv},
        {"attn_q_norm", t->q_norm}, {"attn_k_norm", t->k_norm},
    };
    for (size_t i = 0; i < sizeof it / sizeof it[0]; i++)
        if (strcmp(r, it[i].nm) == 0) return it[i].t;
    return NULL;
}
