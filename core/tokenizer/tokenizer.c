/* SentencePiece-style BPE tokenizer (see include/kvsieve/tokenizer.h for the algorithm and its
 * sources: llama.cpp llm_tokenizer_spm, llama2.c encode/decode): construction from GGUF and
 * llama2.c files, accessors, special-token partitioning, decode. The encoders are
 * tokenizer_encode.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/tokenizer_unicode.h"


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

/* ---- special-token partitioning (used by kvs_tokenizer_encode, tokenizer_encode.c) ---------- */

int kvs_tok_fv_insert(fvec *f, size_t at, fragment x) {
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
int kvs_tok_partition(const kvs_tokenizer *t, const char *text, fvec *f, unsigned flags) {
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
                if (kvs_tok_fv_insert(f, at, before)) return -1;
                at++;
            }
            if (after.n > 0 && kvs_tok_fv_insert(f, at + 1, after)) return -1;
            i = at;   /* the loop's i++ moves to `after` */
        }
    }
    return 0;
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
