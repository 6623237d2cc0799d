/* Model files that describe something else than what they hold, or what kvsieve does not run, are
 * refused at load with the file's name (issue 20): RoPE base outside (1, inf), special-token ids
 * outside the vocabulary (naming the key and the vocabulary size), a GGUF block_count below the
 * layers present, llama2.c trailing bytes and shrunk headers, safetensors configs with another
 * hidden_act / architecture, an untied model without lm_head, an empty config.json, unsupported
 * tensor types and tokenizer errors naming the path, directories where a file is expected, policy
 * side files whose shape keys do not match their tensors.
 * The files are the fuzz seeds (tests/data/fuzz/corpus, tiny models cut from stories260K) with one field
 * patched; each unpatched seed is checked to load first. */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvs_config.h"
#include "kvsieve/kvsieve.h"

static char g_dir[256];

static unsigned char *slurp(const char *rel, size_t *n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/fuzz/corpus/%s", KVS_SOURCE_ROOT, rel);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 16);
    ck_assert(b && fread(b, 1, (size_t)sz, f) == (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static const char *put(const char *name, const void *data, size_t n) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert(f && fwrite(data, 1, n, f) == n && fclose(f) == 0);
    return path;
}

/* Offset just after the first occurrence of the length-prefixed string s (a GGUF key or name). */
static size_t after_key(const unsigned char *b, size_t n, const char *s) {
    size_t l = strlen(s);
    for (size_t i = 8; i + l <= n; i++)
        if (memcmp(b + i, s, l) == 0 && b[i - 8] == (unsigned char)l && b[i - 7] == 0) return i + l;
    ck_abort_msg("key %s not in the seed", s);
    return 0;
}

/* Opens path, expects status want and a message holding every fragment given (NULL-terminated). */
static void expect_open(const char *path, kvs_status want, ...) {
    kvs_model_file *m = NULL;
    kvs_status s = kvs_model_file_open(&m, path, NULL);
    const char *msg = kvs_last_error();
    ck_assert_msg(s == want, "%s: %s (%s), expected %s", path, kvs_status_name(s), msg, kvs_status_name(want));
    if (s == KVS_OK) {
        kvs_model_file_close(&m);
        return;
    }
    ck_assert_msg(m == NULL, "handle set on failure");
    va_list ap;
    va_start(ap, want);
    for (const char *frag; (frag = va_arg(ap, const char *)) != NULL;)
        ck_assert_msg(strstr(msg, frag) != NULL, "message '%s' lacks '%s'", msg, frag);
    va_end(ap);
    printf("refused: %s\n", msg);
}

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "%s/kvs-refusals.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert(mkdtemp(g_dir) != NULL);
}

static void teardown(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_gguf_rope_base) {
    size_t n;
    unsigned char *b = slurp("gguf/tiny-f32.gguf", &n);
    expect_open(put("ok.gguf", b, n), KVS_OK);
    size_t at = after_key(b, n, "llama.rope.freq_base") + 4; /* skip the value type */
    const float bad[] = {0.5f, 1.0f, INFINITY, NAN};
    for (int i = 0; i < 4; i++) {
        memcpy(b + at, &bad[i], 4);
        expect_open(put("rope.gguf", b, n), KVS_ERR_FORMAT, "rope.gguf", "rope base", NULL);
    }
    free(b);
}
END_TEST

/* A llama GGUF whose rope.dimension_count is below head_dim (4 here) asks for partial RoPE, which
 * no supported architecture has (llama.cpp asserts n_rot == head_dim): refused, never run. */
START_TEST(test_gguf_partial_rope) {
    size_t n;
    unsigned char *b = slurp("gguf/tiny-f32.gguf", &n);
    size_t at = after_key(b, n, "llama.rope.dimension_count") + 4; /* skip the value type */
    uint32_t v;
    memcpy(&v, b + at, 4);
    ck_assert_uint_eq(v, 4);
    v = 2;
    memcpy(b + at, &v, 4);
    expect_open(put("partial.gguf", b, n), KVS_ERR_UNSUPPORTED, "partial.gguf", "rope.dimension_count 2 < head_dim 4",
                "partial RoPE", NULL);
    free(b);
}
END_TEST

START_TEST(test_gguf_special_ids) {
    size_t n;
    unsigned char *b = slurp("gguf/tiny-f32.gguf", &n);
    size_t at = after_key(b, n, "tokenizer.ggml.bos_token_id") + 4;
    uint32_t v = 99999;
    memcpy(b + at, &v, 4);
    expect_open(put("bos.gguf", b, n), KVS_ERR_FORMAT, "bos.gguf", "tokenizer.ggml.bos_token_id", "99999", "16 tokens", NULL);
    free(b);
    b = slurp("gguf/tiny-llada.gguf", &n);
    expect_open(put("llada.gguf", b, n), KVS_OK);
    at = after_key(b, n, "tokenizer.ggml.mask_token_id") + 4;
    v = 16; /* == vocab */
    memcpy(b + at, &v, 4);
    expect_open(put("mask.gguf", b, n), KVS_ERR_FORMAT, "mask.gguf", "tokenizer.ggml.mask_token_id", "16 tokens", NULL);
    /* a diffusion model without a mask id (the key renamed, same length) is refused at open */
    at = after_key(b, n, "tokenizer.ggml.mask_token_id");
    b[at - 1] = 'X';
    expect_open(put("nomask.gguf", b, n), KVS_ERR_FORMAT, "nomask.gguf", "'llada'", "tokenizer.ggml.mask_token_id", NULL);
    free(b);
}
END_TEST

/* tokenizer.ggml.unknown_token_id outside the vocabulary was loaded silently (the tokenizer dropped it
 * to "none") while BOS/EOS/mask were refused: refused the same way, naming the key. */
START_TEST(test_gguf_unknown_id) {
    char path[4096];
    snprintf(path, sizeof path, "%s/models/kjv-ar-hd64.gguf", KVS_SOURCE_ROOT);
    FILE *f = fopen(path, "rb");
    if (!f) return; /* the repository's models/ holds it; nothing to check without it */
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n);
    ck_assert(b && fread(b, 1, n, f) == n);
    fclose(f);
    size_t at = after_key(b, n, "tokenizer.ggml.unknown_token_id");
    uint32_t type;
    memcpy(&type, b + at, 4);
    ck_assert_msg(type == 4 || type == 5, "unknown_token_id has GGUF type %u, not a 32-bit integer", type);
    uint32_t v = 99999;
    memcpy(b + at + 4, &v, 4);
    expect_open(put("unk.gguf", b, n), KVS_ERR_FORMAT, "unk.gguf", "tokenizer.ggml.unknown_token_id", "99999",
                "outside the vocabulary", NULL);
    free(b);
}
END_TEST

/* An embedding_length the tensors do not have is named as the shape mismatch it is, not as the rope
 * dimension it makes too large for the derived head_dim (tiny-f32: dim 8, 2 heads, head_dim 4). */
START_TEST(test_gguf_embedding_length) {
    size_t n;
    unsigned char *b = slurp("gguf/tiny-f32.gguf", &n);
    size_t at = after_key(b, n, "llama.embedding_length") + 4;
    uint32_t v;
    memcpy(&v, b + at, 4);
    v /= 2;
    memcpy(b + at, &v, 4);
    char want[128];
    snprintf(want, sizeof want, "embedding_length = %u does not match tensor 'token_embd.weight'", v);
    expect_open(put("dim.gguf", b, n), KVS_ERR_SHAPE, "dim.gguf", want, NULL);
    free(b);
}
END_TEST

START_TEST(test_gguf_block_count) {
    size_t n;
    unsigned char *b = slurp("gguf/tiny-f32.gguf", &n);
    size_t at = after_key(b, n, "llama.block_count") + 4;
    uint32_t v = 1; /* the file holds 2 layers */
    memcpy(b + at, &v, 4);
    expect_open(put("blocks.gguf", b, n), KVS_ERR_FORMAT, "blocks.gguf", "blk.1.", "block_count = 1", NULL);
    free(b);
}
END_TEST

START_TEST(test_gguf_messages_name_the_file) {
    size_t n;
    unsigned char *b = slurp("gguf/tiny-f32.gguf", &n);
    /* output_norm.weight: n_dims u32, ne0 u64, then the ggml type: 24 = i8 (sized, not readable) */
    size_t at = after_key(b, n, "output_norm.weight") + 4 + 8;
    uint32_t t = 24;
    memcpy(b + at, &t, 4);
    expect_open(put("type.gguf", b, n), KVS_ERR_DTYPE, "type.gguf", "output_norm.weight", "i8", NULL);
    free(b);
    /* a tokenizer error names the model file */
    b = slurp("gguf/tiny-f32.gguf", &n);
    at = after_key(b, n, "tokenizer.ggml.model") + 4 + 8;
    ck_assert(memcmp(b + at, "llama", 5) == 0);
    memcpy(b + at, "xxxxx", 5);
    const char *path = put("tok.gguf", b, n);
    kvs_model_file *m = NULL;
    ck_assert_int_eq(kvs_model_file_open(&m, path, NULL), KVS_OK);
    kvs_tokenizer *tk = NULL;
    ck_assert_int_eq(kvs_tokenizer_from_model_file(&tk, m), KVS_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(kvs_last_error(), "tok.gguf") && strstr(kvs_last_error(), "xxxxx"), "%s", kvs_last_error());
    kvs_model_file_close(&m);
    free(b);
}
END_TEST

START_TEST(test_llama2c_sizes) {
    static const char *const seeds[] = {"llama2c/tiny-v0-shared.bin", "llama2c/tiny-v1-unshared.bin"};
    for (int i = 0; i < 2; i++) {
        size_t n;
        unsigned char *b = slurp(seeds[i], &n);
        size_t hdr = i == 0 ? 0 : 8; /* the 7 int32 fields */
        expect_open(put("ok.bin", b, n), KVS_OK);
        expect_open(put("trailing.bin", b, n + 4), KVS_ERR_FORMAT, "trailing.bin", "4 trailing bytes", NULL);
        const int fields[] = {2, 1, 5}; /* layers 2 -> 1, hidden 16 -> 1, vocab 16 -> 1 */
        for (int f = 0; f < 3; f++) {
            unsigned char *c = malloc(n);
            memcpy(c, b, n);
            int32_t v;
            memcpy(&v, c + hdr + 4 * fields[f], 4);
            v = v < 0 ? -1 : 1;
            memcpy(c + hdr + 4 * fields[f], &v, 4);
            expect_open(put("shrunk.bin", c, n), KVS_ERR_FORMAT, "shrunk.bin", NULL);
            free(c);
        }
        free(b);
    }
}
END_TEST

/* Splits the safetensors seed (u16 config length, config, data) into g_dir/st/, the config text
 * passed through one replacement (from -> to; NULL: none). Returns the directory. */
static const char *st_dir(const char *seed, const char *from, const char *to) {
    size_t n;
    unsigned char *b = slurp(seed, &n);
    size_t lc = b[0] | (size_t)b[1] << 8;
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "%.*s", (int)lc, (const char *)b + 2);
    if (from) {
        char *p = strstr(cfg, from);
        ck_assert_msg(p != NULL, "'%s' not in the seed config", from);
        char rest[2048];
        snprintf(rest, sizeof rest, "%s", p + strlen(from));
        snprintf(p, sizeof cfg - (size_t)(p - cfg), "%s%s", to, rest);
    }
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/st", g_dir);
    mkdir(dir, 0700);
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    ck_assert(f && fwrite(cfg, 1, strlen(cfg), f) == strlen(cfg) && fclose(f) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    ck_assert(f && fwrite(b + 2 + lc, 1, n - 2 - lc, f) == n - 2 - lc && fclose(f) == 0);
    free(b);
    return dir;
}

START_TEST(test_safetensors_config) {
    expect_open(st_dir("safetensors/tiny-tied", NULL, NULL), KVS_OK);
    expect_open(st_dir("safetensors/tiny-untied", NULL, NULL), KVS_OK);
    expect_open(st_dir("safetensors/tiny-tied", "\"silu\"", "\"gelu\""), KVS_ERR_UNSUPPORTED, "config.json", "hidden_act 'gelu'",
                NULL);
    expect_open(st_dir("safetensors/tiny-tied", "LlamaForCausalLM", "GPT2LMHeadModel"), KVS_ERR_UNSUPPORTED, "config.json",
                "GPT2LMHeadModel", NULL);
    expect_open(st_dir("safetensors/tiny-tied", "\"tie_word_embeddings\":true", "\"tie_word_embeddings\":false"),
                KVS_ERR_NOT_FOUND, "lm_head.weight", "tie_word_embeddings", NULL);
    expect_open(st_dir("safetensors/tiny-tied", "\"tie_word_embeddings\":true,", ""), KVS_ERR_NOT_FOUND, "lm_head.weight",
                NULL);
    /* tie_word_embeddings true with a lm_head.weight: the output is the embedding (transformers'
     * tie_weights); an equal copy (the seed's lm_head is one: saved both) loads tied, a lm_head that
     * differs from the embedding is refused */
    const char *dtie = st_dir("safetensors/tiny-untied", "\"tie_word_embeddings\":false", "\"tie_word_embeddings\":true");
    kvs_model_file *mf = NULL;
    ck_assert_msg(kvs_model_file_open(&mf, dtie, NULL) == KVS_OK, "%s", kvs_last_error());
    ck_assert_int_eq(kvs_model_file_hparams(mf)->tied_output, 1);
    kvs_model_file_close(&mf);
    char sp[600];
    snprintf(sp, sizeof sp, "%s/model.safetensors", dtie);
    FILE *sf = fopen(sp, "r+b");
    ck_assert(sf != NULL);
    uint64_t hn = 0;
    ck_assert(fread(&hn, 8, 1, sf) == 1);
    char *hdr = calloc(1, (size_t)hn + 1);
    ck_assert(fread(hdr, 1, (size_t)hn, sf) == (size_t)hn);
    /* the seed's layout: lm_head [16][8] f32 at data bytes 544..1056 */
    ck_assert(strstr(hdr, "\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[16,8],\"data_offsets\":[544,1056]}"));
    free(hdr);
    const float other = 0.125f;
    ck_assert(fseek(sf, (long)(8 + hn + 544), SEEK_SET) == 0 && fwrite(&other, 4, 1, sf) == 1 && fclose(sf) == 0);
    expect_open(dtie, KVS_ERR_FORMAT, "tie_word_embeddings: true", "'lm_head.weight' differs", NULL);
    expect_open(st_dir("safetensors/tiny-tied", "\"bos_token_id\":1", "\"bos_token_id\":99999"), KVS_ERR_FORMAT,
                "bos_token_id", "99999", "vocab_size 16", NULL);
    expect_open(st_dir("safetensors/tiny-tied", "\"rope_theta\":10000.0", "\"rope_theta\":1"), KVS_ERR_FORMAT, "rope base",
                NULL);
    /* an empty config.json: a message a person understands, with the path */
    const char *dir = st_dir("safetensors/tiny-tied", NULL, NULL);
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    fclose(f);
    expect_open(dir, KVS_ERR_FORMAT, "config.json", "empty", NULL);
    f = fopen(path, "wb");
    fputs("{\"hidden_size\": 8,", f);
    fclose(f);
    expect_open(dir, KVS_ERR_FORMAT, "config.json", "ends before", NULL);
}
END_TEST

/* A directory where a file is expected: refused with KVS_ERR_IO naming it, never read. */
START_TEST(test_directories) {
    char d[600];
    snprintf(d, sizeof d, "%s/adir.bin", g_dir);
    ck_assert_int_eq(mkdir(d, 0700), 0);
    kvs_gguf *g = NULL;
    ck_assert_int_eq(kvs_gguf_open(&g, d), KVS_ERR_IO);
    ck_assert_msg(strstr(kvs_last_error(), "not a regular file"), "%s", kvs_last_error());
    kvs_tokenizer *t = NULL;
    ck_assert_int_eq(kvs_tokenizer_from_llama2c(&t, d, 0), KVS_ERR_IO);
    kvs_learned *lw = NULL;
    ck_assert_int_eq(kvs_learned_load(&lw, d, NULL, -1), KVS_ERR_IO);
    /* safetensors named by its config.json, which is a directory */
    const char *st = st_dir("safetensors/tiny-tied", NULL, NULL);
    char cfg[700];
    snprintf(cfg, sizeof cfg, "%s/config.json", st);
    ck_assert_int_eq(remove(cfg), 0);
    ck_assert_int_eq(mkdir(cfg, 0700), 0);
    char stp[700];
    snprintf(stp, sizeof stp, "%s/model.safetensors", st);
    expect_open(stp, KVS_ERR_IO, "config.json", "not a regular file", NULL);
    rmdir(cfg);
}
END_TEST

/* A policy side file whose shape keys ask for far more weights than its tensors hold is refused
 * before anything is allocated (tests/fuzz/regress/policy/n-layers-2p24: n_layers = 2^24). */
START_TEST(test_policy_shape_keys) {
    size_t n;
    unsigned char *b = slurp("policy/retention.gguf", &n);
    size_t at = after_key(b, n, "kvsieve.policy.n_layers") + 4;
    uint32_t v = 1u << 24;
    memcpy(b + at, &v, 4);
    const char *path = put("policy.gguf", b, n);
    kvs_learned *lw = NULL;
    ck_assert_int_eq(kvs_learned_load(&lw, path, NULL, -1), KVS_ERR_FORMAT);
    ck_assert_msg(strstr(kvs_last_error(), "policy.gguf") && strstr(kvs_last_error(), "16777216 layers"), "%s",
                  kvs_last_error());
    ck_assert(lw == NULL);
    free(b);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model-refusals");
    TCase *tc = tcase_create("refusals");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_gguf_rope_base);
    tcase_add_test(tc, test_gguf_partial_rope);
    tcase_add_test(tc, test_gguf_special_ids);
    tcase_add_test(tc, test_gguf_unknown_id);
    tcase_add_test(tc, test_gguf_embedding_length);
    tcase_add_test(tc, test_gguf_block_count);
    tcase_add_test(tc, test_gguf_messages_name_the_file);
    tcase_add_test(tc, test_llama2c_sizes);
    tcase_add_test(tc, test_safetensors_config);
    tcase_add_test(tc, test_directories);
    tcase_add_test(tc, test_policy_shape_keys);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
