/* kvsieve bench model --context N (without --speculative): plain greedy decoding after N cached rows
 * on a random-weight model of a real shape, per KV cache type (issue 17: "on the bench model shapes:
 * memory per token and decode tokens/s per cache type"). Also the cache fill that --speculative
 * (bench_spec.c) shares.
 *
 * One APPEND cache of the --cache-type-k/-v types is filled with `context` rows once (bench_fill_cache:
 * random K/V rows written directly, or a prefill of random tokens). After one untimed short run (first
 * touches, thread start, kernel choice), `reps` runs each cut the cache back to the context
 * (kvs_cache_truncate, exact) and generate `decode` tokens from the same next token with
 * kvs_generate_ar_continue (greedy, no draft, stop tokens off); the fastest wall and the fastest
 * process-CPU time are kept. One more run under the device profile (kvs_device_profile: two clock reads
 * per op on the CPU backend; a wait around every op on the GPU backends) gives the share of the
 * step's wall time spent in "attention" ops; it is not timed. What each step reads is printed beside
 * it: the weight bytes (every tensor) and the KV bytes at the context. */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define BENCH_FILL_CHUNK 256 /* rows per prefill forward and per direct write */

kvs_status bench_fill_cache(kvs_model *m, kvs_kv_cache *c, int64_t n, int prefill, uint64_t *rng) {
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    kvs_device *dev = kvs_model_device(m);
    kvs_status s = KVS_OK;
    const int64_t chunk = n < BENCH_FILL_CHUNK ? n : BENCH_FILL_CHUNK;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)chunk), *pos = malloc(sizeof(int32_t) * (size_t)chunk);
    const int64_t row = (int64_t)hp->n_kv_heads * hp->head_dim;
    float *kv = prefill ? NULL : malloc(sizeof(float) * (size_t)(chunk * row));
    kvs_tensor *kt = NULL, *vt = NULL;
    if (!tok || !pos || (!prefill && !kv)) s = KVS_ERR_OUT_OF_MEMORY;
    for (int64_t r0 = 0; r0 < n && s == KVS_OK; r0 += chunk) {
        const int64_t nr = n - r0 < chunk ? n - r0 : chunk;
        if (prefill) {
            for (int64_t i = 0; i < nr; i++) { /* ids 3 .. vocab-1: no BOS/EOS inside the context */
                tok[i] = 3 + (int32_t)((0.5f + 0.5f * bench_rng_uniform(rng)) * (float)(hp->vocab - 4));
                if (tok[i] >= hp->vocab) tok[i] = hp->vocab - 1;
                pos[i] = (int32_t)(r0 + i);
            }
            int32_t last = (int32_t)nr - 1;
            kvs_step_plan p = {.tokens = tok, .n_tokens = nr, .positions = pos, .logit_rows = &last, .n_logit_rows = 1};
            kvs_step_result res;
            s = kvs_model_forward(m, c, &p, &res);
            continue;
        }
        for (int64_t i = 0; i < nr; i++) pos[i] = (int32_t)(r0 + i);
        s = kvs_tensor_new(&kt, dev, KVS_F32, hp->head_dim, hp->n_kv_heads, nr, 0);
        if (s == KVS_OK) s = kvs_tensor_new(&vt, dev, KVS_F32, hp->head_dim, hp->n_kv_heads, nr, 0);
        for (int l = 0; l < hp->n_layers && s == KVS_OK; l++) {
            for (int64_t i = 0; i < nr * row; i++) kv[i] = bench_rng_uniform(rng);
            s = kvs_tensor_upload(kt, kv, 0, sizeof(float) * (size_t)(nr * row));
            for (int64_t i = 0; i < nr * row && s == KVS_OK; i++) kv[i] = bench_rng_uniform(rng);
            if (s == KVS_OK) s = kvs_tensor_upload(vt, kv, 0, sizeof(float) * (size_t)(nr * row));
            if (s == KVS_OK) s = kvs_cache_write_rows(c, l, kt, vt, pos, nr);
        }
        kvs_tensor_destroy(&kt);
        kvs_tensor_destroy(&vt);
    }
    if (s == KVS_OK) s = kvs_device_sync(dev);
    free(tok);
    free(pos);
    free(kv);
    return s;
}

/* Seconds of "attention" work and of all work in dev's profile (all layers). */
static void profile_attention(kvs_device *dev, double *attn_s, double *total_s) {
    *attn_s = *total_s = 0;
    const int64_t n = kvs_device_profile_read(dev, NULL, 0);
    kvs_profile_entry *e = n > 0 ? calloc((size_t)n, sizeof *e) : NULL;
    if (!e) return;
    const int64_t got = kvs_device_profile_read(dev, e, n);
    for (int64_t i = 0; i < got; i++) {
        *total_s += e[i].seconds;
        if (strcmp(e[i].kind, "attention") == 0) *attn_s += e[i].seconds;
    }
    free(e);
}

kvs_status bench_context_measure(kvs_model *m, const kvs_dtype kv[2], const bench_context_opts *o, uint64_t *rng,
                                 bench_context_result *r) {
    memset(r, 0, sizeof *r);
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    kvs_device *dev = kvs_model_device(m);
    const int64_t C = o->context, M = o->decode;
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.capacity = C + M;
    cp.mode = KVS_CACHE_APPEND;
    cp.type_k = kv[0], cp.type_v = kv[1];
    kvs_kv_cache *c = NULL;
    int32_t *out = malloc(sizeof(int32_t) * (size_t)M);
    kvs_status s = out ? KVS_OK : KVS_ERR_OUT_OF_MEMORY;
    /* a plain step reads every stored byte of a row (qh8: both planes) */
    r->kv_bytes_per_token = (int64_t)hp->n_layers * hp->n_kv_heads * kvs_cache_row_bytes(kv[0], kv[1], hp->head_dim, 0);
    r->kv_read_bytes_per_token = r->kv_bytes_per_token;
    r->weight_bytes = kvs_model_weight_bytes(m);
    if (s == KVS_OK) s = kvs_cache_create(&c, dev, &cp);
    double t0 = cli_now();
    if (s == KVS_OK) s = bench_fill_cache(m, c, C, o->fill_prefill, rng);
    r->fill_s = cli_now() - t0;
    int32_t first = 3 + (int32_t)((0.5f + 0.5f * bench_rng_uniform(rng)) * (float)(hp->vocab - 4));
    if (first >= hp->vocab) first = hp->vocab - 1;
    kvs_ar_params p = kvs_ar_params_default();
    p.temperature = 0.0f;
    p.stop_at_bos = p.stop_at_eos = 0;
    p.draft = 0;
    r->seconds = r->cpu_seconds = INFINITY;
    r->attention_share = -1;
    kvs_gen_stats st;
    int64_t n = 0;
    /* one untimed short run first, so that --reps 1 does not time a cold start */
    p.max_new = M < 4 ? M : 4;
    if (s == KVS_OK) s = kvs_cache_truncate(c, C);
    if (s == KVS_OK) s = kvs_generate_ar_continue(m, c, first, &p, NULL, NULL, out, &n, &st);
    p.max_new = M;
    for (int rep = 0; rep < o->reps && s == KVS_OK; rep++) {
        s = kvs_cache_truncate(c, C);
        const double c0 = cli_cpu_now(), w0 = cli_now();
        if (s == KVS_OK) s = kvs_generate_ar_continue(m, c, first, &p, NULL, NULL, out, &n, &st);
        const double w = cli_now() - w0, cpu = cli_cpu_now() - c0;
        if (s != KVS_OK) break;
        r->seconds = fmin(r->seconds, w), r->cpu_seconds = fmin(r->cpu_seconds, cpu);
        r->tokens = n;
    }
    /* the attention share: one more run, profiled, not timed */
    if (s == KVS_OK) s = kvs_cache_truncate(c, C);
    if (s == KVS_OK && kvs_device_profile(dev, 1) == KVS_OK) {
        const double w0 = cli_now();
        s = kvs_generate_ar_continue(m, c, first, &p, NULL, NULL, out, &n, &st);
        if (s == KVS_OK) s = kvs_device_sync(dev);
        const double w = cli_now() - w0;
        double attn = 0, total = 0;
        if (s == KVS_OK) profile_attention(dev, &attn, &total);
        kvs_device_profile(dev, 0);
        if (s == KVS_OK && w > 0 && total > 0) {
            r->attention_share = attn / w;
            r->profiled_seconds = w;
        }
    }
    kvs_cache_destroy(&c);
    free(out);
    return s;
}

void bench_context_print(const bench_context_result *r, const bench_context_opts *o, kvs_status s) {
    if (s != KVS_OK) {
        printf("context decode error: %s\n", kvs_last_error());
        fflush(stdout);
        return;
    }
    const double ctx = (double)o->context;
    printf("context decode after %lld cached rows (%s in %.2f s); %lld tokens, fastest of %d runs, greedy\n",
           (long long)o->context, o->fill_prefill ? "a prefill of random tokens" : "random K/V rows written", r->fill_s,
           (long long)o->decode, o->reps);
    printf("bytes per step weights %.1f MiB; KV cache %.1f KiB per token, %.1f MiB read at this context\n",
           (double)r->weight_bytes / 1048576.0, (double)r->kv_bytes_per_token / 1024.0,
           ctx * (double)r->kv_read_bytes_per_token / 1048576.0);
    printf("decode         %6lld tokens  %10.2f tokens/s  (wall %.4f s, CPU %.4f s", (long long)r->tokens,
           r->seconds > 0 ? (double)r->tokens / r->seconds : 0.0, r->seconds, r->cpu_seconds);
    if (r->attention_share >= 0) printf("; attention %.2f of a profiled run's wall", r->attention_share);
    printf(")\n");
    fflush(stdout);
}

json_object *bench_context_json(const bench_context_result *r, const bench_context_opts *o, kvs_status s) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "ok", json_object_new_boolean(s == KVS_OK));
    json_object_object_add(j, "context", json_object_new_int64(o->context));
    json_object_object_add(j, "fill", json_object_new_string(o->fill_prefill ? "prefill" : "random"));
    json_object_object_add(j, "fill_seconds", json_object_new_double(r->fill_s));
    json_object_object_add(j, "decode_tokens", json_object_new_int64(o->decode));
    json_object_object_add(j, "reps", json_object_new_int(o->reps));
    if (s != KVS_OK) return j;
    json_object_object_add(j, "weight_bytes", json_object_new_int64(r->weight_bytes));
    json_object_object_add(j, "kv_bytes_per_token", json_object_new_int64(r->kv_bytes_per_token));
    json_object_object_add(j, "kv_read_bytes", json_object_new_int64(o->context * r->kv_read_bytes_per_token));
    json_object_object_add(j, "tokens", json_object_new_int64(r->tokens));
    json_object_object_add(j, "seconds", json_object_new_double(r->seconds));
    json_object_object_add(j, "cpu_seconds", json_object_new_double(r->cpu_seconds));
    json_object_object_add(j, "tokens_per_s", json_object_new_double(r->seconds > 0 ? (double)r->tokens / r->seconds : 0.0));
    json_object_object_add(j, "attention_share", r->attention_share >= 0 ? json_object_new_double(r->attention_share) : NULL);
    return j;
}
