/* make_seeds: writes the fuzz seed corpora (tests/data/fuzz/corpus/<target>/) from the real fixtures:
 * tiny models cut from stories260K (its first rows and columns, its metadata keys and first tokens),
 * the first tokens of tok512.bin and of the vocab GGUFs, lines of the fixture texts, learned-policy
 * side files written by kvs_learned_save, and fixed pseudo-random op calls. Not run by the build:
 *   ninja -C build tests/fuzz/make_seeds && build/tests/fuzz/make_seeds tests/data/fuzz/corpus
 * (models through kvs_model_locate, texts from ../shared/text next to the source tree, or argv[2]).
 * The seeds are committed; rerun only to change them. Sizes stay small (< 8 KiB each) so that
 * libFuzzer's mutations stay fast. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvs_config.h"
#include "kvsieve/kvsieve.h"

static const char *g_out;

#define DIE(...) (fprintf(stderr, "make_seeds: " __VA_ARGS__), fputc('\n', stderr), exit(1))
#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call) != KVS_OK) DIE("%s: %s", #call, kvs_last_error());                              \
    } while (0)

static void put(const char *target, const char *name, const void *data, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_out, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", g_out, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) DIE("cannot write %s: %s", path, strerror(errno));
}

static void *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) DIE("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (!b || fread(b, 1, (size_t)sz, f) != (size_t)sz) DIE("cannot read %s", path);
    fclose(f);
    b[sz] = 0;
    *n = (size_t)sz;
    return b;
}

/* ---- the tiny model: stories260K's first rows/columns ---- */
typedef struct tiny {
    int L, D, H, KV, HD, F, V, ctx;
    float *embd, *out_norm, *output;                     /* [V][D], [D], [V][D] */
    float *attn_norm[2], *wq[2], *wk[2], *wv[2], *wo[2]; /* [D], [H*HD][D], [KV*HD][D], .., [D][H*HD] */
    float *ffn_norm[2], *gate[2], *down[2], *up[2];      /* [D], [F][D], [D][F], [F][D] */
} tiny;

static float *cut(const kvs_weight *w, int rows, int cols) {
    float *all = malloc((size_t)(w->ne[0] * w->ne[1]) * sizeof *all), *r = malloc((size_t)rows * cols * sizeof *r);
    TRY(kvs_weight_to_f32(w, all));
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) r[i * cols + j] = all[(i % w->ne[1]) * w->ne[0] + (j % w->ne[0])];
    free(all);
    return r;
}

static void tiny_make(tiny *t, const kvs_model_file *mf, int L, int D, int H, int KV, int F, int V) {
    const kvs_model_weights *w = kvs_model_file_weights(mf);
    memset(t, 0, sizeof *t);
    t->L = L, t->D = D, t->H = H, t->KV = KV, t->HD = D / H, t->F = F, t->V = V, t->ctx = 32;
    int Q = H * t->HD, K = KV * t->HD;
    t->embd = cut(&w->token_embd, V, D);
    t->out_norm = cut(&w->output_norm, 1, D);
    t->output = cut(&w->output, V, D);
    for (int l = 0; l < L; l++) {
        const kvs_layer_weights *s = &w->layers[l];
        t->attn_norm[l] = cut(&s->attn_norm, 1, D);
        t->wq[l] = cut(&s->wq, Q, D);
        t->wk[l] = cut(&s->wk, K, D);
        t->wv[l] = cut(&s->wv, K, D);
        t->wo[l] = cut(&s->wo, D, Q);
        t->ffn_norm[l] = cut(&s->ffn_norm, 1, D);
        t->gate[l] = cut(&s->w_gate, F, D);
        t->down[l] = cut(&s->w_down, D, F);
        t->up[l] = cut(&s->w_up, F, D);
    }
}

static void convert(uint32_t type, const float *x, int64_t n, void *dst) {
    uint16_t *h = dst;
    if (type == KVS_GGML_F32) memcpy(dst, x, (size_t)n * 4);
    else if (type == KVS_GGML_F16)
        for (int64_t i = 0; i < n; i++) h[i] = kvs_f32_to_f16(x[i]);
    else if (type == KVS_GGML_BF16)
        for (int64_t i = 0; i < n; i++) h[i] = kvs_f32_to_bf16(x[i]);
    else { /* Q8_0 */
        uint8_t *b = dst;
        for (int64_t i = 0; i < n; i += 32, b += 34) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fabsf(x[i + j]) > amax ? fabsf(x[i + j]) : amax;
            float d = amax / 127.0f;
            uint16_t dh = kvs_f32_to_f16(d);
            memcpy(b, &dh, 2);
            for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(d > 0 ? lrintf(x[i + j] / d) : 0);
        }
    }
}

static void add_t(kvs_gguf_writer *g, const char *name, uint32_t type, const float *x, int64_t rows, int64_t cols) {
    if (type == KVS_GGML_Q8_0 && cols % 32) type = KVS_GGML_F32;
    if (rows == 1) type = KVS_GGML_F32;   /* norms stay f32, as llama.cpp writes them */
    int64_t ne[2] = {cols, rows};
    void *buf = malloc((size_t)(rows * cols) * 4 + 64);
    convert(type, x, rows * cols, buf);
    TRY(kvs_gguf_writer_add_tensor(g, name, type, rows > 1 ? 2 : 1, ne, buf));
    free(buf);
}

/* Every key of src, arrays cut to max_arr elements, keys in `skip` left out. */
static void copy_meta(kvs_gguf_writer *g, const kvs_gguf *src, uint64_t max_arr, const char *const *skip) {
    for (int64_t i = 0; i < kvs_gguf_n_kv(src); i++) {
        const char *key = kvs_gguf_key(src, i);
        int skipped = 0;
        for (int j = 0; skip && skip[j]; j++) skipped |= strcmp(skip[j], key) == 0;
        if (skipped || strcmp(key, "general.alignment") == 0) continue;
        const kvs_gguf_value *v = kvs_gguf_value_at(src, i);
        char s[4096];
        switch (v->type) {
        case KVS_GGUF_STRING:
            snprintf(s, sizeof s, "%.*s", (int)v->s.len, v->s.data);
            TRY(kvs_gguf_writer_set_str(g, key, s));
            break;
        case KVS_GGUF_FLOAT32: TRY(kvs_gguf_writer_set_f32(g, key, (float)v->f)); break;
        case KVS_GGUF_FLOAT64: TRY(kvs_gguf_writer_set_f64(g, key, v->f)); break;
        case KVS_GGUF_BOOL: TRY(kvs_gguf_writer_set_bool(g, key, v->b)); break;
        case KVS_GGUF_INT64: case KVS_GGUF_UINT64: TRY(kvs_gguf_writer_set_u64(g, key, v->u)); break;
        case KVS_GGUF_ARRAY: {
            uint64_t n = v->arr.n < max_arr ? v->arr.n : max_arr;
            if (v->arr.type == KVS_GGUF_STRING) {
                char **strs = malloc(n * sizeof *strs);
                for (uint64_t j = 0; j < n; j++) {
                    const kvs_gguf_value *e = &v->arr.items[j];
                    strs[j] = malloc(e->s.len + 1);
                    memcpy(strs[j], e->s.data, e->s.len);
                    strs[j][e->s.len] = 0;
                }
                TRY(kvs_gguf_writer_set_arr_str(g, key, (const char *const *)strs, n));
                for (uint64_t j = 0; j < n; j++) free(strs[j]);
                free(strs);
            } else if (v->arr.type != KVS_GGUF_ARRAY) {
                TRY(kvs_gguf_writer_set_arr(g, key, v->arr.type, v->arr.data, n));
            }
            break;
        }
        default: TRY(kvs_gguf_writer_set_u32(g, key, (uint32_t)v->u)); break;
        }
    }
}

static void write_gguf(const char *target, const char *name, kvs_gguf_writer *g) {
    void *d;
    size_t n;
    TRY(kvs_gguf_writer_to_memory(g, &d, &n));
    put(target, name, d, n);
    free(d);
}

static void tiny_gguf(const tiny *t, const kvs_gguf *src, const char *name, uint32_t version, uint32_t type,
                      const char *arch, int untied, int mask_id) {
    kvs_gguf_writer *g = NULL;
    TRY(kvs_gguf_writer_create(&g, version));
    static const char *const skip[] = {"general.architecture", "llama.context_length", "llama.embedding_length",
                                       "llama.block_count", "llama.feed_forward_length", "llama.rope.dimension_count",
                                       "llama.attention.head_count", "llama.attention.head_count_kv",
                                       "llama.attention.layer_norm_rms_epsilon", NULL};
    TRY(kvs_gguf_writer_set_str(g, "general.architecture", arch));
    copy_meta(g, src, (uint64_t)t->V, skip);
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, arch), key)
    TRY(kvs_gguf_writer_set_u32(g, KEY("context_length"), (uint32_t)t->ctx));
    TRY(kvs_gguf_writer_set_u32(g, KEY("embedding_length"), (uint32_t)t->D));
    TRY(kvs_gguf_writer_set_u32(g, KEY("block_count"), (uint32_t)t->L));
    TRY(kvs_gguf_writer_set_u32(g, KEY("feed_forward_length"), (uint32_t)t->F));
    TRY(kvs_gguf_writer_set_u32(g, KEY("rope.dimension_count"), (uint32_t)t->HD));
    TRY(kvs_gguf_writer_set_u32(g, KEY("attention.head_count"), (uint32_t)t->H));
    TRY(kvs_gguf_writer_set_u32(g, KEY("attention.head_count_kv"), (uint32_t)t->KV));
    TRY(kvs_gguf_writer_set_f32(g, KEY("attention.layer_norm_rms_epsilon"), 1e-5f));
    TRY(kvs_gguf_writer_set_f32(g, KEY("rope.freq_base"), 10000.0f));
#undef KEY
    if (mask_id >= 0) TRY(kvs_gguf_writer_set_u32(g, "tokenizer.ggml.mask_token_id", (uint32_t)mask_id));
    int Q = t->H * t->HD, K = t->KV * t->HD;
    add_t(g, "token_embd.weight", type, t->embd, t->V, t->D);
    add_t(g, "output_norm.weight", type, t->out_norm, 1, t->D);
    if (untied) add_t(g, "output.weight", type, t->output, t->V, t->D);
    for (int l = 0; l < t->L; l++) {
        char nm[64];
#define T_(suffix, x, rows, cols) snprintf(nm, sizeof nm, "blk.%d." suffix ".weight", l), add_t(g, nm, type, x, rows, cols)
        T_("attn_norm", t->attn_norm[l], 1, t->D);
        T_("attn_q", t->wq[l], Q, t->D);
        T_("attn_k", t->wk[l], K, t->D);
        T_("attn_v", t->wv[l], K, t->D);
        T_("attn_output", t->wo[l], t->D, Q);
        T_("ffn_norm", t->ffn_norm[l], 1, t->D);
        T_("ffn_gate", t->gate[l], t->F, t->D);
        T_("ffn_down", t->down[l], t->D, t->F);
        T_("ffn_up", t->up[l], t->F, t->D);
#undef T_
    }
    write_gguf("gguf", name, g);
    kvs_gguf_writer_destroy(&g);
}

/* ---- llama2.c ---- */
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void b_put(buf *b, const void *x, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}
#define B_ARR(b, field, count) for (int l = 0; l < t->L; l++) b_put(b, t->field[l], (size_t)(count) * 4)

static void llama2c(const tiny *t, int version, int shared) {
    buf b = {0};
    int Q = t->H * t->HD, K = t->KV * t->HD;
    int32_t hd[7] = {t->D, t->F, t->L, t->H, t->KV, shared ? t->V : -t->V, t->ctx};
    if (version == 1) {
        uint32_t magic = 0x616b3432u;
        int32_t v = 1;
        b_put(&b, &magic, 4);
        b_put(&b, &v, 4);
        b_put(&b, hd, sizeof hd);
        hd[5] = t->V;
        memcpy(b.p + 8, hd, sizeof hd);
        uint8_t sh = (uint8_t)shared;
        b_put(&b, &sh, 1);
        uint8_t zero[256] = {0};
        b_put(&b, zero, 256 - b.n);
        B_ARR(&b, attn_norm, t->D);
        B_ARR(&b, ffn_norm, t->D);
        b_put(&b, t->out_norm, (size_t)t->D * 4);
        b_put(&b, t->embd, (size_t)t->V * t->D * 4);
    } else {
        b_put(&b, hd, sizeof hd);
        b_put(&b, t->embd, (size_t)t->V * t->D * 4);
        B_ARR(&b, attn_norm, t->D);
    }
    B_ARR(&b, wq, Q * t->D);
    B_ARR(&b, wk, K * t->D);
    B_ARR(&b, wv, K * t->D);
    B_ARR(&b, wo, t->D * Q);
    if (version == 0) B_ARR(&b, ffn_norm, t->D);
    B_ARR(&b, gate, t->F * t->D);
    B_ARR(&b, down, t->D * t->F);
    B_ARR(&b, up, t->F * t->D);
    if (version == 0) {
        b_put(&b, t->out_norm, (size_t)t->D * 4);
        float *freq = calloc((size_t)t->ctx * t->HD, 4);
        b_put(&b, freq, (size_t)t->ctx * t->HD * 4);
        free(freq);
    }
    if (!shared) b_put(&b, t->output, (size_t)t->V * t->D * 4);
    char name[64];
    snprintf(name, sizeof name, "tiny-v%d-%s.bin", version, shared ? "shared" : "unshared");
    put("llama2c", name, b.p, b.n);
    free(b.p);
}

/* ---- safetensors: u16 config length, config.json, model.safetensors ---- */
static void st_add(buf *hdr, buf *data, int *first, const char *name, const float *x, int rows, int cols) {
    char h[256];
    size_t begin = data->n;
    b_put(data, x, (size_t)rows * cols * 4);
    if (rows == 1)
        snprintf(h, sizeof h, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}", *first ? "" : ",", name,
                 cols, begin, data->n);
    else
        snprintf(h, sizeof h, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}", *first ? "" : ",",
                 name, rows, cols, begin, data->n);
    *first = 0;
    b_put(hdr, h, strlen(h));
}

static void safetensors(const tiny *t, const char *real_cfg, int untied) {
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":%d,"
             "\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
             "\"vocab_size\":%d,\"max_position_embeddings\":%d,\"rms_norm_eps\":1e-05,\"rope_theta\":10000.0,"
             "\"hidden_act\":\"silu\",\"tie_word_embeddings\":%s,\"bos_token_id\":1,\"eos_token_id\":2,"
             "\"torch_dtype\":\"float32\"}",
             t->D, t->F, t->L, t->H, t->KV, t->V, t->ctx, untied ? "false" : "true");
    (void)real_cfg;
    buf hdr = {0}, data = {0};
    int first = 1, Q = t->H * t->HD, K = t->KV * t->HD;
    b_put(&hdr, "{", 1);
    st_add(&hdr, &data, &first, "model.embed_tokens.weight", t->embd, t->V, t->D);
    st_add(&hdr, &data, &first, "model.norm.weight", t->out_norm, 1, t->D);
    if (untied) st_add(&hdr, &data, &first, "lm_head.weight", t->output, t->V, t->D);
    for (int l = 0; l < t->L; l++) {
        char nm[96];
#define S_(suffix, x, rows, cols) snprintf(nm, sizeof nm, "model.layers.%d." suffix ".weight", l), st_add(&hdr, &data, &first, nm, x, rows, cols)
        S_("input_layernorm", t->attn_norm[l], 1, t->D);
        S_("self_attn.q_proj", t->wq[l], Q, t->D);
        S_("self_attn.k_proj", t->wk[l], K, t->D);
        S_("self_attn.v_proj", t->wv[l], K, t->D);
        S_("self_attn.o_proj", t->wo[l], t->D, Q);
        S_("post_attention_layernorm", t->ffn_norm[l], 1, t->D);
        S_("mlp.gate_proj", t->gate[l], t->F, t->D);
        S_("mlp.down_proj", t->down[l], t->D, t->F);
        S_("mlp.up_proj", t->up[l], t->F, t->D);
#undef S_
    }
    b_put(&hdr, ",\"__metadata__\":{\"format\":\"pt\"}}", 32);
    buf all = {0};
    uint16_t lc = (uint16_t)strlen(cfg);
    uint64_t hl = hdr.n;
    b_put(&all, &lc, 2);
    b_put(&all, cfg, lc);
    b_put(&all, &hl, 8);
    b_put(&all, hdr.p, hdr.n);
    b_put(&all, data.p, data.n);
    put("safetensors", untied ? "tiny-untied" : "tiny-tied", all.p, all.n);
    free(hdr.p), free(data.p), free(all.p);
}

int main(int argc, char **argv) {
    if (argc < 2) DIE("usage: make_seeds OUT_DIR [TEXT_DIR]");
    g_out = argv[1];
    mkdir(g_out, 0755);
    char text_dir[2048];
    snprintf(text_dir, sizeof text_dir, "%s", argc > 2 ? argv[2] : KVS_SOURCE_ROOT "/../shared/text");
    char path[4096];
    TRY(kvs_model_locate("stories260K-f32.v3.gguf", path, sizeof path));
    kvs_model_file *mf = NULL;
    TRY(kvs_model_file_open(&mf, path, NULL));
    kvs_gguf *src = NULL;
    TRY(kvs_gguf_open(&src, path));

    tiny t, q8;
    tiny_make(&t, mf, 2, 8, 2, 1, 16, 16);
    tiny_make(&q8, mf, 1, 32, 4, 2, 32, 16);
    tiny_gguf(&t, src, "tiny-f32.gguf", 3, KVS_GGML_F32, "llama", 0, -1);
    tiny_gguf(&t, src, "tiny-f32-v1-untied.gguf", 1, KVS_GGML_F32, "llama", 1, -1);
    tiny_gguf(&t, src, "tiny-f16.gguf", 2, KVS_GGML_F16, "llama", 0, -1);
    tiny_gguf(&t, src, "tiny-bf16.gguf", 3, KVS_GGML_BF16, "llama", 1, -1);
    tiny_gguf(&q8, src, "tiny-q8_0.gguf", 3, KVS_GGML_Q8_0, "llama", 0, -1);
    tiny_gguf(&t, src, "tiny-llada.gguf", 3, KVS_GGML_F32, "llada", 0, 15);
    /* vocab-only files: the tokenizer readers of the three vocabulary kinds */
    static const char *const vocabs[] = {"vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-gpt-2.gguf",
                                         "vocab/ggml-vocab-bert-bge.gguf"};
    for (int i = 0; i < 3; i++) {
        kvs_gguf *v = NULL;
        TRY(kvs_model_locate(vocabs[i], path, sizeof path));
        TRY(kvs_gguf_open(&v, path));
        kvs_gguf_writer *g = NULL;
        TRY(kvs_gguf_writer_create(&g, 3));
        copy_meta(g, v, 48, NULL);
        write_gguf("gguf", strrchr(vocabs[i], '/') + 1, g);
        kvs_gguf_writer_destroy(&g);
        kvs_gguf_close(&v);
    }

    llama2c(&t, 0, 1);
    llama2c(&t, 0, 0);
    llama2c(&t, 1, 1);
    llama2c(&t, 1, 0);
    safetensors(&t, NULL, 0);
    safetensors(&t, NULL, 1);

    /* tokenizer .bin: u16 vocab then the file (the first 16 entries; all of tok512.bin) */
    size_t tn;
    TRY(kvs_model_locate("tok512.bin", path, sizeof path));
    uint8_t *tok = slurp(path, &tn);
    size_t off = 4;
    for (int i = 0; i < 16; i++) {
        int32_t l;
        memcpy(&l, tok + off + 4, 4);
        off += 8 + (size_t)l;
    }
    buf b = {0};
    uint16_t vv = 16;
    b_put(&b, &vv, 2);
    b_put(&b, tok, off);
    put("tokenizer_bin", "tok16", b.p, b.n);
    memset(b.p, 0, 2);   /* vocab 0: count the entries */
    put("tokenizer_bin", "tok16-count", b.p, b.n);
    b.n = 0;
    vv = 512;
    b_put(&b, &vv, 2);
    b_put(&b, tok, tn);
    put("tokenizer_bin", "tok512", b.p, b.n);
    free(b.p);
    free(tok);

    /* tokenizer: lines of the fixture texts and the vocab test inputs, for each of the 4 vocabularies */
    static const char *const texts[] = {"tinystories-sample.txt", "devils-dictionary.txt"};
    int k = 0;
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", text_dir, texts[i]);
        size_t n;
        char *s = slurp(path, &n);
        char *p = s;
        for (int line = 0; line < 4 && p < s + n; line++) {
            char *e = strchr(p, '\n');
            size_t len = e ? (size_t)(e - p) + 1 : strlen(p);
            if (len > 200) len = 200;
            uint8_t seed[256];
            seed[0] = (uint8_t)(k & 3) | (uint8_t)((k & 4) ? 1u << 2 : 0); /* vocab, sometimes ADD_BOS */
            memcpy(seed + 1, p, len);
            char name[32];
            snprintf(name, sizeof name, "text-%02d", k++);
            put("tokenizer", name, seed, len + 1);
            p += len;
            while (p < s + n && *p == '\n') p++;
            for (int skip = 0; skip < 40 && p < s + n; skip++) p = strchr(p, '\n') ? strchr(p, '\n') + 1 : s + n;
        }
        free(s);
    }
    TRY(kvs_model_locate("vocab/ggml-vocab-llama-spm.gguf.inp", path, sizeof path));
    size_t n;
    char *inp = slurp(path, &n);
    char *p = inp;
    const char *sep = "\n__ggml_vocab_test__\n";
    for (int c = 0; c < 46; c++) {
        char *e = strstr(p, sep);
        if (!e) break;
        size_t len = (size_t)(e - p);
        if (len < 200 && c % 3 == 0) {
            uint8_t seed[256];
            seed[0] = (uint8_t)(c & 3);
            memcpy(seed + 1, p, len);
            char name[32];
            snprintf(name, sizeof name, "vocab-%02d", c);
            put("tokenizer", name, seed, len + 1);
        }
        p = e + strlen(sep);
    }
    free(inp);

    /* policy side files for the tiny model's shape */
    kvs_model_hparams hp = *kvs_model_file_hparams(mf);
    hp.n_layers = t.L, hp.dim = t.D, hp.n_heads = t.H, hp.n_kv_heads = t.KV, hp.head_dim = t.HD, hp.ffn_dim = t.F;
    hp.vocab = t.V, hp.ctx_len = t.ctx;
    for (int kind = 0; kind < 3; kind++) {
        kvs_learned *lw = NULL;
        TRY(kvs_learned_create(&lw, (kvs_learned_kind)kind, &hp, 7));
        char tmp[4096], name[64];
        snprintf(name, sizeof name, "%s.gguf", kvs_learned_kind_name((kvs_learned_kind)kind));
        snprintf(tmp, sizeof tmp, "%s/%s", g_out, name);
        TRY(kvs_learned_save(lw, tmp));
        size_t sz;
        void *d = slurp(tmp, &sz);
        remove(tmp);
        put("policy", name, d, sz);
        free(d);
        kvs_learned_destroy(&lw);
    }

    /* ops: fixed pseudo-random calls of each op */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 12; i++) {
        uint8_t s[1536];
        size_t len = 64 + (size_t)i * 120;
        for (size_t j = 0; j < len; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            s[j] = (uint8_t)(x >> 24);
        }
        s[0] = (uint8_t)i;   /* even: attention, odd: top-k */
        char name[32];
        snprintf(name, sizeof name, "%s-%02d", i & 1 ? "topk" : "attention", i);
        put("ops", name, s, len);
    }
    kvs_gguf_close(&src);
    kvs_model_file_close(&mf);
    printf("make_seeds: corpora written to %s\n", g_out);
    return 0;
}
