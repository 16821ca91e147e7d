/* Vulkan backend: instance (with optional validation), devices, open/close,
 * supports/run/sync, and the module entry point. Memory is vk_mem.c,
 * pipelines vk_pipeline.c, command recording vk_cmd.c, ops vk_ops.c,
 * vk_attention.c, vk_matmul.c, vk_moe.c and vk_recurrent.c. */
#if defined(__SANITIZE_ADDRESS__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* dl_iterate_phdr, RTLD_NODELETE */
#endif
#include "backends/module.h"
#include "backends/vulkan/vk_priv.h"
#include "base/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
#include <link.h>

/* Under ASan only: keep the loaded Vulkan drivers (libvulkan_*.so) mapped past
 * vkDestroyInstance. Mesa 22.3.6's lavapipe (Debian 12, +deb12u2) keeps 128
 * bytes per instance in a global and the loader then dlcloses it, so LeakSanitizer
 * reports a leak from an "<unknown module>" in every process that enumerates
 * devices -- a ten-line vkCreateInstance/vkEnumeratePhysicalDevices/
 * vkDestroyInstance program shows it. Pinned (RTLD_NOLOAD|RTLD_NODELETE promotes
 * an object that is already loaded), the driver's globals still point at what it
 * kept, and leaks in weft's own code are reported as before. */
static int pin_driver(struct dl_phdr_info *info, size_t size, void *user)
{
    (void)size;
    (void)user;
    const char *base = strrchr(info->dlpi_name, '/');
    base = base ? base + 1 : info->dlpi_name;
    if (strncmp(base, "libvulkan_", 10) == 0) (void)dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}
static void pin_drivers(void) { dl_iterate_phdr(pin_driver, NULL); }
#else
static void pin_drivers(void) {}
#endif

static const char *vk_result_str(VkResult r)
{
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult error";
    }
}

weft_status vk_result(struct vk_backend *vb, VkResult r, const char *what)
{
    if (r == VK_SUCCESS) return WEFT_OK;
    weft_status s = (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) ? WEFT_ERR_NOMEM
                                                                                           : WEFT_ERR_DEVICE;
    return weft_error(s, "vulkan%s%d: %s: %s (%d)", vb ? ":" : "", vb ? vb->index : 0, what, vk_result_str(r),
                      (int)r);
}

/* ---- validation (vulkan.validate=1; WEFT_VK_VALIDATE) ---- */

static VKAPI_ATTR VkBool32 VKAPI_CALL debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                               VkDebugUtilsMessageTypeFlagsEXT type,
                                               const VkDebugUtilsMessengerCallbackDataEXT *data, void *user)
{
    struct vk_validation *val = user;
    const char *msg = data && data->pMessage ? data->pMessage : "(no message)";
    if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
        fprintf(stderr, "vulkan validation error: %s\n", msg);
        if (val && !val->error) {
            val->error = true;
            snprintf(val->msg, sizeof val->msg, "%s", msg);
        }
    } else if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        fprintf(stderr, "vulkan validation warning: %s\n", msg);
    }
    return VK_FALSE;
}

/* vb->opt and vb->cache_dir from the open parameters; an unknown vulkan.*
 * key fails */
static weft_status read_options(struct vk_backend *vb, const struct weft_backend_params *p)
{
    static const char *const known[] = {"vulkan.exact",      "vulkan.validate",    "vulkan.profile", "vulkan.no_unified",
                                        "vulkan.no_subgroup", "vulkan.matvec_tree", "vulkan.mv_nr"};
    char bad[64];
    if (weft_opt_unknown(p->options, "vulkan.", known, sizeof known / sizeof known[0], bad, sizeof bad))
        return weft_error(WEFT_ERR_INVALID_ARG, "vulkan: unknown option '%s' (known: vulkan.exact, validate, profile, "
                          "no_unified, no_subgroup, matvec_tree, mv_nr)", bad);
    struct vk_opts *o = &vb->opt;
    char v[8];
    /* absent or empty: decided by the device (-1) */
    o->exact = weft_opt_get(p->options, "vulkan.exact", v, sizeof v) && v[0] ? weft_opt_flag(p->options, "vulkan.exact", 0)
                                                                            : -1;
    o->validate = weft_opt_flag(p->options, "vulkan.validate", false);
    o->profile = weft_opt_flag(p->options, "vulkan.profile", false);
    o->no_unified = weft_opt_flag(p->options, "vulkan.no_unified", false);
    o->no_subgroup = weft_opt_flag(p->options, "vulkan.no_subgroup", false);
    o->matvec_tree = weft_opt_flag(p->options, "vulkan.matvec_tree", false);
    o->mv_nr = (uint32_t)weft_opt_long(p->options, "vulkan.mv_nr", 1, 64, 0);
    if (p->cache_dir && *p->cache_dir) snprintf(vb->cache_dir, sizeof vb->cache_dir, "%s", p->cache_dir);
    return WEFT_OK;
}

weft_status vk_check_validation(struct vk_backend *vb)
{
    if (!vb->val || !vb->val->error) return WEFT_OK;
    vb->val->error = false;
    return weft_error(WEFT_ERR_DEVICE, "vulkan validation: %s", vb->val->msg);
}

static bool has_layer(const char *name)
{
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return false;
    VkLayerProperties *lp = calloc(n, sizeof *lp);
    bool found = false;
    if (lp && vkEnumerateInstanceLayerProperties(&n, lp) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++) found |= strcmp(lp[i].layerName, name) == 0;
    free(lp);
    return found;
}

/* A Vulkan 1.2 instance; with val != NULL, the validation layer and a
 * messenger reporting into *val. */
static weft_status make_instance(struct vk_validation *val, VkInstance *inst, VkDebugUtilsMessengerEXT *msgr)
{
    *inst = VK_NULL_HANDLE;
    if (msgr) *msgr = VK_NULL_HANDLE;
    static const char *layer = "VK_LAYER_KHRONOS_validation";
    static const char *ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    if (val && !has_layer(layer))
        return weft_error(WEFT_ERR_DEVICE, "vulkan: vulkan.validate (WEFT_VK_VALIDATE) is set but %s is not installed "
                                           "(package vulkan-validationlayers)", layer);
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "weft",
                             .pEngineName = "weft", .apiVersion = VK_API_VERSION_1_2};
    VkDebugUtilsMessengerCreateInfoEXT mci = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = debug_cb,
        .pUserData = val};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    if (val) {
        ci.enabledLayerCount = 1;
        ci.ppEnabledLayerNames = &layer;
        ci.enabledExtensionCount = 1;
        ci.ppEnabledExtensionNames = &ext;
        ci.pNext = &mci;  /* also reports during vkCreateInstance/vkDestroyInstance */
    }
    VkResult r = vkCreateInstance(&ci, NULL, inst);
    if (r != VK_SUCCESS) {
        *inst = VK_NULL_HANDLE;
        return weft_error(r == VK_ERROR_INCOMPATIBLE_DRIVER ? WEFT_ERR_NO_DEVICE : WEFT_ERR_DEVICE,
                          "vulkan: vkCreateInstance: %s (no Vulkan 1.2 driver?)", vk_result_str(r));
    }
    pin_drivers();
    if (val) {
        PFN_vkCreateDebugUtilsMessengerEXT create =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(*inst, "vkCreateDebugUtilsMessengerEXT");
        if (!create || create(*inst, &mci, NULL, msgr) != VK_SUCCESS) {
            vkDestroyInstance(*inst, NULL);
            *inst = VK_NULL_HANDLE;
            return weft_error(WEFT_ERR_DEVICE, "vulkan: cannot create the validation messenger");
        }
    }
    return WEFT_OK;
}

static bool device_has_ext(VkPhysicalDevice pd, const char *name)
{
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkExtensionProperties *ep = calloc(n, sizeof *ep);
    bool found = false;
    if (ep && vkEnumerateDeviceExtensionProperties(pd, NULL, &n, ep) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++) found |= strcmp(ep[i].extensionName, name) == 0;
    free(ep);
    return found;
}

static const char *type_str(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
    }
}

/* Device-local memory total and (with VK_EXT_memory_budget) free. */
static void device_memory(VkPhysicalDevice pd, uint64_t *total, uint64_t *free_)
{
    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 mp2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
    bool has_budget = device_has_ext(pd, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    if (has_budget) mp2.pNext = &budget;
    vkGetPhysicalDeviceMemoryProperties2(pd, &mp2);
    *total = *free_ = 0;
    for (uint32_t h = 0; h < mp2.memoryProperties.memoryHeapCount; h++) {
        if (!(mp2.memoryProperties.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) continue;
        *total += mp2.memoryProperties.memoryHeaps[h].size;
        if (has_budget)
            *free_ += budget.heapBudget[h] > budget.heapUsage[h] ? budget.heapBudget[h] - budget.heapUsage[h] : 0;
    }
}

static int vk_devices(struct weft_device_info *infos, int max, const char **why)
{
    VkInstance inst;
    if (make_instance(NULL, &inst, NULL) != WEFT_OK) {
        if (why) *why = "no Vulkan driver (vkCreateInstance failed)";
        return 0;
    }
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(inst, &n, NULL);
    VkPhysicalDevice *pds = n ? calloc(n, sizeof *pds) : NULL;
    if (!pds || vkEnumeratePhysicalDevices(inst, &n, pds) < 0) n = 0;
    for (uint32_t i = 0; i < n && (int)i < max; i++) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(pds[i], &p);
        memset(&infos[i], 0, sizeof infos[i]);
        snprintf(infos[i].name, sizeof infos[i].name, "%.90s (%s, Vulkan %u.%u)", p.deviceName,
                 type_str(p.deviceType), VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion));
        snprintf(infos[i].id, sizeof infos[i].id, "vulkan:%u", i);
        device_memory(pds[i], &infos[i].mem_total, &infos[i].mem_free);
    }
    free(pds);
    vkDestroyInstance(inst, NULL);
    if (n == 0 && why) *why = "the Vulkan loader found no device";
    return (int)n;
}

const struct vk_caps *vk_get_caps(const struct vk_backend *vb) { return &vb->caps; }
uint32_t vk_opt_mv_nr(const struct vk_backend *vb) { return vb->opt.mv_nr; }
bool vk_opt_matvec_tree(const struct vk_backend *vb) { return vb->opt.matvec_tree; }

bool vk_exact_ops(const struct vk_backend *vb)
{
    if (!vb->caps.fp64) return false;
    if (vb->opt.exact >= 0) return vb->opt.exact != 0;
    return vb->caps.cpu_device;
}

static void vk_close(struct weft_backend *b)
{
    struct vk_backend *vb = (struct vk_backend *)b;
    if (!vb) return;
    if (vb->dev) {
        vk_wait_idle(vb);
        vkDeviceWaitIdle(vb->dev);
        if (vb->profile) vk_profile_print(vb);
        vk_cmd_free(vb);
        vk_pipelines_free(vb);
        for (int i = 0; i < VK_ROPE_TABS; i++)
            if (vb->rope_tabs[i].buf) vk_buffer_destroy_now(vb->rope_tabs[i].buf);
        if (vb->gelu_tab) vk_buffer_destroy_now(vb->gelu_tab);
        vk_mem_free_all(vb);
        vkDestroyDevice(vb->dev, NULL);
    }
    if (vb->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT destroy =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(vb->inst, "vkDestroyDebugUtilsMessengerEXT");
        if (destroy) destroy(vb->inst, vb->messenger, NULL);
    }
    if (vb->inst) vkDestroyInstance(vb->inst, NULL);
    free(vb->val);
    free(vb);
}

static const struct weft_backend_iface vk_iface;

/* Features we use when present; the caps say which were enabled. */
static weft_status create_device(struct vk_backend *vb)
{
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &f11};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(vb->pd, &f2);
    VkPhysicalDeviceVulkan11Properties p11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &p11};
    vkGetPhysicalDeviceProperties2(vb->pd, &p2);

    struct vk_caps *c = &vb->caps;
    const bool compute_sg = (p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
    c->subgroup_size = p11.subgroupSize;
    c->subgroup_arith = compute_sg && (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    c->subgroup_shuffle = compute_sg && (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    if (vb->opt.no_subgroup) c->subgroup_arith = c->subgroup_shuffle = false;  /* tests the fallbacks */
    c->fp16_arith = f12.shaderFloat16;
    c->storage16 = f11.storageBuffer16BitAccess;
    c->storage8 = f12.storageBuffer8BitAccess;
    c->int8_arith = f12.shaderInt8;
    c->max_workgroup_invocations = vb->props.limits.maxComputeWorkGroupInvocations;
    for (int i = 0; i < 3; i++) c->max_workgroup_count[i] = vb->props.limits.maxComputeWorkGroupCount[i];
    c->max_shared_bytes = vb->props.limits.maxComputeSharedMemorySize;
    c->max_storage_range = vb->props.limits.maxStorageBufferRange;
    c->cpu_device = vb->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    c->fp64 = f2.features.shaderFloat64;

    VkPhysicalDeviceVulkan11Features e11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .storageBuffer16BitAccess = f11.storageBuffer16BitAccess};
    VkPhysicalDeviceVulkan12Features e12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &e11,
                                            .shaderFloat16 = f12.shaderFloat16,
                                            .shaderInt8 = f12.shaderInt8,
                                            .storageBuffer8BitAccess = f12.storageBuffer8BitAccess};
    VkPhysicalDeviceFeatures2 e2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &e12};
    e2.features.shaderInt16 = f2.features.shaderInt16;
    e2.features.shaderInt64 = f2.features.shaderInt64;
    e2.features.shaderFloat64 = f2.features.shaderFloat64;

    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(vb->pd, &nq, NULL);
    VkQueueFamilyProperties qf[16];
    if (nq > 16) nq = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(vb->pd, &nq, qf);
    int fam = -1;
    for (uint32_t i = 0; i < nq && fam < 0; i++)  /* a compute queue that can time stamps, if any */
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && qf[i].timestampValidBits) fam = (int)i;
    for (uint32_t i = 0; i < nq && fam < 0; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) fam = (int)i;
    if (fam < 0) return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan:%d: no compute queue", vb->index);
    vb->qfam = (uint32_t)fam;
    if (vb->profile && !qf[fam].timestampValidBits) {
        fprintf(stderr, "vulkan:%d: vulkan.profile: the compute queue has no timestamps; profiling off\n", vb->index);
        vb->profile = false;
    }

    const char *exts[2];
    uint32_t n_ext = 0;
    if (device_has_ext(vb->pd, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME)) exts[n_ext++] = VK_EXT_MEMORY_BUDGET_EXTENSION_NAME;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = vb->qfam,
                                   .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &e2, .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci, .enabledExtensionCount = n_ext,
                              .ppEnabledExtensionNames = exts};
    VkResult r = vkCreateDevice(vb->pd, &dci, NULL, &vb->dev);
    if (r != VK_SUCCESS) {
        vb->dev = VK_NULL_HANDLE;
        return vk_result(vb, r, "vkCreateDevice");
    }
    vkGetDeviceQueue(vb->dev, vb->qfam, 0, &vb->queue);
    return WEFT_OK;
}

static weft_status vk_open(const struct weft_backend_params *p, struct weft_backend **out)
{
    *out = NULL;
    struct vk_backend *vb = calloc(1, sizeof *vb);
    if (!vb) return weft_error(WEFT_ERR_NOMEM, "vulkan: out of memory");
    vb->base.iface = &vk_iface;
    vb->index = p->device;
    vb->cur_kind = -1;
    weft_status st = read_options(vb, p);
    if (st != WEFT_OK) { free(vb); return st; }
    vb->profile = vb->opt.profile;
    if (vb->opt.validate) {
        vb->val = calloc(1, sizeof *vb->val);
        if (!vb->val) { free(vb); return weft_error(WEFT_ERR_NOMEM, "vulkan: out of memory"); }
        vb->val->enabled = true;
    }
    if ((st = make_instance(vb->val, &vb->inst, vb->val ? &vb->messenger : NULL)) != WEFT_OK) goto err;
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(vb->inst, &n, NULL);
    VkPhysicalDevice pds[16];
    if (n > 16) n = 16;
    if (n) vkEnumeratePhysicalDevices(vb->inst, &n, pds);
    if (p->device < 0 || (uint32_t)p->device >= n) {
        st = weft_error(WEFT_ERR_NO_DEVICE, "vulkan: no device %d (%u found)", p->device, n);
        goto err;
    }
    vb->pd = pds[p->device];
    vkGetPhysicalDeviceProperties(vb->pd, &vb->props);
    vkGetPhysicalDeviceMemoryProperties(vb->pd, &vb->memprops);
    if (vb->props.apiVersion < VK_API_VERSION_1_2) {
        st = weft_error(WEFT_ERR_UNSUPPORTED, "vulkan:%d: %s supports Vulkan %u.%u; weft needs 1.2", p->device,
                        vb->props.deviceName, VK_API_VERSION_MAJOR(vb->props.apiVersion),
                        VK_API_VERSION_MINOR(vb->props.apiVersion));
        goto err;
    }
    if ((st = create_device(vb)) != WEFT_OK) goto err;
    if ((st = vk_mem_init(vb)) != WEFT_OK) goto err;
    if ((st = vk_cmd_init(vb)) != WEFT_OK) goto err;
    if ((st = vk_pipelines_init(vb)) != WEFT_OK) goto err;
    if ((st = vk_check_validation(vb)) != WEFT_OK) goto err;
    *out = &vb->base;
    return WEFT_OK;
err:
    vk_close(&vb->base);
    return st;
}

size_t vk_buffer_size(const struct weft_buffer *buf) { return buf->size; }

bool vk_view_ok(const struct weft_view *v)
{
    if (!v->buf || v->ne0 <= 0 || v->ne1 <= 0) return false;
    const struct weft_type_info *ti = weft_type_get(v->type);
    if (!ti || v->ne0 % ti->block_size) return false;
    size_t row = weft_row_size(v->type, v->ne0);
    if (v->nb1 < row && v->ne1 > 1) return false;
    size_t end = v->offset + (size_t)(v->ne1 - 1) * v->nb1 + row;
    return end <= v->buf->size;
}

static bool vk_supports(struct weft_backend *b, const struct weft_op *op)
{
    struct vk_backend *vb = (struct vk_backend *)b;
    switch (op->kind) {
    case WEFT_OP_MATMUL:
    case WEFT_OP_LOGITS: return vk_matmul_supports(vb, op);
    case WEFT_OP_ROPE_KV:
    case WEFT_OP_ATTENTION: return vk_attention_supports(vb, op);
    case WEFT_OP_MOE_ROUTE:
    case WEFT_OP_MATMUL_ID: return vk_moe_supports(vb, op);
    case WEFT_OP_SSM_CONV:
    case WEFT_OP_DELTA_NET: return vk_recurrent_supports(vb, op);
    case WEFT_OP_COPY: {
        const struct weft_op_copy *c = &op->u.copy;
        return c->src && c->dst && c->src_off <= c->src->size && c->bytes <= c->src->size - c->src_off &&
               c->dst_off <= c->dst->size && c->bytes <= c->dst->size - c->dst_off;
    }
    default: return vk_ops_supports(vb, op);
    }
}

static weft_status run_one(struct vk_backend *vb, const struct weft_op *op)
{
    switch (op->kind) {
    case WEFT_OP_EMBED: return vk_op_embed(vb, op);
    case WEFT_OP_RMSNORM: return vk_op_rmsnorm(vb, op);
    case WEFT_OP_MATMUL: return vk_op_matmul(vb, op);
    case WEFT_OP_ROPE_KV: return vk_op_rope_kv(vb, op);
    case WEFT_OP_ATTENTION: return vk_op_attention(vb, op);
    case WEFT_OP_SILU_MUL: return vk_op_silu_mul(vb, op);
    case WEFT_OP_ADD: return vk_op_add(vb, op);
    case WEFT_OP_COPY:
        return vk_record_copy(vb, op->u.copy.dst, op->u.copy.dst_off, op->u.copy.src, op->u.copy.src_off,
                              op->u.copy.bytes);
    case WEFT_OP_LOGITS: return vk_op_logits(vb, op);
    case WEFT_OP_MOE_ROUTE: return vk_op_moe_route(vb, op);
    case WEFT_OP_MATMUL_ID: return vk_op_matmul_id(vb, op);
    case WEFT_OP_SSM_CONV: return vk_op_ssm_conv(vb, op);
    case WEFT_OP_DELTA_NET: return vk_op_delta_net(vb, op);
    default: return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan: unknown op kind %d", (int)op->kind);
    }
}

/* The whole list goes into one command buffer and one submit. Ops are
 * checked first, so a refused op leaves nothing run; an op failing while
 * recording leaves the ops before it submitted; a validation error while
 * recording (vulkan.validate) submits nothing. */
static weft_status vk_run(struct weft_backend *b, const struct weft_op *ops, size_t n)
{
    struct vk_backend *vb = (struct vk_backend *)b;
    weft_status st = vk_check_validation(vb);
    if (st != WEFT_OK) return st;
    for (size_t i = 0; i < n; i++)
        if (!vk_supports(b, &ops[i]))
            return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan:%d: op %zu (kind %d) not supported with these "
                                                    "types/shapes", vb->index, i, (int)ops[i].kind);
    if (n == 0) return WEFT_OK;
    /* tables uploaded before recording (an upload may use the command buffer) */
    for (size_t i = 0; i < n; i++)
        if (ops[i].kind == WEFT_OP_SILU_MUL && ops[i].u.silu_mul.act == WEFT_GLU_GELU_TANH &&
            (st = vk_gelu_table(vb)) != WEFT_OK)
            return st;
    /* recurrent ops' slots inside their state, or nothing runs (the CPU's check) */
    if ((st = vk_recurrent_check_slots(vb, ops, n)) != WEFT_OK) return st;
    if ((st = vk_step_begin(vb)) != WEFT_OK) return st;
    for (size_t i = 0; i < n && st == WEFT_OK; i++) {
        vk_op_begin(vb, (int)ops[i].kind);
        st = run_one(vb, &ops[i]);
        vk_op_end(vb);
    }
    if (vb->val && vb->val->error) {
        /* recording broke a rule: running it could fault the device */
        vk_step_abort(vb);
        return vk_check_validation(vb);
    }
    weft_status st2 = vk_step_submit(vb);
    if (st == WEFT_OK) st = st2;
    if (st == WEFT_OK) st = vk_check_validation(vb);
    return st;
}

static weft_status vk_sync(struct weft_backend *b)
{
    struct vk_backend *vb = (struct vk_backend *)b;
    weft_status st = vk_wait_idle(vb);
    weft_status st2 = vk_check_validation(vb);
    return st != WEFT_OK ? st : st2;
}

static uint64_t vk_max_buffer(struct weft_backend *b)
{
    return vk_get_caps((struct vk_backend *)b)->max_storage_range & ~(uint64_t)255;
}

static const struct weft_backend_iface vk_iface = {
    .api_version = WEFT_BACKEND_API_VERSION,
    .name = "vulkan",
    .devices = vk_devices,
    .open = vk_open,
    .close = vk_close,
    .buffer_alloc = vk_buffer_alloc,
    .buffer_free = vk_buffer_free,
    .buffer_write = vk_buffer_write,
    .buffer_read = vk_buffer_read,
    .buffer_copy = vk_buffer_copy,
    .supports = vk_supports,
    .run = vk_run,
    .sync = vk_sync,
    .max_buffer = vk_max_buffer,
};

WEFT_MODULE_EXPORT const struct weft_backend_iface *weft_backend_module_init(const struct weft_module_host *host,
                                                                           const char **why)
{
    if (!host || host->abi != WEFT_MODULE_ABI) {
        if (why) *why = "module ABI mismatch";
        return NULL;
    }
    weft_module_host_ = host;
    return &vk_iface;
}
