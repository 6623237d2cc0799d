/* Prints "StructName sizeof offsetof-of-last-field" for every struct the Python binding declares
 * (python/kvsieve/_lib.py), so test_kvsieve.py can check the ctypes layouts against the compiler's. */
#include <kvsieve/kvsieve.h>
#include <stddef.h>
#include <stdio.h>

#define ROW(py, c, last) printf("%s %zu %zu\n", py, sizeof(c), offsetof(c, last))

int main(void) {
    ROW("DeviceParams", kvs_device_params, validation);
    ROW("Caps", kvs_caps, kv_hierarchical);
    ROW("DeviceInfo", kvs_device_info, driver);
    ROW("RopeParams", kvs_rope_params, freq_scale);
    ROW("AttentionParams", kvs_attention_params, lse_extra);
    ROW("TopkParams", kvs_topk_params, row_len);
    ROW("ModelHparams", kvs_model_hparams, logit_shift);
    ROW("ModelFileParams", kvs_model_file_params, tokenizer_path);
    ROW("ModelParams", kvs_model_params, map_weights);
    ROW("CacheParams", kvs_cache_params, flags);
    ROW("LayerStats", kvs_layer_stats, q);
    ROW("LayerPlan", kvs_layer_plan, spa_delta);
    ROW("StepPlan", kvs_step_plan, key_limit);
    ROW("StepResult", kvs_step_result, seconds_logits);
    ROW("PolicyParams", kvs_policy_params, keep_mass);
    ROW("EvictParams", kvs_evict_params, think_in_place);
    ROW("EvictStats", kvs_evict_stats, channels_pruned);
    ROW("ElasticParams", kvs_elastic_params, block_refresh);
    ROW("WavefilterParams", kvs_wavefilter_params, dev);
    ROW("GenStats", kvs_gen_stats, seconds_build);
    ROW("ArParams", kvs_ar_params, draft);
    ROW("DlmParams", kvs_dlm_params, block_causal);
    return 0;
}
