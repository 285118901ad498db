"""The vLLM API per supported release, as read from each release's own source (the PyPI wheel's .py files).

For each version: the keywords `LLM(...)` accepts (its __init__'s keyword-only parameters and
every EngineArgs field, vllm/entrypoints/llm.py + vllm/engine/arg_utils.py), SamplingParams'
public fields (vllm/sampling_params.py), LoRARequest's fields (vllm/lora/request.py),
LLM.generate / sleep / wake_up parameters (vllm/entrypoints/llm.py), the LoRA ranks LoRAConfig
allows (vllm/config), the sleep levels and wake-up tags, and vLLM's startup check on free memory
(vllm/v1/worker/gpu_worker.py; 0.33: vllm/v1/worker/utils.py request_memory); SamplingParams' upper
bound on temperature (vllm/sampling_params.py _verify_args) and whether LLM.release_kv_cache_memory
exists (vllm/entrypoints/llm.py; vllm/v1/engine/core.py: it needs a completed pause, sleep(level=0),
and frees only the KV cache, the weights staying on the device).
"""

from __future__ import annotations


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())

VERSIONS = {
    "0.10.1.1": dict(
        torch="2.7.1",  # the torch release its wheel pins
        engine_args=_names("""
    additional_config allowed_local_media_path async_scheduling block_size calculate_kv_scales
    code_revision collect_detailed_traces compilation_config config_format convert cpu_offload_gb
    cuda_graph_sizes data_parallel_address data_parallel_backend data_parallel_hybrid_lb
    data_parallel_rank data_parallel_rpc_port data_parallel_size data_parallel_size_local
    data_parallel_start_rank default_mm_loras disable_async_output_proc disable_cascade_attn
    disable_chunked_mm_input disable_custom_all_reduce disable_hybrid_kv_cache_manager
    disable_log_stats disable_mm_preprocessor_cache disable_sliding_window
    distributed_executor_backend download_dir dtype enable_chunked_prefill enable_eplb
    enable_expert_parallel enable_lora enable_lora_bias enable_multimodal_encoder_data_parallel
    enable_prefix_caching enable_prompt_adapter enable_prompt_embeds enable_sleep_mode enforce_eager
    eplb_log_balancedness eplb_step_interval eplb_window_size fully_sharded_loras generation_config
    gpu_memory_utilization guided_decoding_backend guided_decoding_disable_additional_properties
    guided_decoding_disable_any_whitespace guided_decoding_disable_fallback hf_config_path
    hf_overrides hf_token ignore_patterns interleave_mm_strings kv_cache_dtype kv_events_config
    kv_sharing_fast_prefill kv_transfer_config limit_mm_per_prompt load_format
    logits_processor_pattern logits_processors logprobs_mode long_prefill_token_threshold lora_dtype
    lora_extra_vocab_size mamba_cache_dtype mamba_ssm_cache_dtype max_cpu_loras max_logprobs
    max_long_partial_prefills max_lora_rank max_loras max_model_len max_num_batched_tokens
    max_num_partial_prefills max_num_seqs max_parallel_loading_workers max_seq_len_to_capture
    media_io_kwargs mm_processor_cache_gb mm_processor_kwargs model_impl model_loader_extra_config
    num_gpu_blocks_override num_lookahead_slots num_redundant_experts otlp_traces_endpoint
    override_attention_dtype override_generation_config override_neuron_config
    override_pooler_config pipeline_parallel_size preemption_mode prefix_caching_hash_algo
    pt_load_map_location quantization ray_workers_use_nsight reasoning_parser revision rope_scaling
    rope_theta runner scheduler_cls scheduler_delay_factor scheduling_policy seed served_model_name
    show_hidden_metrics_for_version skip_mm_profiling skip_tokenizer_init speculative_config
    swap_space task tensor_parallel_size tokenizer tokenizer_mode tokenizer_revision
    trust_remote_code use_tqdm_on_load worker_cls worker_extension_cls
    """),
        sampling_fields=_names("""
    allowed_token_ids bad_words best_of detokenize extra_args frequency_penalty guided_decoding
    ignore_eos include_stop_str_in_output logit_bias logits_processors logprobs max_tokens min_p
    min_tokens n output_kind output_text_buffer_length presence_penalty prompt_logprobs
    repetition_penalty seed skip_special_tokens spaces_between_special_tokens stop stop_token_ids
    temperature top_k top_p truncate_prompt_tokens
    """),
        lora_request_fields=('lora_name', 'lora_int_id', 'lora_path', 'lora_local_path', 'long_lora_max_len', 'base_model_name', 'tensorizer_config_dict'),
        generate_positional=('prompts', 'sampling_params', 'prompt_token_ids', 'use_tqdm', 'lora_request', 'priority'),  # after self
        generate_keyword_only=(),
        sleep_params=('level',),
        sleep_levels=(1, 2),
        wake_up_tags=('weights', 'kv_cache'),
        wake_up_returns_bool=False,
        max_lora_ranks=(8, 16, 32, 64, 128, 256, 320, 512),
        max_temperature=None,  # SamplingParams._verify_args checks only temperature >= 0
        release_kv_cache_memory=False,  # LLM has no release_kv_cache_memory(); sleep levels 1 and 2 only
        device_ids=False,  # no device_ids engine argument: the engine process takes the first visible GPU
        startup_free_memory_error='Free memory on device ({free}/{total} GiB) on startup is less than desired GPU memory utilization ({gmu}, {need} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.',
    ),
    "0.33.0": dict(
        torch="2.14.0",  # the torch release its wheel pins
        engine_args=_names("""
    _api_process_count _api_process_rank additional_config aggregate_engine_logging all2all_backend
    allow_deprecated_quantization allowed_local_media_path allowed_media_domains async_scheduling
    attention_backend attention_config aux_output_config block_size chat_template code_revision
    collect_detailed_traces compilation_config config_format convert cp_kv_cache_interleave_size
    cpu_distributed_timeout_seconds cpu_offload_gb cpu_offload_params cudagraph_capture_sizes
    cudagraph_metrics custom_histogram_buckets data_parallel_address data_parallel_backend
    data_parallel_external_lb data_parallel_hybrid_lb data_parallel_multi_port_external_lb
    data_parallel_rank data_parallel_rpc_port data_parallel_size data_parallel_size_local
    data_parallel_start_rank dbo_decode_token_threshold dbo_prefill_token_threshold dcp_comm_backend
    dcp_kv_cache_interleave_size dcp_q_replicate decode_context_parallel_size default_mm_loras
    device_ids diffusion_config disable_cascade_attn disable_chunked_mm_input
    disable_custom_all_reduce disable_hybrid_kv_cache_manager disable_log_stats
    disable_nccl_for_dp_synchronization disable_sliding_window distributed_executor_backend
    distributed_timeout_seconds download_dir dp_sync_interval dtype ec_manager_config
    ec_transfer_config elastic_ep_max_dp_size enable_batch_sharded_sampling enable_chunked_prefill
    enable_cumem_allocator enable_dbo enable_elastic_ep enable_ep_weight_filter enable_eplb
    enable_expert_parallel enable_fault_tolerance enable_flashinfer_autotune enable_hc_sp
    enable_layerwise_nvtx_tracing enable_logging_iteration_details enable_lora
    enable_mamba_cache_stochastic_rounding enable_mamba_shared_prefix_checkpoint enable_mfu_metrics
    enable_mixed_moe_lora_format enable_mm_embeds enable_mm_processor_stats enable_moe_shared_loras
    enable_nccl_comm_suspend enable_prefix_caching enable_prompt_embeds enable_return_routed_experts
    enable_shm_tensor_arena enable_sleep_mode enable_tower_connector_lora enable_trace_replay
    enforce_eager engram_config eplb_config expert_placement_strategy fail_on_environ_validation
    fault_tolerance_config fully_sharded_loras gdn_prefill_backend generation_config
    gpu_memory_utilization hf_config_path hf_overrides hf_token ignore_patterns
    interleave_mm_strings io_processor_plugin ir_op_priority jit_monitor_mode jit_monitor_verbose
    kda_decode_backend kda_prefill_backend kernel_config kv_cache_dtype kv_cache_dtype_skip_layers
    kv_cache_memory_bytes kv_cache_metrics kv_cache_metrics_sample kv_events_config
    kv_offloading_backend kv_offloading_size kv_sharing_fast_prefill kv_transfer_config
    language_model_only limit_mm_per_prompt linear_backend load_format log_config_file log_level
    logging_config logits_processors logprobs_mode long_prefill_token_threshold
    long_prefill_token_threshold_adaptive lora_dtype lora_target_modules mamba_backend
    mamba_block_size mamba_cache_dtype mamba_cache_mode mamba_cache_philox_rounds mamba_config
    mamba_ssm_cache_dtype mamba_ssu_algorithm master_addr master_port max_cpu_loras
    max_cudagraph_capture_size max_logprobs max_lora_cls_labels max_lora_rank max_loras
    max_model_len max_num_active_seqs max_num_batched_tokens max_num_queued_reqs
    max_num_queued_tokens max_num_scheduled_tokens max_num_seqs max_parallel_loading_workers
    media_io_kwargs mm_device_do_normalize mm_encoder_attn_backend mm_encoder_attn_dtype
    mm_encoder_fp8_scale_path mm_encoder_fp8_scale_save_margin mm_encoder_fp8_scale_save_path
    mm_encoder_only mm_encoder_tp_mode mm_hasher_algorithm mm_ipc_gpu_memory_gb
    mm_processor_cache_gb mm_processor_cache_type mm_processor_device mm_processor_kwargs
    mm_shm_cache_max_object_size_mb mm_tensor_ipc model_class_overrides model_impl
    model_loader_extra_config model_weights moe_backend monokernel nnodes node_rank
    num_gpu_blocks_override numa_bind numa_bind_cpus numa_bind_nodes offload_backend
    offload_group_size offload_num_in_group offload_params offload_prefetch_step optimization_level
    otlp_traces_endpoint override_generation_config per_request_spec_decode_metrics performance_mode
    pipeline_parallel_size pooler_config prefill_context_parallel_size prefill_schedule_interval
    prefix_cache_retention_interval prefix_caching_hash_algo prefix_match_unit profiler_config
    pt_load_map_location quantization quantization_config ray_workers_use_nsight reasoning_config
    reasoning_parser reasoning_parser_plugin renderer_num_workers replayssm_buffer_len
    return_sampling_mask revision runner safetensors_load_strategy safetensors_prefetch_block_size
    safetensors_prefetch_num_threads scheduler_cls scheduler_reserve_full_isl scheduling_policy seed
    served_model_name show_hidden_metrics_for_version shutdown_timeout skip_mm_profiling
    skip_tokenizer_init sleep_mode_backend sleep_mode_offload_cudagraph
    sleep_preserve_parameter_names sparse_indexer_topk_backend spec_method spec_model spec_tokens
    specialize_active_lora speculative_config stream_interval structured_outputs_config
    swa_bounded_replay tensor_parallel_size tokenizer tokenizer_mode tokenizer_revision tokens_only
    trust_remote_code ubatch_size use_fp64_gumbel use_replayssm use_tqdm_on_load
    video_pruning_method video_pruning_rate watchdog_config watermark watermark_config
    weight_transfer_config worker_cls worker_extension_cls
    """),
        sampling_fields=_names("""
    allowed_token_ids bad_words detokenize extra_args flat_logprobs frequency_penalty ignore_eos
    include_stop_str_in_output logit_bias logprob_token_ids logprobs max_tokens min_p min_tokens n
    output_kind output_text_buffer_length presence_penalty prompt_logprob_start
    prompt_logprob_token_ids prompt_logprobs repetition_detection repetition_penalty
    routed_experts_prompt_start seed skip_clone skip_reading_prefix_cache skip_special_tokens
    spaces_between_special_tokens stop stop_token_ids stream_interval structured_outputs temperature
    thinking_token_budget top_k top_p trace_decode_token_ids watermarking
    """),
        lora_request_fields=('lora_name', 'lora_int_id', 'lora_path', 'base_model_name', 'load_inplace', 'is_3d_lora_weight'),
        generate_positional=('prompts', 'sampling_params'),  # after self
        generate_keyword_only=('use_tqdm', 'lora_request', 'priority', 'tokenization_kwargs', 'mm_processor_kwargs'),
        sleep_params=('level', 'mode'),
        sleep_levels=(0, 1, 2),
        wake_up_tags=('weights', 'kv_cache', 'scheduling'),
        wake_up_returns_bool=True,
        max_lora_ranks=(1, 8, 16, 32, 64, 128, 256, 320, 512),
        max_temperature=2.0,  # _verify_args: 'temperature must be in [0, 2]' (vllm PR 44965, June 2026)
        release_kv_cache_memory=True,  # LLM.release_kv_cache_memory() after sleep(level=0) (vllm PR 44890)
        device_ids=True,  # engine argument device_ids (vllm PR 45026); race uses CUDA_VISIBLE_DEVICES for both
        startup_free_memory_error='Free memory on device cuda:0 ({free}/{total} GiB) on startup is less than desired GPU memory utilization ({gmu}, {need} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.',
    ),
}
NEWEST = max(VERSIONS, key=lambda v: tuple(int(x) for x in v.split(".")))
