/* Vulkan backend: the instance (with the validation layer and its messages on request), physical
 * device enumeration and description, and the logical device with one compute queue and the caps
 * the ops choose variants from. Memory types and sizes: memory.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

kvs_status kvs_vk_fail(VkResult r, const char *what) {
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: %s failed: out of memory (VkResult %d)", what, (int)r);
    return kvs_error(KVS_ERR_BACKEND, "vulkan: %s failed (VkResult %d)", what, (int)r);
}

/* ---- validation messages -------------------------------------------------------------------- */

static VKAPI_ATTR VkBool32 VKAPI_CALL vk_debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                  VkDebugUtilsMessageTypeFlagsEXT type,
                                                  const VkDebugUtilsMessengerCallbackDataEXT *data,
                                                  void *user) {
    (void)type;
    kvs_vk *v = user;
    if (!v || !(sev & (VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)))
        return VK_FALSE;
    size_t len = strlen(v->val_msg);
    if (len + 8 < sizeof v->val_msg)
        snprintf(v->val_msg + len, sizeof v->val_msg - len, "%s[%s] %s", len ? " | " : "",
                 (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? "error" : "warning",
                 data && data->pMessage ? data->pMessage : "(no message)");
    v->val_pending = 1;
    return VK_FALSE;
}

kvs_status kvs_vk_check(kvs_vk *v, const char *op) {
    if (!v->val_pending) return KVS_OK;
    v->val_pending = 0;
    kvs_status s = kvs_error(KVS_ERR_BACKEND, "%s: Vulkan validation: %s", op, v->val_msg);
    v->val_msg[0] = '\0';
    return s;
}

/* ---- instance and enumeration --------------------------------------------------------------- */

int kvs_vk_validation_wanted(const kvs_device_params *p) {
    if (p && p->validation >= 0) return p->validation > 0;
    const char *e = getenv("KVS_VULKAN_VALIDATION");
    return e && e[0] && strcmp(e, "0") != 0;
}

static int vk_has_layer(const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return 0;
    VkLayerProperties *l = calloc(n, sizeof *l);
    if (!l) return 0;
    int found = 0;
    if (vkEnumerateInstanceLayerProperties(&n, l) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++)
            if (strcmp(l[i].layerName, name) == 0) found = 1;
    free(l);
    return found;
}

/* The validation messenger: warnings and errors of every type go to vk_debug_cb (which turns them
 * into op errors). Used for instance creation (pNext) and the instance's own messenger. */
static VkDebugUtilsMessengerCreateInfoEXT vk_messenger_info(kvs_vk *v) {
    VkDebugUtilsMessengerCreateInfoEXT dci = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = vk_debug_cb,
        .pUserData = v};
    return dci;
}

kvs_status kvs_vk_instance(VkInstance *out, int validation, kvs_vk *v) {
    uint32_t api = VK_API_VERSION_1_0;
    PFN_vkEnumerateInstanceVersion ev =
        (PFN_vkEnumerateInstanceVersion)vkGetInstanceProcAddr(NULL, "vkEnumerateInstanceVersion");
    if (ev) ev(&api);
    if (api < VK_API_VERSION_1_1)
        return kvs_error(KVS_ERR_UNSUPPORTED, "vulkan: the loader supports only Vulkan 1.0 (1.1 is required)");
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "kvsieve",
                             .pEngineName = "kvsieve",
                             .apiVersion = api >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : api};
    const char *layers[1] = {"VK_LAYER_KHRONOS_validation"};
    const char *exts[1] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkDebugUtilsMessengerCreateInfoEXT dci = vk_messenger_info(v);
    if (validation) {
        if (!vk_has_layer(layers[0]))
            return kvs_error(KVS_ERR_UNSUPPORTED,
                             "vulkan: validation requested but VK_LAYER_KHRONOS_validation is not installed "
                             "(Debian: apt-get install vulkan-validationlayers)");
        ci.enabledLayerCount = 1;
        ci.ppEnabledLayerNames = layers;
        ci.enabledExtensionCount = 1;
        ci.ppEnabledExtensionNames = exts;
        ci.pNext = &dci; /* also reports problems during instance creation */
    }
    VkResult r = vkCreateInstance(&ci, NULL, out);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
        return kvs_error(KVS_ERR_NO_DEVICE, "vulkan: no compatible driver (vkCreateInstance: incompatible driver)");
    KVS_VKC(r, "vkCreateInstance");
    return KVS_OK;
}

kvs_status kvs_vk_messenger(kvs_vk *v) {
    PFN_vkCreateDebugUtilsMessengerEXT f =
        (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(v->instance, "vkCreateDebugUtilsMessengerEXT");
    if (!f) return kvs_error(KVS_ERR_UNSUPPORTED, "vulkan: validation requested but VK_EXT_debug_utils is missing");
    VkDebugUtilsMessengerCreateInfoEXT dci = vk_messenger_info(v);
    KVS_VKC(f(v->instance, &dci, NULL, &v->messenger), "vkCreateDebugUtilsMessengerEXT");
    return KVS_OK;
}

kvs_status kvs_vk_physical(VkInstance inst, int index, VkPhysicalDevice *out, int *count) {
    uint32_t n = 0;
    KVS_VKC(vkEnumeratePhysicalDevices(inst, &n, NULL), "vkEnumeratePhysicalDevices");
    *count = (int)n;
    if (index < 0) return KVS_OK;
    if ((uint32_t)index >= n) return kvs_error(KVS_ERR_NO_DEVICE, "vulkan device %d does not exist (%u found)", index, n);
    VkPhysicalDevice *d = calloc(n, sizeof *d);
    if (!d) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    VkResult r = vkEnumeratePhysicalDevices(inst, &n, d);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        free(d);
        return kvs_vk_fail(r, "vkEnumeratePhysicalDevices");
    }
    *out = d[index];
    free(d);
    return KVS_OK;
}

/* Only devices that report Vulkan >= 1.1 and have a compute queue count. Enumeration order. */
void kvs_vk_fill_info(VkPhysicalDevice pd, kvs_device_info *info) {
    VkPhysicalDeviceProperties pr;
    vkGetPhysicalDeviceProperties(pd, &pr);
    switch (pr.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: info->type = KVS_DEVICE_GPU_DISCRETE; break;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: info->type = KVS_DEVICE_GPU_INTEGRATED; break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: info->type = KVS_DEVICE_CPU; break;
    default: info->type = KVS_DEVICE_OTHER; break;
    }
    snprintf(info->name, sizeof info->name, "%.127s", pr.deviceName);
    snprintf(info->vendor, sizeof info->vendor, "0x%04x", pr.vendorID);
    snprintf(info->driver, sizeof info->driver, "Vulkan %u.%u.%u, driver version 0x%x",
             VK_VERSION_MAJOR(pr.apiVersion), VK_VERSION_MINOR(pr.apiVersion), VK_VERSION_PATCH(pr.apiVersion),
             pr.driverVersion);
}

/* ---- logical device and caps --------------------------------------------------------------- */

static kvs_status vk_open_queue(kvs_vk *v) {
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(v->phys, &nq, NULL);
    VkQueueFamilyProperties *qf = calloc(nq ? nq : 1, sizeof *qf);
    if (!qf) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    vkGetPhysicalDeviceQueueFamilyProperties(v->phys, &nq, qf);
    int fam = -1;
    for (uint32_t i = 0; i < nq && fam < 0; i++) /* prefer a compute queue without graphics */
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) fam = (int)i;
    for (uint32_t i = 0; i < nq && fam < 0; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) fam = (int)i;
    free(qf);
    if (fam < 0) return kvs_error(KVS_ERR_UNSUPPORTED, "vulkan: device '%s' has no compute queue", v->props.deviceName);
    v->queue_family = (uint32_t)fam;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = (uint32_t)fam,
                                  .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi};
    KVS_VKC(vkCreateDevice(v->phys, &di, NULL, &v->device), "vkCreateDevice");
    vkGetDeviceQueue(v->device, (uint32_t)fam, 0, &v->queue);
    return KVS_OK;
}

kvs_status kvs_vk_create_device(kvs_device *dev, kvs_vk *v) {
    kvs_vk_fill_info(v->phys, &dev->info);
    v->build_seconds = &dev->build_seconds;
    vkGetPhysicalDeviceProperties(v->phys, &v->props);
    vkGetPhysicalDeviceMemoryProperties(v->phys, &v->memprops);
    v->api_version = v->props.apiVersion;
    if (v->api_version < VK_API_VERSION_1_1)
        return kvs_error(KVS_ERR_UNSUPPORTED, "vulkan: device '%s' supports only Vulkan %u.%u (1.1 required)",
                         v->props.deviceName, VK_VERSION_MAJOR(v->api_version), VK_VERSION_MINOR(v->api_version));
    if (v->props.limits.maxPerStageDescriptorStorageBuffers < KVS_VK_BINDINGS)
        return kvs_error(KVS_ERR_UNSUPPORTED, "vulkan: device '%s' allows %u storage buffers per stage, kvsieve needs %d",
                         v->props.deviceName, v->props.limits.maxPerStageDescriptorStorageBuffers, KVS_VK_BINDINGS);

    KVS_TRY(vk_open_queue(v));
    /* capabilities */
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 pr2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    vkGetPhysicalDeviceProperties2(v->phys, &pr2);
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features f16i8 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, .pNext = &s16};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = v->api_version >= VK_API_VERSION_1_2 ? (void *)&f16i8 : (void *)&s16};
    vkGetPhysicalDeviceFeatures2(v->phys, &f2);

    kvs_caps *c = &dev->caps;
    memset(c, 0, sizeof *c);
    /* f16/bf16 tensors are read and written by every shader through packed 32-bit words
     * (unpackHalf2x16 / bit shifts), which every Vulkan 1.1 device supports. */
    c->fp16_storage = 1;
    c->bf16_storage = 1;
    c->fp16_arith = f16i8.shaderFloat16 ? 1 : 0;
    c->int8_arith = f16i8.shaderInt8 ? 1 : 0;
    int sg_compute = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
    c->subgroup_size = sg_compute ? (int)sg.subgroupSize : 0;
    VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_ARITHMETIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT |
                                  VK_SUBGROUP_FEATURE_BALLOT_BIT;
    c->subgroup_ops = sg_compute && (sg.supportedOperations & need) == need;
    c->shared_mem_bytes = v->props.limits.maxComputeSharedMemorySize;
    c->max_workgroup_size = (int)v->props.limits.maxComputeWorkGroupInvocations;
    c->max_binding_bytes = v->props.limits.maxStorageBufferRange;
    c->compute_units = 0; /* not reported: Vulkan has no compute-unit query (kvs_caps) */
    c->kv_hierarchical = 1; /* attn.comp / attn_stats.comp read qh8's lower planes, scatter_cvt writes them */
    for (int i = 0; i < 3; i++) v->max_groups[i] = v->props.limits.maxComputeWorkGroupCount[i];
    return KVS_OK;
}
