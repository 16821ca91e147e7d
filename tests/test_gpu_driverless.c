/* A GPU module (WEFT_TEST_GPU=cuda|hip; ctest runs both) on a machine without
 * its driver (or without its GPU): it loads, reports no devices with a
 * reason, and nothing else breaks.
 *  - in process: the backend is found, devices() is 0 with a reason, opening
 *    GPU:0 fails with WEFT_ERR_NO_DEVICE and a message naming the backend;
 *  - `weft devices` prints its line saying why (text and --json);
 *  - `weft run -d cpu` still works; `weft run -d GPU:0` exits 1 with a
 *    one-line `weft:` error, no crash;
 *  - HIP: the nvcc build of the same sources (libweft-hip-nvcc.so, when
 *    built), installed as libweft-hip.so in a folder named by
 *    WEFT_MODULE_PATH, is the one loaded and also answers without a driver.
 * Skipped where the module was not built, and where a device is present
 * (test_gpu_kernels and test_backend_ops cover that case). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/module.h"
#include "tests/check.h"

static const char *model = WEFT_SHARED_DIR "/models/stories260K.gguf";
static char gpu[16] = "cuda", dev0[32] = "cuda:0";

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

/* the "GPU ..." line of `weft devices` output, copied into l; false if none */
static bool gpu_line(const char *out, char *l, size_t cap)
{
    char key[24];
    snprintf(key, sizeof key, "\n%s ", gpu);
    const char *line = strstr(out, key);
    if (!line && !strncmp(out, key + 1, strlen(key + 1))) line = out - 1;
    if (!line) return false;
    snprintf(l, cap, "%.*s", (int)strcspn(line + 1, "\n"), line + 1);
    return true;
}

static void module_loads_and_reports_no_devices(void)
{
    const struct weft_backend_iface *bi = weft_backend_find(gpu);
    CHECK_MSG(bi != NULL, "%s backend not loaded: %s", gpu, weft_backend_unavailable(gpu));
    if (!bi) return;
    CHECK(!strcmp(bi->name, gpu));
    struct weft_device_info info[4];
    const char *why = NULL;
    CHECK_EQ_INT(bi->devices(info, 4, &why), 0);
    CHECK(why && strlen(why) > 10);
    printf("  reason: %s\n", why ? why : "(none)");
    struct weft_backend *be = NULL;
    CHECK(weft_backend_open(dev0, 1, &be) == WEFT_ERR_NO_DEVICE);
    CHECK(be == NULL);
    CHECK(strstr(weft_last_error(), gpu) != NULL);
    printf("  open %s: %s\n", dev0, weft_last_error());
    /* a second query gives the same answer (no state left half set up) */
    CHECK_EQ_INT(bi->devices(info, 4, NULL), 0);
}

static void weft_devices_names_the_reason(void)
{
    static char out[8192];
    char l[512];
    int st = run_cmd(WEFT_BUILD_DIR "/weft devices", out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_MSG(gpu_line(out, l, sizeof l), "no %s line in:\n%s", gpu, out);
    printf("  %s\n", l);
    CHECK(strstr(l, "no devices:") || strstr(l, "unavailable:"));
    CHECK(strlen(l) > 30);  /* a reason follows */
    CHECK(strstr(out, "\ncpu ") || !strncmp(out, "cpu ", 4));
    st = run_cmd(WEFT_BUILD_DIR "/weft devices --json", out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char key[48];
    snprintf(key, sizeof key, "\"backend\": \"%s\"", gpu);
    const char *j = strstr(out, key);
    CHECK_MSG(j != NULL, "no %s entry in: %s", gpu, out);
    if (j) {
        CHECK(strstr(j, "\"available\": false") != NULL);
        CHECK(strstr(j, "\"reason\"") != NULL);
    }
}

static void cpu_still_runs_and_the_gpu_fails_cleanly(void)
{
    static char out[8192];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, WEFT_BUILD_DIR "/weft run -m %s -p 'Once upon a time' -n 8 -d cpu", model);
    int st = run_cmd(cmd, out, sizeof out);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "weft run -d cpu: %s", out);
    snprintf(cmd, sizeof cmd, WEFT_BUILD_DIR "/weft run -m %s -p 'Once upon a time' -n 8 -d %s", model, dev0);
    st = run_cmd(cmd, out, sizeof out);
    CHECK_MSG(!WIFSIGNALED(st), "weft run -d %s died of signal %d", dev0, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "weft run -d %s: status %d: %s", dev0, st, out);
    CHECK_MSG(strstr(out, "weft:") && strstr(out, gpu), "unclear message: %s", out);
    CHECK_MSG(strchr(out, '\n') == out + strlen(out) - 1, "more than one line: %s", out);
    printf("  %s", out);
}

/* The nvcc build, renamed libweft-hip.so in a folder ahead of the build
 * folder on WEFT_MODULE_PATH: `weft devices` must show that one (its reason
 * names the nvcc build), with or without an NVIDIA driver. */
static void nvcc_build_loads_as_the_hip_module(void)
{
    if (strcmp(gpu, "hip") != 0) return;
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
    CHECK_MSG(gpu_line(out, l, sizeof l), "no hip line in:\n%s", out);
    printf("  %s\n", l);
    /* no NVIDIA driver: the reason names the nvcc build; with one: hip:0 is listed */
    CHECK_MSG(strstr(l, "nvcc build") || strstr(out, "hip:0"), "not the nvcc module: %s", l);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    const char *g = getenv("WEFT_TEST_GPU");
    if (g && *g) snprintf(gpu, sizeof gpu, "%s", g);
    if (strcmp(gpu, "cuda") && strcmp(gpu, "hip")) SKIP_ALL("WEFT_TEST_GPU must be cuda or hip, not '%s'", gpu);
    snprintf(dev0, sizeof dev0, "%s:0", gpu);
    char lib[256];
    snprintf(lib, sizeof lib, WEFT_BUILD_DIR "/libweft-%s.so", gpu);
    if (access(lib, F_OK) != 0) SKIP_ALL("%s not built (WEFT_%s=OFF or no compiler)", lib, strcmp(gpu, "hip") ? "CUDA" : "HIP");
    if (access(WEFT_BUILD_DIR "/weft", X_OK) != 0) SKIP_ALL("no weft binary in %s", WEFT_BUILD_DIR);
    if (access(model, R_OK) != 0) SKIP_ALL("no %s", model);
    const struct weft_backend_iface *bi = weft_backend_find(gpu);
    if (bi && bi->devices((struct weft_device_info[1]){0}, 1, NULL) > 0)
        SKIP_ALL("a %s device is present: the driverless path is not testable here (test_gpu_kernels covers the device)", gpu);
    RUN(module_loads_and_reports_no_devices);
    RUN(weft_devices_names_the_reason);
    RUN(cpu_still_runs_and_the_gpu_fails_cleanly);
    RUN(nvcc_build_loads_as_the_hip_module);
    return check_summary();
}
