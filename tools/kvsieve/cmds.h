/* kvsieve CLI — the subcommands. Each lives in its own cmd_NAME.c; to add one, declare it here,
 * add a row to the table in main.c and its file to tools/meson.build. */
#ifndef KVS_TOOLS_CMDS_H
#define KVS_TOOLS_CMDS_H

/* argv[0] is the subcommand name; returns the exit status (see cli.h). */
int cmd_devices(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_train(int argc, char **argv);
/* `kvsieve eval --dlm` (cmd_eval_dlm.c): diffusion cache schedules vs the no-cache decode. */
int cmd_eval_dlm(int argc, char **argv);
/* `kvsieve eval --dlm --tasks FILE` (cmd_eval_tasks.c): task accuracy and speed of the schedules. */
int cmd_eval_dlm_tasks(int argc, char **argv);

#endif
