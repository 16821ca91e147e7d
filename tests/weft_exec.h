/* Run the built `weft` CLI from a test and parse its --json output. */
#ifndef WEFT_TEST_EXEC_H
#define WEFT_TEST_EXEC_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#ifndef WEFT_BUILD_DIR
#define WEFT_BUILD_DIR "build"
#endif
#ifndef WEFT_SHARED_DIR
#define WEFT_SHARED_DIR "../shared"
#endif
#ifndef WEFT_EXEC_PREFIX
#define WEFT_EXEC_PREFIX "" /* a cross build's emulator (qemu-aarch64-static), one word */
#endif

static inline bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Run `weft ARGS` (ARGS already shell-quoted), capture stdout (up to 16 MiB)
 * into *out (malloc'd). Returns the exit status, -1 if it could not run. */
static inline int weft_exec(const char *args, char **out)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s%s%s/weft %s", WEFT_EXEC_PREFIX, WEFT_EXEC_PREFIX[0] ? " " : "", WEFT_BUILD_DIR,
             args);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (len + 1 == cap && cap < (16u << 20)) buf = realloc(buf, cap *= 2);
    }
    int st = pclose(f);
    if (buf) buf[len] = '\0';
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Run and parse the JSON object weft printed; NULL (with a message) on failure. */
static inline json_t *weft_exec_json(const char *args)
{
    char *out = NULL;
    int rc = weft_exec(args, &out);
    json_error_t err;
    json_t *j = rc == 0 && out ? json_loads(out, 0, &err) : NULL;
    if (!j) fprintf(stderr, "weft %s: exit %d, output: %.300s\n", args, rc, out ? out : "(none)");
    free(out);
    return j;
}

#endif
