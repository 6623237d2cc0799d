/* Tokenizer tests: llama.cpp's SPM test vectors (ggml-vocab-llama-spm.gguf.inp/.out), the
 * stories260K tokenizers (GGUF v1/v3/llada and llama2.c tok512.bin) against the LLaDA reference
 * prompts and the published greedy text, round trips, refusal of non-SPM vocabularies.
 * On a clone without ../shared the cases that read only the repository's models/ (GGUF v3 and
 * llada, the two reference JSON files) and none run; the rest need ../shared/models and skip. */
#include <check.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvsieve/gguf.h"
#include "kvsieve/model_file.h"
#include "probe.h"
#include "kvsieve/tokenizer.h"

static char g_models[4096];
static int g_full; /* 1: ../shared/models (every fixture); 0: the repository's models/ alone */

/* g_models: the full fixture set when found, else the folder holding the repository's
 * stories260K-f32.v3.gguf (models/). 0 when neither is found. */
static int find_models(void) {
    g_full = kvs_test_full_fixtures(g_models, sizeof g_models);
    if (g_full) return 1;
    if (kvs_model_locate("stories260K-f32.v3.gguf", g_models, sizeof g_models) != KVS_OK) return 0;
    char *slash = strrchr(g_models, '/');
    if (slash) *slash = '\0';
    else snprintf(g_models, sizeof g_models, ".");
    return 1;
}

static char *slurp(const char *rel, size_t *n) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", g_models, rel);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    ck_assert(buf != NULL);
    ck_assert_int_eq(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    buf[sz] = '\0';
    fclose(f);
    if (n) *n = (size_t)sz;
    return buf;
}

static kvs_tokenizer *tok_gguf(const char *rel) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", g_models, rel);
    kvs_gguf *g = NULL;
    kvs_status s = kvs_gguf_open(&g, path);
    ck_assert_msg(s == KVS_OK, "%s: %s", path, kvs_last_error());
    kvs_tokenizer *t = NULL;
    s = kvs_tokenizer_from_gguf(&t, g);
    ck_assert_msg(s == KVS_OK, "%s: %s", path, kvs_last_error());
    kvs_gguf_close(&g);   /* the tokenizer must not depend on the GGUF afterwards */
    return t;
}

static kvs_tokenizer *tok_bin(void) {
    char path[8192];
    snprintf(path, sizeof path, "%s/tok512.bin", g_models);
    kvs_tokenizer *t = NULL;
    kvs_status s = kvs_tokenizer_from_llama2c(&t, path, 512);
    ck_assert_msg(s == KVS_OK, "%s", kvs_last_error());
    return t;
}

static int64_t encode(const kvs_tokenizer *t, const char *s, size_t n, unsigned flags, int32_t *ids,
                      int64_t cap) {
    int64_t got = -1;
    kvs_status st = kvs_tokenizer_encode(t, s, n, flags, ids, cap, &got);
    ck_assert_msg(st == KVS_OK, "encode: %s", kvs_last_error());
    return got;
}

static void check_roundtrip(const kvs_tokenizer *t, const char *s, size_t n) {
    int64_t cap = (int64_t)n * 4 + 8;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int64_t k = encode(t, s, n, KVS_TOKENIZE_ADD_BOS, ids, cap);
    char *out = malloc(n * 4 + 16);
    size_t len = 0;
    kvs_status st = kvs_tokenizer_decode(t, ids, k, out, n * 4 + 16, &len);
    ck_assert_msg(st == KVS_OK, "%s", kvs_last_error());
    ck_assert_msg(len == n && memcmp(out, s, n) == 0, "round trip of '%.*s' gave '%s'", (int)n, s, out);
    free(ids);
    free(out);
}

/* llama.cpp test-tokenizer-0 conventions: .inp chunks end with "\n__ggml_vocab_test__\n"; .out has
 * one line of space-separated ids per chunk; add_special = false, parse_special = false. */
static void run_vectors(const char *vocab, int expect_cases, int roundtrip) {
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/%s", vocab);
    kvs_tokenizer *t = tok_gguf(rel);
    snprintf(rel, sizeof rel, "vocab/%s.inp", vocab);
    char *inp = slurp(rel, NULL);
    snprintf(rel, sizeof rel, "vocab/%s.out", vocab);
    char *outp = slurp(rel, NULL);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *p = inp, *o = outp;
    int n_cases = 0, n_ids = 0;
    for (;;) {
        char *e = strstr(p, sep);
        if (!e) break;
        size_t n = (size_t)(e - p);
        char *eol = strchr(o, '\n');
        ck_assert_msg(eol != NULL, "fewer .out lines than .inp chunks");
        *eol = '\0';
        int32_t want[1024], got[1024];
        int nw = 0;
        for (char *q = o; *q;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            ck_assert(nw < 1024);
            want[nw++] = (int32_t)v;
            q = end;
        }
        int64_t ng = encode(t, p, n, 0, got, 1024);
        int same = ng == nw;
        for (int i = 0; same && i < nw; i++) same = got[i] == want[i];
        if (!same) {
            char gs[4096] = "";
            size_t k = 0;
            for (int64_t i = 0; i < ng && k < sizeof gs - 16; i++)
                k += (size_t)snprintf(gs + k, sizeof gs - k, " %d", got[i]);
            ck_abort_msg("%s vector %d '%.*s': expected%s, got%s", vocab, n_cases, (int)n, p, o, gs);
        }
        if (roundtrip) check_roundtrip(t, p, n);
        n_ids += nw;
        n_cases++;
        p = e + strlen(sep);
        o = eol + 1;
    }
    ck_assert_int_eq(n_cases, expect_cases);
    printf("tokenizer: %d %s vectors (%d ids) match llama.cpp%s\n", n_cases, vocab, n_ids,
           roundtrip ? ", decode round-trips" : "");
    free(inp);
    free(outp);
    kvs_tokenizer_destroy(&t);
}

START_TEST(test_spm_vectors) {
    kvs_tokenizer *t = tok_gguf("vocab/ggml-vocab-llama-spm.gguf");
    ck_assert_int_eq(kvs_tokenizer_n_vocab(t), 32000);
    ck_assert_int_eq(kvs_tokenizer_bos(t), 1);
    ck_assert_int_eq(kvs_tokenizer_eos(t), 2);
    ck_assert_int_eq(kvs_tokenizer_unk(t), 0);
    ck_assert_int_eq(kvs_tokenizer_wants_bos(t), 1);
    ck_assert_int_eq(kvs_tokenizer_wants_eos(t), 0);
    kvs_tokenizer_destroy(&t);
    run_vectors("ggml-vocab-llama-spm.gguf", 46, 1);
}
END_TEST

/* GPT-2 byte-level BPE (GPT-2 regex pre-tokenizer + merges by rank). */
START_TEST(test_gpt2_vectors) {
    kvs_tokenizer *t = tok_gguf("vocab/ggml-vocab-gpt-2.gguf");
    ck_assert_int_eq(kvs_tokenizer_n_vocab(t), 50257);
    ck_assert_int_eq(kvs_tokenizer_bos(t), 50256);
    ck_assert_int_eq(kvs_tokenizer_wants_bos(t), 0);
    /* invalid UTF-8 and NUL bytes round-trip through byte tokens */
    const char bad[] = {'a', (char)0xff, 0, (char)0xc3, 'b', ' ', (char)0xe2, (char)0x96};
    check_roundtrip(t, bad, sizeof bad);
    kvs_tokenizer_destroy(&t);
    run_vectors("ggml-vocab-gpt-2.gguf", 46, 1);
}
END_TEST

/* Encode flags, count queries and small buffers. */
START_TEST(test_encode_api) {
    kvs_tokenizer *t = tok_gguf("vocab/ggml-vocab-llama-spm.gguf");
    int32_t ids[8];
    int64_t n = -1;
    ck_assert_int_eq(kvs_tokenizer_encode(t, "Hello world", 11, KVS_TOKENIZE_ADD_BOS | KVS_TOKENIZE_ADD_EOS,
                                          ids, 8, &n), KVS_OK);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 15043);
    ck_assert_int_eq(ids[2], 3186);
    ck_assert_int_eq(ids[3], 2);
    ck_assert_int_eq(kvs_tokenizer_encode(t, "Hello world", 11, 0, NULL, 0, &n), KVS_ERR_OUT_OF_RANGE);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(kvs_tokenizer_encode(t, "Hello world", 11, 0, ids, 1, &n), KVS_ERR_OUT_OF_RANGE);
    ck_assert_int_eq(ids[0], 15043);
    ck_assert_int_eq(kvs_tokenizer_encode(t, "", 0, 0, ids, 8, &n), KVS_OK);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(kvs_tokenizer_encode(t, "", 0, KVS_TOKENIZE_PREFIX_EMPTY, ids, 8, &n), KVS_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], 29871);   /* U+2581 */
    /* special tokens are text unless asked */
    ck_assert_int_eq(kvs_tokenizer_encode(t, "<s>", 3, KVS_TOKENIZE_PARSE_SPECIAL, ids, 8, &n), KVS_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(kvs_tokenizer_encode(t, "<s>", 3, 0, ids, 8, &n), KVS_OK);
    ck_assert_int_gt(n, 1);
    /* invalid UTF-8 and NUL bytes go through byte fallback and round-trip */
    const char bad[] = {'a', (char)0xff, 0, (char)0xc3, 'b'};
    check_roundtrip(t, bad, sizeof bad);
    /* a lead byte cut short by a space (tests/fuzz/regress/tokenizer/spm-lead-byte-space) */
    check_roundtrip(t, "\xe1 ", 2);
    check_roundtrip(t, "x\xe2\x96 y\xf0\x9f", 7);
    ck_assert_int_eq(kvs_tokenizer_encode(NULL, "a", 1, 0, ids, 8, &n), KVS_ERR_INVALID_ARGUMENT);
    kvs_tokenizer_destroy(&t);
    kvs_tokenizer_destroy(&t);   /* NULL-safe */
}
END_TEST

/* stories260K-llada-ref.json: prompt_tokens = [BOS] + spm_encode(prompt) (with the dummy prefix
 * also for the empty prompt). Every stories260K tokenizer must give them. */
START_TEST(test_stories_prompts) {
    char path[8192];
    snprintf(path, sizeof path, "%s/stories260K-llada-ref.json", g_models);
    json_object *ref = json_object_from_file(path);
    ck_assert(ref != NULL);
    json_object *cases;
    ck_assert(json_object_object_get_ex(ref, "cases", &cases));
    /* v3 and llada are in the repository's models/; v1 and tok512.bin only in ../shared */
    kvs_tokenizer *toks[4] = {tok_gguf("stories260K-f32.v3.gguf"), tok_gguf("stories260K-llada-f32.gguf"),
                              g_full ? tok_gguf("stories260K-f32.v1.gguf") : NULL, g_full ? tok_bin() : NULL};
    const int nt = g_full ? 4 : 2;
    ck_assert_int_eq(kvs_tokenizer_mask(toks[1]), 0);
    ck_assert_int_eq(kvs_tokenizer_mask(toks[0]), -1);
    size_t nc = json_object_array_length(cases);
    ck_assert_uint_ge(nc, 5);
    for (size_t c = 0; c < nc; c++) {
        json_object *cs = json_object_array_get_idx(cases, c), *pr, *pt;
        ck_assert(json_object_object_get_ex(cs, "prompt", &pr));
        ck_assert(json_object_object_get_ex(cs, "prompt_tokens", &pt));
        const char *prompt = json_object_get_string(pr);
        for (int k = 0; k < nt; k++) {
            int32_t ids[256];
            int64_t n = encode(toks[k], prompt, strlen(prompt),
                               KVS_TOKENIZE_ADD_BOS | KVS_TOKENIZE_PREFIX_EMPTY, ids, 256);
            ck_assert_int_eq(n, (int64_t)json_object_array_length(pt));
            for (int64_t i = 0; i < n; i++)
                ck_assert_msg(ids[i] == json_object_get_int(json_object_array_get_idx(pt, (size_t)i)),
                              "tokenizer %d prompt '%s' id %lld", k, prompt, (long long)i);
            if (prompt[0]) check_roundtrip(toks[k], prompt, strlen(prompt));
        }
    }
    json_object_put(ref);
    for (int k = 0; k < 4; k++) kvs_tokenizer_destroy(&toks[k]);
    printf("tokenizer: %zu reference prompts, %d stories260K tokenizers\n", nc, nt);
}
END_TEST

/* The published greedy output decodes to the published text, piece by piece (llama2.c's decode:
 * leading space stripped after BOS) and in one call; GGUF and tok512.bin agree on every token. */
START_TEST(test_stories_decode) {
    char path[8192];
    snprintf(path, sizeof path, "%s/ref_greedy_256.json", g_models);
    json_object *ref = json_object_from_file(path), *gen, *text;
    ck_assert(ref != NULL);
    ck_assert(json_object_object_get_ex(ref, "generated_ids", &gen));
    ck_assert(json_object_object_get_ex(ref, "text", &text));
    kvs_tokenizer *a = tok_gguf("stories260K-f32.v3.gguf"), *b = g_full ? tok_bin() : NULL; /* tok512.bin: ../shared */
    for (int32_t id = 0; b && id < 512; id++) {
        size_t la, lb;
        const char *ta = kvs_tokenizer_token_text(a, id, &la), *tb = kvs_tokenizer_token_text(b, id, &lb);
        if (id >= 3) ck_assert_msg(la == lb && memcmp(ta, tb, la) == 0, "token %d differs", id);
        ck_assert(kvs_tokenizer_token_score(a, id) == kvs_tokenizer_token_score(b, id));
        ck_assert_int_eq(kvs_tokenizer_token_type(a, id), kvs_tokenizer_token_type(b, id));
    }
    size_t n = json_object_array_length(gen);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    ids[0] = 1;
    for (size_t i = 0; i < n; i++) ids[i + 1] = json_object_get_int(json_object_array_get_idx(gen, i));
    const char *want = json_object_get_string(text);
    size_t cap = 16384, len;
    char *out = malloc(cap), *stream = malloc(cap);
    for (int k = 0; k < (b ? 2 : 1); k++) {
        kvs_tokenizer *t = k ? b : a;
        ck_assert_int_eq(kvs_tokenizer_decode(t, ids, (int64_t)n + 1, out, cap, &len), KVS_OK);
        ck_assert_str_eq(out, want);
        size_t pos = 0;
        for (size_t i = 1; i <= n; i++) {
            size_t pl;
            ck_assert_int_eq(kvs_tokenizer_token_to_piece(t, ids[i - 1], ids[i], stream + pos, cap - pos, &pl),
                             KVS_OK);
            pos += pl;
        }
        stream[pos] = '\0';
        ck_assert_str_eq(stream, want);
    }
    /* too small buffers report the needed size */
    ck_assert_int_eq(kvs_tokenizer_decode(a, ids, (int64_t)n + 1, out, 4, &len), KVS_ERR_OUT_OF_RANGE);
    ck_assert_uint_eq(len, strlen(want));
    ck_assert_int_eq(kvs_tokenizer_decode(a, ids, 1, out, 4, &len), KVS_OK);
    ck_assert_uint_eq(len, 0);
    int32_t badid = 512;
    ck_assert_int_eq(kvs_tokenizer_decode(a, &badid, 1, out, cap, &len), KVS_ERR_OUT_OF_RANGE);
    free(ids);
    free(out);
    free(stream);
    json_object_put(ref);
    kvs_tokenizer_destroy(&a);
    kvs_tokenizer_destroy(&b);
}
END_TEST

/* GGUF and tok512.bin tokenizers agree on real text; every line round-trips. */
START_TEST(test_stories_text) {
    char path[8192];
    snprintf(path, sizeof path, "%s/../text/tinystories-sample.txt", g_models);
    FILE *f = fopen(path, "rb");
    if (!f) return;
    kvs_tokenizer *a = tok_gguf("stories260K-f32.v1.gguf"), *b = tok_bin();
    char line[8192];
    int lines = 0;
    int64_t total = 0;
    while (fgets(line, sizeof line, f) && lines < 400) {
        size_t n = strlen(line);
        int32_t ia[8192], ib[8192];
        int64_t na = encode(a, line, n, KVS_TOKENIZE_ADD_BOS, ia, 8192);
        int64_t nb = encode(b, line, n, KVS_TOKENIZE_ADD_BOS, ib, 8192);
        ck_assert_int_eq(na, nb);
        ck_assert(memcmp(ia, ib, (size_t)na * sizeof *ia) == 0);
        check_roundtrip(a, line, n);
        total += na;
        lines++;
    }
    fclose(f);
    printf("tokenizer: %d TinyStories lines, %lld tokens, GGUF == tok512.bin, round trips exact\n",
           lines, (long long)total);
    kvs_tokenizer_destroy(&a);
    kvs_tokenizer_destroy(&b);
}
END_TEST

/* Seeded random strings never fail to encode and decode back to themselves: any bytes (invalid
 * UTF-8, NULs) for byte-level BPE; valid UTF-8 without a literal U+2581 and without special-token
 * texts for SPM (SPM escapes ' ' as U+2581 before splitting characters, so a literal U+2581 or an
 * invalid byte next to an escaped space is not recoverable, as in llama.cpp and sentencepiece). */
START_TEST(test_random_roundtrip) {
    kvs_tokenizer *toks[3] = {tok_gguf("vocab/ggml-vocab-gpt-2.gguf"), tok_gguf("vocab/ggml-vocab-llama-spm.gguf"),
                              tok_gguf("stories260K-llada-f32.gguf")};
    kvs_tokenizer *bert = tok_gguf("vocab/ggml-vocab-bert-bge.gguf");   /* lossy: encodes, no round trip */
    static const char *frag[] = {" ", "  ", "a", "Z", "\xc3\xa9", "\xf0\x9f\xa6\x99", "\n", "\t", "'s",
                                 "12", "\xe4\xbd\xa0", ".", "\xe2\x96\x81", "\xff", "\x80", "<s>", "<mask>"};
    const int n_valid = 12;   /* the first 12 fragments are valid UTF-8 without U+2581 or specials */
    uint64_t x = 0x2545F4914F6CDD1Dull;
    printf("tokenizer: random round trips, seed 0x2545F4914F6CDD1D\n");
    for (int it = 0; it < 1000; it++) {
        int kind = it % 2;   /* 0: any bytes (BPE); 1: valid text (SPM) */
        char buf[256];
        size_t n = 0;
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int parts = (int)(x % 24);
        for (int k = 0; k < parts; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            if (x % 4 == 0) {
                buf[n++] = (char)(kind ? (x >> 8) & 0x7f : x >> 8);   /* NUL included */
            } else {
                const char *f = frag[(x >> 8) % (uint64_t)(kind ? n_valid : (int)(sizeof frag / sizeof frag[0]))];
                memcpy(buf + n, f, strlen(f));
                n += strlen(f);
            }
        }
        if (kind == 0) {
            check_roundtrip(toks[0], buf, n);
            int32_t ids[1024];
            int64_t k = encode(bert, buf, n, KVS_TOKENIZE_ADD_BOS | KVS_TOKENIZE_ADD_EOS, ids, 1024);
            ck_assert(k >= 2 && ids[0] == 101 && ids[k - 1] == 102);
        }
        else for (int k = 1; k < 3; k++) check_roundtrip(toks[k], buf, n);
    }
    for (int k = 0; k < 3; k++) kvs_tokenizer_destroy(&toks[k]);
    kvs_tokenizer_destroy(&bert);
}
END_TEST

/* BERT WordPiece (llama.cpp WPM: NFD first code point, lowercase, punctuation split, greedy
 * longest match with a U+2581 word marker). */
START_TEST(test_bert_vectors) {
    kvs_tokenizer *t = tok_gguf("vocab/ggml-vocab-bert-bge.gguf");
    ck_assert_int_eq(kvs_tokenizer_n_vocab(t), 30522);
    ck_assert_int_eq(kvs_tokenizer_bos(t), 101);   /* [CLS] */
    ck_assert_int_eq(kvs_tokenizer_eos(t), 102);   /* [SEP] */
    ck_assert_int_eq(kvs_tokenizer_unk(t), 100);
    ck_assert_int_eq(kvs_tokenizer_mask(t), 103);
    int32_t ids[8];
    int64_t n;
    ck_assert_int_eq(kvs_tokenizer_encode(t, "Hello world", 11, KVS_TOKENIZE_ADD_BOS | KVS_TOKENIZE_ADD_EOS, ids, 8, &n), KVS_OK);
    ck_assert_int_eq(n, 4);
    ck_assert(ids[0] == 101 && ids[1] == 7592 && ids[2] == 2088 && ids[3] == 102);
    char buf[64];
    size_t len;
    ck_assert_int_eq(kvs_tokenizer_decode(t, ids, n, buf, sizeof buf, &len), KVS_OK);
    ck_assert_str_eq(buf, "hello world");
    kvs_tokenizer_destroy(&t);
    run_vectors("ggml-vocab-bert-bge.gguf", 46, 0);
}
END_TEST

/* Tokenizer models we do not implement are refused with a message naming them. */
START_TEST(test_refuse_other_vocabs) {
    const char *toks[3] = {"a", "b", "c"};
    const char *model[2] = {"rwkv", "gpt2"};
    for (int i = 0; i < 2; i++) {
        kvs_gguf_writer *w = NULL;
        ck_assert_int_eq(kvs_gguf_writer_create(&w, 3), KVS_OK);
        ck_assert_int_eq(kvs_gguf_writer_set_str(w, "tokenizer.ggml.model", model[i]), KVS_OK);
        if (i == 1) ck_assert_int_eq(kvs_gguf_writer_set_str(w, "tokenizer.ggml.pre", "llama-bpe"), KVS_OK);
        ck_assert_int_eq(kvs_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3), KVS_OK);
        void *mem;
        size_t memn;
        ck_assert_int_eq(kvs_gguf_writer_to_memory(w, &mem, &memn), KVS_OK);
        kvs_gguf_writer_destroy(&w);
        kvs_gguf *g = NULL;
        ck_assert_int_eq(kvs_gguf_open_memory(&g, mem, memn), KVS_OK);
        kvs_tokenizer *t = NULL;
        ck_assert_int_eq(kvs_tokenizer_from_gguf(&t, g), KVS_ERR_UNSUPPORTED);
        ck_assert(t == NULL);
        ck_assert_msg(strstr(kvs_last_error(), i == 0 ? "rwkv" : "llama-bpe") != NULL, "%s", kvs_last_error());
        kvs_gguf_close(&g);
        free(mem);
    }
}
END_TEST

/* Truncated / corrupt llama2.c tokenizer files give KVS_ERR_FORMAT. */
START_TEST(test_bin_corrupt) {
    size_t n;
    char *data = slurp("tok512.bin", &n);
    char tmp[] = "/tmp/kvs_tok_XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert(fd >= 0);
    close(fd);
    size_t cuts[] = {0, 3, 4, 10, 100, n / 2, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        FILE *f = fopen(tmp, "wb");
        fwrite(data, 1, cuts[i], f);
        fclose(f);
        kvs_tokenizer *t = NULL;
        ck_assert_int_eq(kvs_tokenizer_from_llama2c(&t, tmp, 512), KVS_ERR_FORMAT);
        ck_assert_msg(strstr(kvs_last_error(), "offset") != NULL, "%s", kvs_last_error());
    }
    /* a huge length field */
    memcpy(data + 8, "\xff\xff\xff\x7f", 4);
    FILE *f = fopen(tmp, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    kvs_tokenizer *t = NULL;
    ck_assert_int_eq(kvs_tokenizer_from_llama2c(&t, tmp, 512), KVS_ERR_FORMAT);
    remove(tmp);
    free(data);
}
END_TEST

int main(void) {
    if (!find_models()) {
        fprintf(stderr, "no models/stories260K-f32.v3.gguf nor ../shared/models (set KVSIEVE_MODELS): skipping\n");
        return 77;
    }
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("spm");
    tcase_set_timeout(tc, 120);
    /* the repository's own files (or none) */
    tcase_add_test(tc, test_stories_prompts);
    tcase_add_test(tc, test_stories_decode);
    tcase_add_test(tc, test_refuse_other_vocabs);
    /* llama.cpp's vocabularies and their vectors, stories260K v1 and tok512.bin: ../shared/models */
    if (g_full) {
        tcase_add_test(tc, test_spm_vectors);
        tcase_add_test(tc, test_gpt2_vectors);
        tcase_add_test(tc, test_bert_vectors);
        tcase_add_test(tc, test_encode_api);
        tcase_add_test(tc, test_random_roundtrip);
        tcase_add_test(tc, test_stories_text);
        tcase_add_test(tc, test_bin_corrupt);
    } else {
        printf("tokenizer: ../shared/models not found: the llama.cpp vocabulary vectors, stories260K v1 and "
               "tok512.bin cases are skipped\n");
    }
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
