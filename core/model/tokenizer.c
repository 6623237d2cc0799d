/* SentencePiece-style BPE tokenizer (see include/kvsieve/tokenizer.h for the algorithm and its
 * sources: llama.cpp llm_tokenizer_spm, llama2.c encode/decode). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvsieve/tokenizer.h"
#include "model/tokenizer_unicode.h"
#include "model/weights.h"

#define SPACE_ESC "\xe2\x96\x81"   /* U+2581 LOWER ONE EIGHTH BLOCK */
#define UNK_PIECE "\xe2\x96\x85"   /* U+2585, llama.cpp's rendering of the unknown token */

struct kvs_tokenizer {
    int32_t n;
    char **text;        /* [n] NUL-terminated raw token texts */
    uint32_t *len;      /* [n] */
    float *score;       /* [n] */
    uint8_t *type;      /* [n] kvs_token_type */
    uint32_t max_len;
    kvs_strhash idx;
    int32_t byte_tok[256];
    int32_t bos, eos, unk, mask;
    int add_bos, add_eos, add_space_prefix;
    int32_t *special;   /* user-defined, control, unknown token ids, longest text first */
    int32_t n_special;
    /* byte-level BPE (GPT-2) / WordPiece (BERT) */
    int bpe, wpm;
    char **merge_text;  /* [n_merges] "left right" */
    int32_t n_merges;
    kvs_strhash merges; /* "left right" -> rank */
    uint16_t byte_cp[256];   /* GPT-2 bytes_to_unicode(): byte -> code point (< 512) */
    int16_t cp_byte[512];    /* inverse; -1 where none */
};

/* ---- construction ------------------------------------------------------------------------------ */

static kvs_status tk_alloc(kvs_tokenizer **out, int32_t n) {
    kvs_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    t->n = n;
    t->text = calloc((size_t)n + 1, sizeof *t->text);
    t->len = calloc((size_t)n + 1, sizeof *t->len);
    t->score = calloc((size_t)n + 1, sizeof *t->score);
    t->type = calloc((size_t)n + 1, 1);
    t->special = calloc((size_t)n + 1, sizeof *t->special);
    if (!t->text || !t->len || !t->score || !t->type || !t->special ||
        kvs_strhash_init(&t->idx, (size_t)n) != 0) {
        kvs_tokenizer_destroy(&t);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for %d tokens", n);
    }
    t->bos = t->eos = t->unk = t->mask = -1;
    t->add_bos = 1;
    t->add_eos = 0;
    t->add_space_prefix = 1;
    *out = t;
    return KVS_OK;
}

void kvs_tokenizer_destroy(kvs_tokenizer **pt) {
    if (!pt || !*pt) return;
    kvs_tokenizer *t = *pt;
    if (t->text)
        for (int32_t i = 0; i < t->n; i++) free(t->text[i]);
    free(t->text);
    free(t->len);
    free(t->score);
    free(t->type);
    free(t->special);
    kvs_strhash_free(&t->idx);
    if (t->merge_text)
        for (int32_t i = 0; i < t->n_merges; i++) free(t->merge_text[i]);
    free(t->merge_text);
    kvs_strhash_free(&t->merges);
    free(t);
    *pt = NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Index, byte tokens, special list; texts/types/scores already filled. */
static kvs_status tk_finish(kvs_tokenizer *t) {
    for (int32_t i = 0; i < t->n; i++) {
        if (t->len[i] > t->max_len) t->max_len = t->len[i];
        if (t->len[i] > 0 && kvs_strhash_put(&t->idx, t->text[i], i) != 0)   /* later ones win */
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    for (int b = 0; b < 256; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        int64_t id = kvs_strhash_find(&t->idx, buf);
        if (id < 0) {
            char one[2] = {(char)b, 0};
            id = b ? kvs_strhash_find_n(&t->idx, one, 1) : -1;
        }
        t->byte_tok[b] = (int32_t)id;
    }
    t->n_special = 0;
    for (int32_t i = 0; i < t->n; i++) {
        uint8_t ty = t->type[i];
        if ((ty == KVS_TOKEN_USER_DEFINED || ty == KVS_TOKEN_CONTROL || ty == KVS_TOKEN_UNKNOWN) &&
            t->len[i] > 0)
            t->special[t->n_special++] = i;
    }
    /* longest first, then lower id: sort keys (~len << 32 | id) */
    uint64_t *keys = malloc(((size_t)t->n_special + 1) * sizeof *keys);
    if (!keys) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    for (int32_t i = 0; i < t->n_special; i++)
        keys[i] = ((uint64_t)(UINT32_MAX - t->len[t->special[i]]) << 32) | (uint32_t)t->special[i];
    qsort(keys, (size_t)t->n_special, sizeof *keys, cmp_u64);
    for (int32_t i = 0; i < t->n_special; i++) t->special[i] = (int32_t)(keys[i] & 0xffffffffu);
    free(keys);
    return KVS_OK;
}

static kvs_status tk_set_text(kvs_tokenizer *t, int32_t i, const char *s, size_t n) {
    t->text[i] = malloc(n + 1);
    if (!t->text[i]) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    memcpy(t->text[i], s, n);
    t->text[i][n] = '\0';
    t->len[i] = (uint32_t)n;
    return KVS_OK;
}

static int32_t id_or_none(int64_t v, int32_t n) { return (v >= 0 && v < n) ? (int32_t)v : -1; }

/* GPT-2 byte <-> code point map (openai/gpt-2 encoder.py bytes_to_unicode) and the merge ranks. */
static kvs_status bpe_setup(kvs_tokenizer *t, const kvs_gguf *g) {
    int n = 0;
    for (int b = 0; b < 512; b++) t->cp_byte[b] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        t->byte_cp[b] = (uint16_t)(printable ? b : 256 + n++);
        t->cp_byte[t->byte_cp[b]] = (int16_t)b;
    }
    const kvs_gguf_value *mg;
    kvs_status s = kvs_gguf_get_arr(g, "tokenizer.ggml.merges", KVS_GGUF_STRING, &mg);
    if (s == KVS_ERR_NOT_FOUND)
        return kvs_error(KVS_ERR_NOT_FOUND, "tokenizer: BPE vocabulary without tokenizer.ggml.merges");
    if (s != KVS_OK) return s;
    if (mg->arr.n > (1u << 24))
        return kvs_error(KVS_ERR_FORMAT, "tokenizer: %llu merges", (unsigned long long)mg->arr.n);
    t->n_merges = 0;
    t->merge_text = calloc((size_t)mg->arr.n + 1, sizeof *t->merge_text);
    if (!t->merge_text || kvs_strhash_init(&t->merges, (size_t)mg->arr.n) != 0)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for merges");
    for (uint64_t i = 0; i < mg->arr.n; i++) {
        kvs_gguf_str m;
        KVS_TRY(kvs_gguf_arr_str(mg, i, &m));
        if (memchr(m.data, 0, (size_t)m.len) || !memchr(m.data, ' ', (size_t)m.len))
            return kvs_error(KVS_ERR_FORMAT, "tokenizer: merge %llu is not \"left right\"",
                             (unsigned long long)i);
        char *c = malloc((size_t)m.len + 1);
        if (!c) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        memcpy(c, m.data, (size_t)m.len);
        c[m.len] = '\0';
        t->merge_text[t->n_merges++] = c;
        if (kvs_strhash_find(&t->merges, c) < 0 && kvs_strhash_put(&t->merges, c, (int64_t)i) != 0)
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    return KVS_OK;
}

kvs_status kvs_tokenizer_from_gguf(kvs_tokenizer **out, const kvs_gguf *g) {
    if (!out || !g) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tokenizer_from_gguf: NULL");
    *out = NULL;
    char model[64];
    kvs_status s = kvs_gguf_get_string(g, "tokenizer.ggml.model", model, sizeof model);
    if (s == KVS_ERR_NOT_FOUND)
        return kvs_error(KVS_ERR_NOT_FOUND, "tokenizer: GGUF has no tokenizer.ggml.model");
    if (s == KVS_ERR_OUT_OF_RANGE) snprintf(model, sizeof model, "(long name)");
    else if (s != KVS_OK) return s;
    int bpe = strcmp(model, "gpt2") == 0;
    if (bpe) {
        /* only the GPT-2 pre-tokenizer regex is implemented */
        char pre[64] = "gpt-2";
        s = kvs_gguf_get_string(g, "tokenizer.ggml.pre", pre, sizeof pre);
        if (s != KVS_OK && s != KVS_ERR_NOT_FOUND) return s;
        if (strcmp(pre, "gpt-2") != 0)
            return kvs_error(KVS_ERR_UNSUPPORTED,
                             "tokenizer: byte-level BPE with pre-tokenizer '%s' is not supported "
                             "(only 'gpt-2')", pre);
    } else if (strcmp(model, "llama") != 0 && strcmp(model, "bert") != 0) {
        return kvs_error(KVS_ERR_UNSUPPORTED,
                         "tokenizer: tokenizer.ggml.model '%s' is not supported; only 'llama' "
                         "(SentencePiece BPE), 'gpt2' (byte-level BPE) and 'bert' (WordPiece) are",
                         model);
    }
    int wpm = strcmp(model, "bert") == 0;
    const kvs_gguf_value *toks, *scores = NULL, *types = NULL;
    s = kvs_gguf_get_arr(g, "tokenizer.ggml.tokens", KVS_GGUF_STRING, &toks);
    if (s != KVS_OK) return s;
    if (toks->arr.n == 0 || toks->arr.n > (1u << 24))
        return kvs_error(KVS_ERR_FORMAT, "tokenizer: %llu tokens (1..2^24 allowed)",
                         (unsigned long long)toks->arr.n);
    int32_t n = (int32_t)toks->arr.n;
    s = kvs_gguf_get_arr(g, "tokenizer.ggml.scores", KVS_GGUF_TYPE_COUNT, &scores);
    if (s == KVS_ERR_NOT_FOUND) scores = NULL;
    else if (s != KVS_OK) return s;
    s = kvs_gguf_get_arr(g, "tokenizer.ggml.token_type", KVS_GGUF_TYPE_COUNT, &types);
    if (s == KVS_ERR_NOT_FOUND) types = NULL;
    else if (s != KVS_OK) return s;
    if (scores && scores->arr.n != toks->arr.n)
        return kvs_error(KVS_ERR_FORMAT, "tokenizer: %llu scores for %d tokens",
                         (unsigned long long)scores->arr.n, n);
    if (types && types->arr.n != toks->arr.n)
        return kvs_error(KVS_ERR_FORMAT, "tokenizer: %llu token types for %d tokens",
                         (unsigned long long)types->arr.n, n);
    kvs_tokenizer *t;
    KVS_TRY(tk_alloc(&t, n));
    if (bpe) {
        t->bpe = 1;
        t->add_bos = 0;            /* llama.cpp: BPE vocabularies add no BOS unless told */
        t->add_space_prefix = 0;
    }
    if (wpm) {
        t->wpm = 1;                /* llama.cpp: [CLS] text [SEP] */
        t->add_bos = 1;
        t->add_eos = 1;
    }
    for (int32_t i = 0; i < n; i++) {
        kvs_gguf_str str;
        if ((s = kvs_gguf_arr_str(toks, (uint64_t)i, &str)) != KVS_OK) goto fail;
        if (memchr(str.data, 0, (size_t)str.len)) {
            s = kvs_error(KVS_ERR_FORMAT, "tokenizer: token %d contains a NUL byte", i);
            goto fail;
        }
        if ((s = tk_set_text(t, i, str.data, (size_t)str.len)) != KVS_OK) goto fail;
        if (scores) {
            double v;
            if ((s = kvs_gguf_arr_float(scores, (uint64_t)i, &v)) != KVS_OK) goto fail;
            t->score[i] = (float)v;
        }
        int64_t ty = KVS_TOKEN_NORMAL;
        if (types && (s = kvs_gguf_arr_int(types, (uint64_t)i, &ty)) != KVS_OK) goto fail;
        t->type[i] = (ty >= 0 && ty <= KVS_TOKEN_BYTE) ? (uint8_t)ty : KVS_TOKEN_NORMAL;
    }
    int64_t v;
    if (kvs_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v) == KVS_OK) t->bos = id_or_none(v, n);
    else t->bos = n > 1 ? 1 : -1;
    if (kvs_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v) == KVS_OK) t->eos = id_or_none(v, n);
    else t->eos = n > 2 ? 2 : -1;
    if (kvs_gguf_get_int(g, "tokenizer.ggml.unknown_token_id", &v) == KVS_OK) t->unk = id_or_none(v, n);
    else t->unk = (t->type[0] == KVS_TOKEN_UNKNOWN) ? 0 : -1;
    if (kvs_gguf_get_int(g, "tokenizer.ggml.mask_token_id", &v) == KVS_OK) t->mask = id_or_none(v, n);
    if (wpm && kvs_gguf_get_int(g, "tokenizer.ggml.cls_token_id", &v) == KVS_OK) t->bos = id_or_none(v, n);
    if (wpm && kvs_gguf_get_int(g, "tokenizer.ggml.seperator_token_id", &v) == KVS_OK)
        t->eos = id_or_none(v, n);
    int b;
    if (kvs_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == KVS_OK) t->add_bos = b;
    if (kvs_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == KVS_OK) t->add_eos = b;
    if (kvs_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == KVS_OK) t->add_space_prefix = b;
    kvs_clear_error();
    if (bpe && (s = bpe_setup(t, g)) != KVS_OK) goto fail;
    if ((s = tk_finish(t)) != KVS_OK) goto fail;
    *out = t;
    return KVS_OK;
fail:
    kvs_tokenizer_destroy(&t);
    return s;
}

static int is_byte_text(const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEFabcdef";
    return n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && s[3] && s[4] && strchr(hex, s[3]) &&
           strchr(hex, s[4]);
}

kvs_status kvs_tokenizer_from_llama2c(kvs_tokenizer **out, const char *path, int vocab_size) {
    if (!out || !path || vocab_size < 0)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tokenizer_from_llama2c: bad argument");
    *out = NULL;
    void *map = NULL, *heap = NULL;
    size_t size = 0;
    KVS_TRY(kvs_map_file(path, &map, &heap, &size));
    const uint8_t *p = map ? map : heap;
    kvs_status s = KVS_OK;
    kvs_tokenizer *t = NULL;
    if (size < 4) {
        s = kvs_error(KVS_ERR_FORMAT, "%s: offset 0: too short for a llama2.c tokenizer", path);
        goto done;
    }
    int32_t n = vocab_size;
    if (n == 0) {   /* count the entries */
        size_t off = 4;
        while (off + 8 <= size) {
            int32_t l;
            memcpy(&l, p + off + 4, 4);
            if (l < 0 || (size_t)l > size - off - 8) break;
            off += 8 + (size_t)l;
            n++;
        }
        if (n == 0 || off != size) {
            s = kvs_error(KVS_ERR_FORMAT, "%s: offset %zu: not a llama2.c tokenizer (trailing or "
                                          "truncated entry after %d tokens)", path, off, n);
            goto done;
        }
    }
    if ((s = tk_alloc(&t, n)) != KVS_OK) goto done;
    size_t off = 4;
    for (int32_t i = 0; i < n; i++) {
        if (size - off < 8) {
            s = kvs_error(KVS_ERR_FORMAT, "%s: offset %zu: truncated at token %d of %d", path, off, i,
                          n);
            goto done;
        }
        float sc;
        int32_t l;
        memcpy(&sc, p + off, 4);
        memcpy(&l, p + off + 4, 4);
        if (l < 0 || (size_t)l > size - off - 8) {
            s = kvs_error(KVS_ERR_FORMAT, "%s: offset %zu: token %d has length %d (%zu bytes left)",
                          path, off + 4, i, l, size - off - 8);
            goto done;
        }
        const char *src = (const char *)p + off + 8;
        if (memchr(src, 0, (size_t)l)) {
            s = kvs_error(KVS_ERR_FORMAT, "%s: offset %zu: token %d contains a NUL byte", path,
                          off + 8, i);
            goto done;
        }
        /* spaces -> U+2581 (the GGUF / SentencePiece form), except in control/unknown tokens */
        size_t nsp = 0;
        for (int32_t k = 0; k < l; k++) nsp += src[k] == ' ';
        char *tmp = malloc((size_t)l + 2 * nsp + 1);
        if (!tmp) {
            s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
            goto done;
        }
        size_t j = 0;
        int special = i < 3;   /* llama2.c: 0 <unk>, 1 "\n<s>\n", 2 "\n</s>\n" */
        for (int32_t k = 0; k < l; k++) {
            if (src[k] == ' ' && !special) {
                memcpy(tmp + j, SPACE_ESC, 3);
                j += 3;
            } else {
                tmp[j++] = src[k];
            }
        }
        s = tk_set_text(t, i, tmp, j);
        free(tmp);
        if (s != KVS_OK) goto done;
        t->score[i] = sc;
        t->type[i] = i == 0               ? KVS_TOKEN_UNKNOWN
                     : special            ? KVS_TOKEN_CONTROL
                     : is_byte_text(t->text[i], t->len[i]) ? KVS_TOKEN_BYTE
                                                           : KVS_TOKEN_NORMAL;
        off += 8 + (size_t)l;
    }
    t->unk = 0;
    t->bos = n > 1 ? 1 : -1;
    t->eos = n > 2 ? 2 : -1;
    s = tk_finish(t);
done:
    kvs_unmap_file(map, heap, size);
    if (s != KVS_OK) {
        kvs_tokenizer_destroy(&t);
        return s;
    }
    *out = t;
    return KVS_OK;
}

kvs_status kvs_tokenizer_from_model_file(kvs_tokenizer **out, const kvs_model_file *mf) {
    if (!out || !mf) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tokenizer_from_model_file: NULL");
    *out = NULL;
    const kvs_model_hparams *hp = kvs_model_file_hparams(mf);
    kvs_tokenizer *t = NULL;
    if (kvs_model_file_gguf(mf)) {
        kvs_status s = kvs_tokenizer_from_gguf(&t, kvs_model_file_gguf(mf));
        if (s != KVS_OK) {   /* the GGUF reader's messages do not know the path: name it */
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", kvs_last_error());
            return kvs_error(s, "%s: %s", kvs_model_file_path(mf), msg);
        }
    } else {
        char path[4096];
        KVS_TRY(kvs_model_file_tokenizer_path(mf, path, sizeof path));
        KVS_TRY(kvs_tokenizer_from_llama2c(&t, path, hp->vocab));
    }
    if (t->n != hp->vocab) {
        int32_t n = t->n;
        kvs_tokenizer_destroy(&t);
        return kvs_error(KVS_ERR_FORMAT, "%s: tokenizer has %d tokens, the model %d",
                         kvs_model_file_path(mf), n, hp->vocab);
    }
    *out = t;
    return KVS_OK;
}

/* ---- accessors ------------------------------------------------------------------------------- */

int32_t kvs_tokenizer_n_vocab(const kvs_tokenizer *t) { return t ? t->n : 0; }
int32_t kvs_tokenizer_bos(const kvs_tokenizer *t) { return t ? t->bos : -1; }
int32_t kvs_tokenizer_eos(const kvs_tokenizer *t) { return t ? t->eos : -1; }
int32_t kvs_tokenizer_unk(const kvs_tokenizer *t) { return t ? t->unk : -1; }
int32_t kvs_tokenizer_mask(const kvs_tokenizer *t) { return t ? t->mask : -1; }
int kvs_tokenizer_wants_bos(const kvs_tokenizer *t) { return t ? t->add_bos : 0; }
int kvs_tokenizer_wants_eos(const kvs_tokenizer *t) { return t ? t->add_eos : 0; }

const char *kvs_tokenizer_token_text(const kvs_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n) return NULL;
    if (len) *len = t->len[id];
    return t->text[id];
}

float kvs_tokenizer_token_score(const kvs_tokenizer *t, int32_t id) {
    return (t && id >= 0 && id < t->n) ? t->score[id] : 0.0f;
}

kvs_token_type kvs_tokenizer_token_type(const kvs_tokenizer *t, int32_t id) {
    return (t && id >= 0 && id < t->n) ? (kvs_token_type)t->type[id] : KVS_TOKEN_UNDEFINED;
}

int32_t kvs_tokenizer_find(const kvs_tokenizer *t, const char *text, size_t len) {
    if (!t || !text || len == 0) return -1;
    return (int32_t)kvs_strhash_find_n(&t->idx, text, len);
}

/* ---- encode ---------------------------------------------------------------------------------- */

typedef struct {
    int32_t *v;
    int64_t n, cap;
} ivec;

static int iv_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 64;
        int32_t *v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

typedef struct {
    int left, right;
    float score;
    size_t size;
} bigram;

typedef struct {
    bigram *v;
    size_t n, cap;
} bheap;

/* a before b: higher score, then smaller left (llama.cpp llm_bigram_spm comparator). */
static int bg_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int bh_push(bheap *h, bigram x) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_before(&x, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
    return 0;
}

static bigram bh_pop(bheap *h) {
    bigram top = h->v[0];
    bigram x = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bg_before(&h->v[c + 1], &h->v[c])) c++;
        if (!bg_before(&h->v[c], &x)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = x;
    return top;
}

typedef struct {
    size_t start, n;
    int prev, next;
} symbol;

typedef struct {
    const kvs_tokenizer *t;
    const char *s;     /* escaped text */
    symbol *sym;
    bheap heap;
} session;

static int try_bigram(session *ss, int left, int right) {
    if (left < 0 || right < 0) return 0;
    const symbol *a = &ss->sym[left], *b = &ss->sym[right];
    size_t n = a->n + b->n;
    int64_t id = kvs_strhash_find_n(&ss->t->idx, ss->s + a->start, n);
    if (id < 0) return 0;
    bigram bg = {left, right, ss->t->score[id], n};
    return bh_push(&ss->heap, bg);
}

static size_t utf8_len(unsigned char c) {
    static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

/* Tokenizes one escaped fragment s[0..n) into out. */
static kvs_status spm_fragment(const kvs_tokenizer *t, const char *s, size_t n, ivec *out) {
    if (n == 0) return KVS_OK;
    session ss = {t, s, NULL, {0}};
    ss.sym = malloc(n * sizeof *ss.sym);
    if (!ss.sym) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    int count = 0;
    for (size_t off = 0; off < n;) {
        size_t l = utf8_len((unsigned char)s[off]);
        if (l > n - off) l = n - off;
        /* invalid UTF-8: a lead byte without its continuation bytes is a symbol of its own, so the
         * bytes after it (the U+2581 of a space) keep their tokens and decode round-trips (found by
         * tests/fuzz/fuzz_tokenizer: "\xe1 " decoded to "\xe1\xe2\x96\x81") */
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)s[off + k] & 0xC0) != 0x80) {
                l = k;
                break;
            }
        symbol *y = &ss.sym[count];
        y->start = off;
        y->n = l;
        y->prev = count - 1;
        off += l;
        y->next = off == n ? -1 : count + 1;
        count++;
    }
    kvs_status st = KVS_OK;
    for (int i = 1; i < count; i++)
        if (try_bigram(&ss, i - 1, i)) goto oom;
    while (ss.heap.n) {
        bigram bg = bh_pop(&ss.heap);
        symbol *l = &ss.sym[bg.left], *r = &ss.sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) ss.sym[r->next].prev = bg.left;
        if (try_bigram(&ss, l->prev, bg.left) || try_bigram(&ss, bg.left, l->next)) goto oom;
    }
    for (int i = 0; i != -1; i = ss.sym[i].next) {
        const symbol *y = &ss.sym[i];
        int64_t id = kvs_strhash_find_n(&t->idx, s + y->start, y->n);
        if (id >= 0) {
            if (iv_push(out, (int32_t)id)) goto oom;
            continue;
        }
        for (size_t k = 0; k < y->n; k++) {
            unsigned char c = (unsigned char)s[y->start + k];
            int32_t b = t->byte_tok[c] >= 0 ? t->byte_tok[c] : t->unk;
            if (b < 0) {
                st = kvs_error(KVS_ERR_NOT_FOUND, "tokenizer: byte 0x%02X has no <0x%02X> token "
                                                  "and there is no unknown token", c, c);
                goto done;
            }
            if (iv_push(out, b)) goto oom;
        }
    }
    goto done;
oom:
    st = kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
done:
    free(ss.sym);
    free(ss.heap.v);
    return st;
}

/* ---- byte-level BPE (GPT-2) ---- */

/* Decodes one UTF-8 code point at s[0..n): returns its byte length (>= 1); *cp = UINT32_MAX for an
 * invalid sequence (then the length is 1). */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (l == 0 || l > n) {
        *cp = UINT32_MAX;
        return 1;
    }
    uint32_t v = l == 1 ? c : l == 2 ? (c & 0x1F) : l == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t i = 1; i < l; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = UINT32_MAX;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return l;
}

enum { CP_OTHER = 0, CP_LETTER = 1, CP_NUMBER = 2, CP_SPACE = 3 };

static int cp_class(uint32_t cp) {
    if (cp == UINT32_MAX) return CP_OTHER;
    if (kvs_uni_is_space(cp)) return CP_SPACE;
    if (kvs_uni_is_letter(cp)) return CP_LETTER;
    if (kvs_uni_is_number(cp)) return CP_NUMBER;
    return CP_OTHER;
}

/* BPE merges of one pre-token (raw bytes s[0..n)) into out. */
static kvs_status bpe_word(const kvs_tokenizer *t, const unsigned char *s, size_t n, ivec *out,
                           char *mapped, symbol *sym, char *key) {
    /* map bytes to their code points (UTF-8, 1 or 2 bytes each); one symbol per byte */
    size_t m = 0;
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t cp = t->byte_cp[s[i]];
        sym[count].start = m;
        if (cp < 0x80) {
            mapped[m++] = (char)cp;
        } else {
            mapped[m++] = (char)(0xC0 | (cp >> 6));
            mapped[m++] = (char)(0x80 | (cp & 0x3F));
        }
        sym[count].n = m - sym[count].start;
        sym[count].prev = count - 1;
        sym[count].next = i + 1 == n ? -1 : count + 1;
        count++;
    }
    bheap heap = {0};
    kvs_status st = KVS_OK;
#define TRY_PAIR(L, R)                                                                             \
    do {                                                                                           \
        int l_ = (L), r_ = (R);                                                                    \
        if (l_ >= 0 && r_ >= 0) {                                                                  \
            size_t ln = sym[l_].n, rn = sym[r_].n;                                                 \
            memcpy(key, mapped + sym[l_].start, ln);                                               \
            key[ln] = ' ';                                                                         \
            memcpy(key + ln + 1, mapped + sym[r_].start, rn);                                      \
            int64_t rank = kvs_strhash_find_n(&t->merges, key, ln + 1 + rn);                       \
            if (rank >= 0) {                                                                       \
                bigram bg_ = {l_, r_, -(float)rank, ln + rn};                                      \
                if (bh_push(&heap, bg_)) goto oom;                                                 \
            }                                                                                      \
        }                                                                                          \
    } while (0)
    for (int i = 1; i < count; i++) TRY_PAIR(i - 1, i);
    while (heap.n) {
        bigram bg = bh_pop(&heap);
        symbol *l = &sym[bg.left], *r = &sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = bg.left;
        TRY_PAIR(l->prev, bg.left);
        TRY_PAIR(bg.left, l->next);
    }
#undef TRY_PAIR
    for (int i = 0; i != -1; i = sym[i].next) {
        int64_t id = kvs_strhash_find_n(&t->idx, mapped + sym[i].start, sym[i].n);
        if (id >= 0) {
            if (iv_push(out, (int32_t)id)) goto oom;
            continue;
        }
        /* not a token: one token per mapped byte (every GPT-2 byte is one) */
        for (size_t k = 0; k < sym[i].n;) {
            size_t cl = ((unsigned char)mapped[sym[i].start + k] < 0x80) ? 1 : 2;
            id = kvs_strhash_find_n(&t->idx, mapped + sym[i].start + k, cl);
            if (id < 0) id = t->unk;
            if (id < 0) {
                st = kvs_error(KVS_ERR_NOT_FOUND, "tokenizer: a byte has no token and there is no "
                                                  "unknown token");
                goto done;
            }
            if (iv_push(out, (int32_t)id)) goto oom;
            k += cl;
        }
    }
    goto done;
oom:
    st = kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
done:
    free(heap.v);
    return st;
}

/* GPT-2 pre-tokenizer (openai/gpt-2 encoder.py regex, as llama.cpp's unicode_regex_split_custom_gpt2):
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * then byte-level BPE of each piece. */
static kvs_status bpe_fragment(const kvs_tokenizer *t, const char *text, size_t n, ivec *out) {
    if (n == 0) return KVS_OK;
    const unsigned char *s = (const unsigned char *)text;
    /* code points: byte offset and class; one extra sentinel */
    size_t *off = malloc((n + 1) * sizeof *off);
    uint32_t *cps = malloc((n + 1) * sizeof *cps);
    char *mapped = malloc(2 * n + 1);
    symbol *sym = malloc((n + 1) * sizeof *sym);
    char *key = malloc(4 * n + 2);
    kvs_status st = KVS_OK;
    if (!off || !cps || !mapped || !sym || !key) {
        st = kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        goto done;
    }
    size_t nc = 0;
    for (size_t i = 0; i < n;) {
        off[nc] = i;
        i += utf8_decode(s + i, n - i, &cps[nc]);
        nc++;
    }
    off[nc] = n;
#define CLS(k) ((k) < nc ? cp_class(cps[k]) : -1)
    for (size_t i = 0; i < nc;) {
        size_t j = i;
        uint32_t c = cps[i];
        int cl = CLS(i);
        if (c == '\'' && i + 1 < nc) {
            uint32_t c1 = cps[i + 1], c2 = i + 2 < nc ? cps[i + 2] : 0;
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') j = i + 2;
            else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
                j = i + 3;
        }
        if (j == i) {
            size_t k = i + (c == ' ' && i + 1 < nc && CLS(i + 1) != CP_SPACE ? 1 : 0);
            int kc = CLS(k);
            if (kc == CP_LETTER || kc == CP_NUMBER || kc == CP_OTHER) {
                j = k;
                while (j < nc && CLS(j) == kc) j++;
            } else if (cl == CP_SPACE) {
                j = i;
                while (j < nc && CLS(j) == CP_SPACE) j++;
                if (j < nc && j - i > 1) j--;   /* \s+(?!\S): leave one space for the next word */
            } else {
                j = i + 1;
            }
        }
        if ((st = bpe_word(t, s + off[i], off[j] - off[i], out, mapped, sym, key)) != KVS_OK) goto done;
        i = j;
    }
#undef CLS
done:
    free(off);
    free(cps);
    free(mapped);
    free(sym);
    free(key);
    return st;
}

/* ---- WordPiece (BERT), as llama.cpp llm_tokenizer_wpm ---- */

static int is_chinese_char(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static size_t utf8_put(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Greedy longest-match of "\u2581" + word (bytes w[0..n), w starting with the marker). */
static kvs_status wpm_word(const kvs_tokenizer *t, const char *w, size_t n, ivec *out) {
    int64_t start = out->n;
    for (size_t i = 0; i < n; i++) {
        int match = 0;
        size_t jmax = i + t->max_len + 1 < n ? i + t->max_len + 1 : n;
        for (size_t j = jmax; j > i; j--) {
            int64_t id = kvs_strhash_find_n(&t->idx, w + i, j - i);
            if (id >= 0) {
                if (iv_push(out, (int32_t)id)) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
                match = 1;
                i = j - 1;
                break;
            }
        }
        if (!match) {
            out->n = start;   /* discard the partial word */
            break;
        }
    }
    if (out->n == start) {
        if (t->unk < 0)
            return kvs_error(KVS_ERR_NOT_FOUND, "tokenizer: word not in the vocabulary and no unknown token");
        if (iv_push(out, t->unk)) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    return KVS_OK;
}

/* BERT pre-processing (llama.cpp llm_tokenizer_wpm::preprocess): each code point -> the first code
 * point of its NFD (accents dropped); White_Space ends a word; NUL, U+FFFD (invalid UTF-8) and
 * control characters are dropped; lowercase; punctuation, ASCII symbols and CJK ideographs are
 * words of their own. Each word is matched greedily, longest token first, with a U+2581 prefix. */
static kvs_status wpm_fragment(const kvs_tokenizer *t, const char *text, size_t n, ivec *out) {
    if (n == 0) return KVS_OK;
    char *w = malloc(3 + 4 * n + 4);
    if (!w) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    memcpy(w, SPACE_ESC, 3);
    size_t wn = 3;
    kvs_status st = KVS_OK;
    for (size_t i = 0; i <= n && st == KVS_OK;) {
        uint32_t cp = 0x20;   /* a final space flushes the last word */
        if (i < n) {
            i += utf8_decode((const unsigned char *)text + i, n - i, &cp);
            if (cp == UINT32_MAX) cp = 0xFFFD;
            cp = kvs_uni_nfd_first(cp);
        } else {
            i++;
        }
        if (kvs_uni_is_space(cp)) {
            if (wn > 3) st = wpm_word(t, w, wn, out);
            wn = 3;
            continue;
        }
        if (cp == 0 || cp == 0xFFFD || kvs_uni_is_control(cp)) continue;
        uint32_t lc = kvs_uni_tolower(cp);
        if (kvs_uni_is_punct(cp) || (cp < 0x7F && kvs_uni_is_symbol(cp)) || is_chinese_char(cp)) {
            if (wn > 3) st = wpm_word(t, w, wn, out);
            if (st != KVS_OK) break;
            wn = 3 + utf8_put(lc, w + 3);
            st = wpm_word(t, w, wn, out);
            wn = 3;
        } else {
            wn += utf8_put(lc, w + wn);
        }
    }
    free(w);
    return st;
}

typedef struct {
    size_t off, n;    /* raw text range, or */
    int32_t id;       /* >= 0: a special token */
} fragment;

typedef struct {
    fragment *v;
    size_t n, cap;
} fvec;

static int fv_insert(fvec *f, size_t at, fragment x) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        fragment *v = realloc(f->v, cap * sizeof *v);
        if (!v) return -1;
        f->v = v;
        f->cap = cap;
    }
    memmove(f->v + at + 1, f->v + at, (f->n - at) * sizeof *f->v);
    f->v[at] = x;
    f->n++;
    return 0;
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0 || nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}

/* Splits raw fragments at occurrences of special token texts (llama.cpp tokenizer_st_partition). */
static int partition(const kvs_tokenizer *t, const char *text, fvec *f, unsigned flags) {
    for (int32_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (t->type[id] != KVS_TOKEN_USER_DEFINED && !(flags & KVS_TOKENIZE_PARSE_SPECIAL)) continue;
        const char *tok = t->text[id];
        size_t tl = t->len[id];
        for (size_t i = 0; i < f->n; i++) {
            fragment fr = f->v[i];
            if (fr.id >= 0) continue;
            const char *hit = find_bytes(text + fr.off, fr.n, tok, tl);
            if (!hit) continue;
            size_t pos = (size_t)(hit - text);
            fragment before = {fr.off, pos - fr.off, -1};
            fragment sp = {pos, tl, id};
            fragment after = {pos + tl, fr.off + fr.n - pos - tl, -1};
            /* replace fr by [before] sp [after]; continue scanning in `after` */
            size_t at = i;
            f->v[i] = sp;
            if (before.n > 0) {
                if (fv_insert(f, at, before)) return -1;
                at++;
            }
            if (after.n > 0 && fv_insert(f, at + 1, after)) return -1;
            i = at;   /* the loop's i++ moves to `after` */
        }
    }
    return 0;
}

kvs_status kvs_tokenizer_encode(const kvs_tokenizer *t, const char *text, size_t len, unsigned flags,
                                int32_t *ids, int64_t cap, int64_t *n_out) {
    if (!t || (!text && len) || (!ids && cap) || cap < 0 || !n_out)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tokenizer_encode: bad argument");
    *n_out = 0;
    ivec out = {0};
    fvec fr = {0};
    char *esc = NULL;
    kvs_status s = KVS_OK;
    if ((flags & KVS_TOKENIZE_ADD_BOS) && t->bos >= 0 && iv_push(&out, t->bos)) goto oom;
    if (len > 0 || (flags & KVS_TOKENIZE_PREFIX_EMPTY)) {
        fragment all = {0, len, -1};
        if (fv_insert(&fr, 0, all)) goto oom;
        if (len > 0 && partition(t, text, &fr, flags)) goto oom;
    }
    /* escaped text buffer: worst case every byte a space (3 bytes) + prefix */
    esc = malloc(3 * len + 4);
    if (!esc) goto oom;
    int prev_special = 1;
    for (size_t i = 0; i < fr.n; i++) {
        if (fr.v[i].id >= 0) {
            if (iv_push(&out, fr.v[i].id)) goto oom;
            prev_special = 1;
            continue;
        }
        if (t->bpe || t->wpm) {
            s = t->bpe ? bpe_fragment(t, text + fr.v[i].off, fr.v[i].n, &out)
                       : wpm_fragment(t, text + fr.v[i].off, fr.v[i].n, &out);
            if (s != KVS_OK) goto done;
            prev_special = 0;
            continue;
        }
        size_t n = 0;
        if (t->add_space_prefix && prev_special) {
            memcpy(esc, SPACE_ESC, 3);
            n = 3;
        }
        for (size_t k = 0; k < fr.v[i].n; k++) {
            char c = text[fr.v[i].off + k];
            if (c == ' ') {
                memcpy(esc + n, SPACE_ESC, 3);
                n += 3;
            } else {
                esc[n++] = c;
            }
        }
        if ((s = spm_fragment(t, esc, n, &out)) != KVS_OK) goto done;
        prev_special = 0;
    }
    if ((flags & KVS_TOKENIZE_ADD_EOS) && t->eos >= 0 && iv_push(&out, t->eos)) goto oom;
    *n_out = out.n;
    if (out.n && cap > 0) memcpy(ids, out.v, (size_t)(out.n < cap ? out.n : cap) * sizeof *ids);
    if (out.n > cap)
        s = kvs_error(KVS_ERR_OUT_OF_RANGE, "kvs_tokenizer_encode: %lld ids do not fit %lld",
                      (long long)out.n, (long long)cap);
    goto done;
oom:
    s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
done:
    free(out.v);
    free(fr.v);
    free(esc);
    return s;
}

/* ---- decode ---------------------------------------------------------------------------------- */

/* Writes the piece of id into out (capacity >= max(len[id], 3) + 1); returns its length. */
static size_t piece(const kvs_tokenizer *t, int32_t id, char *out) {
    const char *s = t->text[id];
    size_t n = t->len[id];
    switch (t->type[id]) {
    case KVS_TOKEN_BYTE:
        if (is_byte_text(s, n)) {
            out[0] = (char)strtol(s + 3, NULL, 16);
            return 1;
        }
        break;
    case KVS_TOKEN_CONTROL:
    case KVS_TOKEN_UNUSED:
        return 0;
    case KVS_TOKEN_UNKNOWN:
        memcpy(out, UNK_PIECE, 3);
        return 3;
    default:
        break;
    }
    size_t j = 0;
    if (t->bpe) {   /* byte-level: each code point < 512 stands for one byte */
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t l = utf8_decode((const unsigned char *)s + i, n - i, &cp);
            if (cp < 512 && t->cp_byte[cp] >= 0) out[j++] = (char)t->cp_byte[cp];
            else for (size_t k = 0; k < l; k++) out[j++] = s[i + k];
            i += l;
        }
        return j;
    }
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(s + i, SPACE_ESC, 3) == 0) {
            out[j++] = ' ';
            i += 3;
        } else {
            out[j++] = s[i++];
        }
    }
    return j;
}

kvs_status kvs_tokenizer_token_to_piece(const kvs_tokenizer *t, int32_t prev, int32_t id, char *buf,
                                        size_t cap, size_t *len) {
    if (!t || !buf || !len) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "token_to_piece: NULL");
    if (id < 0 || id >= t->n)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "token_to_piece: id %d outside [0, %d)", id, t->n);
    char *tmp = malloc(t->max_len + 8);
    if (!tmp) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    size_t n = piece(t, id, tmp);
    const char *p = tmp;
    if (prev == t->bos && t->bos >= 0 && n > 0 && p[0] == ' ') {
        p++;
        n--;
    }
    *len = n;
    kvs_status s = KVS_OK;
    if (n + 1 > cap) {
        s = kvs_error(KVS_ERR_OUT_OF_RANGE, "token_to_piece: %zu bytes do not fit %zu", n + 1, cap);
    } else {
        memcpy(buf, p, n);
        buf[n] = '\0';
    }
    free(tmp);
    return s;
}

kvs_status kvs_tokenizer_decode(const kvs_tokenizer *t, const int32_t *ids, int64_t n, char *buf,
                                size_t cap, size_t *len) {
    if (!t || (!ids && n) || n < 0 || !len || (!buf && cap))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tokenizer_decode: bad argument");
    *len = 0;
    char *tmp = malloc(t->max_len + 8);
    if (!tmp) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    size_t total = 0;
    int at_start = 1;   /* no text emitted yet, or just after BOS */
    kvs_status s = KVS_OK;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n) {
            s = kvs_error(KVS_ERR_OUT_OF_RANGE, "kvs_tokenizer_decode: id %d at %lld outside [0, %d)",
                          id, (long long)i, t->n);
            break;
        }
        if (id == t->bos) {
            at_start = 1;
            continue;
        }
        size_t k = piece(t, id, tmp);
        const char *p = tmp;
        if (k == 0) continue;
        if (at_start && t->add_space_prefix && p[0] == ' ') {
            p++;
            k--;
        }
        at_start = 0;
        if (buf && total + k < cap) memcpy(buf + total, p, k);
        total += k;
    }
    free(tmp);
    if (s != KVS_OK) return s;
    *len = total;
    if (total + 1 > cap)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "kvs_tokenizer_decode: %zu bytes do not fit %zu",
                         total + 1, cap);
    buf[total] = '\0';
    return KVS_OK;
}
