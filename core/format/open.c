/* Opening a model file: format detection (a directory or config.json / *.safetensors: safetensors;
 * "GGUF" magic: GGUF; otherwise llama2.c) and the dispatch to the format's reader, which fills the
 * model-file object (model_file.c). See include/kvsieve/model_file.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include "format/format.h"

static void hparams_defaults(kvs_model_hparams *h) {
    memset(h, 0, sizeof *h);
    h->rms_eps = 1e-5f;
    h->rope_base = 10000.0f;
    h->bos_id = -1;
    h->eos_id = -1;
    h->mask_id = -1;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void dir_of(const char *p, char *dir, size_t cap) {
    const char *s = strrchr(p, '/');
    if (!s) snprintf(dir, cap, ".");
    else if (s == p) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(s - p), p);
}

kvs_status kvs_model_file_open(kvs_model_file **out, const char *path, const kvs_model_file_params *p) {
    if (!out || !path) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_file_open: NULL argument");
    *out = NULL;
    if (strlen(path) >= KVS_PATH_MAX)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_model_file_open: path too long");
    kvs_model_file_params def = kvs_model_file_params_default();
    if (!p) p = &def;
    kvs_model_file *m = calloc(1, sizeof *m);
    if (!m) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "model file: out of memory");
    snprintf(m->path, sizeof m->path, "%s", path);
    if (p->tokenizer_path) snprintf(m->tok_path, sizeof m->tok_path, "%s", p->tokenizer_path);
    m->force_f32 = p->force_f32;
    hparams_defaults(&m->hp);

    kvs_status s;
    char st_path[KVS_PATH_MAX + 32], cfg_path[KVS_PATH_MAX + 32];
    if (kvs_path_is_dir(path)) {
        snprintf(m->dir, sizeof m->dir, "%s", path);
        snprintf(st_path, sizeof st_path, "%s/model.safetensors", path);
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", path);
        m->format = KVS_MODEL_SAFETENSORS;
        if (!kvs_path_is_file(st_path) || !kvs_path_is_file(cfg_path)) {
            s = kvs_error(KVS_ERR_NOT_FOUND, "'%s' is a directory without model.safetensors and "
                                             "config.json", path);
            goto fail;
        }
        s = kvs_mf_load_safetensors(m, st_path, cfg_path);
    } else {
        dir_of(path, m->dir, sizeof m->dir);
        const char *bn = base_name(path);
        size_t bl = strlen(bn);
        if (strcmp(bn, "config.json") == 0 ||
            (bl > 12 && strcmp(bn + bl - 12, ".safetensors") == 0)) {
            m->format = KVS_MODEL_SAFETENSORS;
            if (strcmp(bn, "config.json") == 0)
                snprintf(st_path, sizeof st_path, "%s/model.safetensors", m->dir);
            else
                snprintf(st_path, sizeof st_path, "%s", path);
            snprintf(cfg_path, sizeof cfg_path, "%s/config.json", m->dir);
            s = kvs_mf_load_safetensors(m, st_path, cfg_path);
        } else {
            /* only a regular file is sniffed: opening a FIFO without a writer would block */
            struct stat st;
            if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
                s = kvs_error(KVS_ERR_IO, "'%s' is not a regular file", path);
                goto fail;
            }
            FILE *f = fopen(path, "rb");
            if (!f) {
                s = kvs_error(KVS_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
                goto fail;
            }
            char magic[4] = {0};
            size_t got = fread(magic, 1, 4, f);
            fclose(f);
            if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
                m->format = KVS_MODEL_GGUF;
                s = kvs_mf_load_gguf(m);
            } else {
                /* no GGUF magic and not safetensors: the llama2.c checkpoint format has no magic of its
                 * own, so say what was tried when its header does not make sense either */
                m->format = KVS_MODEL_LLAMA2C;
                s = kvs_mf_load_llama2c(m);
                if (s == KVS_ERR_FORMAT) {
                    char why[512];
                    snprintf(why, sizeof why, "%s", kvs_last_error());
                    s = kvs_error(KVS_ERR_FORMAT, "'%s' is not a model file kvsieve reads: no GGUF magic, not "
                                  "safetensors, and as a llama2.c checkpoint: %s", path, why);
                }
            }
        }
    }
    if (s != KVS_OK) goto fail;
    *out = m;
    return KVS_OK;
fail:
    kvs_model_file_close(&m);
    return s;
}
