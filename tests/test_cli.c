/* The weft CLI's contracts: exit codes (0 ok, 1 runtime failure, 2 usage),
 * --json shapes, and that bad input produces one error line, not a crash. */
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include "tests/check.h"
#include "tests/weft_exec.h"
#include "tools/cli.h"

static char stories[1024];

static void usage_errors_exit_2(void)
{
    char *out = NULL;
    CHECK_EQ_INT(weft_exec("2>/dev/null", &out), 2);
    free(out);
    CHECK_EQ_INT(weft_exec("frobnicate 2>/dev/null", &out), 2);
    free(out);
    CHECK_EQ_INT(weft_exec("run --no-such-flag 2>/dev/null", &out), 2);
    free(out);
    CHECK_EQ_INT(weft_exec("run -m x.gguf -p hi -n notanumber 2>/dev/null", &out), 2);
    free(out);
    CHECK_EQ_INT(weft_exec("run -m x.gguf 2>/dev/null", &out), 2);  /* no -p */
    free(out);
}

static void runtime_errors_exit_1_with_one_line(void)
{
    char *out = NULL;
    CHECK_EQ_INT(weft_exec("run -m /nonexistent.gguf -p hi 2>&1", &out), 1);
    CHECK(out && strstr(out, "weft: ") == out && strchr(out, '\n') == out + strlen(out) - 1);
    free(out);
    char args[1200];
    snprintf(args, sizeof args, "run -m '%s' -p hi --device cuda:0 2>&1", stories);
    CHECK_EQ_INT(weft_exec(args, &out), 1);
    CHECK(out && strstr(out, "cuda"));
    free(out);
    snprintf(args, sizeof args, "run -m '%s' -p 'a long prompt that will not fit' -c 4 2>&1", stories);
    CHECK_EQ_INT(weft_exec(args, &out), 1);
    CHECK(out && strstr(out, "longer than the context"));
    free(out);
}

static void tokenize_json_gives_ids_and_pieces(void)
{
    char args[1200];
    snprintf(args, sizeof args, "tokenize -m '%s' -p 'Once upon a time' --json", stories);
    json_t *j = weft_exec_json(args);
    CHECK(j != NULL);
    if (!j) return;
    static const int want[] = {1, 403, 407, 261, 378};
    json_t *ids = json_object_get(j, "ids");
    CHECK_EQ_INT(json_array_size(ids), 5);
    for (size_t i = 0; i < 5 && i < json_array_size(ids); i++) CHECK_EQ_INT(json_integer_value(json_array_get(ids, i)), want[i]);
    CHECK_EQ_INT(json_array_size(json_object_get(j, "pieces")), 5);
    json_decref(j);
}

static void run_json_has_every_field(void)
{
    char args[1200];
    snprintf(args, sizeof args, "run -m '%s' -p 'Once upon a time' -n 8 --temp 0.7 --seed 42 --json --logprobs 2", stories);
    json_t *a = weft_exec_json(args), *b = weft_exec_json(args);
    CHECK(a && b);
    if (!a || !b) { json_decref(a); json_decref(b); return; }
    CHECK(json_is_array(json_object_get(a, "prompt_ids")));
    CHECK_EQ_INT(json_array_size(json_object_get(a, "ids")), 8);
    CHECK(json_is_string(json_object_get(a, "text")));
    json_t *lp = json_object_get(a, "logprobs");
    CHECK_EQ_INT(json_array_size(lp), 8);
    CHECK_EQ_INT(json_array_size(json_object_get(json_array_get(lp, 0), "top")), 2);
    json_t *t = json_object_get(a, "timings");
    CHECK(json_is_number(json_object_get(t, "gen_tokens_per_s")) && json_is_number(json_object_get(t, "prompt_ms")));
    /* same seed, same output */
    CHECK(json_equal(json_object_get(a, "ids"), json_object_get(b, "ids")));
    json_decref(a);
    json_decref(b);
}

static void devices_json_lists_cpu(void)
{
    char *out = NULL;
    CHECK_EQ_INT(weft_exec("devices --json", &out), 0);
    json_error_t err;
    json_t *j = out ? json_loads(out, 0, &err) : NULL;
    free(out);
    CHECK(json_is_array(j));
    bool cpu = false;
    for (size_t i = 0; i < json_array_size(j); i++) {
        json_t *d = json_array_get(j, i);
        if (!strcmp(json_string_value(json_object_get(d, "backend")), "cpu"))
            cpu = json_is_true(json_object_get(d, "available"));
        else  /* others are either available or say why not */
            CHECK(json_is_true(json_object_get(d, "available")) || json_is_string(json_object_get(d, "reason")));
    }
    CHECK(cpu);
    json_decref(j);
}

/* --version and --help answer on stdout with 0, for weft and every command. */
static void version_and_help_on_stdout(void)
{
    char *out = NULL;
    CHECK_EQ_INT(weft_exec("--version 2>/dev/null", &out), 0);
    CHECK(out && !strncmp(out, "weft 0.", 7) && strstr(out, "backends: cpu"));
    free(out);
    CHECK_EQ_INT(weft_exec("--help 2>/dev/null", &out), 0);
    CHECK(out && strstr(out, " serve "));
    free(out);
    static const char *const cmds[] = {"run", "chat", "tokenize", "info", "devices", "quantize",
                                       "gen", "bench", "serve", "router", "fleet"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char args[128], want[64];
        snprintf(args, sizeof args, "%s --help 2>/dev/null", cmds[i]);
        snprintf(want, sizeof want, "usage: weft %s", cmds[i]);
        CHECK_MSG(weft_exec(args, &out) == 0, "weft %s --help: not 0", cmds[i]);
        CHECK_MSG(out && strstr(out, want), "weft %s --help printed no usage on stdout", cmds[i]);
        free(out);
    }
}

/* An unknown option is named in the error (exit 2). */
static void unknown_options_are_named(void)
{
    static const char *const cmds[] = {"run",   "chat",  "tokenize", "quantize", "info", "devices",
                                       "gen",   "bench", "serve",    "router",   "fleet"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char args[128], *out = NULL;
        snprintf(args, sizeof args, "%s --no-such-flag x 2>&1 >/dev/null", cmds[i]);
        CHECK_MSG(weft_exec(args, &out) == 2, "weft %s --no-such-flag: not 2", cmds[i]);
        CHECK_MSG(out && strstr(out, "'--no-such-flag'"), "weft %s: %s", cmds[i], out ? out : "");
        free(out);
    }
}

/* weft chat reading stdin: end of input (Ctrl-D) ends it quietly; /reset
 * and /exit (nothing after /exit is read). */
/* stories260K has no chat template: a plain one (tests/data/plain-chat.jinja) */
#define PLAIN_TEMPLATE WEFT_SOURCE_DIR "/tests/data/plain-chat.jinja"

static void chat_commands(void)
{
    char args[3200], *out = NULL;
    snprintf(args, sizeof args,
             "chat -m '%s' --chat-template %s -n 4 -t 1 --temp 0 < /dev/null; printf "
             "'hello\\n/reset\\nhello\\n/exit\\nmore\\n' | %s/weft chat -m '%s' --chat-template %s -n 4 -t 1 --temp 0 "
             "2>/dev/null", stories, PLAIN_TEMPLATE, WEFT_BUILD_DIR, stories, PLAIN_TEMPLATE);
    CHECK_EQ_INT(weft_exec(args, &out), 0);
    /* two replies, the same (after /reset the conversation starts over), then nothing */
    char *nl = out ? strchr(out, '\n') : NULL;
    CHECK(nl && strchr(nl + 1, '\n') && !strchr(strchr(nl + 1, '\n') + 1, '\n'));
    if (nl && strchr(nl + 1, '\n')) CHECK(!strncmp(out, nl + 1, (size_t)(nl - out) + 1));
    free(out);
}

/* Ctrl-C (SIGINT) in weft chat stops the reply being written, not the
 * program: the next message is answered, /exit then ends it with 0. */
static void chat_sigint_stops_the_reply(void)
{
    char *model = weft_default_model_path();
    if (!model) {
        printf("SKIP: the default model is absent: chat's SIGINT case not run\n");
        return;
    }
    int in[2], outp[2];
    CHECK(pipe(in) == 0 && pipe(outp) == 0);
    char bin[1200];
    snprintf(bin, sizeof bin, "%s/weft", WEFT_BUILD_DIR);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(outp[1], 1);
        close(in[1]);
        close(outp[0]);
        execl(bin, bin, "chat", "-m", model, "-n", "2000", "-t", "1", "--temp", "0", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(outp[1]);
    const char *ask = "Write a very long story about a dragon and a knight, with many chapters.\n";
    CHECK(write(in[1], ask, strlen(ask)) == (ssize_t)strlen(ask));
    char buf[8192];
    size_t len = 0;
    ssize_t n = read(outp[0], buf, sizeof buf - 1);  /* the reply has begun */
    CHECK(n > 0);
    len = n > 0 ? (size_t)n : 0;
    kill(pid, SIGINT);
    const char *more = "Say hi.\n/exit\n";
    CHECK(write(in[1], more, strlen(more)) == (ssize_t)strlen(more));
    close(in[1]);
    while (len < sizeof buf - 1 && (n = read(outp[0], buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)n;
    buf[len] = 0;
    close(outp[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "weft chat ended with status %d", st);
    char *stopped = strstr(buf, " [stopped]\n");
    CHECK_MSG(stopped != NULL, "no stopped reply in: %.300s", buf);
    CHECK_MSG(stopped && strlen(stopped) > strlen(" [stopped]\n") + 1, "no second reply: %.300s", buf);
    free(model);
}

int main(void)
{
    snprintf(stories, sizeof stories, "%s/models/stories260K.gguf", WEFT_SHARED_DIR);
    RUN(usage_errors_exit_2);
    RUN(devices_json_lists_cpu);
    RUN(version_and_help_on_stdout);
    RUN(unknown_options_are_named);
    RUN(chat_sigint_stops_the_reply);
    if (!file_exists(stories)) {
        printf("SKIP: %s absent: model-running CLI cases not run\n", stories);
        return check_summary();
    }
    RUN(runtime_errors_exit_1_with_one_line);
    RUN(tokenize_json_gives_ids_and_pieces);
    RUN(run_json_has_every_field);
    RUN(chat_commands);
    return check_summary();
}
