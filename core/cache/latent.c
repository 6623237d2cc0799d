/* Latent memory of evicted tokens (see include/kvsieve/latent.h for the method and its sources). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvsieve/latent.h"

struct kvs_latent {
    int L, H, NH, hd, F;
    float scale;
    double *omega;   /* [F][hd] */
    double *S;       /* [L][H][F][hd] */
    double *z;       /* [L][H][F] */
    int64_t *count;  /* [L][H] */
    int force;
};

static uint64_t sm64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

kvs_status kvs_latent_create(kvs_latent **out, int L, int H, int NH, int hd, int F, float scale, uint64_t seed) {
    const char *op = "kvs_latent_create";
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (L < 1 || H < 1 || NH < H || NH % H || hd < 1 || hd > 512 || F < 1 || F > 4096 || !(scale >= 0.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: bad shape (%d layers, %d kv heads, %d heads, head_dim %d, %d features, scale %g)",
                         op, L, H, NH, hd, F, (double)scale);
    kvs_latent *m = calloc(1, sizeof *m);
    if (!m) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    m->L = L, m->H = H, m->NH = NH, m->hd = hd, m->F = F;
    m->scale = scale > 0.0f ? scale : 1.0f / sqrtf((float)hd);
    m->omega = malloc((size_t)F * hd * sizeof *m->omega);
    m->S = calloc((size_t)L * H * F * hd, sizeof *m->S);
    m->z = calloc((size_t)L * H * F, sizeof *m->z);
    m->count = calloc((size_t)L * H, sizeof *m->count);
    if (!m->omega || !m->S || !m->z || !m->count) {
        kvs_latent_destroy(&m);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    uint64_t s = seed ^ 0x6A09E667F3BCC909ull;
    for (int64_t i = 0; i < (int64_t)F * hd; i++) { /* Box-Muller */
        double u1 = ((double)(sm64(&s) >> 11) + 0.5) / 9007199254740992.0, u2 = ((double)(sm64(&s) >> 11) + 0.5) / 9007199254740992.0;
        m->omega[i] = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    }
    *out = m;
    return KVS_OK;
}

void kvs_latent_destroy(kvs_latent **lm) {
    if (!lm || !*lm) return;
    free((*lm)->omega), free((*lm)->S), free((*lm)->z), free((*lm)->count);
    free(*lm);
    *lm = NULL;
}

void kvs_latent_reset(kvs_latent *m) {
    if (!m) return;
    memset(m->S, 0, (size_t)m->L * m->H * m->F * m->hd * sizeof *m->S);
    memset(m->z, 0, (size_t)m->L * m->H * m->F * sizeof *m->z);
    memset(m->count, 0, (size_t)m->L * m->H * sizeof *m->count);
}

/* log phi(x)_f for f < F into lp (x' = x * sqrt(scale)). */
static void log_phi(const kvs_latent *m, const float *x, double *lp) {
    double rs = sqrt((double)m->scale), n2 = 0;
    for (int i = 0; i < m->hd; i++) n2 += (double)x[i] * x[i] * m->scale;
    for (int f = 0; f < m->F; f++) {
        double d = 0;
        for (int i = 0; i < m->hd; i++) d += m->omega[(int64_t)f * m->hd + i] * x[i] * rs;
        lp[f] = d - 0.5 * n2 - 0.5 * log((double)m->F);
    }
}

kvs_status kvs_latent_fold(kvs_latent *m, int l, int h, const float *k, const float *v, int64_t n) {
    if (!m || l < 0 || l >= m->L || h < 0 || h >= m->H || n < 0 || (n > 0 && (!k || !v)))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_latent_fold: NULL memory/rows or layer %d / head %d / n %lld out of range", l,
                         h, (long long)n);
    double lp[4096];
    double *S = m->S + ((int64_t)l * m->H + h) * m->F * m->hd, *z = m->z + ((int64_t)l * m->H + h) * m->F;
    for (int64_t r = 0; r < n; r++) {
        log_phi(m, k + r * m->hd, lp);
        for (int f = 0; f < m->F; f++) {
            double p = exp(lp[f]);
            z[f] += p;
            for (int i = 0; i < m->hd; i++) S[(int64_t)f * m->hd + i] += p * v[r * m->hd + i];
        }
    }
    m->count[l * m->H + h] += n;
    return KVS_OK;
}

int64_t kvs_latent_count(const kvs_latent *m, int l, int h) {
    return m && l >= 0 && l < m->L && h >= 0 && h < m->H ? m->count[l * m->H + h] : -1;
}

int kvs_latent_active(const kvs_latent *m, int l) {
    if (!m || l < 0 || l >= m->L) return 0;
    if (m->force) return 1;
    for (int h = 0; h < m->H; h++)
        if (m->count[l * m->H + h] > 0) return 1;
    return 0;
}

void kvs_latent_set_force(kvs_latent *m, int force) {
    if (m) m->force = force != 0;
}
int kvs_latent_forced(const kvs_latent *m) { return m ? m->force : 0; }

kvs_status kvs_latent_merge(const kvs_latent *m, int l, const kvs_tensor *q, kvs_tensor *out, const kvs_tensor *row_max,
                            const kvs_tensor *row_sum) {
    const char *op = "kvs_latent_merge";
    if (!m || !q || !out || !row_max || !row_sum || l < 0 || l >= m->L)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument or layer %d out of range", op, l);
    int64_t n = kvs_tensor_nelements(q) / ((int64_t)m->NH * m->hd);
    if (kvs_tensor_nelements(q) != n * m->NH * m->hd || kvs_tensor_nelements(out) != n * m->NH * m->hd ||
        kvs_tensor_nelements(row_max) != n * m->NH || kvs_tensor_nelements(row_sum) != n * m->NH || kvs_tensor_dtype(q) != KVS_F32 ||
        kvs_tensor_dtype(out) != KVS_F32 || kvs_tensor_dtype(row_max) != KVS_F32 || kvs_tensor_dtype(row_sum) != KVS_F32)
        return kvs_error(KVS_ERR_SHAPE, "%s: want F32 q/out [n][%d][%d] and row_max/row_sum [n][%d]", op, m->NH, m->hd, m->NH);
    size_t nq = (size_t)(n * m->NH * m->hd), nr = (size_t)(n * m->NH);
    float *hq = malloc(nq * 4), *ho = malloc(nq * 4), *hm = malloc(nr * 4), *hl = malloc(nr * 4);
    double *lp = malloc((size_t)m->F * sizeof *lp);
    kvs_status s = hq && ho && hm && hl && lp ? KVS_OK : kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (s == KVS_OK) s = kvs_tensor_download(q, hq, 0, nq * 4);
    if (s == KVS_OK) s = kvs_tensor_download(out, ho, 0, nq * 4);
    if (s == KVS_OK) s = kvs_tensor_download(row_max, hm, 0, nr * 4);
    if (s == KVS_OK) s = kvs_tensor_download(row_sum, hl, 0, nr * 4);
    int G = m->NH / m->H;
    for (int64_t i = 0; s == KVS_OK && i < n; i++)
        for (int g = 0; g < m->NH; g++) {
            int h = g / G;
            float *o = ho + (i * m->NH + g) * m->hd;
            double mx = hm[i * m->NH + g], lsum = hl[i * m->NH + g];
            int has_keys = lsum > 0.0;
            if (m->count[l * m->H + h] == 0) {
                for (int d = 0; d < m->hd; d++) o[d] = has_keys ? (float)((double)o[d] / lsum) : 0.0f;
                continue;
            }
            const float *qq = hq + (i * m->NH + g) * m->hd;
            log_phi(m, qq, lp);
            double M = has_keys ? mx : -DBL_MAX;
            for (int f = 0; f < m->F; f++) M = lp[f] > M ? lp[f] : M;
            double wk = has_keys ? exp(mx - M) : 0.0, den = lsum * wk, num[512];
            int hd = m->hd < 512 ? m->hd : 512;
            for (int d = 0; d < hd; d++) num[d] = (double)o[d] * wk;
            const double *S = m->S + ((int64_t)l * m->H + h) * m->F * m->hd, *z = m->z + ((int64_t)l * m->H + h) * m->F;
            for (int f = 0; f < m->F; f++) {
                double e = exp(lp[f] - M);
                den += e * z[f];
                for (int d = 0; d < hd; d++) num[d] += e * S[(int64_t)f * m->hd + d];
            }
            for (int d = 0; d < hd; d++) o[d] = den > 0 ? (float)(num[d] / den) : 0.0f;
        }
    if (s == KVS_OK) s = kvs_tensor_upload(out, ho, 0, nq * 4);
    free(hq), free(ho), free(hm), free(hl), free(lp);
    return s;
}
