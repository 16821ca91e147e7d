/* weft CLI subcommands. Each takes argv after the subcommand name
 * (argv[0] is the subcommand) and returns a process exit code: 0 success,
 * 1 runtime failure (message printed to stderr as one line "weft: ..."),
 * 2 usage error. */
#ifndef WEFT_CLI_H
#define WEFT_CLI_H

int weft_cmd_run(int argc, char **argv);
int weft_cmd_chat(int argc, char **argv);
int weft_cmd_tokenize(int argc, char **argv);
int weft_cmd_info(int argc, char **argv);
int weft_cmd_devices(int argc, char **argv);
int weft_cmd_quantize(int argc, char **argv);
int weft_cmd_gen(int argc, char **argv);
int weft_cmd_bench(int argc, char **argv);
int weft_cmd_serve(int argc, char **argv);
int weft_cmd_router(int argc, char **argv);
int weft_cmd_fleet(int argc, char **argv);
int weft_cmd_template(int argc, char **argv);

/* Resolve the default model path (SmolLM2-135M-Instruct Q4_1): $WEFT_MODEL,
 * else $WEFT_CACHE_DIR or $XDG_CACHE_HOME/weft or ~/.cache/weft, file
 * models/SmolLM2-135M-Instruct.Q4_1.gguf. Returns a malloc'd path if the
 * file exists; otherwise prints to stderr how to fetch it and returns NULL. */
char *weft_default_model_path(void);

#endif
