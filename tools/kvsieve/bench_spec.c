/* kvsieve bench model --speculative: QuantSpec self-speculative decoding against plain decoding at a
 * chosen context on a random-weight model of a real shape (issue 17: "report acceptance rate and
 * wall-time speedup vs plain decoding ... in bench").
 *
 * One APPEND cache of the given K/V types (qh8 for the draft's 4-bit view) is filled with `context`
 * rows once by bench_fill_cache (bench_context.c, shared with the plain --context mode): either a
 * prefill of random tokens (chunks of 256 rows) or random K/V rows written straight into it
 * (kvs_cache_write_rows: no forward at all, so a 32k context costs seconds, not a long-context
 * prefill's minutes). Then, `reps` times interleaved, the cache is cut
 * back to the context (kvs_cache_truncate, exact) and `decode` tokens are generated from the same
 * next token by kvs_generate_ar_continue, plain (draft 0) and speculative (draft N), greedy, stop
 * tokens off: the fastest wall and the fastest process-CPU time of each are kept (the first
 * repetition also meets the warm-up), and every speculative run's tokens are compared with the plain
 * run's of the same repetition. What each step reads is printed beside it: weight bytes (every
 * tensor of the model) and the KV bytes at the context (8-bit: both planes; the draft: the upper
 * planes). Random weights: acceptance is what this model gives, not a trained model's. */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

kvs_status bench_spec_measure(kvs_model *m, const kvs_dtype kv[2], const bench_spec_opts *o, uint64_t *rng,
                              bench_spec_result *r) {
    memset(r, 0, sizeof *r);
    const kvs_model_hparams *hp = kvs_model_get_hparams(m);
    const int64_t C = o->context, M = o->decode;
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.capacity = C + M;
    cp.mode = KVS_CACHE_APPEND;
    cp.type_k = kv[0], cp.type_v = kv[1];
    kvs_kv_cache *c = NULL;
    int32_t *plain = malloc(sizeof(int32_t) * (size_t)M), *spec = malloc(sizeof(int32_t) * (size_t)M);
    kvs_status s = plain && spec ? KVS_OK : KVS_ERR_OUT_OF_MEMORY;
    /* bytes per context token read by one step (all layers and kv heads) */
    for (int w = 0; w < 2; w++)
        r->kv_bytes_per_token[w] = (int64_t)hp->n_layers * hp->n_kv_heads *
                                   kvs_cache_row_bytes(kv[0], kv[1], hp->head_dim, w);
    r->weight_bytes = kvs_model_weight_bytes(m);
    r->draft_weight_bytes = kvs_model_draft_weight_bytes(m);
    if (s == KVS_OK) s = kvs_cache_create(&c, kvs_model_device(m), &cp);
    double t0 = cli_now();
    if (s == KVS_OK) s = bench_fill_cache(m, c, C, o->fill_prefill, rng);
    r->fill_s = cli_now() - t0;
    int32_t first = 3 + (int32_t)((0.5f + 0.5f * bench_rng_uniform(rng)) * (float)(hp->vocab - 4));
    if (first >= hp->vocab) first = hp->vocab - 1;
    kvs_ar_params p = kvs_ar_params_default();
    p.temperature = 0.0f;
    p.stop_at_bos = p.stop_at_eos = 0;
    r->plain_s = r->plain_cpu_s = r->spec_s = r->spec_cpu_s = INFINITY;
    r->identical = 1;
    r->first_diff = -1;
    /* one untimed short run of each first (first-touch page faults, thread start, kernel choice), so
     * that --reps 1 does not time plain decoding cold and speculative decoding warm */
    for (int which = 0; which < 2 && s == KVS_OK; which++) {
        p.max_new = M < 4 ? M : 4;
        p.draft = which ? o->draft : 0;
        kvs_gen_stats st;
        int64_t n = 0;
        s = kvs_cache_truncate(c, C);
        if (s == KVS_OK) s = kvs_generate_ar_continue(m, c, first, &p, NULL, NULL, which ? spec : plain, &n, &st);
    }
    for (int rep = 0; rep < o->reps && s == KVS_OK; rep++) {
        for (int which = 0; which < 2 && s == KVS_OK; which++) {
            p.max_new = M;
            p.draft = which ? o->draft : 0;
            kvs_gen_stats st;
            int64_t n = 0;
            s = kvs_cache_truncate(c, C);
            const double c0 = cli_cpu_now(), w0 = cli_now();
            if (s == KVS_OK) s = kvs_generate_ar_continue(m, c, first, &p, NULL, NULL, which ? spec : plain, &n, &st);
            const double w = cli_now() - w0, cpu = cli_cpu_now() - c0;
            if (s != KVS_OK) break;
            if (which) {
                if (w < r->spec_s) r->draft_s = st.seconds_draft; /* the draft share of the fastest run */
                r->spec_s = fmin(r->spec_s, w), r->spec_cpu_s = fmin(r->spec_cpu_s, cpu);
                r->verify_steps = st.spec_verify_steps, r->drafted = st.spec_drafted, r->accepted = st.spec_accepted;
                r->spec_tokens = n;
                for (int64_t i = 0; i < n && i < r->plain_tokens; i++)
                    if (spec[i] != plain[i]) {
                        if (r->first_diff < 0 || i < r->first_diff) r->first_diff = i;
                        break;
                    }
                if (n != r->plain_tokens || r->first_diff >= 0) r->identical = 0;
            } else {
                r->plain_s = fmin(r->plain_s, w), r->plain_cpu_s = fmin(r->plain_cpu_s, cpu);
                r->plain_tokens = n;
                r->distinct_tokens = 0;
                for (int64_t i = 0; i < n; i++) {
                    int64_t j = 0;
                    while (j < i && plain[j] != plain[i]) j++;
                    r->distinct_tokens += j == i;
                }
            }
        }
    }
    if (s == KVS_OK && o->tokens_out) memcpy(o->tokens_out, spec, sizeof(int32_t) * (size_t)r->spec_tokens);
    if (s == KVS_OK && o->plain_out) memcpy(o->plain_out, plain, sizeof(int32_t) * (size_t)r->plain_tokens);
    kvs_cache_destroy(&c);
    free(plain);
    free(spec);
    return s;
}

void bench_spec_print(const bench_spec_result *r, const bench_spec_opts *o, kvs_status s) {
    if (s != KVS_OK) {
        printf("speculative    error: %s\n", kvs_last_error());
        fflush(stdout);
        return;
    }
    const double ctx = (double)o->context;
    printf("speculative    draft %d after %lld cached rows (%s in %.2f s); %lld tokens, fastest of %d interleaved runs, greedy\n",
           o->draft, (long long)o->context, o->fill_prefill ? "a prefill of random tokens" : "random K/V rows written",
           r->fill_s, (long long)o->decode, o->reps);
    printf("bytes per step weights %.1f MiB", (double)r->weight_bytes / 1048576.0);
    if (o->draft_weights != KVS_F32)
        printf(" (draft: %s copies, %.1f MiB, and the embedding and matrices not copied)", kvs_dtype_name(o->draft_weights),
               (double)r->draft_weight_bytes / 1048576.0);
    printf("; KV at this context: 8-bit read %.1f MiB, draft (4-bit view) %.1f MiB\n", ctx * (double)r->kv_bytes_per_token[0] / 1048576.0,
           ctx * (double)r->kv_bytes_per_token[1] / 1048576.0);
    printf("plain          %6lld tokens  %10.2f tokens/s  (wall %.4f s, CPU %.4f s)\n", (long long)r->plain_tokens,
           r->plain_s > 0 ? (double)r->plain_tokens / r->plain_s : 0.0, r->plain_s, r->plain_cpu_s);
    printf("speculative    %6lld tokens  %10.2f tokens/s  (wall %.4f s, CPU %.4f s; draft forwards %.4f s)\n",
           (long long)r->spec_tokens, r->spec_s > 0 ? (double)r->spec_tokens / r->spec_s : 0.0, r->spec_s, r->spec_cpu_s,
           r->draft_s);
    printf("acceptance     %.3f (%lld of %lld drafted), %.2f tokens per verify step (%lld verify steps); %lld distinct "
           "tokens in the output\n",
           r->drafted ? (double)r->accepted / (double)r->drafted : 0.0, (long long)r->accepted, (long long)r->drafted,
           r->verify_steps ? (double)(r->accepted + r->verify_steps) / (double)r->verify_steps : 0.0,
           (long long)r->verify_steps, (long long)r->distinct_tokens);
    printf("speedup        %.2fx wall, %.2fx CPU time; ", r->spec_s > 0 ? r->plain_s / r->spec_s : 0.0,
           r->spec_cpu_s > 0 ? r->plain_cpu_s / r->spec_cpu_s : 0.0);
    if (r->identical) printf("tokens identical to plain decoding\n");
    else printf("TOKENS DIFFER from plain decoding (first at %lld)\n", (long long)r->first_diff);
    fflush(stdout);
}

json_object *bench_spec_json(const bench_spec_result *r, const bench_spec_opts *o, kvs_status s) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "ok", json_object_new_boolean(s == KVS_OK));
    json_object_object_add(j, "draft", json_object_new_int(o->draft));
    json_object_object_add(j, "context", json_object_new_int64(o->context));
    json_object_object_add(j, "fill", json_object_new_string(o->fill_prefill ? "prefill" : "random"));
    json_object_object_add(j, "fill_seconds", json_object_new_double(r->fill_s));
    json_object_object_add(j, "decode_tokens", json_object_new_int64(o->decode));
    json_object_object_add(j, "reps", json_object_new_int(o->reps));
    if (s != KVS_OK) return j;
    json_object_object_add(j, "weight_bytes", json_object_new_int64(r->weight_bytes));
    json_object_object_add(j, "draft_weights", json_object_new_string(o->draft_weights != KVS_F32 ? kvs_dtype_name(o->draft_weights) : "model"));
    json_object_object_add(j, "draft_weight_bytes", json_object_new_int64(r->draft_weight_bytes));
    json_object_object_add(j, "kv_bytes_per_context_token", json_object_new_int64(r->kv_bytes_per_token[0]));
    json_object_object_add(j, "kv_bytes_per_context_token_draft", json_object_new_int64(r->kv_bytes_per_token[1]));
    json_object_object_add(j, "plain_tokens", json_object_new_int64(r->plain_tokens));
    json_object_object_add(j, "plain_seconds", json_object_new_double(r->plain_s));
    json_object_object_add(j, "plain_cpu_seconds", json_object_new_double(r->plain_cpu_s));
    json_object_object_add(j, "plain_tokens_per_s", json_object_new_double(r->plain_s > 0 ? (double)r->plain_tokens / r->plain_s : 0.0));
    json_object_object_add(j, "spec_tokens", json_object_new_int64(r->spec_tokens));
    json_object_object_add(j, "distinct_tokens", json_object_new_int64(r->distinct_tokens));
    json_object_object_add(j, "spec_seconds", json_object_new_double(r->spec_s));
    json_object_object_add(j, "spec_cpu_seconds", json_object_new_double(r->spec_cpu_s));
    json_object_object_add(j, "spec_tokens_per_s", json_object_new_double(r->spec_s > 0 ? (double)r->spec_tokens / r->spec_s : 0.0));
    json_object_object_add(j, "seconds_draft", json_object_new_double(r->draft_s));
    json_object_object_add(j, "verify_steps", json_object_new_int64(r->verify_steps));
    json_object_object_add(j, "drafted", json_object_new_int64(r->drafted));
    json_object_object_add(j, "accepted", json_object_new_int64(r->accepted));
    json_object_object_add(j, "acceptance", json_object_new_double(r->drafted ? (double)r->accepted / (double)r->drafted : 0.0));
    json_object_object_add(j, "tokens_per_verify_step",
                           json_object_new_double(r->verify_steps ? (double)(r->accepted + r->verify_steps) / (double)r->verify_steps : 0.0));
    json_object_object_add(j, "speedup_wall", json_object_new_double(r->spec_s > 0 ? r->plain_s / r->spec_s : 0.0));
    json_object_object_add(j, "speedup_cpu", json_object_new_double(r->spec_cpu_s > 0 ? r->plain_cpu_s / r->spec_cpu_s : 0.0));
    json_object_object_add(j, "identical", json_object_new_boolean(r->identical));
    json_object_object_add(j, "first_diff", json_object_new_int64(r->first_diff));
    return j;
}
