/* Compute pipelines from the embedded SPIR-V (vk_spirv_data.c), created on
 * first use and kept for the device's lifetime, with an on-disk
 * VkPipelineCache: $WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft, else
 * ~/.cache/weft, one file per device (vendor, device id, cache UUID).
 * Failing to read or write that file only costs compile time. */
#include "backends/vulkan/vk_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VK_MAX_SPEC 4

struct vk_pipeline {
    char name[96];
    uint32_t n_bind, push_bytes, n_spec, spec[VK_MAX_SPEC];
    VkShaderModule module;
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkPipeline pipe;
};

VkPipeline vk_pipeline_handle(const struct vk_pipeline *p) { return p->pipe; }
VkPipelineLayout vk_pipeline_layout(const struct vk_pipeline *p) { return p->layout; }
VkDescriptorSetLayout vk_pipeline_set_layout(const struct vk_pipeline *p) { return p->set_layout; }

static void mkdirs(char *path)
{
    for (char *s = path + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(path, 0755);
            *s = '/';
        }
    mkdir(path, 0755);
}

static void cache_path(struct vk_backend *vb)
{
    const char *dir = vb->cache_dir;   /* the open parameters' cache_dir */
    if (!dir[0]) return;
    char uuid[33];
    for (int i = 0; i < 16; i++) snprintf(uuid + 2 * i, 3, "%02x", vb->props.pipelineCacheUUID[i]);
    snprintf(vb->pcache_path, sizeof vb->pcache_path, "%s/vk-%04x-%04x-%s.bin", dir, vb->props.vendorID,
             vb->props.deviceID, uuid);
}

/* The cache file's bytes if its header names this device, else NULL. */
static void *cache_load(struct vk_backend *vb, size_t *size)
{
    *size = 0;
    if (!vb->pcache_path[0]) return NULL;
    FILE *f = fopen(vb->pcache_path, "rb");
    if (!f) return NULL;
    void *data = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 32 && n < (1l << 30) && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n)) &&
        fread(data, 1, (size_t)n, f) == (size_t)n) {
        uint32_t hdr[4];
        memcpy(hdr, data, sizeof hdr);
        if (hdr[0] >= 32 && hdr[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE && hdr[2] == vb->props.vendorID &&
            hdr[3] == vb->props.deviceID &&
            memcmp((uint8_t *)data + 16, vb->props.pipelineCacheUUID, VK_UUID_SIZE) == 0) {
            *size = (size_t)n;
            fclose(f);
            return data;
        }
    }
    free(data);
    fclose(f);
    return NULL;
}

static void cache_save(struct vk_backend *vb)
{
    if (!vb->pcache || !vb->pcache_path[0]) return;
    size_t n = 0;
    if (vkGetPipelineCacheData(vb->dev, vb->pcache, &n, NULL) != VK_SUCCESS || n == 0) return;
    void *data = malloc(n);
    if (!data) return;
    if (vkGetPipelineCacheData(vb->dev, vb->pcache, &n, data) == VK_SUCCESS) {
        char dir[1024], tmp[1100];
        snprintf(dir, sizeof dir, "%s", vb->pcache_path);
        char *slash = strrchr(dir, '/');
        if (slash) {
            *slash = 0;
            mkdirs(dir);
        }
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", vb->pcache_path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        if (f) {
            bool ok = fwrite(data, 1, n, f) == n;
            ok &= fclose(f) == 0;
            if (!ok || rename(tmp, vb->pcache_path) != 0) remove(tmp);
        }
    }
    free(data);
}

weft_status vk_pipelines_init(struct vk_backend *vb)
{
    cache_path(vb);
    size_t n = 0;
    void *data = cache_load(vb, &n);
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO, .initialDataSize = n,
                                    .pInitialData = data};
    VkResult r = vkCreatePipelineCache(vb->dev, &ci, NULL, &vb->pcache);
    if (r != VK_SUCCESS && data) {  /* a cache the driver refuses: start empty */
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        r = vkCreatePipelineCache(vb->dev, &ci, NULL, &vb->pcache);
    }
    free(data);
    if (r != VK_SUCCESS) vb->pcache = VK_NULL_HANDLE;  /* harmless: no cache */
    return WEFT_OK;
}

static void pipeline_destroy(struct vk_backend *vb, struct vk_pipeline *p)
{
    if (p->pipe) vkDestroyPipeline(vb->dev, p->pipe, NULL);
    if (p->layout) vkDestroyPipelineLayout(vb->dev, p->layout, NULL);
    if (p->set_layout) vkDestroyDescriptorSetLayout(vb->dev, p->set_layout, NULL);
    if (p->module) vkDestroyShaderModule(vb->dev, p->module, NULL);
    free(p);
}

void vk_pipelines_free(struct vk_backend *vb)
{
    cache_save(vb);
    for (uint32_t i = 0; i < vb->n_pipes; i++) pipeline_destroy(vb, vb->pipes[i]);
    free(vb->pipes);
    vb->pipes = NULL;
    vb->n_pipes = vb->cap_pipes = 0;
    if (vb->pcache) vkDestroyPipelineCache(vb->dev, vb->pcache, NULL);
    vb->pcache = VK_NULL_HANDLE;
}

static bool same_key(const struct vk_pipeline *p, const char *name, uint32_t n_bind, uint32_t push_bytes,
                     const uint32_t *spec, uint32_t n_spec)
{
    return p->n_bind == n_bind && p->push_bytes == push_bytes && p->n_spec == n_spec &&
           (n_spec == 0 || memcmp(p->spec, spec, n_spec * sizeof *spec) == 0) && strcmp(p->name, name) == 0;
}

struct vk_pipeline *vk_pipeline_get(struct vk_backend *vb, const char *name, uint32_t n_bind, uint32_t push_bytes,
                                    const uint32_t *spec, uint32_t n_spec)
{
    for (uint32_t i = 0; i < vb->n_pipes; i++)
        if (same_key(vb->pipes[i], name, n_bind, push_bytes, spec, n_spec)) return vb->pipes[i];
    if (n_spec > VK_MAX_SPEC || push_bytes > 128 || strlen(name) >= sizeof(((struct vk_pipeline *)0)->name)) {
        weft_error(WEFT_ERR_INVALID_ARG, "vulkan: pipeline %s: bad parameters", name);
        return NULL;
    }
    size_t bytes = 0;
    const uint32_t *code = vk_spirv_find(name, &bytes);
    if (!code) {
        weft_error(WEFT_ERR_NOT_FOUND, "vulkan: no shader named %s in this build", name);
        return NULL;
    }
    if (vb->n_pipes == vb->cap_pipes) {
        uint32_t cap = vb->cap_pipes ? vb->cap_pipes * 2 : 32;
        struct vk_pipeline **pp = realloc(vb->pipes, cap * sizeof *pp);
        if (!pp) {
            weft_error(WEFT_ERR_NOMEM, "vulkan: out of host memory");
            return NULL;
        }
        vb->pipes = pp;
        vb->cap_pipes = cap;
    }
    struct vk_pipeline *p = calloc(1, sizeof *p);
    if (!p) {
        weft_error(WEFT_ERR_NOMEM, "vulkan: out of host memory");
        return NULL;
    }
    snprintf(p->name, sizeof p->name, "%s", name);
    p->n_bind = n_bind;
    p->push_bytes = push_bytes;
    p->n_spec = n_spec;
    if (n_spec) memcpy(p->spec, spec, n_spec * sizeof *spec);

    VkResult r;
    const char *what = "vkCreateShaderModule";
    VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = bytes,
                                     .pCode = code};
    if ((r = vkCreateShaderModule(vb->dev, &smci, NULL, &p->module)) != VK_SUCCESS) goto err;
    VkDescriptorSetLayoutBinding binds[16];
    if (n_bind > 16) {
        r = VK_ERROR_TOO_MANY_OBJECTS;
        what = "more than 16 bindings";
        goto err;
    }
    for (uint32_t i = 0; i < n_bind; i++)
        binds[i] = (VkDescriptorSetLayoutBinding){.binding = i, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                  .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dlci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                            .bindingCount = n_bind, .pBindings = binds};
    what = "vkCreateDescriptorSetLayout";
    if ((r = vkCreateDescriptorSetLayout(vb->dev, &dlci, NULL, &p->set_layout)) != VK_SUCCESS) goto err;
    VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                       .pSetLayouts = &p->set_layout, .pushConstantRangeCount = push_bytes ? 1 : 0,
                                       .pPushConstantRanges = &pcr};
    what = "vkCreatePipelineLayout";
    if ((r = vkCreatePipelineLayout(vb->dev, &plci, NULL, &p->layout)) != VK_SUCCESS) goto err;
    VkSpecializationMapEntry map[VK_MAX_SPEC];
    for (uint32_t i = 0; i < n_spec; i++) map[i] = (VkSpecializationMapEntry){i, i * 4, 4};
    VkSpecializationInfo si = {n_spec, map, n_spec * 4, p->spec};
    VkComputePipelineCreateInfo cpci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = p->module, .pName = "main", .pSpecializationInfo = n_spec ? &si : NULL},
        .layout = p->layout};
    what = "vkCreateComputePipelines";
    if ((r = vkCreateComputePipelines(vb->dev, vb->pcache, 1, &cpci, NULL, &p->pipe)) != VK_SUCCESS) goto err;
    vb->pipes[vb->n_pipes++] = p;
    return p;
err:
    pipeline_destroy(vb, p);
    char msg[160];
    snprintf(msg, sizeof msg, "pipeline %s: %s", name, what);
    vk_result(vb, r, msg);
    return NULL;
}
