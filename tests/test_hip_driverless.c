/* The HIP module on a machine without ROCm's driver (or without an AMD GPU):
 * it loads, reports no devices with a reason, and nothing else breaks.
 *  - in process: the "hip" backend is found, devices() is 0 with a reason,
 *    opening hip:0 fails with WEFT_ERR_NO_DEVICE and a message naming hip;
 *  - `weft devices` prints a hip line that says why (text and --json);
 *  - `weft run -d cpu` still works; `weft run -d hip:0` exits 1 with a
 *    one-line `weft:` error, no crash;
 *  - the nvcc build of the same sources (libweft-hip-nvcc.so, when built),
 *    installed as libweft-hip.so in a folder named by WEFT_MODULE_PATH,
 *    is the one loaded and also answers without a driver.
 * Skipped where the module was not built, and where a HIP device is
 * present (test_hip and test_backend_ops cover that case). */
#include <stdio.h>
#include <stdlib.h>
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
    char full[2048];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *f = popen(full, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    return pclose(f);
}

/* the "hip ..." line of `weft devices` output, copied into l; false if none */
static bool hip_line(const char *out, char *l, size_t cap)
{
    const char *line = strstr(out, "\nhip ");
    if (!line && !strncmp(out, "hip ", 4)) line = out - 1;
    if (!line) return false;
    snprintf(l, cap, "%.*s", (int)strcspn(line + 1, "\n"), line + 1);
    return true;
}

static void module_loads_and_reports_no_devices(void)
{
    const struct weft_backend_iface *bi = weft_backend_find("hip");
    CHECK_MSG(bi != NULL, "hip backend not loaded: %s", weft_backend_unavailable("hip"));
    if (!bi) return;
    CHECK(!strcmp(bi->name, "hip"));
    struct weft_device_info info[4];
    const char *why = NULL;
    CHECK_EQ_INT(bi->devices(info, 4, &why), 0);
    CHECK(why && strlen(why) > 10);
    printf("  reason: %s\n", why ? why : "(none)");
    struct weft_backend *be = NULL;
    CHECK(weft_backend_open("hip:0", 1, &be) == WEFT_ERR_NO_DEVICE);
    CHECK(be == NULL);
    CHECK(strstr(weft_last_error(), "hip") != NULL);
    printf("  open hip:0: %s\n", weft_last_error());
    /* a second query gives the same answer (no state left half set up) */
    CHECK_EQ_INT(bi->devices(info, 4, NULL), 0);
}

static void weft_devices_names_the_reason(void)
{
    static char out[8192];
    char l[512];
    int st = run_cmd(WEFT_BUILD_DIR "/weft devices", out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_MSG(hip_line(out, l, sizeof l), "no hip line in:\n%s", out);
    printf("  %s\n", l);
    CHECK(strstr(l, "no devices:") || strstr(l, "unavailable:"));
    CHECK(strlen(l) > 30);  /* a reason follows */
    CHECK(strstr(out, "\ncpu ") || !strncmp(out, "cpu ", 4));
    st = run_cmd(WEFT_BUILD_DIR "/weft devices --json", out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    const char *j = strstr(out, "\"backend\": \"hip\"");
    CHECK_MSG(j != NULL, "no hip entry in: %s", out);
    if (j) {
        CHECK(strstr(j, "\"available\": false") != NULL);
        CHECK(strstr(j, "\"reason\"") != NULL);
    }
}

static void cpu_still_runs_and_hip_fails_cleanly(void)
{
    static char out[8192];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, WEFT_BUILD_DIR "/weft run -m %s -p 'Once upon a time' -n 8 -d cpu", model);
    int st = run_cmd(cmd, out, sizeof out);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "weft run -d cpu: %s", out);
    snprintf(cmd, sizeof cmd, WEFT_BUILD_DIR "/weft run -m %s -p 'Once upon a time' -n 8 -d hip:0", model);
    st = run_cmd(cmd, out, sizeof out);
    CHECK_MSG(!WIFSIGNALED(st), "weft run -d hip:0 died of signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "weft run -d hip:0: status %d: %s", st, out);
    CHECK_MSG(strstr(out, "weft:") && strstr(out, "hip"), "unclear message: %s", out);
    CHECK_MSG(strchr(out, '\n') == out + strlen(out) - 1, "more than one line: %s", out);
    printf("  %s", out);
}

/* The nvcc build, renamed libweft-hip.so in a folder ahead of the build
 * folder on WEFT_MODULE_PATH: `weft devices` must show that one (its reason
 * names the nvcc build), with or without an NVIDIA driver. */
static void nvcc_build_loads_as_the_hip_module(void)
{
    if (access(WEFT_BUILD_DIR "/libweft-hip-nvcc.so", R_OK) != 0) {
        printf("  (no libweft-hip-nvcc.so in this build: WEFT_HIP_NVCC is OFF, or ON and libweft-hip.so is that build, or no nvcc)\n");
        return;
    }
    char dir[] = "/tmp/weft-hip-nvcc-XXXXXX", cmd[1024];
    static char out[8192];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(cmd, sizeof cmd, "cp " WEFT_BUILD_DIR "/libweft-hip-nvcc.so %s/libweft-hip.so", dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "WEFT_MODULE_PATH=%s " WEFT_BUILD_DIR "/weft devices", dir);
    int st = run_cmd(cmd, out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char l[512];
    CHECK_MSG(hip_line(out, l, sizeof l), "no hip line in:\n%s", out);
    printf("  %s\n", l);
    /* no NVIDIA driver: the reason names the nvcc build; with one: hip:0 is listed */
    CHECK_MSG(strstr(l, "nvcc build") || strstr(out, "hip:0"), "not the nvcc module: %s", l);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    if (access(WEFT_BUILD_DIR "/libweft-hip.so", F_OK) != 0) SKIP_ALL("libweft-hip.so not built (WEFT_HIP=OFF or no hipcc)");
    if (access(WEFT_BUILD_DIR "/weft", X_OK) != 0) SKIP_ALL("no weft binary in %s", WEFT_BUILD_DIR);
    if (access(model, R_OK) != 0) SKIP_ALL("no %s", model);
    const struct weft_backend_iface *bi = weft_backend_find("hip");
    if (bi && bi->devices((struct weft_device_info[1]){0}, 1, NULL) > 0)
        SKIP_ALL("a HIP device is present: the driverless path is not testable here (test_hip covers the device)");
    RUN(module_loads_and_reports_no_devices);
    RUN(weft_devices_names_the_reason);
    RUN(cpu_still_runs_and_hip_fails_cleanly);
    RUN(nvcc_build_loads_as_the_hip_module);
    return check_summary();
}
