/* kvsieve eval --dlm --tasks FILE: task accuracy of the diffusion cache schedules, the yardstick of
 * the papers (Fast-dLLM, dKV-Cache, Elastic-Cache, WaveFilter judge by task accuracy). For every
 * schedule (each also with WaveFilter at the given budgets) and every task of the file: accuracy
 * (decoded text up to the first EOS, stripped, equals the answer stripped), mean steps, tokens
 * committed per step, compute fraction (rows computed / rows of the no-cache decode at the same
 * threshold, and / rows of the LLaDA baseline), and wall-time speedups against the LLaDA baseline
 * (no cache, one token per step, steps = gen: how the papers measure) and against `none` at the
 * same threshold. Text table, --json (with --answers: every decoded answer), --plot (SVG bars of
 * accuracy and speedup). Each case is decoded by the baseline, by `none`, then by every variant in
 * turn, so slow drifts of the machine hit all rows alike. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen_report.h"
#include "cli.h"
#include "cmds.h"
#include "dlm_cache_opts.h"
#include "dlm_tasks.h"
#include "eval_dlm.h"
#include "kvsieve/generate.h"
#include "kvsieve/model.h"
#include "kvsieve/model_file.h"
#include "kvsieve/schedule.h"
#include "kvsieve/tokenizer.h"
#include "opts_common.h"

#define PROG "kvsieve eval --dlm --tasks"
#define MAX_LIST 16
#define MAX_TASKS 32

typedef struct tcase {
    const dlm_task_case *c;
    int32_t *ids;
    int64_t n;
    int task;            /* index into the task names */
} tcase;


/* Decoded text of out[0..gen) up to the first EOS, stripped of white space at both ends (malloc'd). */
static char *answer_text(const kvs_tokenizer *tok, const int32_t *out, int64_t gen) {
    int32_t eos = kvs_tokenizer_eos(tok);
    int64_t n = 0;
    while (n < gen && out[n] != eos) n++;
    size_t need = 0;
    kvs_tokenizer_decode(tok, out, n, NULL, 0, &need);
    char *s = malloc(need + 1);
    if (!s) return NULL;
    size_t len = 0;
    if (kvs_tokenizer_decode(tok, out, n, s, need + 1, &len) != KVS_OK) len = 0;
    s[len] = '\0';
    size_t a = 0;
    while (a < len && (s[a] == ' ' || s[a] == '\n' || s[a] == '\t' || s[a] == '\r')) a++;
    while (len > a && (s[len - 1] == ' ' || s[len - 1] == '\n' || s[len - 1] == '\t' || s[len - 1] == '\r')) len--;
    memmove(s, s + a, len - a);
    s[len - a] = '\0';
    return s;
}

static int same_stripped(const char *got, const char *want, size_t want_len) {
    size_t a = 0;
    while (a < want_len && (want[a] == ' ' || want[a] == '\n' || want[a] == '\t' || want[a] == '\r')) a++;
    while (want_len > a && (want[want_len - 1] == ' ' || want[want_len - 1] == '\n' || want[want_len - 1] == '\t' ||
                            want[want_len - 1] == '\r'))
        want_len--;
    return strlen(got) == want_len - a && memcmp(got, want + a, want_len - a) == 0;
}

static kvs_status decode(kvs_device *dev, kvs_model *m, const tcase *tc, kvs_dlm_schedule *sc, float threshold,
                         int32_t *out, kvs_gen_stats *st) {
    kvs_cache_params cp = kvs_model_cache_params(m);
    cp.capacity = tc->n + tc->c->gen;
    cp.flags = kvs_dlm_schedule_cache_flags(sc);
    kvs_kv_cache *cache = NULL;
    kvs_status s = kvs_cache_create(&cache, dev, &cp);
    if (s != KVS_OK) return s;
    kvs_dlm_params dp = kvs_dlm_params_default();
    dp.gen_len = tc->c->gen;
    dp.block_len = tc->c->block;
    dp.steps = tc->c->gen;
    dp.threshold = threshold;
    dp.schedule = sc;
    s = kvs_generate_dlm(m, cache, tc->ids, tc->n, &dp, NULL, NULL, out, st);
    kvs_cache_destroy(&cache);
    return s;
}

int cmd_eval_dlm_tasks(int argc, char **argv) {
    const char *model = "stories260K-llada-f32.gguf", *tasks_path = NULL, *caches_s = "none,prefix,dual,delayed,elastic",
               *plot = NULL, *budgets_s = "0.25,0.5", *only = NULL;
    int json = 0, dlm_flag = 0, answers = 0;
    device_opts dv = {.backend = "cpu"};
    int64_t limit = 0;
    double threshold = 0.9;
    dlm_cache_opts co = dlm_cache_opts_default();
    cli_opt opts[40] = {
        {"dlm", 0, CLI_FLAG, &dlm_flag, NULL, "evaluate the diffusion-LM cache schedules (required)"},
        {"tasks", 0, CLI_STRING, &tasks_path, "FILE", "task file: JSON lines {task, prompt, answer, gen, block} (required)"},
        {"model", 'm', CLI_STRING, &model, "MODEL", "masked-diffusion model (default stories260K-llada-f32.gguf)"},
        {"caches", 0, CLI_STRING, &caches_s, "C,C,..", "schedules (default none,prefix,dual,delayed,elastic; none "
                                                    "always runs, first)"},
        {"budgets", 0, CLI_STRING, &budgets_s, "F,F", "WaveFilter budgets, each schedule also runs with each "
                                                       "(default 0.25,0.5; 0 = no WaveFilter rows)"},
        {"threshold", 0, CLI_DOUBLE, &threshold, "E", "parallel decoding threshold of the schedules (default 0.9; 0 = one "
                                                      "token per step)"},
        {"task", 0, CLI_STRING, &only, "NAME", "only the cases of this task (default all)"},
        {"limit", 0, CLI_INT64, &limit, "N", "at most the first N cases of each task (default all)"},
        DEVICE_OPTS(dv),
        {"json", 0, CLI_FLAG, &json, NULL, "print one JSON object instead of the table"},
        {"answers", 0, CLI_FLAG, &answers, NULL, "with --json: every case's decoded answer per schedule"},
        {"plot", 0, CLI_STRING, &plot, "F.svg", "write an SVG of accuracy and speedup per schedule and task"},
    };
    int n_opts = 0;
    while (opts[n_opts].name) n_opts++;
    dlm_cache_cli_opts(&co, opts + n_opts);
    n_opts += DLM_CACHE_N_OPTS;
    const cli_spec spec = {
        .prog = PROG,
        .usage = "FILE [-m MODEL] [--caches ...] [--budgets F,F] [--threshold E] [--json] [--plot F.svg]",
        .summary = "Task accuracy, steps, tokens per step, compute and wall-time speedup of the diffusion cache\n"
                   "schedules, per task, against the LLaDA baseline (no cache, one token per step) and `none`.",
        .opts = opts,
        .n_opts = n_opts,
        .epilog = "Correct: the decoded text up to the first EOS, stripped, equals the answer stripped.\n"
                  "The schedule options (--gamma, --window, --track, --reload, --spa-*) apply to every run of their\n"
                  "schedule, --wf-* (but --wf-budget) to the WaveFilter rows; generate's --cache, --wavefilter and\n"
                  "--wf-budget are refused here (give --caches and --budgets).",
    };
    int rc = cli_parse(&spec, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!dlm_flag) return cli_fail(CLI_EXIT_USAGE, "kvsieve eval", "--tasks needs --dlm (task accuracy of the diffusion caches)");
    if (!tasks_path) return cli_fail(CLI_EXIT_USAGE, PROG, "--tasks FILE is required");
    if (threshold < 0 || threshold > 1) return cli_fail(CLI_EXIT_USAGE, PROG, "--threshold %g outside [0, 1]", threshold);
    if (limit < 0) return cli_fail(CLI_EXIT_USAGE, PROG, "--limit %lld must be >= 0", (long long)limit);
    if (answers && !json) return cli_fail(CLI_EXIT_USAGE, PROG, "--answers needs --json");
    char cbuf[256];
    snprintf(cbuf, sizeof cbuf, "%s", caches_s);
    char *caches[MAX_LIST];
    int nc = 0;
    for (char *t = strtok(cbuf, ","); t && nc < MAX_LIST; t = strtok(NULL, ",")) caches[nc++] = t;
    if (nc == 0) return cli_fail(CLI_EXIT_USAGE, PROG, "--caches needs at least one schedule");
    /* `none` at the threshold always runs first: the reference of "vs none" */
    int has_none = 0;
    for (int i = 0; i < nc; i++) has_none |= !strcmp(caches[i], "none");
    if (!has_none) {
        if (nc == MAX_LIST) return cli_fail(CLI_EXIT_USAGE, PROG, "--caches: at most %d schedules", MAX_LIST - 1);
        memmove(caches + 1, caches, (size_t)nc * sizeof *caches);
        static char none_name[] = "none";
        caches[0] = none_name;
        nc++;
    } else {
        for (int i = 0; i < nc; i++)
            if (!strcmp(caches[i], "none")) {
                char *t = caches[i];
                memmove(caches + 1, caches, (size_t)i * sizeof *caches);
                caches[0] = t;
                break;
            }
    }
    for (int i = 0; i < nc; i++) {
        kvs_dlm_schedule *t = NULL;
        if (kvs_dlm_schedule_from_name(&t, caches[i], co.reload != CLI_UNSET_INT ? co.reload : KVS_DLM_DELAYED_RELOAD_DEFAULT, NULL) != KVS_OK)
            return cli_fail(CLI_EXIT_USAGE, PROG, "--caches: %s", kvs_last_error());
        kvs_dlm_schedule_destroy(&t);
    }
    double budgets[MAX_LIST];
    int nb = 0;
    if (cli_parse_double_list(budgets_s, budgets, MAX_LIST, &nb))
        return cli_fail(CLI_EXIT_USAGE, PROG, "--budgets: bad list '%s'", budgets_s);
    if (nb == 1 && budgets[0] == 0) nb = 0;
    for (int i = 0; i < nb; i++)
        if (!(budgets[i] > 0 && budgets[i] <= 1)) return cli_fail(CLI_EXIT_USAGE, PROG, "--budgets: %g outside (0, 1]", budgets[i]);
    if (dlm_cache_check_flags(PROG, &co, caches, nc, 1, nb > 0) != 0) return CLI_EXIT_USAGE;
    if (plot && cli_check_writable(PROG, "--plot", plot) != CLI_EXIT_OK) return CLI_EXIT_USAGE;

    char *text = NULL;
    size_t tsz = 0;
    rc = cli_read_file(PROG, "--tasks", tasks_path, &text, &tsz);
    if (rc != CLI_EXIT_OK) return rc;
    dlm_task_set set = {0};
    kvs_status ps = dlm_tasks_parse(text, tsz, tasks_path, &set);
    free(text);
    if (ps != KVS_OK) return cli_fail(CLI_EXIT_USAGE, PROG, "%s", kvs_last_error());

    int exit_code = CLI_EXIT_FAIL;
    cli_model cm = {0};
    tcase *tc = calloc((size_t)set.n, sizeof *tc);
    char *tasks[MAX_TASKS];
    int nt = 0;
    int64_t ncase = 0, per_task[MAX_TASKS] = {0}, max_gen = 1, skipped = 0, first_skipped = 0;
    int nv = 1 + nc * (1 + nb); /* the LLaDA baseline, then each schedule without and with WaveFilter */
    variant *v = calloc((size_t)nv, sizeof *v);
    int32_t *out = NULL;
    kvs_gen_stats *st = NULL;
    int *ok = NULL, none_k = 1;
    if (!tc || !v) {
        exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "out of memory");
        goto done;
    }
    rc = cli_model_open(PROG, model, &dv, &cm);
    if (rc == CLI_EXIT_OK) rc = cli_model_require_dlm(PROG, model, &cm);
    if (rc != CLI_EXIT_OK) {
        exit_code = rc;
        goto done;
    }
    kvs_device *dev = cm.dev;
    kvs_model *m = cm.m;
    const kvs_tokenizer *tok = cm.tok;
    const kvs_model_hparams *hp = cm.hp;
    /* cases: filter, group by task, tokenize, check the context */
    for (int64_t i = 0; i < set.n; i++) {
        const dlm_task_case *c = &set.cases[i];
        if (only && strcmp(c->task, only) != 0) continue;
        int t = 0;
        while (t < nt && strcmp(tasks[t], c->task) != 0) t++;
        if (t < nt && limit > 0 && per_task[t] >= limit) continue;
        tcase *x = &tc[ncase];
        x->c = c;
        const unsigned flags = KVS_TOKENIZE_ADD_BOS | KVS_TOKENIZE_PREFIX_EMPTY;
        kvs_tokenizer_encode(tok, c->prompt, c->prompt_len, flags, NULL, 0, &x->n);
        x->ids = malloc((size_t)(x->n + 1) * sizeof *x->ids);
        if (!x->ids || kvs_tokenizer_encode(tok, c->prompt, c->prompt_len, flags, x->ids, x->n + 1, &x->n) != KVS_OK) {
            free(x->ids);
            x->ids = NULL;
            exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "%s:%lld: cannot tokenize the prompt: %s", tasks_path,
                                 (long long)c->line, kvs_last_error());
            goto done;
        }
        if (x->n + c->gen > hp->ctx_len) {
            /* a case this model cannot hold is left out with a note, not the whole file */
            if (skipped == 0) first_skipped = c->line;
            free(x->ids);
            x->ids = NULL;
            skipped++;
            continue;
        }
        if (t == nt) {
            if (nt == MAX_TASKS) {
                exit_code = cli_fail(CLI_EXIT_USAGE, PROG, "%s:%lld: more than %d task names", tasks_path, (long long)c->line,
                                     MAX_TASKS);
                goto done;
            }
            tasks[nt++] = set.cases[i].task;
        }
        x->task = t;
        per_task[t]++;
        ncase++;
        if (c->gen > max_gen) max_gen = c->gen;
    }
    if (ncase == 0) {
        exit_code = skipped ? cli_fail(CLI_EXIT_USAGE, PROG, "%s: every case (%lld) has prompt + gen beyond the model context %d",
                                       tasks_path, (long long)skipped, hp->ctx_len)
                            : cli_fail(CLI_EXIT_USAGE, PROG, "%s: no case of task '%s'", tasks_path, only ? only : "");
        goto done;
    }
    if (skipped)
        fprintf(stderr, "%s: note: %lld case(s) of %s skipped, their prompt + gen exceed the model context %d (first: line %lld)\n",
                PROG, (long long)skipped, tasks_path, hp->ctx_len, (long long)first_skipped);
    /* variants */
    snprintf(v[0].name, sizeof v[0].name, "llada-baseline");
    v[0].cache = "none";
    v[0].threshold = 0;
    /* spa takes no WaveFilter (kvs_dlm_schedule_wavefilter refuses it): its row is the cache alone */
    int nvar = 1;
    for (int ci = 0; ci < nc; ci++)
        for (int bi = -1; bi < nb; bi++) {
            if (bi >= 0 && strcmp(caches[ci], "spa") == 0) continue;
            variant *vk = &v[nvar++];
            vk->cache = caches[ci];
            vk->budget = bi >= 0 ? budgets[bi] : 0;
            vk->threshold = (float)threshold;
            if (bi >= 0) snprintf(vk->name, sizeof vk->name, "%s+wavefilter@%.2f", caches[ci], budgets[bi]);
            else snprintf(vk->name, sizeof vk->name, "%s", caches[ci]);
        }
    nv = nvar;
    for (int k = 0; k < nv; k++) {
        v[k].cells = calloc((size_t)nt, sizeof *v[k].cells);
        v[k].answers = answers ? calloc((size_t)ncase, sizeof *v[k].answers) : NULL;
        if (!v[k].cells || (answers && !v[k].answers)) {
            exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "out of memory");
            goto done;
        }
    }
    out = malloc((size_t)max_gen * sizeof *out);
    st = calloc((size_t)nv, sizeof *st);
    ok = calloc((size_t)nv, sizeof *ok);
    if (!out || !st || !ok) {
        exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < ncase; i++) {
        const tcase *x = &tc[i];
        /* every variant on this case, then the cells: the speedups need the baseline's and none's time */
        for (int k = 0; k < nv; k++) {
            variant *vk = &v[k];
            kvs_dlm_schedule *sc = NULL;
            if (k > 0) {
                rc = dlm_cache_build(PROG, &co, vk->cache, vk->budget, &sc);
                if (rc) {
                    exit_code = rc;
                    goto done;
                }
            }
            kvs_status s = decode(dev, m, x, sc, vk->threshold, out, &st[k]);
            kvs_dlm_schedule_destroy(&sc);
            if (s != KVS_OK) {
                exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "%s:%lld: %s: %s", tasks_path, (long long)x->c->line, vk->name,
                                     kvs_last_error());
                goto done;
            }
            char *got = answer_text(tok, out, x->c->gen);
            if (!got) {
                exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "out of memory");
                goto done;
            }
            ok[k] = same_stripped(got, x->c->answer, x->c->answer_len);
            if (answers) vk->answers[i] = got;
            else free(got);
        }
        for (int k = 0; k < nv; k++) {
            cell *c = &v[k].cells[x->task];
            c->cases++;
            c->correct += ok[k];
            c->steps += st[k].steps;
            c->gen += x->c->gen;
            c->rows += st[k].rows_computed;
            c->sec += st[k].seconds;
            c->sec_llada += st[0].seconds;
            c->sec_none += st[none_k].seconds;
            c->rows_llada += st[0].rows_computed;
            c->rows_none += st[none_k].rows_computed;
        }
        if (!json && isatty(2) && (i + 1) % 10 == 0)
            fprintf(stderr, "\r[%lld/%lld cases]", (long long)(i + 1), (long long)ncase);
    }
    if (!json && isatty(2) && ncase >= 10) fprintf(stderr, "\r%*s\r", 30, "");
    if (json) {
        json_object *j = json_object_new_object(), *rows = json_object_new_array();
        json_object_object_add(j, "model", json_object_new_string(model));
        json_object_object_add(j, "backend", json_object_new_string(kvs_backend_name(kvs_device_backend(dev))));
        json_object_object_add(j, "tasks_file", json_object_new_string(tasks_path));
        json_object_object_add(j, "threshold", json_object_new_double(threshold));
        json_object_object_add(j, "cases", json_object_new_int64(ncase));
        for (int k = 0; k < nv; k++)
            for (int t = 0; t < nt; t++) {
                json_object *r = eval_tasks_cell_json(tasks[t], &v[k], &v[k].cells[t]);
                if (answers) {
                    json_object *a = json_object_new_array();
                    for (int64_t i = 0; i < ncase; i++)
                        if (tc[i].task == t) json_object_array_add(a, gen_json_text(v[k].answers[i]));
                    json_object_object_add(r, "answers", a);
                }
                json_object_array_add(rows, r);
            }
        json_object_object_add(j, "rows", rows);
        printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(j);
    } else {
        printf("%s on %s: %lld cases from %s, threshold %.2f (llada-baseline: no cache, one token per step)\n"
               "acc = answers exactly right; tok/step = tokens committed per step; compute = rows computed / rows of\n"
               "`none` (vs llada: / rows of the baseline); speedup = wall time of the baseline (or none) / this row's\n\n",
               model, kvs_device_get_info(dev)->name, (long long)ncase, tasks_path, threshold);
        printf("%-12s %-26s %5s %8s %8s %7s %8s %8s %9s %9s\n", "task", "schedule", "cases", "acc", "steps", "tok/step",
               "compute", "vs llada", "speedup", "vs none");
        for (int t = 0; t < nt; t++)
            for (int k = 0; k < nv; k++) eval_tasks_cell_print(tasks[t], &v[k], &v[k].cells[t]);
    }
    const int perr = plot ? eval_tasks_write_svg(plot, model, v, nv, tasks, nt) : 0;
    if (perr) {
        exit_code = cli_fail(CLI_EXIT_FAIL, PROG, "cannot write --plot %s: %s", plot, strerror(perr));
        goto done;
    }
    exit_code = CLI_EXIT_OK;
done:
    for (int k = 0; v && k < nv; k++) {
        for (int64_t i = 0; v[k].answers && i < ncase; i++) free(v[k].answers[i]);
        free(v[k].answers);
        free(v[k].cells);
    }
    free(v);
    for (int64_t i = 0; tc && i < ncase; i++) free(tc[i].ids);
    free(tc);
    free(out);
    free(st);
    free(ok);
    dlm_tasks_free(&set);
    cli_model_close(&cm);
    return exit_code;
}
