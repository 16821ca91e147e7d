/* The CUDA module on a machine without the NVIDIA driver (or without a GPU):
 * it loads, reports no devices with a reason, and nothing else breaks.
 *  - in process: the "cuda" backend is found, devices() is 0 with a reason,
 *    opening cuda:0 fails with WEFT_ERR_NO_DEVICE and a message naming it;
 *  - `weft devices` prints a cuda line that says why (text and --json);
 *  - `weft run -d cpu` still works; `weft run -d cuda:0` exits 1 with a
 *    one-line `weft:` error, no crash.
 * Skipped where the module was not built, and where a CUDA device is
 * present (test_cuda and test_backend_ops cover that case). */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/module.h"
#include "tests/check.h"

static const char *model = WEFT_SHARED_DIR "/models/stories260K.gguf";

/* Run cmd through the shell; stdout+stderr into out; returns the wait status. */
static int run_cmd(const char *cmd, char *out, size_t cap)
{
    char full[1024];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *f = popen(full, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    return pclose(f);
}

static void module_loads_and_reports_no_devices(void)
{
    const struct weft_backend_iface *bi = weft_backend_find("cuda");
    CHECK_MSG(bi != NULL, "cuda backend not loaded: %s", weft_backend_unavailable("cuda"));
    if (!bi) return;
    struct weft_device_info info[4];
    const char *why = NULL;
    CHECK_EQ_INT(bi->devices(info, 4, &why), 0);
    CHECK(why && strlen(why) > 10);
    printf("  reason: %s\n", why ? why : "(none)");
    struct weft_backend *be = NULL;
    CHECK(weft_backend_open("cuda:0", 1, &be) == WEFT_ERR_NO_DEVICE);
    CHECK(be == NULL);
    CHECK(strstr(weft_last_error(), "cuda") != NULL);
    /* a second query gives the same answer (no state left half set up) */
    CHECK_EQ_INT(bi->devices(info, 4, NULL), 0);
}

static void weft_devices_names_the_reason(void)
{
    static char out[8192];
    int st = run_cmd(WEFT_BUILD_DIR "/weft devices", out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    const char *line = strstr(out, "\ncuda ");
    if (!line && !strncmp(out, "cuda ", 5)) line = out - 1;
    CHECK_MSG(line != NULL, "no cuda line in:\n%s", out);
    if (line) {
        char l[512];
        sscanf(line + 1, "%511[^\n]", l);
        printf("  %s\n", l);
        CHECK(strstr(l, "no devices:") || strstr(l, "unavailable:"));
        CHECK(strlen(l) > 30);  /* a reason follows */
    }
    st = run_cmd(WEFT_BUILD_DIR "/weft devices --json", out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    const char *j = strstr(out, "\"backend\": \"cuda\"");
    CHECK_MSG(j != NULL, "no cuda entry in: %s", out);
    if (j) {
        CHECK(strstr(j, "\"available\": false") != NULL);
        CHECK(strstr(j, "\"reason\"") != NULL);
    }
}

static void cpu_still_runs_and_cuda_fails_cleanly(void)
{
    static char out[8192];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, WEFT_BUILD_DIR "/weft run -m %s -p 'Once upon a time' -n 8 -d cpu", model);
    int st = run_cmd(cmd, out, sizeof out);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "weft run -d cpu: %s", out);
    snprintf(cmd, sizeof cmd, WEFT_BUILD_DIR "/weft run -m %s -p 'Once upon a time' -n 8 -d cuda:0", model);
    st = run_cmd(cmd, out, sizeof out);
    CHECK_MSG(!WIFSIGNALED(st), "weft run -d cuda:0 died of signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "weft run -d cuda:0: status %d: %s", st, out);
    CHECK_MSG(strstr(out, "weft:") && strstr(out, "cuda"), "unclear message: %s", out);
    printf("  %s", out);
}

int main(void)
{
    if (access(WEFT_BUILD_DIR "/libweft-cuda.so", F_OK) != 0) SKIP_ALL("libweft-cuda.so not built (WEFT_CUDA=OFF or no nvcc)");
    if (access(WEFT_BUILD_DIR "/weft", X_OK) != 0) SKIP_ALL("no weft binary in %s", WEFT_BUILD_DIR);
    if (access(model, R_OK) != 0) SKIP_ALL("no %s", model);
    const struct weft_backend_iface *bi = weft_backend_find("cuda");
    if (bi && bi->devices((struct weft_device_info[1]){0}, 1, NULL) > 0)
        SKIP_ALL("a CUDA device is present: the driverless path is not testable here (test_cuda covers the device)");
    RUN(module_loads_and_reports_no_devices);
    RUN(weft_devices_names_the_reason);
    RUN(cpu_still_runs_and_cuda_fails_cleanly);
    return check_summary();
}
