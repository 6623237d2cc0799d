/* kvsieve CLI — the device options and model opening shared by the model-running commands
 * (opts_common.h). */
#include <strings.h>
#include <stdlib.h>

#include "opts_common.h"

int cli_model_open_file(const char *prog, const char *name, cli_model *cm) {
    if (kvs_model_locate(name, cm->path, sizeof cm->path) != KVS_OK)
        return cli_fail(CLI_EXIT_USAGE, prog, "%s", kvs_last_error());
    if (kvs_model_file_open(&cm->mf, cm->path, NULL) != KVS_OK ||
        kvs_tokenizer_from_model_file(&cm->tok, cm->mf) != KVS_OK)
        return cli_fail_file(CLI_EXIT_USAGE, prog, cm->path);
    return CLI_EXIT_OK;
}

int cli_model_create(const char *prog, const device_opts *d, cli_model *cm) {
    int rc = cli_open_device(prog, d->backend, d->threads, &cm->dev);
    if (rc != CLI_EXIT_OK) return rc;
    /* weights used in place from the file's mapping on the CPU (cli_model_close destroys the model
     * before it closes the file) */
    kvs_model_params mp = kvs_model_params_default();
    mp.map_weights = 1;
    kvs_status s = kvs_model_create(&cm->m, cm->dev, cm->mf, &mp);
    if (s != KVS_OK) {
        int file = s == KVS_ERR_FORMAT || s == KVS_ERR_UNSUPPORTED || s == KVS_ERR_DTYPE || s == KVS_ERR_IO ||
                   s == KVS_ERR_NOT_FOUND;
        return cli_fail_file(file ? CLI_EXIT_USAGE : CLI_EXIT_FAIL, prog, cm->path);
    }
    cm->hp = kvs_model_get_hparams(cm->m);
    return CLI_EXIT_OK;
}

int cli_model_open(const char *prog, const char *name, const device_opts *d, cli_model *cm) {
    const double t0 = cli_now();
    int rc = cli_model_open_file(prog, name, cm);
    if (rc == CLI_EXIT_OK) rc = cli_model_create(prog, d, cm);
    cm->load_s = cli_now() - t0;
    return rc;
}

int cli_cache_types(const char *prog, const cache_type_opts *o, kvs_dtype types[2]) {
    const char *names[2] = {o->k, o->v};
    for (int w = 0; w < 2; w++) {
        types[w] = KVS_F32;
        if (names[w] && kvs_cache_type_from_name(names[w], &types[w]) != KVS_OK)
            return cli_fail(CLI_EXIT_USAGE, prog, "--cache-type-%c: %s", w ? 'v' : 'k', kvs_last_error());
    }
    return CLI_EXIT_OK;
}

kvs_cache_params cli_cache_key_params(const cache_type_opts *o, const kvs_dtype types[2]) {
    kvs_cache_params p = kvs_cache_params_default();
    p.type_k = types[0];
    p.type_v = types[1];
    if (o->rotate) p.flags |= KVS_CACHE_ROTATE;
    return p;
}

int cli_cache_types_fit(const char *prog, const kvs_dtype types[2], const kvs_model_hparams *hp, const char *chosen_by) {
    for (int w = 0; w < 2; w++) {
        const int blk = kvs_dtype_block(types[w]);
        if (blk <= 1 || hp->head_dim % blk == 0) continue;
        if (chosen_by)
            return cli_fail(CLI_EXIT_USAGE, prog, "%s cache (blocks of %d values along head_dim); this model's head_dim is %d",
                            chosen_by, blk, hp->head_dim);
        return cli_fail(CLI_EXIT_USAGE, prog,
                        "--cache-type-%c %s stores blocks of %d values along head_dim; this model's head_dim is %d "
                        "(f32, f16 and bf16 fit any head_dim)",
                        w ? 'v' : 'k', kvs_dtype_name(types[w]), blk, hp->head_dim);
    }
    return CLI_EXIT_OK;
}

int cli_draft_weight_type(const char *prog, const char *name, kvs_dtype *out) {
    static const kvs_dtype ok[] = {KVS_Q4_0, KVS_Q4_1, KVS_IQ4_NL, KVS_Q8_0};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcasecmp(name, kvs_dtype_name(ok[i])) == 0) return *out = ok[i], CLI_EXIT_OK;
    return cli_fail(CLI_EXIT_USAGE, prog, "--draft-weights: '%s' is not a draft weight type (q4_0, q4_1, iq4_nl, q8_0)", name);
}

int cli_model_require_dlm(const char *prog, const char *name, const cli_model *cm) {
    if (cm->hp && kvs_arch_is_diffusion(cm->hp->arch)) return CLI_EXIT_OK;
    return cli_fail(CLI_EXIT_USAGE, prog, "%s is not a masked-diffusion (llada, dream) model", name);
}

int cli_model_read_tokens(const char *prog, const cli_model *cm, const char *path, int32_t **ids, int64_t *n) {
    *ids = NULL;
    *n = 0;
    char *txt = NULL;
    size_t tlen = 0;
    int rc = cli_read_file(prog, "--text", path, &txt, &tlen);
    if (rc != CLI_EXIT_OK) return rc;
    int64_t cnt = 0;
    kvs_tokenizer_encode(cm->tok, txt, tlen, 0, NULL, 0, &cnt);
    int32_t *v = malloc((size_t)(cnt + 1) * sizeof *v);
    if (!v || kvs_tokenizer_encode(cm->tok, txt, tlen, 0, v, cnt + 1, &cnt) != KVS_OK) {
        free(v);
        free(txt);
        return cli_fail(CLI_EXIT_FAIL, prog, "tokenizing %s: %s", path, kvs_last_error());
    }
    free(txt);
    *ids = v;
    *n = cnt;
    return CLI_EXIT_OK;
}

void cli_model_close(cli_model *cm) {
    kvs_model_destroy(&cm->m);
    kvs_device_destroy(&cm->dev);
    kvs_tokenizer_destroy(&cm->tok);
    kvs_model_file_close(&cm->mf);
    cm->hp = NULL;
}
