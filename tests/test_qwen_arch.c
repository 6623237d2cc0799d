/* The qwen2, qwen3 and dream architectures (issue 15) against an independent oracle, one backend per
 * run (test_qwen_arch --backend cpu|opencl|vulkan --data tests/data/qwen).
 * (Over 600 lines: one fixture set's tests, sharing its readers and the GGUF/safetensors writers.)
 * Fixtures: models/tiny-{qwen2,qwen3,dream}.gguf and tests/data/qwen/, written by
 * tools/fixtures/make_qwen_models.py (random weights; transformers' Qwen2ForCausalLM /
 * Qwen3ForCausalLM in float64 for qwen2/qwen3, the script's float64 numpy forward, checked against
 * transformers, for dream's bidirectional shifted logits).
 *  - logits of a fixed 12-token sequence (dream: a sequence with masks, read shifted) match the
 *    reference; hparams the files carry (theta 1e6, head_dim 32 != 64/4 from key_length, tied and
 *    separate outputs, biases, q/k norm, NEOX RoPE, the shift) are as written;
 *  - the safetensors path: a directory with transformers' config.json and the same weights under
 *    the Hugging Face names loads to the same model (bit-identical logits to the GGUF);
 *  - greedy AR tokens (24) identical to transformers' for qwen2/qwen3; eviction (h2o, critical) runs on
 *    them and expected (no model of a q bias / q norm) refuses them;
 *  - dream: kvs_generate_dlm without a cache = the script's reference decodes; every schedule at full
 *    refresh (prefix/dual one step per block, delayed reload 1, elastic gamma 1, WaveFilter budget 1
 *    over dual) = no cache; every schedule at default settings (steps that recompute only some rows,
 *    where the row before each masked position must be computed) decodes the whole answer; a custom
 *    schedule that does not compute that row, an empty prompt (nothing precedes position 0) and
 *    autoregressive decoding of dream are refused.
 *
 * Tolerance, derived: the file's f16 weights are exactly the oracle's (the script rounds them
 * before both), so the difference is f32 arithmetic against float64: a dot product of depth k <= 128
 * has relative error <= k * 2^-24 = 7.6e-6 (worst case), about 16 such products lie on a logit's path
 * (7 per layer, the output), and the softmax/RMSNorm/RoPE add a few ulps each; transformers keeps its
 * RoPE frequencies in float32 (the script measured that as <= 6e-6 absolute on logits of rms ~3).
 * Checked: max |delta| <= 2e-4 * rms(ref) (the worst-case bound 16 * 7.6e-6 = 1.2e-4 relative to the
 * terms of a logit, whose size is that of the logits here, plus transformers' float32 RoPE
 * frequencies, 2e-6 relative) and normalised MSE <= 1e-8; measured: 1.6e-6 to 3.7e-6 * rms, nmse
 * 1e-13 to 4e-13 on CPU, OpenCL (PoCL) and Vulkan (lavapipe); the figures are printed per backend. The greedy and decode references record
 * their smallest margins (ref.json: top-2 logit margin >= 0.017; probability margin of a commit
 * choice >= 2.5e-4), well above what the measured errors can move (|delta logit| <= 1.2e-5, so a
 * softmax probability p moves by <= 2.4e-5 * p). */
#include <check.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "probe.h"
#include "kvsieve/kvsieve.h"
#include "kvsieve/generate.h"
#include "kvsieve/gguf.h"
#include "kvsieve/model.h"
#include "kvsieve/model_file.h"
#include "kvsieve/policy.h"
#include "kvsieve/schedule.h"

static kvs_device_params g_params;
static const char *g_data = "tests/data/qwen";
static const char *const g_archs[3] = {"qwen2", "qwen3", "dream"};

static json_object *ref_json(void) {
    char p[4096];
    snprintf(p, sizeof p, "%s/ref.json", g_data);
    json_object *j = json_object_from_file(p);
    ck_assert_msg(j != NULL, "cannot parse %s", p);
    return j;
}

static json_object *jget(json_object *o, const char *k) {
    json_object *v = NULL;
    ck_assert_msg(json_object_object_get_ex(o, k, &v), "ref.json: no '%s'", k);
    return v;
}

static int64_t jints(json_object *arr, int32_t *dst, int64_t cap) {
    int64_t n = (int64_t)json_object_array_length(arr);
    ck_assert_int_le(n, cap);
    for (int64_t i = 0; i < n; i++) dst[i] = json_object_get_int(json_object_array_get_idx(arr, (size_t)i));
    return n;
}

static float *read_f32(const char *name, int64_t n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", g_data, name);
    FILE *f = fopen(p, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", p);
    float *v = malloc((size_t)n * sizeof *v);
    ck_assert(v && fread(v, sizeof *v, (size_t)n, f) == (size_t)n);
    fclose(f);
    return v;
}

static kvs_model *load(kvs_device *dev, const char *arch) {
    char name[64], path[4096];
    snprintf(name, sizeof name, "tiny-%s.gguf", arch);
    ck_assert_msg(kvs_model_locate(name, path, sizeof path) == KVS_OK, "%s", kvs_last_error());
    kvs_model *m = NULL;
    ck_assert_msg(kvs_model_load(&m, dev, path, NULL) == KVS_OK, "%s: %s", name, kvs_last_error());
    return m;
}

/* max |a - b| <= 2e-4 rms(b) and sum (a-b)^2 / sum b^2 <= 1e-8 over n values. */
static void assert_close(const float *a, const float *b, int64_t n, const char *what) {
    double se = 0, ss = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        se += d * d;
        ss += (double)b[i] * b[i];
        if (fabs(d) > mx || isnan(d)) mx = isnan(d) ? INFINITY : fabs(d);
    }
    double rms = sqrt(ss / (double)n), nmse = se / ss;
    printf("%s [%s]: max |delta| %.3g (rms %.3g, ratio %.2e), nmse %.2e\n", what, kvs_backend_name(g_params.backend), mx,
           rms, mx / rms, nmse);
    ck_assert_msg(mx <= 2e-4 * rms && nmse <= 1e-8, "%s [%s]: max |delta| %g vs rms %g, nmse %g", what,
                  kvs_backend_name(g_params.backend), mx, rms, nmse);
}

START_TEST(test_logits) {
    const char *arch = g_archs[_i];
    json_object *ref = ref_json(), *e = jget(jget(ref, "models"), arch);
    int32_t seq[64], rows[64];
    int64_t n = jints(_i == 2 ? jget(e, "masked_sequence") : jget(ref, "sequence"), seq, 64);
    kvs_device *dev = NULL;
    ck_assert(kvs_device_open(&dev, &g_params) == KVS_OK);
    kvs_model *m = load(dev, arch);
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    /* what the files carry */
    ck_assert_str_eq(kvs_arch_name(hp->arch), arch);
    ck_assert_int_eq(hp->rope_mode, KVS_ROPE_NEOX);
    ck_assert(hp->rope_base == 1.0e6f);
    ck_assert(hp->rms_eps == 1e-6f);
    ck_assert_int_eq(hp->head_dim, _i == 1 ? 32 : 16);
    ck_assert_int_eq(hp->tied_output, _i == 0);
    ck_assert_int_eq(hp->qkv_bias, _i != 1);
    ck_assert_int_eq(hp->qk_norm, _i == 1);
    ck_assert_int_eq(hp->logit_shift, _i == 2);
    ck_assert_int_eq(kvs_arch_is_diffusion(hp->arch), _i == 2);
    if (_i == 2) ck_assert_int_eq(hp->mask_id, 0);
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.capacity = 16;
    kvs_kv_cache *c = NULL;
    ck_assert_msg(kvs_cache_create(&c, dev, &cp) == KVS_OK, "%s", kvs_last_error());
    for (int64_t i = 0; i < n; i++) rows[i] = (int32_t)i;
    kvs_step_plan plan = {.tokens = seq, .n_tokens = n, .logit_rows = rows, .n_logit_rows = n};
    kvs_step_result r;
    ck_assert_msg(kvs_model_forward(m, c, &plan, &r) == KVS_OK, "%s: %s", arch, kvs_last_error());
    int64_t V = r.vocab;
    ck_assert_int_eq(V, 512);
    char fname[64];
    snprintf(fname, sizeof fname, "%s.logits.f32", arch);
    float *want = read_f32(fname, n * V);
    if (_i < 2) {
        assert_close(r.logits, want, n * V, arch);
    } else {
        /* dream: the reference row i (i >= 1) is the prediction for position i = our row i-1; row 0
         * repeats row 0 (Dream's cat(logits[:, :1], logits[:, :-1])) */
        assert_close(r.logits, want + V, (n - 1) * V, "dream rows 0..n-2 = reference 1..n-1 (shifted)");
        assert_close(r.logits, want, V, "dream row 0");
        /* the shift is real: unshifted rows are far from the reference */
        double se = 0, ss = 0;
        for (int64_t i = V; i < n * V; i++) {
            se += ((double)r.logits[i] - want[i]) * ((double)r.logits[i] - want[i]);
            ss += (double)want[i] * want[i];
        }
        ck_assert_msg(se / ss > 0.1, "unshifted dream logits match the shifted reference (nmse %g)", se / ss);
    }
    free(want);
    kvs_cache_destroy(&c);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
    json_object_put(ref);
}
END_TEST

START_TEST(test_greedy) {
    const char *arch = g_archs[_i];
    json_object *ref = ref_json(), *e = jget(jget(ref, "models"), arch);
    int32_t prompt[64], want[64], out[64];
    int64_t np = jints(jget(ref, "greedy_prompt"), prompt, 64), nw = jints(jget(e, "greedy"), want, 64), n = 0;
    kvs_device *dev = NULL;
    ck_assert(kvs_device_open(&dev, &g_params) == KVS_OK);
    kvs_model *m = load(dev, arch);
    kvs_ar_params p = kvs_ar_params_default();
    p.max_new = nw;
    p.stop_at_bos = p.stop_at_eos = 0;
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.mode = KVS_CACHE_APPEND;
    cp.capacity = kvs_ar_capacity(m, np, &p);
    kvs_kv_cache *c = NULL;
    ck_assert(kvs_cache_create(&c, dev, &cp) == KVS_OK);
    kvs_gen_stats st;
    ck_assert_msg(kvs_generate_ar(m, c, prompt, np, &p, NULL, NULL, out, &n, &st) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_eq(n, nw);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(out[i] == want[i], "%s [%s]: greedy token %lld is %d, transformers %d", arch,
                      kvs_backend_name(g_params.backend), (long long)i, out[i], want[i]);
    kvs_cache_destroy(&c);
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
    json_object_put(ref);
}
END_TEST

/* Eviction on the Qwen architectures: a key/attention policy (h2o) and critical (reads Wo) run at half
 * budget; expected (predicts queries as Wq x) refuses a model with a q bias / q norm. */
START_TEST(test_policies) {
    const char *arch = g_archs[_i];
    kvs_device *dev = NULL;
    ck_assert(kvs_device_open(&dev, &g_params) == KVS_OK);
    kvs_model *m = load(dev, arch);
    const char *pols[4] = {"h2o", "critical", "expected", "critical:expected"};
    for (int k = 0; k < 4; k++) {
        kvs_policy *pol = NULL;
        ck_assert_msg(kvs_policy_create(&pol, pols[k], NULL) == KVS_OK, "%s", kvs_last_error());
        kvs_ar_params p = kvs_ar_params_default();
        p.max_new = 40;
        p.stop_at_bos = p.stop_at_eos = 0;
        p.policy = pol;
        p.budget = 0.5;
        int32_t bos = 1, out[64];
        int64_t n = 0;
        kvs_cache_params cp = kvs_model_cache_params(m);
        cp.mode = KVS_CACHE_APPEND;
        cp.capacity = kvs_ar_capacity(m, 1, &p);
        kvs_kv_cache *c = NULL;
        ck_assert(kvs_cache_create(&c, dev, &cp) == KVS_OK);
        kvs_gen_stats st;
        /* asked up front (kvs_policy_check_model), and the decode refuses before its first token */
        ck_assert_int_eq(kvs_policy_check_model(pol, m), k < 2 ? KVS_OK : KVS_ERR_UNSUPPORTED);
        kvs_status s = kvs_generate_ar(m, c, &bos, 1, &p, NULL, NULL, out, &n, &st);
        if (k < 2) {
            ck_assert_msg(s == KVS_OK, "%s on %s: %s", pols[k], arch, kvs_last_error());
            ck_assert_int_eq(n, 40);
        } else {
            ck_assert_int_eq(s, KVS_ERR_UNSUPPORTED);
            ck_assert_int_eq(n, 0);
            ck_assert_msg(strstr(kvs_last_error(), "not modelled") != NULL, "%s", kvs_last_error());
        }
        kvs_cache_destroy(&c);
        kvs_policy_destroy(&pol);
    }
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* ---- dream decodes ------------------------------------------------------------------------------ */

typedef struct dcase {
    int32_t prompt[64], tokens[64];
    int64_t np;
    kvs_dlm_params p;
} dcase;

static int load_cases(dcase *cs, int cap) {
    json_object *ref = ref_json(), *arr = jget(jget(jget(ref, "models"), "dream"), "cases");
    int n = (int)json_object_array_length(arr);
    ck_assert_int_le(n, cap);
    for (int i = 0; i < n; i++) {
        json_object *cj = json_object_array_get_idx(arr, (size_t)i);
        cs[i].np = jints(jget(cj, "prompt"), cs[i].prompt, 64);
        jints(jget(cj, "tokens"), cs[i].tokens, 64);
        cs[i].p = kvs_dlm_params_default();
        cs[i].p.gen_len = json_object_get_int(jget(cj, "gen"));
        cs[i].p.block_len = json_object_get_int(jget(cj, "block"));
        cs[i].p.steps = json_object_get_int(jget(cj, "steps"));
    }
    json_object_put(ref);
    return n;
}

static kvs_status decode(kvs_device *dev, kvs_model *m, const dcase *dc, kvs_dlm_params p, kvs_dlm_schedule *sc,
                         int32_t *out) {
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.capacity = dc->np + p.gen_len;
    cp.flags = kvs_dlm_schedule_cache_flags(sc);
    kvs_kv_cache *c = NULL;
    ck_assert_msg(kvs_cache_create(&c, dev, &cp) == KVS_OK, "%s", kvs_last_error());
    p.schedule = sc;
    kvs_gen_stats st;
    kvs_status s = kvs_generate_dlm(m, c, dc->prompt, dc->np, &p, NULL, NULL, out, &st);
    kvs_cache_destroy(&c);
    return s;
}

static void same(const int32_t *a, const int32_t *b, int64_t n, const char *what, int ci) {
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(a[i] == b[i], "%s, case %d [%s]: token %lld is %d, want %d", what, ci,
                      kvs_backend_name(g_params.backend), (long long)i, a[i], b[i]);
}

START_TEST(test_dream_decodes) {
    dcase cs[4];
    int nc = load_cases(cs, 4);
    kvs_device *dev = NULL;
    ck_assert(kvs_device_open(&dev, &g_params) == KVS_OK);
    kvs_model *m = load(dev, "dream");
    for (int ci = 0; ci < nc; ci++) {
        const dcase *dc = &cs[ci];
        int32_t base[64], got[64];
        ck_assert_msg(decode(dev, m, dc, dc->p, NULL, base) == KVS_OK, "%s", kvs_last_error());
        same(base, dc->tokens, dc->p.gen_len, "no cache vs the reference decode", ci);
        /* full refresh: every schedule = no cache */
        kvs_dlm_params one = dc->p;
        one.steps = one.gen_len / one.block_len;
        int32_t base1[64];
        ck_assert(decode(dev, m, dc, one, NULL, base1) == KVS_OK);
        const char *names[] = {"prefix", "dual"};
        for (int k = 0; k < 2; k++) {
            kvs_dlm_schedule *sc = NULL;
            ck_assert(kvs_dlm_schedule_from_name(&sc, names[k], 4, NULL) == KVS_OK);
            ck_assert_msg(decode(dev, m, dc, one, sc, got) == KVS_OK, "%s: %s", names[k], kvs_last_error());
            same(got, base1, one.gen_len, names[k], ci);
            kvs_dlm_schedule_destroy(&sc);
        }
        kvs_dlm_schedule *sc = NULL;
        ck_assert(kvs_dlm_schedule_delayed(&sc, 1) == KVS_OK);
        ck_assert_msg(decode(dev, m, dc, dc->p, sc, got) == KVS_OK, "%s", kvs_last_error());
        same(got, base, dc->p.gen_len, "delayed reload 1", ci);
        kvs_dlm_schedule_destroy(&sc);
        kvs_elastic_params ep = kvs_elastic_params_default();
        ep.gamma = 1.0f;
        ep.window = (int)dc->p.block_len;
        ck_assert(kvs_dlm_schedule_elastic(&sc, &ep) == KVS_OK);
        ck_assert_msg(decode(dev, m, dc, dc->p, sc, got) == KVS_OK, "%s", kvs_last_error());
        same(got, base, dc->p.gen_len, "elastic gamma 1", ci);
        kvs_dlm_schedule_destroy(&sc);
        kvs_dlm_schedule *inner = NULL;
        ck_assert(kvs_dlm_schedule_delayed(&inner, 1) == KVS_OK);
        kvs_wavefilter_params wp = kvs_wavefilter_params_default();
        wp.budget = 1.0f;
        ck_assert(kvs_dlm_schedule_wavefilter(&sc, inner, &wp) == KVS_OK);
        ck_assert_msg(decode(dev, m, dc, dc->p, sc, got) == KVS_OK, "%s", kvs_last_error());
        same(got, base, dc->p.gen_len, "wavefilter budget 1 over delayed reload 1", ci);
        kvs_dlm_schedule_destroy(&sc);
    }
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* A custom schedule that ignores view.logit_shift: its later steps compute the block's rows only. */
typedef struct naive { int32_t rows[64], logits[64]; kvs_layer_plan layers[8]; } naive;

static kvs_status naive_plan(void *self, const kvs_dlm_view *v, kvs_dlm_step *out) {
    naive *s = self;
    memset(out, 0, sizeof *out);
    int64_t nl = 0, nr = 0;
    for (int64_t p = v->block_start; p < v->block_end; p++) {
        s->rows[nr++] = (int32_t)p;
        if (v->masked[p]) s->logits[nl++] = (int32_t)p;
    }
    out->plan.logit_rows = s->logits;
    out->plan.n_logit_rows = nl;
    if (v->step_in_block == 0) return KVS_OK; /* every row */
    memset(s->layers, 0, sizeof s->layers);
    s->layers[0].rows = s->rows;
    s->layers[0].n_rows = nr;
    out->plan.layers = s->layers;
    return KVS_OK;
}

/* Default settings: steps that compute only some rows. The forward refuses a logit row it did not
 * compute, so a schedule that forgot the row before a masked position would fail here. */
START_TEST(test_dream_partial_steps) {
    dcase cs[4];
    int nc = load_cases(cs, 4);
    kvs_device *dev = NULL;
    ck_assert(kvs_device_open(&dev, &g_params) == KVS_OK);
    kvs_model *m = load(dev, "dream");
    const char *names[] = {"prefix", "dual", "delayed", "elastic"};
    for (int ci = 0; ci < nc; ci++) {
        for (int k = 0; k < 5; k++) {
            kvs_dlm_schedule *sc = NULL, *base = NULL;
            if (k < 4) {
                ck_assert(kvs_dlm_schedule_from_name(&sc, names[k], 4, NULL) == KVS_OK);
            } else {
                ck_assert(kvs_dlm_schedule_from_name(&base, "dual", 4, NULL) == KVS_OK);
                kvs_wavefilter_params wp = kvs_wavefilter_params_default();
                ck_assert(kvs_dlm_schedule_wavefilter(&sc, base, &wp) == KVS_OK);
            }
            int32_t got[64];
            ck_assert_msg(decode(dev, m, &cs[ci], cs[ci].p, sc, got) == KVS_OK, "%s: %s", kvs_dlm_schedule_name(sc),
                          kvs_last_error());
            kvs_dlm_schedule_stats ss;
            ck_assert(kvs_dlm_schedule_get_stats(sc, &ss) == KVS_OK);
            ck_assert_msg(ss.full_steps < ss.steps, "%s: some steps reuse the cache", kvs_dlm_schedule_name(sc));
            kvs_dlm_schedule_destroy(&sc);
        }
    }
    /* a schedule that does not compute the row before a masked position is refused by the forward */
    {
        static naive nv;
        static const kvs_dlm_schedule_ops ops = {.name = "naive", .plan = naive_plan};
        kvs_dlm_schedule *sc = NULL;
        ck_assert(kvs_dlm_schedule_custom(&sc, &ops, &nv) == KVS_OK);
        int32_t got[64];
        ck_assert_int_eq(decode(dev, m, &cs[0], cs[0].p, sc, got), KVS_ERR_INVALID_ARGUMENT);
        ck_assert_msg(strstr(kvs_last_error(), "is not computed at the last layer") != NULL &&
                          strstr(kvs_last_error(), "row before each logit position") != NULL, "%s", kvs_last_error());
        printf("refused: %s\n", kvs_last_error());
        kvs_dlm_schedule_destroy(&sc);
    }
    /* a diffusion model is not decoded autoregressively */
    {
        kvs_cache_params cp = kvs_model_cache_params(m);
        cp.mode = KVS_CACHE_APPEND;
        cp.capacity = 16;
        kvs_kv_cache *c = NULL;
        ck_assert(kvs_cache_create(&c, dev, &cp) == KVS_OK);
        int64_t n_out = 0;
        int32_t out[8];
        kvs_ar_params ap = kvs_ar_params_default();
        ap.max_new = 4;
        ck_assert_int_eq(kvs_generate_ar(m, c, cs[0].prompt, cs[0].np, &ap, NULL, NULL, out, &n_out, NULL),
                         KVS_ERR_INVALID_ARGUMENT);
        ck_assert_msg(strstr(kvs_last_error(), "masked-diffusion") != NULL, "%s", kvs_last_error());
        kvs_cache_destroy(&c);
    }
    /* nothing precedes position 0 */
    dcase empty = cs[0];
    empty.np = 0;
    int32_t got[64];
    ck_assert_int_eq(decode(dev, m, &empty, empty.p, NULL, got), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "shifted logits") != NULL, "%s", kvs_last_error());
    kvs_model_destroy(&m);
    kvs_device_destroy(&dev);
}
END_TEST

/* ---- the safetensors path ----------------------------------------------------------------------- */

/* Writes DIR/model.safetensors from the GGUF's tensors under the Hugging Face names ref.json lists
 * (hf_tensors: {hf name: gguf name}; the GGUF's f16 matrices stay F16, f32 vectors F32; shapes
 * [rows, cols] / [n]) and copies tests/data/qwen/ARCH.config.json (what transformers saved) to
 * DIR/config.json. */
static void write_safetensors(const char *arch, json_object *map, const char *dir) {
    char path[4096], gpath[4096];
    snprintf(path, sizeof path, "tiny-%s.gguf", arch);
    ck_assert(kvs_model_locate(path, gpath, sizeof gpath) == KVS_OK);
    kvs_gguf *g = NULL;
    ck_assert_msg(kvs_gguf_open(&g, gpath) == KVS_OK, "%s", kvs_last_error());
    size_t cap = 1 << 16, len = 0;
    char *hdr = malloc(cap);
    ck_assert(hdr != NULL);
    len += (size_t)snprintf(hdr + len, cap - len, "{");
    uint64_t off = 0;
    const kvs_gguf_tensor_info *ts[64];
    int nt = 0;
    json_object_object_foreach(map, hf, ggv) {
        int64_t i = kvs_gguf_find_tensor(g, json_object_get_string(ggv));
        ck_assert_msg(i >= 0, "%s: no %s", gpath, json_object_get_string(ggv));
        const kvs_gguf_tensor_info *t = kvs_gguf_tensor(g, i);
        ck_assert(t->ggml_type == KVS_GGML_F16 || t->ggml_type == KVS_GGML_F32);
        ck_assert_int_lt(nt, 64);
        ts[nt++] = t;
        char shape[64];
        if (t->n_dims == 2) snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)t->ne[1], (long long)t->ne[0]);
        else snprintf(shape, sizeof shape, "[%lld]", (long long)t->ne[0]);
        len += (size_t)snprintf(hdr + len, cap - len, "%s\"%s\": {\"dtype\": \"%s\", \"shape\": %s, \"data_offsets\": [%llu, %llu]}",
                                nt > 1 ? ", " : "", hf, t->ggml_type == KVS_GGML_F16 ? "F16" : "F32", shape,
                                (unsigned long long)off, (unsigned long long)(off + t->nbytes));
        ck_assert_int_lt(len, cap - 256);
        off += t->nbytes;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' '; /* the format pads the header with spaces */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    ck_assert(f != NULL);
    uint64_t n = len;
    ck_assert(fwrite(&n, 8, 1, f) == 1 && fwrite(hdr, 1, len, f) == len);
    for (int i = 0; i < nt; i++) ck_assert(fwrite(ts[i]->data, 1, ts[i]->nbytes, f) == ts[i]->nbytes);
    ck_assert(fclose(f) == 0);
    free(hdr);
    kvs_gguf_close(&g);
    char src[4096], cmd[8400];
    snprintf(src, sizeof src, "%s/%s.config.json", g_data, arch);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/config.json'", src, dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* A Hugging Face directory (transformers' config.json, the same weights as model.safetensors) loads
 * to the same model as the GGUF: same hparams, bit-identical logits, the reference within tolerance. */
START_TEST(test_safetensors) {
    const char *arch = g_archs[_i];
    json_object *ref = ref_json(), *e = jget(jget(ref, "models"), arch);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/kvs-qwen-st.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert(mkdtemp(dir) != NULL);
    write_safetensors(arch, jget(e, "hf_tensors"), dir);
    kvs_device *dev = NULL;
    ck_assert(kvs_device_open(&dev, &g_params) == KVS_OK);
    kvs_model *mg = load(dev, arch), *ms = NULL;
    ck_assert_msg(kvs_model_load(&ms, dev, dir, NULL) == KVS_OK, "%s: %s", dir, kvs_last_error());
    const kvs_model_hparams *a = kvs_model_get_hparams(mg), *b = kvs_model_get_hparams(ms);
    ck_assert_int_eq(a->arch, b->arch);
    ck_assert_int_eq(a->head_dim, b->head_dim);
    ck_assert_int_eq(a->rope_mode, b->rope_mode);
    ck_assert(a->rope_base == b->rope_base && a->rms_eps == b->rms_eps);
    ck_assert_int_eq(a->tied_output, b->tied_output);
    ck_assert_int_eq(a->qkv_bias, b->qkv_bias);
    ck_assert_int_eq(a->qk_norm, b->qk_norm);
    int32_t seq[64], rows[64];
    int64_t n = jints(jget(ref, "sequence"), seq, 64);
    for (int64_t i = 0; i < n; i++) rows[i] = (int32_t)i;
    float *lg[2];
    kvs_model *ms2[2] = {mg, ms};
    for (int k = 0; k < 2; k++) {
        kvs_cache_params cp = kvs_model_cache_params(ms2[k]);
        cp.capacity = 16;
        kvs_kv_cache *c = NULL;
        ck_assert(kvs_cache_create(&c, dev, &cp) == KVS_OK);
        kvs_step_plan plan = {.tokens = seq, .n_tokens = n, .logit_rows = rows, .n_logit_rows = n};
        kvs_step_result r;
        ck_assert_msg(kvs_model_forward(ms2[k], c, &plan, &r) == KVS_OK, "%s", kvs_last_error());
        lg[k] = malloc((size_t)(n * r.vocab) * sizeof(float));
        memcpy(lg[k], r.logits, (size_t)(n * r.vocab) * sizeof(float));
        kvs_cache_destroy(&c);
    }
    ck_assert_msg(memcmp(lg[0], lg[1], (size_t)(n * 512) * sizeof(float)) == 0, "%s: safetensors logits differ from GGUF's", arch);
    char fname[64];
    snprintf(fname, sizeof fname, "%s.logits.f32", arch);
    float *want = read_f32(fname, n * 512);
    assert_close(lg[1], want, n * 512, arch);
    free(want), free(lg[0]), free(lg[1]);
    kvs_model_destroy(&mg);
    kvs_model_destroy(&ms);
    kvs_device_destroy(&dev);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    json_object_put(ref);
}
END_TEST

/* config.json variants of the qwen2 directory that kvsieve does not run are refused at load. */
START_TEST(test_safetensors_refusals) {
    json_object *ref = ref_json();
    char dir[256], cfg[4096];
    snprintf(dir, sizeof dir, "%s/kvs-qwen-st.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert(mkdtemp(dir) != NULL);
    write_safetensors("qwen2", jget(jget(jget(ref, "models"), "qwen2"), "hf_tensors"), dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    FILE *f = fopen(cfg, "rb");
    ck_assert(f != NULL);
    static char orig[1 << 14];
    size_t n = fread(orig, 1, sizeof orig - 1, f);
    fclose(f);
    orig[n] = 0;
    struct { const char *from, *to, *frag; } v[] = {
        {"\"rope_type\": \"default\"", "\"rope_type\": \"yarn\", \"factor\": 4.0", "'yarn' is not implemented"},
        {"\"use_sliding_window\": false", "\"use_sliding_window\": true", "sliding-window attention"},
        {"\"model_type\": \"qwen2\"", "\"model_type\": \"qwen3\"", "does not match model_type 'qwen3'"},
        {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act 'gelu'"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        const char *at = strstr(orig, v[i].from);
        ck_assert_msg(at != NULL, "config.json lacks %s", v[i].from);
        f = fopen(cfg, "wb");
        ck_assert(f != NULL);
        fprintf(f, "%.*s%s%s", (int)(at - orig), orig, v[i].to, at + strlen(v[i].from));
        fclose(f);
        kvs_model_file *mf = NULL;
        kvs_status st = kvs_model_file_open(&mf, dir, NULL);
        ck_assert_msg(st == KVS_ERR_UNSUPPORTED, "%s: %s (%s)", v[i].to, kvs_status_name(st), kvs_last_error());
        ck_assert_msg(strstr(kvs_last_error(), v[i].frag) != NULL, "'%s' lacks '%s'", kvs_last_error(), v[i].frag);
        printf("refused: %s\n", kvs_last_error());
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    json_object_put(ref);
}
END_TEST

/* ---- refusals at load (hand-written GGUFs) ---------------------------------------------------- */

typedef struct spec {
    const char *arch;
    int key_length, value_length; /* 0: key absent; key_length -1: written as 0 */
    const char *scaling_type;     /* NULL: absent */
    float scaling_factor;         /* 0: absent */
    int causal;                   /* -1: absent */
    unsigned bias;                /* bits: 1 q, 2 k, 4 v, 8 attn_output (not read by kvsieve) */
    int qk_norm;                  /* 1: attn_q_norm/attn_k_norm of length head_dim; 2: q_norm of a wrong length */
    int no_mask;                  /* dream: 1 = no tokenizer.ggml.mask_token_id (else 15) */
} spec;

/* dim 8, 1 layer, 2 heads, 1 kv head, ffn 16, vocab 16, f32 weights 0.01 */
static void write_spec(const char *path, const spec *sp) {
    kvs_gguf_writer *w = NULL;
    ck_assert(kvs_gguf_writer_create(&w, 3) == KVS_OK);
    char k[128];
    const char *a = sp->arch;
    int hd = sp->key_length > 0 ? sp->key_length : 4;
#define KEY(sfx) (snprintf(k, sizeof k, "%s.%s", a, sfx), k)
    ck_assert(kvs_gguf_writer_set_str(w, "general.architecture", a) == KVS_OK);
    ck_assert(kvs_gguf_writer_set_u32(w, KEY("context_length"), 32) == KVS_OK);
    ck_assert(kvs_gguf_writer_set_u32(w, KEY("embedding_length"), 8) == KVS_OK);
    ck_assert(kvs_gguf_writer_set_u32(w, KEY("block_count"), 1) == KVS_OK);
    ck_assert(kvs_gguf_writer_set_u32(w, KEY("feed_forward_length"), 16) == KVS_OK);
    ck_assert(kvs_gguf_writer_set_u32(w, KEY("attention.head_count"), 2) == KVS_OK);
    ck_assert(kvs_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), 1) == KVS_OK);
    ck_assert(kvs_gguf_writer_set_f32(w, KEY("rope.freq_base"), 1e6f) == KVS_OK);
    if (sp->key_length)
        ck_assert(kvs_gguf_writer_set_u32(w, KEY("attention.key_length"), sp->key_length < 0 ? 0u : (uint32_t)sp->key_length) ==
                  KVS_OK);
    if (sp->value_length)
        ck_assert(kvs_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)sp->value_length) == KVS_OK);
    if (sp->scaling_type) ck_assert(kvs_gguf_writer_set_str(w, KEY("rope.scaling.type"), sp->scaling_type) == KVS_OK);
    if (sp->scaling_factor != 0.0f) ck_assert(kvs_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), sp->scaling_factor) == KVS_OK);
    if (sp->causal >= 0) ck_assert(kvs_gguf_writer_set_bool(w, KEY("attention.causal"), sp->causal) == KVS_OK);
    if (strcmp(a, "dream") == 0 && !sp->no_mask)
        ck_assert(kvs_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 15) == KVS_OK);
#undef KEY
    static float buf[16 * 64];
    for (int i = 0; i < 16 * 64; i++) buf[i] = 0.01f;
    struct { const char *name; int64_t cols, rows; } t[] = {
        {"token_embd.weight", 8, 16}, {"output_norm.weight", 8, 1}, {"blk.0.attn_norm.weight", 8, 1},
        {"blk.0.attn_q.weight", 8, 2 * hd}, {"blk.0.attn_k.weight", 8, hd}, {"blk.0.attn_v.weight", 8, hd},
        {"blk.0.attn_output.weight", 2 * hd, 8}, {"blk.0.ffn_norm.weight", 8, 1}, {"blk.0.ffn_gate.weight", 8, 16},
        {"blk.0.ffn_up.weight", 8, 16}, {"blk.0.ffn_down.weight", 16, 8},
        {(sp->bias & 1) ? "blk.0.attn_q.bias" : NULL, 2 * hd, 1}, {(sp->bias & 2) ? "blk.0.attn_k.bias" : NULL, hd, 1},
        {(sp->bias & 4) ? "blk.0.attn_v.bias" : NULL, hd, 1}, {(sp->bias & 8) ? "blk.0.attn_output.bias" : NULL, 8, 1},
        {sp->qk_norm ? "blk.0.attn_q_norm.weight" : NULL, sp->qk_norm == 2 ? hd + 2 : hd, 1},
        {sp->qk_norm ? "blk.0.attn_k_norm.weight" : NULL, hd, 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (!t[i].name) continue;
        int64_t ne[2] = {t[i].cols, t[i].rows};
        ck_assert(kvs_gguf_writer_add_tensor(w, t[i].name, KVS_GGML_F32, t[i].rows > 1 ? 2 : 1, ne, buf) == KVS_OK);
    }
    ck_assert(kvs_gguf_writer_write(w, path) == KVS_OK);
    kvs_gguf_writer_destroy(&w);
}

static void expect(const spec *sp, kvs_status want, const char *frag) {
    char path[256];
    snprintf(path, sizeof path, "%s/kvs-qwen-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    write_spec(path, sp);
    kvs_model_file *mf = NULL;
    kvs_status s = kvs_model_file_open(&mf, path, NULL);
    const char *msg = kvs_last_error();
    ck_assert_msg(s == want, "%s: got %s (%s), want %s", sp->arch, kvs_status_name(s), s ? msg : "", kvs_status_name(want));
    if (s == KVS_OK) {
        kvs_model_file_close(&mf);
    } else {
        ck_assert_msg(strstr(msg, frag) != NULL, "message '%s' lacks '%s'", msg, frag);
        printf("refused: %s\n", msg);
    }
    unlink(path);
}

START_TEST(test_refusals) {
    spec q2 = {.arch = "qwen2", .causal = -1, .bias = 7};
    expect(&q2, KVS_OK, NULL);
    spec s = q2;
    s.scaling_type = "yarn";
    s.scaling_factor = 4.0f;
    expect(&s, KVS_ERR_UNSUPPORTED, "'yarn' is not implemented");
    s = q2;
    s.scaling_type = "longrope";
    expect(&s, KVS_ERR_UNSUPPORTED, "longrope");
    s = q2;
    s.scaling_type = "linear";
    s.scaling_factor = 2.0f;
    expect(&s, KVS_ERR_UNSUPPORTED, "factor 2");
    s.scaling_factor = 1.0f; /* linear with factor 1 is unscaled */
    expect(&s, KVS_OK, NULL);
    s = q2;
    s.key_length = 6;
    s.value_length = 4;
    expect(&s, KVS_ERR_UNSUPPORTED, "value_length = 4");
    s.value_length = 6; /* head_dim 6 != dim 8 / 2 heads: honoured */
    expect(&s, KVS_OK, NULL);
    s = q2;
    s.key_length = 5; /* odd head_dim */
    expect(&s, KVS_ERR_FORMAT, "head_dim = 5");
    s = q2;
    s.key_length = -1; /* written as 0 */
    expect(&s, KVS_ERR_FORMAT, "key_length = 0");
    s = q2;
    s.causal = 0;
    expect(&s, KVS_ERR_UNSUPPORTED, "attention.causal = false");
    s = q2;
    s.bias = 15;
    expect(&s, KVS_ERR_UNSUPPORTED, "tensor 'blk.0.attn_output.bias' is not used");
    s = q2;
    s.bias = 5;
    expect(&s, KVS_ERR_NOT_FOUND, "blk.0.attn_k.bias");
    spec q3 = {.arch = "qwen3", .causal = -1, .key_length = 6, .value_length = 6, .qk_norm = 1};
    expect(&q3, KVS_OK, NULL);
    s = q3;
    s.qk_norm = 0;
    expect(&s, KVS_ERR_NOT_FOUND, "attn_q_norm");
    s.qk_norm = 2;
    expect(&s, KVS_ERR_SHAPE, "attn_q_norm");
    spec dr = {.arch = "dream", .causal = 1, .bias = 7};
    expect(&dr, KVS_ERR_UNSUPPORTED, "is bidirectional");
    dr.causal = 0;
    expect(&dr, KVS_OK, NULL);
    dr.no_mask = 1; /* a diffusion model without a mask token cannot decode: refused at open */
    expect(&dr, KVS_ERR_FORMAT, "tokenizer.ggml.mask_token_id");
    spec other = {.arch = "gemma3", .causal = -1};
    expect(&other, KVS_ERR_UNSUPPORTED, "llama, llada, qwen2, qwen3, dream");
}
END_TEST

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--data") == 0) g_data = argv[++i];
    int setup = kvs_test_setup(argc, argv, "test_qwen_arch", &g_params, "tiny-qwen2.gguf", NULL, 0);
    if (setup >= 0) return setup;
    Suite *s = suite_create("qwen-arch");
    TCase *tc = tcase_create("qwen");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_logits, 0, 3);
    tcase_add_loop_test(tc, test_greedy, 0, 2);
    tcase_add_loop_test(tc, test_policies, 0, 2);
    tcase_add_loop_test(tc, test_safetensors, 0, 2);
    tcase_add_test(tc, test_dream_decodes);
    tcase_add_test(tc, test_dream_partial_steps);
    if (g_params.backend == KVS_BACKEND_CPU) { /* loading only */
        tcase_add_test(tc, test_refusals);
        tcase_add_test(tc, test_safetensors_refusals);
    }
    suite_add_tcase(s, tc);
    return kvs_test_run(s);
}
