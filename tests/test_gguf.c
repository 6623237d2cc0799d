/* GGUF reader/writer tests: every fixture opens with its metadata; typed getters; hand-made
 * malformed files; truncation at many offsets and seeded random byte flips of real files give
 * KVS_ERR_FORMAT or a clean load, never a crash (Check forks each test); bit-exact writer
 * round trips (v1 and v3, all scalar types, arrays, F32/F16/BF16/Q8_0 tensors).
 * Over 600 lines by reason: one Check suite for one file format; the hand-made malformed files and
 * the writer round trips share its fixture readers and value checkers (slurp, open_rel, touch_all). */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvsieve/gguf.h"
#include "kvsieve/model_file.h"
#include "probe.h"

static char g_models[4096];

static int have_models(void) {
    return kvs_test_full_fixtures(g_models, sizeof g_models); /* not all are in the repository's models/ */
}

static uint8_t *slurp(const char *rel, size_t *n) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", g_models, rel);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)sz + 1);
    ck_assert(buf != NULL);
    ck_assert_int_eq(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return buf;
}

static kvs_gguf *open_rel(const char *rel) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", g_models, rel);
    kvs_gguf *g = NULL;
    kvs_status s = kvs_gguf_open(&g, path);
    ck_assert_msg(s == KVS_OK, "%s: %s", rel, kvs_last_error());
    return g;
}

static int64_t get_i(const kvs_gguf *g, const char *key) {
    int64_t v = -12345;
    kvs_status s = kvs_gguf_get_int(g, key, &v);
    ck_assert_msg(s == KVS_OK, "%s: %s", key, kvs_last_error());
    return v;
}

static void assert_str(const kvs_gguf *g, const char *key, const char *want) {
    char buf[256];
    ck_assert_int_eq(kvs_gguf_get_string(g, key, buf, sizeof buf), KVS_OK);
    ck_assert_str_eq(buf, want);
}

/* Walks everything a successful open exposes (values, strings, nested arrays, tensor bytes). */
static uint64_t touch_value(const kvs_gguf_value *v) {
    uint64_t h = (uint64_t)v->type;
    if (v->type == KVS_GGUF_STRING && v->s.len) h += (unsigned char)v->s.data[v->s.len - 1];
    if (v->type == KVS_GGUF_ARRAY) {
        h += v->arr.n;
        if (v->arr.items)
            for (uint64_t i = 0; i < v->arr.n; i++) h += touch_value(&v->arr.items[i]);
        else if (v->arr.n) {
            int64_t x;
            double d;
            if (kvs_gguf_arr_int(v, v->arr.n - 1, &x) == KVS_OK) h += (uint64_t)x;
            else if (kvs_gguf_arr_float(v, v->arr.n - 1, &d) == KVS_OK) h += (uint64_t)(d != 0);
        }
    }
    return h;
}

static uint64_t touch_all(const kvs_gguf *g) {
    uint64_t h = 0;
    for (int64_t i = 0; i < kvs_gguf_n_kv(g); i++) {
        h += strlen(kvs_gguf_key(g, i));
        h += touch_value(kvs_gguf_value_at(g, i));
    }
    for (int64_t i = 0; i < kvs_gguf_n_tensors(g); i++) {
        const kvs_gguf_tensor_info *t = kvs_gguf_tensor(g, i);
        const uint8_t *d = t->data;
        h += d[0] + d[t->nbytes - 1] + strlen(t->name);
    }
    return h;
}

/* ---- fixtures ---------------------------------------------------------------------------------- */

START_TEST(test_open_all_fixtures) {
    if (!have_models()) return;
    const char *dirs[] = {"", "vocab/"};
    int n_files = 0;
    for (int d = 0; d < 2; d++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", g_models, dirs[d]);
        DIR *dir = opendir(path);
        ck_assert(dir != NULL);
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            size_t l = strlen(e->d_name);
            if (l < 5 || strcmp(e->d_name + l - 5, ".gguf") != 0) continue;
            char rel[1024];
            snprintf(rel, sizeof rel, "%s%s", dirs[d], e->d_name);
            kvs_gguf *g = open_rel(rel);
            ck_assert(touch_all(g) > 0);
            char arch[64];
            ck_assert_int_eq(kvs_gguf_get_string(g, "general.architecture", arch, sizeof arch), KVS_OK);
            const kvs_gguf_value *toks;
            ck_assert_int_eq(kvs_gguf_get_arr(g, "tokenizer.ggml.tokens", KVS_GGUF_STRING, &toks), KVS_OK);
            printf("gguf: %-36s v%u kv %3lld tensors %2lld arch %-6s vocab %llu\n", rel,
                   kvs_gguf_version(g), (long long)kvs_gguf_n_kv(g), (long long)kvs_gguf_n_tensors(g),
                   arch, (unsigned long long)toks->arr.n);
            kvs_gguf_close(&g);
            ck_assert(g == NULL);
            n_files++;
        }
        closedir(dir);
    }
    ck_assert_int_ge(n_files, 6);
}
END_TEST

START_TEST(test_metadata_values) {
    if (!have_models()) return;
    const char *files[] = {"stories260K-f32.v1.gguf", "stories260K-f32.v3.gguf"};
    for (int f = 0; f < 2; f++) {
        kvs_gguf *g = open_rel(files[f]);
        ck_assert_uint_eq(kvs_gguf_version(g), f == 0 ? 1 : 3);
        ck_assert_int_eq(kvs_gguf_n_kv(g), 18);
        ck_assert_int_eq(kvs_gguf_n_tensors(g), 48);
        ck_assert_uint_eq(kvs_gguf_alignment(g), 32);
        ck_assert_uint_eq(kvs_gguf_data_offset(g), f == 0 ? 11456 : 14144);
        assert_str(g, "general.architecture", "llama");
        assert_str(g, "general.name", "tinyllamas-stories-260k");
        assert_str(g, "tokenizer.ggml.model", "llama");
        ck_assert_int_eq(get_i(g, "llama.context_length"), 512);
        ck_assert_int_eq(get_i(g, "llama.embedding_length"), 64);
        ck_assert_int_eq(get_i(g, "llama.block_count"), 5);
        ck_assert_int_eq(get_i(g, "llama.feed_forward_length"), 172);
        ck_assert_int_eq(get_i(g, "llama.rope.dimension_count"), 8);
        ck_assert_int_eq(get_i(g, "llama.attention.head_count"), 8);
        ck_assert_int_eq(get_i(g, "llama.attention.head_count_kv"), 4);
        ck_assert_int_eq(get_i(g, "tokenizer.ggml.bos_token_id"), 1);
        ck_assert_int_eq(get_i(g, "tokenizer.ggml.eos_token_id"), 2);
        double eps;
        ck_assert_int_eq(kvs_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &eps), KVS_OK);
        ck_assert(eps == (double)1e-5f);
        const kvs_gguf_value *v = kvs_gguf_get(g, "llama.block_count");
        ck_assert_int_eq(v->type, KVS_GGUF_UINT32);
        /* arrays */
        const kvs_gguf_value *toks, *scores, *types;
        ck_assert_int_eq(kvs_gguf_get_arr(g, "tokenizer.ggml.tokens", KVS_GGUF_STRING, &toks), KVS_OK);
        ck_assert_int_eq(kvs_gguf_get_arr(g, "tokenizer.ggml.scores", KVS_GGUF_FLOAT32, &scores), KVS_OK);
        ck_assert_int_eq(kvs_gguf_get_arr(g, "tokenizer.ggml.token_type", KVS_GGUF_INT32, &types), KVS_OK);
        ck_assert_uint_eq(toks->arr.n, 512);
        kvs_gguf_str s;
        ck_assert_int_eq(kvs_gguf_arr_str(toks, 1, &s), KVS_OK);
        ck_assert(s.len == 3 && memcmp(s.data, "<s>", 3) == 0);
        ck_assert_int_eq(kvs_gguf_arr_str(toks, 259, &s), KVS_OK);
        ck_assert(s.len == 4 && memcmp(s.data, "\xe2\x96\x81t", 4) == 0);
        double sc;
        ck_assert_int_eq(kvs_gguf_arr_float(scores, 260, &sc), KVS_OK);
        ck_assert(sc == -1.0);
        int64_t ty;
        ck_assert_int_eq(kvs_gguf_arr_int(types, 0, &ty), KVS_OK);
        ck_assert_int_eq(ty, 2);
        ck_assert_int_eq(kvs_gguf_arr_int(types, 3, &ty), KVS_OK);
        ck_assert_int_eq(ty, 6);
        ck_assert_int_eq(kvs_gguf_arr_int(types, 512, &ty), KVS_ERR_OUT_OF_RANGE);
        ck_assert_int_eq(kvs_gguf_arr_int(toks, 0, &ty), KVS_ERR_DTYPE);
        /* errors */
        int64_t x;
        ck_assert_int_eq(kvs_gguf_get_int(g, "no.such.key", &x), KVS_ERR_NOT_FOUND);
        ck_assert_int_eq(kvs_gguf_get_int(g, "general.name", &x), KVS_ERR_DTYPE);
        ck_assert_msg(strstr(kvs_last_error(), "general.name") != NULL, "%s", kvs_last_error());
        ck_assert_int_eq(kvs_gguf_get_arr(g, "tokenizer.ggml.tokens", KVS_GGUF_INT32, &toks), KVS_ERR_DTYPE);
        char small[4];
        ck_assert_int_eq(kvs_gguf_get_string(g, "general.name", small, sizeof small), KVS_ERR_OUT_OF_RANGE);
        ck_assert_int_eq(kvs_gguf_find_key(g, "general.architecture"), 0);
        ck_assert_str_eq(kvs_gguf_key(g, 0), "general.architecture");
        ck_assert(kvs_gguf_key(g, 18) == NULL);
        /* tensors */
        int64_t ti = kvs_gguf_find_tensor(g, "token_embd.weight");
        ck_assert_int_eq(ti, 0);
        const kvs_gguf_tensor_info *t = kvs_gguf_tensor(g, ti);
        ck_assert_int_eq(t->n_dims, 2);
        ck_assert_int_eq(t->ne[0], 64);
        ck_assert_int_eq(t->ne[1], 512);
        ck_assert_uint_eq(t->ggml_type, KVS_GGML_F32);
        ck_assert_uint_eq(t->nbytes, 64 * 512 * 4);
        ck_assert_uint_eq(t->file_offset, kvs_gguf_data_offset(g));
        kvs_dtype dt;
        ck_assert_int_eq(kvs_gguf_tensor_dtype(t, &dt), KVS_OK);
        ck_assert_int_eq(dt, KVS_F32);
        t = kvs_gguf_tensor(g, kvs_gguf_find_tensor(g, "blk.4.ffn_down.weight"));
        ck_assert(t != NULL);
        ck_assert_int_eq(t->ne[0], 172);
        ck_assert_int_eq(t->ne[1], 64);
        ck_assert_int_eq(kvs_gguf_find_tensor(g, "blk.5.ffn_down.weight"), -1);
        kvs_gguf_close(&g);
    }
    kvs_gguf *g = open_rel("stories260K-llada-f32.gguf");
    assert_str(g, "general.architecture", "llada");
    ck_assert_int_eq(get_i(g, "tokenizer.ggml.mask_token_id"), 0);
    ck_assert_int_eq(get_i(g, "general.alignment"), 32);
    int b = -1;
    ck_assert_int_eq(kvs_gguf_get_bool(g, "diffusion.shift_logits", &b), KVS_OK);
    ck_assert_int_eq(b, 0);
    ck_assert_int_eq(kvs_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b), KVS_OK);
    ck_assert_int_eq(b, 1);
    double base;
    ck_assert_int_eq(kvs_gguf_get_float(g, "llada.rope.freq_base", &base), KVS_OK);
    ck_assert(base == 10000.0);
    kvs_gguf_close(&g);
    g = open_rel("vocab/ggml-vocab-gpt-2.gguf");
    ck_assert_int_eq(kvs_gguf_n_tensors(g), 0);
    const kvs_gguf_value *merges;
    ck_assert_int_eq(kvs_gguf_get_arr(g, "tokenizer.ggml.merges", KVS_GGUF_STRING, &merges), KVS_OK);
    ck_assert_uint_eq(merges->arr.n, 50000);
    ck_assert_int_eq(get_i(g, "tokenizer.ggml.bos_token_id"), 50256);
    kvs_gguf_close(&g);
    g = open_rel("vocab/ggml-vocab-bert-bge.gguf");
    double leps;
    ck_assert_int_eq(kvs_gguf_get_float(g, "bert.attention.layer_norm_epsilon", &leps), KVS_OK);
    ck_assert(fabs(leps - 1e-12) < 1e-18);
    ck_assert_int_eq(kvs_gguf_get_bool(g, "bert.attention.causal", &b), KVS_OK);
    ck_assert_int_eq(b, 0);
    kvs_gguf_close(&g);
}
END_TEST

/* ---- hand-made files ---------------------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n;
    int v1;
} bb;

static void bput(bb *b, const void *x, size_t n) {
    b->p = realloc(b->p, b->n + n + 1);
    memcpy(b->p + b->n, x, n);
    b->n += n;
}
static void bu32(bb *b, uint32_t x) { bput(b, &x, 4); }
static void bu64(bb *b, uint64_t x) { bput(b, &x, 8); }
static void bcnt(bb *b, uint64_t x) {
    if (b->v1) bu32(b, (uint32_t)x);
    else bu64(b, x);
}
static void bstr(bb *b, const char *s) {
    bcnt(b, strlen(s));
    bput(b, s, strlen(s));
}
static void bhdr(bb *b, int version, uint64_t nt, uint64_t nkv) {
    b->v1 = version == 1;
    bput(b, "GGUF", 4);
    bu32(b, (uint32_t)version);
    bcnt(b, nt);
    bcnt(b, nkv);
}
static void btensor(bb *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    bstr(b, name);
    bu32(b, nd);
    for (uint32_t i = 0; i < nd; i++) bcnt(b, ne[i]);
    bu32(b, type);
    bu64(b, off);
}
static void bpad(bb *b, size_t align, size_t extra) {
    while (b->n % align) bput(b, "", 1);
    for (size_t i = 0; i < extra; i++) bput(b, "\x3c", 1);
}

static kvs_status open_bb(bb *b, kvs_gguf **g) {
    /* copy into an exact-size buffer so over-reads hit the allocation end */
    void *exact = malloc(b->n ? b->n : 1);
    memcpy(exact, b->p, b->n);
    free(b->p);
    b->p = exact;
    return kvs_gguf_open_memory(g, b->p, b->n);
}

static void expect_format(bb *b, const char *needle) {
    kvs_gguf *g = NULL;
    kvs_status s = open_bb(b, &g);
    ck_assert_msg(s == KVS_ERR_FORMAT, "expected KVS_ERR_FORMAT for '%s', got %s (%s)", needle,
                  kvs_status_name(s), kvs_last_error());
    ck_assert(g == NULL);
    ck_assert_msg(strstr(kvs_last_error(), needle) != NULL, "message '%s' lacks '%s'",
                  kvs_last_error(), needle);
    ck_assert_msg(strstr(kvs_last_error(), "offset") != NULL, "message '%s' lacks the offset",
                  kvs_last_error());
    free(b->p);
    b->p = NULL;
    b->n = 0;
}

START_TEST(test_malformed_handmade) {
    bb b = {0};
    uint64_t ne2[2] = {8, 2}, ne1[1] = {8};
    /* magic, version */
    bput(&b, "GGUX", 4); bu32(&b, 3); bu64(&b, 0); bu64(&b, 0);
    expect_format(&b, "magic");
    bput(&b, "GGUF", 4); bu32(&b, 4); bu64(&b, 0); bu64(&b, 0);
    expect_format(&b, "version");
    /* absurd counts */
    bhdr(&b, 3, 0, UINT64_MAX);
    expect_format(&b, "metadata count");
    bhdr(&b, 3, UINT64_MAX / 2, 0);
    expect_format(&b, "tensor count");
    /* a string length beyond the file */
    bhdr(&b, 3, 0, 1); bcnt(&b, 1000); bput(&b, "abcdefghijklmnopq", 17);
    expect_format(&b, "key length");
    /* bad value type */
    bhdr(&b, 3, 0, 1); bstr(&b, "a.b"); bu32(&b, 13); bu32(&b, 0);
    expect_format(&b, "key 'a.b'");
    /* array with absurd count / bad element type / too deep */
    bhdr(&b, 3, 0, 1); bstr(&b, "arr"); bu32(&b, KVS_GGUF_ARRAY); bu32(&b, KVS_GGUF_UINT32); bcnt(&b, 1ull << 40);
    expect_format(&b, "array count");
    bhdr(&b, 3, 0, 1); bstr(&b, "arr"); bu32(&b, KVS_GGUF_ARRAY); bu32(&b, 77); bcnt(&b, 1);
    expect_format(&b, "element type");
    bhdr(&b, 3, 0, 1); bstr(&b, "deep"); bu32(&b, KVS_GGUF_ARRAY);
    for (int i = 0; i < 40; i++) { bu32(&b, KVS_GGUF_ARRAY); bcnt(&b, 1); }
    bu32(&b, KVS_GGUF_UINT8); bcnt(&b, 0);
    expect_format(&b, "nested");
    /* duplicate key */
    bhdr(&b, 3, 0, 2); bstr(&b, "k"); bu32(&b, KVS_GGUF_UINT8); bput(&b, "\1", 1);
    bstr(&b, "k"); bu32(&b, KVS_GGUF_UINT8); bput(&b, "\1", 1);
    expect_format(&b, "duplicate key");
    /* bad alignment */
    bhdr(&b, 3, 0, 1); bstr(&b, "general.alignment"); bu32(&b, KVS_GGUF_UINT32); bu32(&b, 24);
    expect_format(&b, "power of two");
    bhdr(&b, 3, 0, 1); bstr(&b, "general.alignment"); bu32(&b, KVS_GGUF_STRING); bstr(&b, "32");
    expect_format(&b, "general.alignment");
    /* tensors: n_dims, zero dim, unknown type, block multiple, duplicate, unaligned, beyond EOF, overlap */
    bhdr(&b, 3, 1, 0); btensor(&b, "t", 5, (uint64_t[]){1, 1, 1, 1, 1}, 0, 0); bpad(&b, 32, 64);
    expect_format(&b, "n_dims");
    bhdr(&b, 3, 1, 0); btensor(&b, "t", 2, (uint64_t[]){8, 0}, 0, 0); bpad(&b, 32, 64);
    expect_format(&b, "tensor 't'");
    bhdr(&b, 3, 1, 0); btensor(&b, "t", 2, (uint64_t[]){1ull << 40, 1ull << 40}, 0, 0); bpad(&b, 32, 64);
    expect_format(&b, "overflow");
    bhdr(&b, 3, 1, 0); btensor(&b, "t", 1, ne1, 4, 0); bpad(&b, 32, 64);
    expect_format(&b, "unknown ggml type 4");
    bhdr(&b, 3, 1, 0); btensor(&b, "t", 1, ne1, KVS_GGML_Q8_0, 0); bpad(&b, 32, 64);
    expect_format(&b, "block size");
    bhdr(&b, 3, 2, 0); btensor(&b, "t", 1, ne1, 0, 0); btensor(&b, "t", 1, ne1, 0, 32); bpad(&b, 32, 64);
    expect_format(&b, "duplicate tensor");
    bhdr(&b, 3, 1, 0); btensor(&b, "t", 1, ne1, 0, 4); bpad(&b, 32, 64);
    expect_format(&b, "alignment");
    bhdr(&b, 3, 1, 0); btensor(&b, "t", 2, ne2, 0, 0); bpad(&b, 32, 63);
    expect_format(&b, "beyond the end");
    bhdr(&b, 3, 1, 0); btensor(&b, "t", 1, ne1, 0, UINT64_MAX - 31); bpad(&b, 32, 64);
    expect_format(&b, "beyond the end");
    bhdr(&b, 3, 2, 0); btensor(&b, "a", 2, ne2, 0, 0); btensor(&b, "b", 1, ne1, 0, 32); bpad(&b, 32, 96);
    expect_format(&b, "overlaps");
    /* the same file with b after a opens */
    bhdr(&b, 3, 2, 0); btensor(&b, "a", 2, ne2, 0, 0); btensor(&b, "b", 1, ne1, 0, 64); bpad(&b, 32, 96);
    kvs_gguf *g = NULL;
    ck_assert_int_eq(open_bb(&b, &g), KVS_OK);
    ck_assert_int_eq(kvs_gguf_n_tensors(g), 2);
    kvs_gguf_close(&g);
    free(b.p);
    b.p = NULL;
    b.n = 0;
    /* a known but unsupported type (9 = Q8_1, an activation type of ggml) opens; conversion names
     * tensor and type */
    bhdr(&b, 3, 1, 0); btensor(&b, "blk.0.attn_q.weight", 1, (uint64_t[]){32}, 9, 0); bpad(&b, 32, 64);
    ck_assert_int_eq(open_bb(&b, &g), KVS_OK);
    const kvs_gguf_tensor_info *t = kvs_gguf_tensor(g, 0);
    ck_assert_uint_eq(t->nbytes, 36);
    kvs_dtype dt;
    ck_assert_int_eq(kvs_gguf_tensor_dtype(t, &dt), KVS_ERR_DTYPE);
    ck_assert_msg(strstr(kvs_last_error(), "blk.0.attn_q.weight") && strstr(kvs_last_error(), "type 9"),
                  "%s", kvs_last_error());
    float f[32];
    ck_assert_int_eq(kvs_gguf_tensor_to_f32(t, f), KVS_ERR_DTYPE);
    kvs_gguf_close(&g);
    free(b.p);
    b.p = NULL;
    b.n = 0;
    /* nested arrays of strings and arrays, v1 counts */
    for (int ver = 1; ver <= 3; ver += 2) {
        bhdr(&b, ver, 0, 2);
        bstr(&b, "nest"); bu32(&b, KVS_GGUF_ARRAY); bu32(&b, KVS_GGUF_ARRAY); bcnt(&b, 2);
        bu32(&b, KVS_GGUF_STRING); bcnt(&b, 2); bstr(&b, "x"); bstr(&b, "yz");
        bu32(&b, KVS_GGUF_INT16); bcnt(&b, 3); bput(&b, "\x01\x00\xff\xff\x00\x80", 6);
        bstr(&b, "i8"); bu32(&b, KVS_GGUF_INT8); bput(&b, "\xfe", 1);
        ck_assert_int_eq(open_bb(&b, &g), KVS_OK);
        const kvs_gguf_value *v = kvs_gguf_get(g, "nest");
        ck_assert(v && v->arr.type == KVS_GGUF_ARRAY && v->arr.n == 2);
        const kvs_gguf_value *a0 = &v->arr.items[0], *a1 = &v->arr.items[1];
        kvs_gguf_str s;
        ck_assert_int_eq(kvs_gguf_arr_str(a0, 1, &s), KVS_OK);
        ck_assert(s.len == 2 && memcmp(s.data, "yz", 2) == 0);
        int64_t x;
        ck_assert_int_eq(kvs_gguf_arr_int(a1, 0, &x), KVS_OK); ck_assert_int_eq(x, 1);
        ck_assert_int_eq(kvs_gguf_arr_int(a1, 1, &x), KVS_OK); ck_assert_int_eq(x, -1);
        ck_assert_int_eq(kvs_gguf_arr_int(a1, 2, &x), KVS_OK); ck_assert_int_eq(x, -32768);
        ck_assert_int_eq(kvs_gguf_get_int(g, "i8", &x), KVS_OK); ck_assert_int_eq(x, -2);
        kvs_gguf_close(&g);
        free(b.p);
        b.p = NULL;
        b.n = 0;
    }
}
END_TEST

/* ---- truncation and random flips ------------------------------------------------------------------ */

static uint64_t rng_state;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void truncation_case(const char *rel) {
    size_t n;
    uint8_t *data = slurp(rel, &n);
    kvs_gguf *g = NULL;
    ck_assert_int_eq(kvs_gguf_open_memory(&g, data, n), KVS_OK);
    size_t hdr = kvs_gguf_n_tensors(g) ? (size_t)kvs_gguf_data_offset(g) : n;
    kvs_gguf_close(&g);
    rng_state = 0x9E3779B97F4A7C15ull;
    int tried = 0;
    /* every length through the header (up to 16 KiB, then a stride), 300 random in the data */
    size_t step = hdr > 16384 ? hdr / 4096 : 1;
    for (size_t cut = 0; cut < n; cut = cut < hdr ? cut + step : cut + 1 + (size_t)(rng() % (n / 300 + 1))) {
        uint8_t *part = malloc(cut ? cut : 1);
        memcpy(part, data, cut);
        kvs_status s = kvs_gguf_open_memory(&g, part, cut);
        ck_assert_msg(s == KVS_ERR_FORMAT, "%s truncated to %zu bytes: %s (%s)", rel, cut,
                      kvs_status_name(s), kvs_last_error());
        ck_assert(g == NULL);
        free(part);
        tried++;
    }
    printf("gguf: %s: %d truncations, all KVS_ERR_FORMAT\n", rel, tried);
    free(data);
}

START_TEST(test_truncation) {
    if (!have_models()) return;
    truncation_case("stories260K-f32.v1.gguf");
    truncation_case("stories260K-f32.v3.gguf");
    truncation_case("stories260K-llada-f32.gguf");
    truncation_case("vocab/ggml-vocab-llama-spm.gguf");
}
END_TEST

static void flip_case(const char *rel, uint64_t seed, int iters) {
    size_t n;
    uint8_t *data = slurp(rel, &n);
    kvs_gguf *g = NULL;
    ck_assert_int_eq(kvs_gguf_open_memory(&g, data, n), KVS_OK);
    size_t hdr = kvs_gguf_n_tensors(g) ? (size_t)kvs_gguf_data_offset(g) : n;
    kvs_gguf_close(&g);
    rng_state = seed;
    int ok = 0, bad = 0;
    uint8_t *copy = malloc(n);
    for (int it = 0; it < iters; it++) {
        memcpy(copy, data, n);
        int flips = 1 + (int)(rng() % 4);
        for (int k = 0; k < flips; k++) {
            /* mostly the first bytes (header, counts, first keys), sometimes anywhere in the header */
            size_t pos = (rng() % 3 == 0) ? (size_t)(rng() % hdr) : (size_t)(rng() % (hdr < 512 ? hdr : 512));
            uint8_t mode = (uint8_t)(rng() % 3);
            copy[pos] = mode == 0 ? (uint8_t)(copy[pos] ^ (1u << (rng() % 8)))
                        : mode == 1 ? (uint8_t)rng() : 0xff;
        }
        kvs_status s = kvs_gguf_open_memory(&g, copy, n);
        ck_assert_msg(s == KVS_OK || s == KVS_ERR_FORMAT, "%s seed %llu iter %d: %s (%s)", rel,
                      (unsigned long long)seed, it, kvs_status_name(s), kvs_last_error());
        if (s == KVS_OK) {
            touch_all(g);
            kvs_gguf_close(&g);
            ok++;
        } else {
            ck_assert(strstr(kvs_last_error(), "offset") != NULL);
            bad++;
        }
    }
    printf("gguf: %s: %d random flip sets (seed %llu): %d KVS_ERR_FORMAT, %d clean loads\n", rel,
           iters, (unsigned long long)seed, bad, ok);
    free(copy);
    free(data);
}

START_TEST(test_byte_flips) {
    if (!have_models()) return;
    flip_case("stories260K-f32.v1.gguf", 1234567, 3000);
    flip_case("stories260K-f32.v3.gguf", 7654321, 3000);
    flip_case("stories260K-llada-f32.gguf", 42, 3000);
}
END_TEST

/* ---- writer ------------------------------------------------------------------------------------ */

static void writer_roundtrip(uint32_t version, uint32_t align) {
    kvs_gguf_writer *w = NULL;
    ck_assert_int_eq(kvs_gguf_writer_create(&w, version), KVS_OK);
    if (align) ck_assert_int_eq(kvs_gguf_writer_set_alignment(w, align), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_set_u32(w, "u32", 4000000000u), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_set_i32(w, "i32", -7), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_set_u64(w, "u64", UINT64_MAX), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_set_i64(w, "i64", INT64_MIN), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_set_f32(w, "f32", 0.1f), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_set_f64(w, "f64", -1e-300), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_set_bool(w, "bool", 1), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_set_str(w, "str", "policy \xe2\x96\x81 weights"), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_set_str(w, "str", "again"), KVS_ERR_INVALID_ARGUMENT);
    float fa[5] = {1.5f, -0.0f, INFINITY, 1e-40f, 3.0f};
    uint8_t ua[3] = {0, 200, 255};
    ck_assert_int_eq(kvs_gguf_writer_set_arr(w, "arr.f32", KVS_GGUF_FLOAT32, fa, 5), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_set_arr(w, "arr.u8", KVS_GGUF_UINT8, ua, 3), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_set_arr(w, "arr.empty", KVS_GGUF_INT64, NULL, 0), KVS_OK);
    const char *strs[3] = {"a", "", "\xf0\x9f\xa6\x99"};
    ck_assert_int_eq(kvs_gguf_writer_set_arr_str(w, "arr.str", strs, 3), KVS_OK);
    /* tensors */
    float t32[3 * 7];
    for (int i = 0; i < 21; i++) t32[i] = (float)sin(i * 1.7) * 1e3f;
    t32[5] = NAN;
    uint16_t t16[33];
    for (int i = 0; i < 33; i++) t16[i] = (uint16_t)(i * 1999);
    uint8_t q8[2 * 34];
    for (int i = 0; i < 68; i++) q8[i] = (uint8_t)(i * 37);
    q8[0] = 0x00; q8[1] = 0x3c;     /* d = 1.0 (f16) */
    q8[34] = 0x00; q8[35] = 0xc0;   /* d = -2.0 */
    ck_assert_int_eq(kvs_gguf_writer_add_tensor(w, "w.f32", KVS_GGML_F32, 2, (int64_t[]){7, 3}, t32), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_add_tensor(w, "w.f16", KVS_GGML_F16, 3, (int64_t[]){11, 1, 3}, t16), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_add_tensor(w, "w.bf16", KVS_GGML_BF16, 1, (int64_t[]){33}, t16), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_add_tensor(w, "w.q8", KVS_GGML_Q8_0, 2, (int64_t[]){32, 2}, q8), KVS_OK);
    ck_assert_int_eq(kvs_gguf_writer_add_tensor(w, "w.f32", KVS_GGML_F32, 1, (int64_t[]){1}, t32), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_gguf_writer_add_tensor(w, "w.q8_1", 9, 1, (int64_t[]){32}, q8), KVS_ERR_DTYPE); /* Q8_1 */
    ck_assert_int_eq(kvs_gguf_writer_add_tensor(w, "w.bad", KVS_GGML_Q8_0, 1, (int64_t[]){31}, q8), KVS_ERR_DTYPE);
    char path[] = "/tmp/kvs_gguf_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    ck_assert_int_eq(kvs_gguf_writer_write(w, path), KVS_OK);
    void *mem;
    size_t memn;
    ck_assert_int_eq(kvs_gguf_writer_to_memory(w, &mem, &memn), KVS_OK);
    kvs_gguf_writer_destroy(&w);
    ck_assert(w == NULL);

    kvs_gguf *g = NULL;
    kvs_status s = kvs_gguf_open(&g, path);
    ck_assert_msg(s == KVS_OK, "%s", kvs_last_error());
    ck_assert_uint_eq(kvs_gguf_version(g), version ? version : 3);
    ck_assert_uint_eq(kvs_gguf_alignment(g), align ? align : 32);
    ck_assert_int_eq(kvs_gguf_n_kv(g), 12 + (align ? 1 : 0));
    const kvs_gguf_value *v = kvs_gguf_get(g, "u32");
    ck_assert(v->type == KVS_GGUF_UINT32 && v->u == 4000000000u);
    v = kvs_gguf_get(g, "i32");
    ck_assert(v->type == KVS_GGUF_INT32 && v->i == -7);
    v = kvs_gguf_get(g, "u64");
    ck_assert(v->type == KVS_GGUF_UINT64 && v->u == UINT64_MAX);
    int64_t x;
    ck_assert_int_eq(kvs_gguf_get_int(g, "u64", &x), KVS_ERR_OUT_OF_RANGE);
    v = kvs_gguf_get(g, "i64");
    ck_assert(v->type == KVS_GGUF_INT64 && v->i == INT64_MIN);
    v = kvs_gguf_get(g, "f32");
    ck_assert(v->type == KVS_GGUF_FLOAT32 && (float)v->f == 0.1f);
    v = kvs_gguf_get(g, "f64");
    ck_assert(v->type == KVS_GGUF_FLOAT64 && v->f == -1e-300);
    v = kvs_gguf_get(g, "bool");
    ck_assert(v->type == KVS_GGUF_BOOL && v->b == 1);
    char buf[64];
    ck_assert_int_eq(kvs_gguf_get_string(g, "str", buf, sizeof buf), KVS_OK);
    ck_assert_str_eq(buf, "policy \xe2\x96\x81 weights");
    ck_assert_int_eq(kvs_gguf_get_arr(g, "arr.f32", KVS_GGUF_FLOAT32, &v), KVS_OK);
    ck_assert(v->arr.n == 5 && memcmp(v->arr.data, fa, sizeof fa) == 0);
    ck_assert_int_eq(kvs_gguf_get_arr(g, "arr.u8", KVS_GGUF_UINT8, &v), KVS_OK);
    ck_assert(v->arr.n == 3 && memcmp(v->arr.data, ua, 3) == 0);
    ck_assert_int_eq(kvs_gguf_get_arr(g, "arr.empty", KVS_GGUF_INT64, &v), KVS_OK);
    ck_assert_uint_eq(v->arr.n, 0);
    ck_assert_int_eq(kvs_gguf_get_arr(g, "arr.str", KVS_GGUF_STRING, &v), KVS_OK);
    for (int i = 0; i < 3; i++) {
        kvs_gguf_str st;
        ck_assert_int_eq(kvs_gguf_arr_str(v, (uint64_t)i, &st), KVS_OK);
        ck_assert(st.len == strlen(strs[i]) && memcmp(st.data, strs[i], st.len) == 0);
    }
    const struct { const char *name; const void *data; size_t n; uint32_t type; int nd; } want[] = {
        {"w.f32", t32, sizeof t32, KVS_GGML_F32, 2}, {"w.f16", t16, sizeof t16, KVS_GGML_F16, 3},
        {"w.bf16", t16, sizeof t16, KVS_GGML_BF16, 1}, {"w.q8", q8, sizeof q8, KVS_GGML_Q8_0, 2}};
    for (int i = 0; i < 4; i++) {
        const kvs_gguf_tensor_info *t = kvs_gguf_tensor(g, kvs_gguf_find_tensor(g, want[i].name));
        ck_assert(t != NULL);
        ck_assert_uint_eq(t->ggml_type, want[i].type);
        ck_assert_int_eq(t->n_dims, want[i].nd);
        ck_assert_uint_eq(t->nbytes, want[i].n);
        ck_assert(memcmp(t->data, want[i].data, want[i].n) == 0);   /* bit-exact, NaN included */
        ck_assert_uint_eq(t->file_offset % kvs_gguf_alignment(g), 0);
    }
    /* Q8_0 and F16 conversion */
    const kvs_gguf_tensor_info *t = kvs_gguf_tensor(g, kvs_gguf_find_tensor(g, "w.q8"));
    float deq[64];
    ck_assert_int_eq(kvs_gguf_tensor_to_f32(t, deq), KVS_OK);
    for (int i = 0; i < 32; i++) {
        ck_assert(deq[i] == (float)(int8_t)q8[2 + i]);
        ck_assert(deq[32 + i] == -2.0f * (float)(int8_t)q8[36 + i]);
    }
    t = kvs_gguf_tensor(g, kvs_gguf_find_tensor(g, "w.bf16"));
    ck_assert_int_eq(kvs_gguf_tensor_to_f32(t, deq), KVS_OK);
    for (int i = 0; i < 33; i++) {
        uint32_t u = (uint32_t)t16[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        ck_assert(memcmp(&deq[i], &f, 4) == 0);
    }
    /* the file and the memory image are identical; re-reading from memory gives the same */
    size_t fn;
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    fn = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *fb = malloc(fn);
    ck_assert_uint_eq(fread(fb, 1, fn, f), fn);
    fclose(f);
    ck_assert_uint_eq(fn, memn);
    ck_assert(memcmp(fb, mem, fn) == 0);
    kvs_gguf *g2 = NULL;
    ck_assert_int_eq(kvs_gguf_open_memory(&g2, mem, memn), KVS_OK);
    ck_assert_int_eq(kvs_gguf_n_tensors(g2), 4);
    kvs_gguf_close(&g2);
    free(fb);
    free(mem);
    kvs_gguf_close(&g);
    remove(path);
}

START_TEST(test_writer_roundtrip) {
    writer_roundtrip(3, 0);
    writer_roundtrip(1, 0);
    writer_roundtrip(2, 64);
    writer_roundtrip(0, 1);
}
END_TEST

/* Re-encoding a real file with the writer (every key in order, every tensor) reproduces it
 * byte for byte. */
static void copy_value(kvs_gguf_writer *w, const char *key, const kvs_gguf_value *v) {
    kvs_status s = KVS_OK;
    switch (v->type) {
    case KVS_GGUF_UINT32: s = kvs_gguf_writer_set_u32(w, key, (uint32_t)v->u); break;
    case KVS_GGUF_INT32: s = kvs_gguf_writer_set_i32(w, key, (int32_t)v->i); break;
    case KVS_GGUF_UINT64: s = kvs_gguf_writer_set_u64(w, key, v->u); break;
    case KVS_GGUF_INT64: s = kvs_gguf_writer_set_i64(w, key, v->i); break;
    case KVS_GGUF_FLOAT32: s = kvs_gguf_writer_set_f32(w, key, (float)v->f); break;
    case KVS_GGUF_FLOAT64: s = kvs_gguf_writer_set_f64(w, key, v->f); break;
    case KVS_GGUF_BOOL: s = kvs_gguf_writer_set_bool(w, key, v->b); break;
    case KVS_GGUF_STRING: {
        char *str = strndup(v->s.data, (size_t)v->s.len);
        s = kvs_gguf_writer_set_str(w, key, str);
        free(str);
    } break;
    case KVS_GGUF_ARRAY:
        if (v->arr.type == KVS_GGUF_STRING) {
            char **strs = malloc((size_t)v->arr.n * sizeof *strs);
            for (uint64_t i = 0; i < v->arr.n; i++)
                strs[i] = strndup(v->arr.items[i].s.data, (size_t)v->arr.items[i].s.len);
            s = kvs_gguf_writer_set_arr_str(w, key, (const char *const *)strs, v->arr.n);
            for (uint64_t i = 0; i < v->arr.n; i++) free(strs[i]);
            free(strs);
        } else {
            s = kvs_gguf_writer_set_arr(w, key, v->arr.type, v->arr.data, v->arr.n);
        }
        break;
    default: ck_abort_msg("type %d not copied", v->type);
    }
    ck_assert_msg(s == KVS_OK, "%s: %s", key, kvs_last_error());
}

START_TEST(test_writer_reproduces_file) {
    if (!have_models()) return;
    const char *files[] = {"stories260K-f32.v3.gguf", "stories260K-f32.v1.gguf", "stories260K-llada-f32.gguf"};
    for (int f = 0; f < 3; f++) {
        size_t n;
        uint8_t *data = slurp(files[f], &n);
        kvs_gguf *g = NULL;
        ck_assert_int_eq(kvs_gguf_open_memory(&g, data, n), KVS_OK);
        kvs_gguf_writer *w = NULL;
        ck_assert_int_eq(kvs_gguf_writer_create(&w, kvs_gguf_version(g)), KVS_OK);
        for (int64_t i = 0; i < kvs_gguf_n_kv(g); i++) {
            if (strcmp(kvs_gguf_key(g, i), "general.alignment") == 0) {
                ck_assert_int_eq(kvs_gguf_writer_set_alignment(w, kvs_gguf_alignment(g)), KVS_OK);
                continue;
            }
            copy_value(w, kvs_gguf_key(g, i), kvs_gguf_value_at(g, i));
        }
        for (int64_t i = 0; i < kvs_gguf_n_tensors(g); i++) {
            const kvs_gguf_tensor_info *t = kvs_gguf_tensor(g, i);
            ck_assert_int_eq(kvs_gguf_writer_add_tensor(w, t->name, t->ggml_type, t->n_dims, t->ne, t->data),
                             KVS_OK);
        }
        void *mem;
        size_t memn;
        ck_assert_int_eq(kvs_gguf_writer_to_memory(w, &mem, &memn), KVS_OK);
        ck_assert_uint_eq(memn, n);
        ck_assert_msg(memcmp(mem, data, n) == 0, "%s not reproduced byte for byte", files[f]);
        free(mem);
        kvs_gguf_writer_destroy(&w);
        kvs_gguf_close(&g);
        free(data);
    }
}
END_TEST

/* test_gguf: the hand-made cases (always). test_gguf --fixtures: the cases over the full fixture set,
 * exit 77 (a visible SKIP) when it is not there, so a clone without ../shared shows what it missed. */
int main(int argc, char **argv) {
    int fixtures = argc > 1 && strcmp(argv[1], "--fixtures") == 0;
    if (fixtures && !have_models()) {
        printf("SKIP: model fixtures (../shared/models) not found (set KVSIEVE_MODELS)\n");
        return 77;
    }
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("gguf");
    tcase_set_timeout(tc, 300);
    if (!fixtures) {
        tcase_add_test(tc, test_malformed_handmade);
        tcase_add_test(tc, test_writer_roundtrip);
    } else {
        tcase_add_test(tc, test_open_all_fixtures);
        tcase_add_test(tc, test_metadata_values);
        tcase_add_test(tc, test_truncation);
        tcase_add_test(tc, test_byte_flips);
        tcase_add_test(tc, test_writer_reproduces_file);
    }
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
