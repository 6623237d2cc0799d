/* Learned eviction policies (issue 8): weights, GGUF side files, and the kvs_policy scorers.
 * See include/kvsieve/learned.h for the methods and their sources. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../policy_internal.h"
#include "kvsieve/gguf.h"
#include "kvsieve/latent.h"
#include "internal.h"
#include "learned_internal.h"

#define GATE_HIDDEN 32  /* retention / indexer hidden width G */
#define RL_HIDDEN 16

static const char *const kind_names[] = {"retention", "indexer", "rl"};

const char *kvs_learned_kind_name(kvs_learned_kind k) {
    return (int)k >= 0 && (int)k < 3 ? kind_names[k] : "unknown";
}

kvs_status kvs_learned_kind_from_name(const char *name, kvs_learned_kind *out) {
    for (int i = 0; name && out && i < 3; i++)
        if (strcmp(name, kind_names[i]) == 0) {
            *out = (kvs_learned_kind)i;
            return KVS_OK;
        }
    return kvs_error(KVS_ERR_INVALID_ARGUMENT, "learned policy kind '%s': want retention, indexer or rl", name ? name : "(null)");
}

/* ---- RNG ------------------------------------------------------------------------------------ */

uint64_t lrn_next(lrn_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
double lrn_uniform(lrn_rng *r) { return ((double)(lrn_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
double lrn_normal(lrn_rng *r) {
    double u1 = lrn_uniform(r), u2 = lrn_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- layout --------------------------------------------------------------------------------- */

int64_t lrn_ret_block(const kvs_learned *w) { return (int64_t)w->G * w->dim + w->G + (int64_t)w->H * w->G + w->H; }
int64_t lrn_idx_block(const kvs_learned *w) { return (int64_t)w->G * w->hd + (int64_t)w->G * w->dim + 2 * w->G + 3; }

static int64_t n_params(const kvs_learned *w) {
    switch (w->kind) {
    case KVS_LEARNED_RETENTION: return w->L * lrn_ret_block(w) + 2;
    case KVS_LEARNED_INDEXER: return w->L * lrn_idx_block(w);
    default: return (int64_t)w->G * LRN_RL_F + 2 * w->G + 1 + w->L;
    }
}

/* One named tensor of the side file: offset into p, ne0 (fastest), ne1. */
typedef struct blk { char name[48]; int64_t off, ne0, ne1; } blk;

static int blocks(const kvs_learned *w, blk *b, int max) {
    int n = 0;
#define ADD(nm, o, a, c)                                                                           \
    do {                                                                                           \
        if (n < max) {                                                                             \
            snprintf(b[n].name, sizeof b[n].name, "%s", nm);                                       \
            b[n].off = (o), b[n].ne0 = (a), b[n].ne1 = (c);                                        \
        }                                                                                          \
        n++;                                                                                       \
    } while (0)
    char nm[48];
    int64_t G = w->G;
    if (w->kind == KVS_LEARNED_RETENTION) {
        for (int l = 0; l < w->L; l++) {
            int64_t o = l * lrn_ret_block(w);
            snprintf(nm, sizeof nm, "retention.%d.w1", l); ADD(nm, o, w->dim, G);
            o += G * w->dim;
            snprintf(nm, sizeof nm, "retention.%d.b1", l); ADD(nm, o, G, 1);
            o += G;
            snprintf(nm, sizeof nm, "retention.%d.w2", l); ADD(nm, o, G, w->H);
            o += G * w->H;
            snprintf(nm, sizeof nm, "retention.%d.b2", l); ADD(nm, o, w->H, 1);
        }
        ADD("retention.proj", w->L * lrn_ret_block(w), 2, 1);
    } else if (w->kind == KVS_LEARNED_INDEXER) {
        for (int l = 0; l < w->L; l++) {
            int64_t o = l * lrn_idx_block(w);
            snprintf(nm, sizeof nm, "indexer.%d.wk", l); ADD(nm, o, w->hd, G);
            o += G * w->hd;
            snprintf(nm, sizeof nm, "indexer.%d.wx", l); ADD(nm, o, w->dim, G);
            o += G * w->dim;
            snprintf(nm, sizeof nm, "indexer.%d.b1", l); ADD(nm, o, G, 1);
            o += G;
            snprintf(nm, sizeof nm, "indexer.%d.w2", l); ADD(nm, o, G, 1);
            o += G;
            snprintf(nm, sizeof nm, "indexer.%d.b2d", l); ADD(nm, o, 3, 1);
        }
    } else {
        ADD("rl.w1", 0, LRN_RL_F, G);
        ADD("rl.b1", G * LRN_RL_F, G, 1);
        ADD("rl.w2", G * LRN_RL_F + G, G, 1);
        ADD("rl.b2", G * LRN_RL_F + 2 * G, 1, 1);
        ADD("rl.layer_bias", G * LRN_RL_F + 2 * G + 1, w->L, 1);
    }
#undef ADD
    return n;
}

/* ---- create / destroy ----------------------------------------------------------------------- */

static kvs_status check_hp(const kvs_model_hparams *hp, const char *op) {
    if (!hp || hp->n_layers < 1 || hp->n_kv_heads < 1 || hp->n_heads < hp->n_kv_heads || hp->head_dim < 1 || hp->dim < 1 ||
        hp->n_kv_heads > 256)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: bad model shape", op);
    return KVS_OK;
}

static kvs_status alloc_learned(kvs_learned **out, kvs_learned_kind kind, int L, int H, int NH, int hd, int dim, int vocab) {
    kvs_learned *w = calloc(1, sizeof *w);
    if (!w) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_learned: out of host memory");
    w->kind = kind;
    w->L = L, w->H = H, w->NH = NH, w->hd = hd, w->dim = dim, w->vocab = vocab;
    w->G = kind == KVS_LEARNED_RL ? RL_HIDDEN : GATE_HIDDEN;
    w->n = n_params(w);
    w->p = calloc((size_t)w->n, sizeof *w->p);
    if (!w->p) {
        free(w);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_learned: out of host memory");
    }
    *out = w;
    return KVS_OK;
}

kvs_status kvs_learned_create(kvs_learned **out, kvs_learned_kind kind, const kvs_model_hparams *hp, uint64_t seed) {
    const char *op = "kvs_learned_create";
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    KVS_TRY(check_hp(hp, op));
    if ((int)kind < 0 || (int)kind > 2) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: bad kind %d", op, (int)kind);
    kvs_learned *w;
    KVS_TRY(alloc_learned(&w, kind, hp->n_layers, hp->n_kv_heads, hp->n_heads, hp->head_dim, hp->dim, hp->vocab));
    lrn_rng r = {seed * 0x2545F4914F6CDD1Dull + 7};
    /* weights ~ N(0, 0.02) as trimkv RetentionGate.reset_parameters; biases 0; gate bias 10 */
    for (int64_t i = 0; i < w->n; i++) w->p[i] = (float)(0.02 * lrn_normal(&r));
    blk b[512];
    int nb = blocks(w, b, 512);
    for (int i = 0; i < nb && i < 512; i++) {
        const char *s = strrchr(b[i].name, '.') + 1;
        float v = NAN;
        if (strcmp(s, "b1") == 0 || strcmp(s, "layer_bias") == 0 || strcmp(s, "b2d") == 0 || strcmp(s, "b2") == 0) v = 0.0f;
        if (w->kind == KVS_LEARNED_RETENTION && strcmp(s, "b2") == 0) v = 10.0f;
        if (!isnan(v))
            for (int64_t j = 0; j < b[i].ne0 * b[i].ne1; j++) w->p[b[i].off + j] = v;
        if (strcmp(s, "proj") == 0) w->p[b[i].off] = 1.0f, w->p[b[i].off + 1] = 0.0f;
    }
    if (w->kind == KVS_LEARNED_RL) lrn_rl_heuristic_init(w, &r);
    *out = w;
    return KVS_OK;
}

void kvs_learned_destroy(kvs_learned **lw) {
    if (!lw || !*lw) return;
    free((*lw)->p);
    free(*lw);
    *lw = NULL;
}

kvs_learned_kind kvs_learned_get_kind(const kvs_learned *lw) { return lw ? lw->kind : KVS_LEARNED_RETENTION; }

float *kvs_learned_params(kvs_learned *lw, int64_t *n) {
    if (n) *n = lw ? lw->n : 0;
    return lw ? lw->p : NULL;
}

/* ---- side files ----------------------------------------------------------------------------- */

kvs_status kvs_learned_save(const kvs_learned *w, const char *path) {
    const char *op = "kvs_learned_save";
    if (!w || !path) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    kvs_gguf_writer *g = NULL;
    KVS_TRY(kvs_gguf_writer_create(&g, 3));
    kvs_status s = kvs_gguf_writer_set_str(g, "general.architecture", "kvsieve-policy");
    if (s == KVS_OK) s = kvs_gguf_writer_set_str(g, "kvsieve.policy.kind", kvs_learned_kind_name(w->kind));
    if (s == KVS_OK) s = kvs_gguf_writer_set_u32(g, "kvsieve.policy.n_layers", (uint32_t)w->L);
    if (s == KVS_OK) s = kvs_gguf_writer_set_u32(g, "kvsieve.policy.n_kv_heads", (uint32_t)w->H);
    if (s == KVS_OK) s = kvs_gguf_writer_set_u32(g, "kvsieve.policy.n_heads", (uint32_t)w->NH);
    if (s == KVS_OK) s = kvs_gguf_writer_set_u32(g, "kvsieve.policy.head_dim", (uint32_t)w->hd);
    if (s == KVS_OK) s = kvs_gguf_writer_set_u32(g, "kvsieve.policy.dim", (uint32_t)w->dim);
    if (s == KVS_OK) s = kvs_gguf_writer_set_u32(g, "kvsieve.policy.vocab", (uint32_t)w->vocab);
    if (s == KVS_OK) s = kvs_gguf_writer_set_u32(g, "kvsieve.policy.hidden", (uint32_t)w->G);
    if (s == KVS_OK) s = kvs_gguf_writer_set_u64(g, "kvsieve.policy.train_steps", (uint64_t)w->train_steps);
    if (s == KVS_OK) s = kvs_gguf_writer_set_u64(g, "kvsieve.policy.train_seed", w->train_seed);
    if (s == KVS_OK) s = kvs_gguf_writer_set_f64(g, "kvsieve.policy.train_budget", w->train_budget);
    blk b[512];
    int nb = blocks(w, b, 512);
    for (int i = 0; i < nb && i < 512 && s == KVS_OK; i++) {
        int64_t ne[2] = {b[i].ne0, b[i].ne1};
        s = kvs_gguf_writer_add_tensor(g, b[i].name, KVS_GGML_F32, b[i].ne1 > 1 ? 2 : 1, ne, w->p + b[i].off);
    }
    char tmp[4096];
    if (s == KVS_OK && snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        s = kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: path too long", op);
    if (s == KVS_OK) s = kvs_gguf_writer_write(g, tmp);
    kvs_gguf_writer_destroy(&g);
    if (s == KVS_OK && rename(tmp, path) != 0) {
        remove(tmp);
        s = kvs_error(KVS_ERR_IO, "%s: cannot rename %s to %s", op, tmp, path);
    }
    return s;
}

static kvs_status get_u(const kvs_gguf *g, const char *path, const char *key, int *v) {
    int64_t x;
    if (kvs_gguf_get_int(g, key, &x) != KVS_OK || x < 1 || x > (1 << 24))
        return kvs_error(KVS_ERR_FORMAT, "%s: not a kvsieve policy file (key %s missing or out of range)", path, key);
    *v = (int)x;
    return KVS_OK;
}

kvs_status kvs_learned_load(kvs_learned **out, const char *path, const kvs_model_hparams *hp, int want_kind) {
    const char *op = "kvs_learned_load";
    if (!out || !path) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    *out = NULL;
    kvs_gguf *g = NULL;
    KVS_TRY(kvs_gguf_open(&g, path));
    char kname[32];
    kvs_learned_kind kind;
    kvs_status s = KVS_OK;
    if (kvs_gguf_get_string(g, "kvsieve.policy.kind", kname, sizeof kname) != KVS_OK ||
        kvs_learned_kind_from_name(kname, &kind) != KVS_OK)
        s = kvs_error(KVS_ERR_FORMAT, "%s: not a kvsieve policy file (kvsieve.policy.kind missing or unknown)", path);
    int L = 0, H = 0, NH = 0, hd = 0, dim = 0, vocab = 0, G = 0;
    if (s == KVS_OK) s = get_u(g, path, "kvsieve.policy.n_layers", &L);
    if (s == KVS_OK) s = get_u(g, path, "kvsieve.policy.n_kv_heads", &H);
    if (s == KVS_OK) s = get_u(g, path, "kvsieve.policy.n_heads", &NH);
    if (s == KVS_OK) s = get_u(g, path, "kvsieve.policy.head_dim", &hd);
    if (s == KVS_OK) s = get_u(g, path, "kvsieve.policy.dim", &dim);
    if (s == KVS_OK) s = get_u(g, path, "kvsieve.policy.vocab", &vocab);
    if (s == KVS_OK) s = get_u(g, path, "kvsieve.policy.hidden", &G);
    if (s == KVS_OK && H > 256) s = kvs_error(KVS_ERR_FORMAT, "%s: %d kv heads (at most 256)", path, H);
    if (s == KVS_OK && want_kind >= 0 && (int)kind != want_kind)
        s = kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: the policy file is of kind '%s', not '%s'", path, kname,
                      kvs_learned_kind_name((kvs_learned_kind)want_kind));
    if (s == KVS_OK && hp &&
        (hp->n_layers != L || hp->n_kv_heads != H || hp->n_heads != NH || hp->head_dim != hd || hp->dim != dim || hp->vocab != vocab))
        s = kvs_error(KVS_ERR_SHAPE,
                      "%s: trained for another model (%d layers, %d heads, %d kv heads, head_dim %d, dim %d, vocab %d); this "
                      "model has %d layers, %d heads, %d kv heads, head_dim %d, dim %d, vocab %d",
                      path, L, NH, H, hd, dim, vocab, hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->head_dim, hp->dim, hp->vocab);
    /* the shape keys must describe the tensors present before anything is sized from them: a file
     * without a model to check against (hp NULL) could otherwise ask for 2^50 floats (found by
     * tests/fuzz/fuzz_policy) */
    if (s == KVS_OK) {
        kvs_learned shape;
        memset(&shape, 0, sizeof shape);
        shape.kind = kind;
        shape.L = L, shape.H = H, shape.NH = NH, shape.hd = hd, shape.dim = dim, shape.vocab = vocab;
        shape.G = kind == KVS_LEARNED_RL ? RL_HIDDEN : GATE_HIDDEN;
        int64_t want = n_params(&shape), have = 0;
        for (int64_t i = 0; i < kvs_gguf_n_tensors(g); i++) {
            const kvs_gguf_tensor_info *t = kvs_gguf_tensor(g, i);
            have += (int64_t)(t->nbytes / 4);   /* f32 elements (other types are refused below) */
        }
        if (shape.G != G)
            s = kvs_error(KVS_ERR_FORMAT, "%s: hidden width %d (this build uses %d)", path, G, shape.G);
        else if (want != have)
            s = kvs_error(KVS_ERR_FORMAT, "%s: the tensors hold %lld floats, a %s policy of the shape its keys give "
                          "(%d layers, %d kv heads, head_dim %d, dim %d) has %lld", path, (long long)have, kname, L, H,
                          hd, dim, (long long)want);
    }
    kvs_learned *w = NULL;
    if (s == KVS_OK) s = alloc_learned(&w, kind, L, H, NH, hd, dim, vocab);
    if (s == KVS_OK) {
        int64_t v;
        double d;
        if (kvs_gguf_get_int(g, "kvsieve.policy.train_steps", &v) == KVS_OK) w->train_steps = v;
        if (kvs_gguf_get_int(g, "kvsieve.policy.train_seed", &v) == KVS_OK) w->train_seed = (uint64_t)v;
        if (kvs_gguf_get_float(g, "kvsieve.policy.train_budget", &d) == KVS_OK) w->train_budget = d;
    }
    blk b[512];
    int nb = s == KVS_OK ? blocks(w, b, 512) : 0;
    if (nb > 512) s = kvs_error(KVS_ERR_FORMAT, "%s: too many tensors", path);
    if (s == KVS_OK && kvs_gguf_n_tensors(g) != nb)
        s = kvs_error(KVS_ERR_FORMAT, "%s: %lld tensors, a %s policy for %d layers has %d", path, (long long)kvs_gguf_n_tensors(g),
                      kname, L, nb);
    for (int i = 0; i < nb && s == KVS_OK; i++) {
        int64_t ti = kvs_gguf_find_tensor(g, b[i].name);
        const kvs_gguf_tensor_info *t = ti >= 0 ? kvs_gguf_tensor(g, ti) : NULL;
        if (!t) {
            s = kvs_error(KVS_ERR_FORMAT, "%s: tensor %s missing", path, b[i].name);
            break;
        }
        if (t->ggml_type != KVS_GGML_F32 || t->ne[0] != b[i].ne0 || t->ne[1] != b[i].ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
            s = kvs_error(KVS_ERR_FORMAT, "%s: tensor %s is %s [%lld, %lld], want f32 [%lld, %lld]", path, b[i].name,
                          kvs_ggml_type_name(t->ggml_type), (long long)t->ne[0], (long long)t->ne[1], (long long)b[i].ne0,
                          (long long)b[i].ne1);
            break;
        }
        memcpy(w->p + b[i].off, t->data, (size_t)(b[i].ne0 * b[i].ne1) * sizeof(float));
        for (int64_t j = 0; j < b[i].ne0 * b[i].ne1; j++)
            if (!isfinite(w->p[b[i].off + j])) {
                s = kvs_error(KVS_ERR_FORMAT, "%s: tensor %s holds a non-finite weight at %lld", path, b[i].name, (long long)j);
                break;
            }
    }
    kvs_gguf_close(&g);
    if (s != KVS_OK) {
        kvs_learned_destroy(&w);
        return s;
    }
    *out = w;
    return KVS_OK;
}

/* ---- the scorers ---------------------------------------------------------------------------- */

void lrn_ret_gate(const kvs_learned *w, int l, const float *xn, float *pre, float *g, float *logbeta) {
    const float *W1 = w->p + l * lrn_ret_block(w), *b1 = W1 + (int64_t)w->G * w->dim, *W2 = b1 + w->G, *b2 = W2 + (int64_t)w->H * w->G;
    for (int j = 0; j < w->G; j++) {
        float a = b1[j];
        const float *r = W1 + (int64_t)j * w->dim;
        for (int i = 0; i < w->dim; i++) a += r[i] * xn[i];
        pre[j] = a;
        g[j] = lrn_silu(a);
    }
    for (int h = 0; h < w->H; h++) {
        float z = b2[h];
        for (int j = 0; j < w->G; j++) z += W2[h * w->G + j] * g[j];
        logbeta[h] = lrn_logsigmoid(z);
    }
}

void lrn_idx_u(const kvs_learned *w, int l, const float *xn, float *u) {
    const float *Wx = w->p + l * lrn_idx_block(w) + (int64_t)w->G * w->hd, *b1 = Wx + (int64_t)w->G * w->dim;
    for (int j = 0; j < w->G; j++) {
        float a = b1[j];
        for (int i = 0; i < w->dim; i++) a += Wx[(int64_t)j * w->dim + i] * xn[i];
        u[j] = a;
    }
}

float lrn_idx_m(const kvs_learned *w, int l, const float *u, const float *k, float *pre, float *g) {
    const float *Wk = w->p + l * lrn_idx_block(w), *w2 = Wk + (int64_t)w->G * w->hd + (int64_t)w->G * w->dim + w->G;
    float m = w2[w->G];
    for (int j = 0; j < w->G; j++) {
        float a = u[j];
        for (int i = 0; i < w->hd; i++) a += Wk[(int64_t)j * w->hd + i] * k[i];
        pre[j] = a;
        g[j] = lrn_silu(a);
        m += w2[j] * g[j];
    }
    return m;
}

float lrn_rl_score(const kvs_learned *w, int l, const float *f, float *pre, float *g) {
    const float *W1 = w->p, *b1 = W1 + w->G * LRN_RL_F, *w2 = b1 + w->G, *b2 = w2 + w->G, *lb = b2 + 1;
    float s = b2[0] + lb[l];
    for (int j = 0; j < w->G; j++) {
        float a = b1[j];
        for (int i = 0; i < LRN_RL_F; i++) a += W1[j * LRN_RL_F + i] * f[i];
        pre[j] = a;
        g[j] = lrn_silu(a);
        s += w2[j] * g[j];
    }
    return s;
}

/* The rl policy's starting point (ours): hidden unit 0 computes H2O's score,
 *   pre0 = 3 + f0 + 10 f8  (mean attention received since entering the cache, + 10 inside the
 *                           recent half of the budget: H2O's kept window),
 * read out with w2[0] = LRN_RL_INIT_SCALE (silu is increasing above -1.28 and pre0 >= 3 here, so
 * the ranking is exactly H2O's: kvsieve eval gives identical numbers; the scale sets how greedy
 * the Gumbel top-k sampling starts). The other hidden units start with W1 ~ N(0, 0.3) and w2 = 0:
 * REINFORCE grows them from there. */
void lrn_rl_heuristic_init(kvs_learned *w, lrn_rng *r) {
    float *W1 = w->p, *b1 = W1 + w->G * LRN_RL_F, *w2 = b1 + w->G, *b2 = w2 + w->G, *lb = b2 + 1;
    for (int j = 0; j < w->G; j++) {
        for (int i = 0; i < LRN_RL_F; i++) W1[j * LRN_RL_F + i] = j == 0 ? 0.0f : (float)(0.3 * lrn_normal(r));
        b1[j] = 0.0f;
        w2[j] = 0.0f;
    }
    W1[0] = 1.0f, W1[8] = 10.0f;
    b1[0] = 3.0f;
    w2[0] = LRN_RL_INIT_SCALE;
    b2[0] = 0.0f;
    for (int l = 0; l < w->L; l++) lb[l] = 0.0f;
}

/* Per-policy state: NF floats per (layer, kv head, cache row). */
typedef struct lpol {
    kvs_learned *w;
    int L, H, NF;
    int64_t cap;
    float *rows;        /* [L][H][cap][NF] */
    float *entropy;     /* [L][H] rl: normalised attention entropy of the last step */
    int32_t *cur;       /* [L] newest position seen */
    float *pre, *g;     /* [G] scratch */
    float *feat;        /* [H][cap][F] rl features of the last scoring */
    float *sc;          /* [H][cap] rl unperturbed scores */
    float *pert;        /* [H][cap] rl perturbed scores */
    int scored_layer;   /* rl training: layer of feat/sc/pert */
    int64_t scored_len[256]; /* rl: rows per head at the last scoring (of scored_layer) */
    int64_t *layer_len;      /* [L][H] rows per head at each layer's last scoring (latent folds) */
    lrn_rl_rec *rec;
    kvs_latent *latent;  /* indexer: evicted rows fold into it (owned) */
    float *lk, *lv;      /* [L][H][cap][hd] keys / values at the last scoring (latent) */
} lpol;

static float *rowp(lpol *p, int l, int h, int64_t r) { return p->rows + (((int64_t)l * p->H + h) * p->cap + r) * p->NF; }

static kvs_policy_needs lpol_needs(const void *self, int layer, int64_t budget) {
    const lpol *p = self;
    (void)layer, (void)budget;
    kvs_policy_needs n = {KVS_POLICY_NEED_OBSERVE, 0};
    if (p->w->kind == KVS_LEARNED_RETENTION) n.flags |= KVS_POLICY_NEED_X;
    if (p->w->kind == KVS_LEARNED_INDEXER) n.flags |= KVS_POLICY_NEED_X | KVS_POLICY_NEED_KEYS;
    if (p->latent) n.flags |= KVS_POLICY_NEED_KEYS | KVS_POLICY_NEED_VALUES;
    if (p->w->kind == KVS_LEARNED_RL) n.flags |= KVS_POLICY_NEED_ACC_MASS | KVS_POLICY_NEED_KEYS | KVS_POLICY_NEED_VALUES;
    return n;
}

static kvs_status lpol_begin(void *self, const kvs_policy_shape *sh) {
    lpol *p = self;
    if (sh->n_layers != p->L || sh->n_kv_heads != p->H || sh->head_dim != p->w->hd)
        return kvs_error(KVS_ERR_SHAPE, "learned policy (%d layers, %d kv heads) started on a model with %d layers, %d kv heads", p->L,
                         p->H, sh->n_layers, sh->n_kv_heads);
    if (sh->capacity != p->cap) {
        free(p->rows), free(p->feat), free(p->sc), free(p->pert);
        p->cap = sh->capacity;
        p->rows = malloc((size_t)(p->L * p->H * p->cap * p->NF) * sizeof(float));
        p->feat = malloc((size_t)(p->H * p->cap * LRN_RL_F) * sizeof(float));
        p->sc = malloc((size_t)(p->H * p->cap) * sizeof(float));
        p->pert = malloc((size_t)(p->H * p->cap) * sizeof(float));
        if (p->latent) {
            free(p->lk), free(p->lv);
            p->lk = malloc((size_t)(p->L * p->H * p->cap * p->w->hd) * sizeof(float));
            p->lv = malloc((size_t)(p->L * p->H * p->cap * p->w->hd) * sizeof(float));
            if (!p->lk || !p->lv) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "learned policy: out of host memory");
        }
        if (!p->rows || !p->feat || !p->sc || !p->pert) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "learned policy: out of host memory");
    }
    memset(p->rows, 0, (size_t)(p->L * p->H * p->cap * p->NF) * sizeof(float));
    memset(p->entropy, 0, (size_t)(p->L * p->H) * sizeof(float));
    for (int l = 0; l < p->L; l++) p->cur[l] = 0;
    p->scored_layer = -1;
    for (int i = 0; i < p->L * p->H; i++) p->layer_len[i] = -1; /* not scored yet */
    kvs_latent_reset(p->latent);
    return KVS_OK;
}

static kvs_status lpol_observe(void *self, int l, const kvs_layer_stats *st, const int64_t *len, int64_t n_new) {
    lpol *p = self;
    kvs_learned *w = p->w;
    if (w->kind != KVS_LEARNED_RL) {
        if (!st || !st->x || st->n_x_rows < n_new)
            return kvs_error(KVS_ERR_STATE, "learned policy: layer %d input rows missing (want_x)", l);
        float lb[256];
        for (int64_t j = 0; j < n_new; j++) {
            const float *xn = st->x + (st->n_x_rows - n_new + j) * w->dim;
            if (w->kind == KVS_LEARNED_RETENTION) {
                lrn_ret_gate(w, l, xn, p->pre, p->g, lb);
                for (int h = 0; h < p->H; h++) rowp(p, l, h, len[h] - n_new + j)[0] = lb[h];
            } else {
                lrn_idx_u(w, l, xn, p->g);
                for (int h = 0; h < p->H; h++) {
                    float *r = rowp(p, l, h, len[h] - n_new + j);
                    memcpy(r, p->g, (size_t)w->G * sizeof(float));
                    r[w->G] = NAN; /* m not computed yet: needs the key */
                }
            }
        }
        return KVS_OK;
    }
    /* rl: per-row max attention and EMA of recent mass; per-head entropy */
    if (!st || !st->key_mass) return KVS_OK;
    for (int h = 0; h < p->H; h++) {
        const float *km = st->key_mass + h * st->n_kv;
        double sum = 0.0, ent = 0.0;
        int64_t n = len[h] < st->n_kv ? len[h] : st->n_kv;
        for (int64_t r = 0; r < n; r++) sum += km[r];
        for (int64_t r = 0; r < len[h]; r++) {
            float *x = rowp(p, l, h, r);
            if (r >= len[h] - n_new) x[0] = x[1] = 0.0f;
            float a = r < n ? km[r] / (float)n_new : 0.0f;
            if (a > x[0]) x[0] = a;
            x[1] = 0.8f * x[1] + a;
            if (r < n && sum > 0 && km[r] > 0) {
                double q = km[r] / sum;
                ent -= q * log(q);
            }
        }
        p->entropy[l * p->H + h] = n > 1 ? (float)(ent / log((double)n)) : 0.0f;
    }
    return KVS_OK;
}

static kvs_status lpol_compact(void *self, int l, const int32_t *keep, const int64_t *n_keep, int64_t stride);

static kvs_status lpol_score(void *self, const kvs_policy_input *in, float *scores) {
    lpol *p = self;
    kvs_learned *w = p->w;
    int l = in->layer;
    for (int h = 0; h < in->n_kv_heads; h++) {
        const int32_t *pos = in->pos + h * in->stride;
        for (int64_t r = 0; r < in->len[h]; r++) {
            float *x = rowp(p, l, h, r);
            double age = (double)in->cur_pos - pos[r];
            if (age < 0) age = 0;
            float s;
            if (w->kind == KVS_LEARNED_RETENTION) {
                const float *proj = w->p + w->L * lrn_ret_block(w);
                s = proj[0] * (float)age * x[0] + proj[1];
            } else if (w->kind == KVS_LEARNED_INDEXER) {
                if (isnan(x[w->G])) x[w->G] = lrn_idx_m(w, l, x, in->keys + (h * in->stride + r) * w->hd, p->pre, p->g);
                const float *d = w->p + l * lrn_idx_block(w) + (int64_t)w->G * w->hd + (int64_t)w->G * w->dim + 2 * w->G;
                s = x[w->G] + d[1] * (float)log1p(age) + d[2];
            } else {
                float *f = p->feat + (h * p->cap + r) * LRN_RL_F;
                double seen = age + 1.0;
                const float *k = in->keys + (h * in->stride + r) * w->hd, *v = in->values + (h * in->stride + r) * w->hd;
                double kn = 0, vn = 0;
                for (int i = 0; i < w->hd; i++) kn += (double)k[i] * k[i], vn += (double)v[i] * v[i];
                f[0] = (float)(in->acc_mass[h * in->stride + r] / seen);
                f[1] = x[0];
                f[2] = x[1] / 5.0f;
                f[3] = p->entropy[l * p->H + h];
                f[4] = (float)sqrt(vn) / (float)sqrt((double)w->hd);
                f[5] = (float)sqrt(kn) / (float)sqrt((double)w->hd);
                f[6] = in->cur_pos > 0 ? (float)pos[r] / (float)in->cur_pos : 1.0f;
                f[7] = (float)(log1p(age) / log(512.0));
                f[8] = 2.0 * age < (double)in->budget ? 1.0f : 0.0f; /* in the recent half of the budget */
                s = lrn_rl_score(w, l, f, p->pre, p->g);
                p->sc[h * p->cap + r] = s;
                if (p->rec) { /* Gumbel top-k: perturb, the evictor's top-k then samples */
                    double u = lrn_uniform(&p->rec->rng);
                    s = s - (float)log(-log(u));
                    p->pert[h * p->cap + r] = s;
                }
            }
            if (!isfinite(s)) s = s > 0 ? 3e38f : -3e38f;
            scores[h * in->stride + r] = s;
        }
        p->scored_len[h] = in->len[h];
        p->layer_len[l * p->H + h] = in->len[h];
        if (p->latent) { /* the rows' keys and values, for folding the evicted ones */
            size_t off = ((size_t)l * p->H + h) * p->cap * w->hd, nb = (size_t)(in->len[h] * w->hd) * sizeof(float);
            memcpy(p->lk + off, in->keys + h * in->stride * w->hd, nb);
            memcpy(p->lv + off, in->values + h * in->stride * w->hd, nb);
        }
    }
    p->scored_layer = l;
    return KVS_OK;
}

/* rl training: d log PL(kept in perturbed order) / d theta, accumulated into rec->grad. */
static void rl_grad(lpol *p, int l, const int32_t *keep, const int64_t *n_keep, int64_t stride) {
    kvs_learned *w = p->w;
    int64_t cap = p->cap;
    float *ds = malloc((size_t)cap * sizeof *ds);
    int64_t *ord = malloc((size_t)cap * sizeof *ord);
    uint8_t *in_r = malloc((size_t)cap);
    if (!ds || !ord || !in_r) goto out;
    for (int h = 0; h < p->H; h++) {
        int64_t n = p->scored_len[h], k = n_keep[h];
        if (k >= n) continue;
        const float *sc = p->sc + h * cap, *pe = p->pert + h * cap;
        for (int64_t i = 0; i < k; i++) ord[i] = keep[h * stride + i];
        for (int64_t i = 1; i < k; i++) /* insertion sort by perturbed score, descending */
            for (int64_t j = i; j > 0 && pe[ord[j]] > pe[ord[j - 1]]; j--) {
                int64_t t = ord[j];
                ord[j] = ord[j - 1], ord[j - 1] = t;
            }
        memset(ds, 0, (size_t)n * sizeof *ds);
        memset(in_r, 1, (size_t)n);
        for (int64_t i = 0; i < k; i++) {
            double mx = -1e30, z = 0;
            for (int64_t j = 0; j < n; j++)
                if (in_r[j] && sc[j] > mx) mx = sc[j];
            for (int64_t j = 0; j < n; j++)
                if (in_r[j]) z += exp(sc[j] - mx);
            for (int64_t j = 0; j < n; j++)
                if (in_r[j]) ds[j] -= (float)(exp(sc[j] - mx) / z);
            ds[ord[i]] += 1.0f;
            in_r[ord[i]] = 0;
        }
        /* backprop through the MLP */
        float *W1 = w->p, *b1 = W1 + w->G * LRN_RL_F, *w2 = b1 + w->G;
        float *gW1 = p->rec->grad, *gb1 = gW1 + w->G * LRN_RL_F, *gw2 = gb1 + w->G, *gb2 = gw2 + w->G, *glb = gb2 + 1;
        (void)b1;
        for (int64_t j = 0; j < n; j++) {
            if (ds[j] == 0.0f) continue;
            const float *f = p->feat + (h * cap + j) * LRN_RL_F;
            lrn_rl_score(w, l, f, p->pre, p->g);
            gb2[0] += ds[j];
            glb[l] += ds[j];
            for (int q = 0; q < w->G; q++) {
                gw2[q] += ds[j] * p->g[q];
                float dp = ds[j] * w2[q] * lrn_dsilu(p->pre[q]);
                gb1[q] += dp;
                for (int i = 0; i < LRN_RL_F; i++) gW1[q * LRN_RL_F + i] += dp * f[i];
            }
        }
    }
    p->rec->event_pending = 1;
out:
    free(ds), free(ord), free(in_r);
}

static kvs_status lpol_compact(void *self, int l, const int32_t *keep, const int64_t *n_keep, int64_t stride) {
    lpol *p = self;
    if (p->rec && p->w->kind == KVS_LEARNED_RL && p->scored_layer == l) rl_grad(p, l, keep, n_keep, stride);
    if (p->latent && p->layer_len[l * p->H] >= 0) /* fold the evicted rows into the latent memory */
        for (int h = 0; h < p->H; h++) {
            int64_t i = 0, hd = p->w->hd;
            size_t off = ((size_t)l * p->H + h) * p->cap * hd;
            for (int64_t r = 0; r < p->layer_len[l * p->H + h]; r++) {
                if (i < n_keep[h] && keep[h * stride + i] == r) {
                    i++;
                    continue;
                }
                KVS_TRY(kvs_latent_fold(p->latent, l, h, p->lk + off + r * hd, p->lv + off + r * hd, 1));
            }
        }
    for (int h = 0; h < p->H; h++) {
        for (int64_t i = 0; i < n_keep[h]; i++) {
            int32_t r = keep[h * stride + i];
            if (r != i) memmove(rowp(p, l, h, i), rowp(p, l, h, r), (size_t)p->NF * sizeof(float));
        }
        memset(rowp(p, l, h, n_keep[h]), 0, (size_t)((p->cap - n_keep[h]) * p->NF) * sizeof(float));
    }
    return KVS_OK;
}

static void lpol_destroy(void *self) {
    lpol *p = self;
    if (!p) return;
    kvs_learned_destroy(&p->w);
    kvs_latent_destroy(&p->latent);
    free(p->lk), free(p->lv);
    free(p->rows), free(p->entropy), free(p->cur), free(p->layer_len), free(p->pre), free(p->g), free(p->feat), free(p->sc), free(p->pert);
    free(p);
}

static const kvs_policy_ops lpol_ops[3] = {
    {"retention", lpol_needs, lpol_score, lpol_begin, lpol_observe, lpol_compact, lpol_destroy},
    {"indexer", lpol_needs, lpol_score, lpol_begin, lpol_observe, lpol_compact, lpol_destroy},
    {"rl", lpol_needs, lpol_score, lpol_begin, lpol_observe, lpol_compact, lpol_destroy},
};

kvs_status kvs_learned_policy(kvs_policy **out, const kvs_learned *src, float threshold, float alpha, int latent_features) {
    const char *op = "kvs_learned_policy";
    if (!out || !src) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    *out = NULL;
    if (latent_features < 0 || latent_features > 4096)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: latent_features %d outside [0, 4096]", op, latent_features);
    if (isnan(threshold) || threshold == INFINITY)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: threshold %g: want a finite score or -INFINITY (off)", op, (double)threshold);
    if (!(alpha >= 0.0f && alpha <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: floor alpha %g outside [0, 1]", op, (double)alpha);
    lpol *p = calloc(1, sizeof *p);
    if (!p) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    kvs_status s = alloc_learned(&p->w, src->kind, src->L, src->H, src->NH, src->hd, src->dim, src->vocab);
    if (s != KVS_OK) {
        free(p);
        return s;
    }
    memcpy(p->w->p, src->p, (size_t)src->n * sizeof(float));
    p->L = src->L, p->H = src->H;
    p->NF = src->kind == KVS_LEARNED_RETENTION ? 1 : src->kind == KVS_LEARNED_INDEXER ? src->G + 1 : 2;
    p->entropy = calloc((size_t)(p->L * p->H), sizeof(float));
    p->cur = calloc((size_t)p->L, sizeof(int32_t));
    p->layer_len = malloc((size_t)(p->L * p->H) * sizeof(int64_t));
    p->pre = calloc((size_t)src->G, sizeof(float));
    p->g = calloc((size_t)src->G, sizeof(float));
    if (!p->entropy || !p->cur || !p->layer_len || !p->pre || !p->g) {
        lpol_destroy(p);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    if (latent_features > 0 && src->kind == KVS_LEARNED_INDEXER) {
        s = kvs_latent_create(&p->latent, src->L, src->H, src->NH, src->hd, latent_features, 0.0f, 0x1D3Eull);
        if (s != KVS_OK) {
            lpol_destroy(p);
            return s;
        }
    }
    s = kvs_policy_custom(out, &lpol_ops[src->kind], p, alpha, 0);
    if (s != KVS_OK) {
        lpol_destroy(p);
        return s;
    }
    kvs_policy_set_latent(*out, p->latent);
    (*out)->threshold = threshold; /* the evictor's threshold mode (policy_internal.h) */
    return s;
}

void lrn_policy_set_rl_rec(kvs_policy *pol, lrn_rl_rec *rec) {
    if (pol && pol->ops && pol->ops->destroy == lpol_destroy) ((lpol *)pol->self)->rec = rec;
}

kvs_learned *lrn_policy_weights(kvs_policy *pol) {
    return pol && pol->ops && pol->ops->destroy == lpol_destroy ? ((lpol *)pol->self)->w : NULL;
}
