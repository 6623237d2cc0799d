/* kvsieve eval --dlm and eval --dlm --tasks: their result rows and reports (not installed).
 *   cmd_eval_dlm.c    speedup / compute / agreement per schedule and generation length
 *   cmd_eval_tasks.c  task accuracy per schedule and task
 *   eval_dlm_report.c both commands' table rows, JSON rows and SVG plots */
#ifndef KVS_CLI_EVAL_DLM_H
#define KVS_CLI_EVAL_DLM_H

#include <json-c/json.h>
#include <stdint.h>

/* eval --dlm: one (schedule, gen[, WaveFilter budget]) row, summed over the prompts. */
typedef struct agg {
    char name[96];
    int64_t gen;
    double budget;          /* WaveFilter budget, 0 = none */
    int prompts;
    double sec, sec_base;
    int64_t rows, rows_base, agree, total;
    int64_t kept, context;
    int64_t fid_match, fid_total; /* step fidelity (--fidelity) */
    int64_t first_div;            /* sum over prompts of the first position that differs (gen if none) */
    int cache;                    /* index of the row's schedule in --caches */
} agg;

/* The row as a JSON object (schedule, gen, speedup, compute_fraction, agreement, ...). */
json_object *eval_dlm_agg_json(const agg *a);
/* The row on stdout; with_budget adds WaveFilter's kept share, fid_col the step-fidelity column. */
void eval_dlm_agg_print(const agg *a, int with_budget, int fid_col);
/* Three line charts (speedup, compute fraction, agreement) against gens[0..ng) to path: 0, or the
 * errno of the failure when the file cannot be written (cli_out_close). */
int eval_dlm_write_svg(const char *path, const agg *a, int na, const int64_t *gens, int ng, const char *model);

/* eval --dlm --tasks: one (variant, task) cell; variant -1 is the LLaDA baseline. */
typedef struct cell {
    int64_t cases, correct, steps, gen, rows;
    double sec;
    double sec_llada, sec_none;  /* the baseline's and `none`'s seconds on the same cases */
    int64_t rows_llada, rows_none;
} cell;

typedef struct variant {
    char name[96];
    const char *cache;
    double budget;       /* WaveFilter budget, 0 = none */
    float threshold;
    cell *cells;         /* [n_tasks] */
    char **answers;      /* [n_cases] decoded answers (--answers) */
} variant;

/* A (task, variant) cell as a JSON object (accuracy, steps, tokens per step, compute, speedups). */
json_object *eval_tasks_cell_json(const char *task, const variant *v, const cell *c);
/* The cell as one table row on stdout. */
void eval_tasks_cell_print(const char *task, const variant *v, const cell *c);
/* Grouped bars of accuracy and speedup vs the LLaDA baseline, one group per variant, one bar per
 * task, to path: 0, or the errno of the failure when the file cannot be written (cli_out_close). */
int eval_tasks_write_svg(const char *path, const char *model, const variant *v, int nv, char **tasks, int nt);

#endif
