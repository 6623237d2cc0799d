/* Row quantizers of the KV-cache block types (contracts: quant.h): f32 values -> GGUF blocks of 32.
 *
 * Written from the formats (quant_blocks.h) and the scale rules of llama.cpp's reference quantizers
 * (ggml-quants.c quantize_row_*_ref was read; this code is our own):
 *   q8_0:   d = amax / 127, q = round(x / d) (half away from zero);
 *   q4_0:   m = the value of largest magnitude (sign kept), d = m / -8, q = min(15, trunc(x / d + 8.5));
 *   q4_1:   d = (max - min) / 15, stored min, q = min(15, trunc((x - min) / d + 0.5));
 *   iq4_nl: the non-linear 16-value code; d from a weighted least-squares search over 15 candidate
 *           scales around amax / 127 (weights x^2, as llama.cpp without an importance matrix), each
 *           value coded as its nearest code value.
 * The scale used for coding is the f32 one; the stored scale is its binary16 rounding (as llama.cpp).
 * A block of zeros (or of one repeated value for q4_1) codes exactly.
 * Non-finite input: a block holding a NaN or an infinity codes as the NaN block (every byte 0 but the
 * f16 scale d, and q4_1's / qh8's m, = 0x7e00, a quiet NaN), so each of its 32 values decodes to NaN:
 * a NaN or inf that reaches a quantized cache comes out of attention as non-finite, as on the f32
 * path, and the logits' NaN check reports it (llama.cpp's reference quantizers code NaN as finite
 * garbage instead). OpenCL (rows.cl) and Vulkan (scatter_cvt.comp) apply the same rule. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "internal.h"
#include "quant/quant.h"
#include "quant/quant_blocks.h"

static void put_f16(uint8_t *p, float f) {
    uint16_t h = kvs_f32_to_f16(f);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

/* 1 when the block's 32 values are all finite (no NaN, no infinity). */
static int block_finite(const float *x) {
    int ok = 1;
    for (int i = 0; i < 32; i++) ok &= fabsf(x[i]) <= FLT_MAX;
    return ok;
}

/* The NaN block of `bytes` bytes: zeros, with the f16 NaN 0x7e00 as d (and as m when has_min). */
static void put_nan_block(uint8_t *b, int bytes, int has_min) {
    memset(b, 0, (size_t)bytes);
    b[1] = 0x7e;
    if (has_min) b[3] = 0x7e;
}

static void enc_q8_0(const float *x, uint8_t *b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int i = 0; i < 32; i++) {
        float q = roundf(x[i] * id);
        q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q == q ? q : 0.0f; /* NaN input: 0 */
        b[2 + i] = (uint8_t)(int8_t)q;
    }
}

/* trunc(a) clamped to [0, 15]; NaN gives 0 (no undefined float-to-int conversion) */
static int code15(float a) { return !(a >= 0.0f) ? 0 : a >= 15.0f ? 15 : (int)a; }

static void enc_q4_0(const float *x, uint8_t *b) {
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            m = x[i];
        }
    const float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int i = 0; i < 16; i++) {
        float a = x[i] * id + 8.5f, c = x[i + 16] * id + 8.5f;
        b[2 + i] = (uint8_t)(code15(a) | code15(c) << 4);
    }
}

static void enc_q4_1(const float *x, uint8_t *b) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int i = 0; i < 32; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    const float d = (hi - lo) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, lo);
    for (int i = 0; i < 16; i++) {
        float a = (x[i] - lo) * id + 0.5f, c = (x[i + 16] - lo) * id + 0.5f;
        b[4 + i] = (uint8_t)(code15(a) | code15(c) << 4);
    }
}

/* Index of the code value nearest to v (lower index on ties); the table is increasing. */
static int iq4_nearest(float v) {
    int best = 0;
    float bd = fabsf(v - (float)kvs_iq4_values[0]);
    for (int k = 1; k < 16; k++) {
        float e = fabsf(v - (float)kvs_iq4_values[k]);
        if (e < bd) {
            bd = e;
            best = k;
        }
    }
    return best;
}

static void enc_iq4_nl(const float *x, uint8_t *b) {
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            m = x[i];
        }
    if (amax == 0.0f) {
        memset(b, 0, 18);
        for (int i = 0; i < 16; i++) b[2 + i] = 0x88; /* code 8 = +1 times d = 0 */
        return;
    }
    /* candidate inverse scales: the code's extreme (-127) mapped to m, then 7 steps either side */
    float best_d = m / -127.0f, best = -1.0f;
    for (int t = -7; t <= 7; t++) {
        const float id = ((float)t - 127.0f) / m;
        double sqx = 0.0, sq2 = 0.0;
        for (int i = 0; i < 32; i++) {
            const double q = kvs_iq4_values[iq4_nearest(x[i] * id)], w = (double)x[i] * x[i];
            sqx += w * q * x[i];
            sq2 += w * q * q;
        }
        if (sq2 > 0.0 && (best < 0.0f || sqx * sqx > (double)best * sq2)) {
            best_d = (float)(sqx / sq2);
            best = (float)(sqx * sqx / sq2);
        }
    }
    /* code with the stored (binary16) scale, so the decoded values are the nearest ones */
    put_f16(b, best_d);
    const float ds = kvs_qf16(b), id = ds != 0.0f ? 1.0f / ds : 0.0f;
    for (int i = 0; i < 16; i++) b[2 + i] = (uint8_t)(iq4_nearest(x[i] * id) | iq4_nearest(x[i + 16] * id) << 4);
}

/* qh8 (quant_blocks.h): block min/max, d = f16(16 (max - min) / 255), m = f16(min + 7.5 (max - min) / 255),
 * then each value's 8-bit code against the stored d and m (round half up, clamped to [0, 255]). */
void kvs_qh8_encode_row(const float *src, int64_t n, void *hi_, void *lo_) {
    uint8_t *hi = hi_, *lo = lo_;
    for (int64_t b = 0; b < n / 32; b++) {
        const float *x = src + 32 * b;
        uint8_t *H = hi + 20 * b, *L = lo + 16 * b;
        if (!block_finite(x)) { /* the NaN block: NaN d and m in the upper plane, zero codes */
            put_nan_block(H, 20, 1);
            memset(L, 0, 16);
            continue;
        }
        float mn = FLT_MAX, mx = -FLT_MAX;
        for (int i = 0; i < 32; i++) {
            if (x[i] < mn) mn = x[i];
            if (x[i] > mx) mx = x[i];
        }
        if (!(mn <= mx)) mn = mx = 0.0f; /* all NaN */
        const float s0 = (mx - mn) / 255.0f;
        put_f16(H, 16.0f * s0);
        put_f16(H + 2, mn + 7.5f * s0);
        const float d = kvs_qf16(H), m = kvs_qf16(H + 2), is = d > 0.0f ? 16.0f / d : 0.0f;
        int u[32];
        for (int i = 0; i < 32; i++) {
            const float a = (x[i] - m) * is + 8.0f; /* round half up of (x - m)/s + 7.5 */
            u[i] = !(a >= 0.0f) ? 0 : a >= 255.0f ? 255 : (int)a;
        }
        for (int i = 0; i < 16; i++) {
            H[4 + i] = (uint8_t)((u[i] >> 4) | (u[i + 16] >> 4) << 4);
            L[i] = (uint8_t)((u[i] & 15) | (u[i + 16] & 15) << 4);
        }
    }
}

int kvs_quant_can_encode(kvs_dtype dt) {
    return dt == KVS_Q8_0 || dt == KVS_Q4_0 || dt == KVS_Q4_1 || dt == KVS_IQ4_NL;
}

kvs_status kvs_quant_row(kvs_dtype dt, const float *src, int64_t n, void *dst) {
    if (!kvs_quant_can_encode(dt))
        return kvs_error(KVS_ERR_DTYPE, "quantize: no encoder for dtype %s (q8_0, q4_0, q4_1, iq4_nl have one)",
                         kvs_dtype_name(dt));
    if (n < 0 || n % KVS_QK != 0)
        return kvs_error(KVS_ERR_DTYPE, "quantize: %lld values of %s is not a multiple of its block of 32", (long long)n,
                         kvs_dtype_name(dt));
    kvs_quant_row_unchecked(dt, src, n, dst);
    return KVS_OK;
}

void kvs_quant_row_unchecked(kvs_dtype dt, const float *src, int64_t n, void *dst) {
    uint8_t *o = dst;
    const int64_t nb = n / KVS_QK;
    switch (dt) {
    case KVS_Q8_0: case KVS_Q4_0: case KVS_Q4_1: case KVS_IQ4_NL: break;
    default: return;
    }
    const int bytes = (int)kvs_dtype_bytes(dt, KVS_QK);
    for (int64_t i = 0; i < nb; i++) {
        const float *x = src + i * 32;
        uint8_t *b = o + i * bytes;
        if (!block_finite(x)) put_nan_block(b, bytes, dt == KVS_Q4_1);
        else if (dt == KVS_Q8_0) enc_q8_0(x, b);
        else if (dt == KVS_Q4_0) enc_q4_0(x, b);
        else if (dt == KVS_Q4_1) enc_q4_1(x, b);
        else enc_iq4_nl(x, b);
    }
}
