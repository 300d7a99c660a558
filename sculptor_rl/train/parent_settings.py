"""Every setting the training configs inherit from TRL's `GRPOConfig` and `SFTConfig` (and transformers'
`TrainingArguments` under them) is either honoured or refused, never silently ignored: our trainers replace
parts of TRL's (the loss, generation, the data path), and a setting of a replaced part would do nothing.

`RL_HONOURED` / `SFT_HONOURED`: the settings a run takes into account (transformers' loop, optimizer, scheduler,
logging, saving, hub, data loading, precision and parallelism; TRL's sampler and generation cadence; the fields
our loss and loop read). `RL_REFUSED` / `SFT_REFUSED`: setting -> what to use instead; a value other than the
config's default is an error of the config check (`rl validate`, the SFT config). tests/test_parent_settings.py
walks every field of the parents and checks that each is in exactly one of the two.
"""

from __future__ import annotations

import dataclasses

__all__ = ["RL_HONOURED", "RL_REFUSED", "SFT_HONOURED", "SFT_REFUSED", "refused_settings"]

# transformers' TrainingArguments that its Trainer loop applies and our trainers keep (both commands)
_TRAINER_LOOP = frozenset("""
output_dir per_device_train_batch_size num_train_epochs max_steps learning_rate lr_scheduler_type lr_scheduler_kwargs
warmup_steps optim optim_args weight_decay adam_beta1 adam_beta2 adam_epsilon optim_target_modules
gradient_accumulation_steps max_grad_norm bf16 fp16 tf32 gradient_checkpointing gradient_checkpointing_kwargs
torch_compile torch_compile_backend torch_compile_mode use_cache torch_empty_cache_steps logging_strategy
logging_steps logging_first_step log_on_each_node logging_nan_inf_filter include_num_input_tokens_seen log_level
log_level_replica disable_tqdm report_to run_name project trackio_space_id trackio_bucket_id trackio_static_space_id
save_only_model save_strategy save_steps save_on_each_node save_total_limit enable_jit_checkpoint push_to_hub
hub_token hub_private_repo hub_model_id hub_strategy hub_always_push hub_revision ignore_data_skip
restore_callback_states_from_checkpoint full_determinism seed data_seed use_cpu accelerator_config
dataloader_drop_last dataloader_num_workers dataloader_pin_memory dataloader_persistent_workers
dataloader_prefetch_factor dataloader_multiprocessing_context dataloader_in_order remove_unused_columns label_names
length_column_name ddp_find_unused_parameters ddp_bucket_cap_mb ddp_broadcast_buffers ddp_static_graph ddp_backend
ddp_timeout fsdp fsdp_config deepspeed debug skip_memory_metrics do_train do_eval do_predict resume_from_checkpoint
local_rank average_tokens_across_devices
""".split())
# evaluation inside the training loop: SFT's Trainer runs it (and says so when no eval set is given); RL refuses it
_EVAL = frozenset("""
bf16_full_eval fp16_full_eval eval_strategy eval_steps eval_delay per_device_eval_batch_size prediction_loss_only
eval_on_start eval_do_concat_batches eval_use_gather_object eval_accumulation_steps include_for_metrics
batch_eval_metrics load_best_model_at_end metric_for_best_model greater_is_better
""".split())

_BOTH_REFUSED = {
    "use_liger_kernel": "Liger's fused loss would replace ours (loss masks, shared prefixes); leave it off",
    "liger_kernel_config": "Liger kernels are not used; leave it unset",
    "label_smoothing_factor": "the masked loss has no label smoothing; leave it 0",
    "parallelism_config": "tensor / context parallelism is not supported; use DeepSpeed or FSDP (configs/accelerate/)",
    "auto_find_batch_size": "set per_device_train_batch_size (or max_tokens_per_batch)",
    "trust_remote_code": "sculptor-rl runs no model code from the hub; use a model transformers supports",
    "router_aux_loss_coef": "the loss adds no MoE router term; leave it unset",
}

# RL: eval_strategy "steps" with eval_steps schedules held-out rollouts (`heldout_tasks`); the rest of evaluation
# inside the loop is refused
_RL_EVAL = frozenset({"eval_strategy", "eval_steps"})
RL_REFUSED = {
    **_BOTH_REFUSED,
    **{name: "evaluate checkpoints with `sculptor-rl eval` (or heldout_tasks with eval_strategy steps)"
       for name in _EVAL - _RL_EVAL},
    "neftune_noise_alpha": "noise on the embeddings would bias the policy's logprobs; leave it unset",
    "train_sampling_strategy": "the rounds use TRL's group sampler; leave it at its default",
    "cast_lm_head_to_fp32": "the LM head runs at the trained positions only (masked_lm); train in fp32 (bf16 false)",
    "num_generations_eval": "evaluate checkpoints with `sculptor-rl eval`",
    "pad_to_multiple_of": "micro-batches are padded to their longest sample; leave it unset",
    "min_p": "the engines take temperature, top_p and top_k; leave it unset",
    "generation_kwargs": "set temperature, top_p, top_k (the engines' sampling)",
    "repetition_penalty": "the engines take temperature, top_p and top_k; leave it 1.0",
    "cache_implementation": "the `hf` engine generates with the model's own cache; leave it unset",
    "use_vllm": "leave use_vllm off: `engine: vllm` with `vllm_mode` drives vLLM through the agent loop",
    "vllm_model_impl": "the engine uses vLLM's default implementation; leave it at its default",
    "vllm_structured_outputs_regex": "tool calls are parsed by the model's format (agent.chat); leave it unset",
    "sapo_temperature_neg": "loss_type takes grpo or dapo",
    "sapo_temperature_pos": "loss_type takes grpo or dapo",
    "vespo_k_pos": "loss_type takes grpo or dapo",
    "vespo_lambda_pos": "loss_type takes grpo or dapo",
    "vespo_k_neg": "loss_type takes grpo or dapo",
    "vespo_lambda_neg": "loss_type takes grpo or dapo",
    "reward_weights": "the environment computes one reward (its `reward` hook)",
    "multi_objective_aggregation": "the environment computes one reward (its `reward` hook)",
    "sync_ref_model": "the reference is the initial policy (beta > 0); leave it off",
    "ref_model_mixup_alpha": "the reference is the initial policy; leave it at its default",
    "ref_model_sync_steps": "the reference is the initial policy; leave it at its default",
    "top_entropy_quantile": "every trained token counts; leave it 1.0",
    "entropy_coef": "the loss has no entropy bonus (entropy is logged); use lm_coef for a regularizer",
    "use_adaptive_entropy": "the loss has no entropy bonus; leave it off",
    "entropy_coef_min": "the loss has no entropy bonus",
    "entropy_coef_max": "the loss has no entropy bonus",
    "entropy_coef_delta": "the loss has no entropy bonus",
    "entropy_target": "the loss has no entropy bonus",
    "max_tool_calling_iterations": "set max_tool_calls (the agent loop's cap)",
    "vllm_importance_sampling_correction": "old logprobs come from the trainer; max_staleness > 0 corrects for the "
                                           "engine's older policy (vllm_importance_sampling_mode)",
    "vllm_importance_sampling_cap": "set vllm_importance_sampling_clip_max (with max_staleness > 0)",
    "off_policy_mask_threshold": "max_staleness bounds how old a round may be; leave it unset",
    "log_completions": "set save_rollouts: true (each round's trajectories under output_dir/rollouts/)",
    "log_multimodal": "set save_rollouts: true",
    "num_completions_to_print": "set save_rollouts: true",
    "log_unique_prompts": "set save_rollouts: true",
    "log_completions_hub_repo": "set save_rollouts: true",
    "use_transformers_continuous_batching": "set `engine` (vllm, ray or hf)",
    "transformers_continuous_batching_config": "set `engine` (vllm, ray or hf)",
    "use_transformers_paged": "set `engine` (vllm, ray or hf)",
}
RL_HONOURED = _TRAINER_LOOP | _RL_EVAL | frozenset("""
model_init_kwargs chat_template_kwargs disable_dropout num_generations max_completion_length ds3_gather_for_generation shuffle_dataset
generation_batch_size steps_per_generation temperature top_p top_k vllm_mode vllm_enable_sleep_mode
vllm_server_base_url vllm_server_host vllm_server_port vllm_server_timeout vllm_group_port vllm_gpu_memory_utilization
vllm_max_model_length vllm_tensor_parallel_size beta num_iterations epsilon delta epsilon_high importance_sampling_level
scale_rewards loss_type mask_truncated_completions vllm_importance_sampling_mode vllm_importance_sampling_clip_max
vllm_importance_sampling_clip_min use_bias_correction_kl
""".split())

SFT_REFUSED = {
    **_BOTH_REFUSED,
    "chat_template_path": "set chat_template (a file or a named variant: the one the samples were made with)",
    "dataset_text_field": "the samples are pre-tokenized (`sculptor-rl samples`); leave it at its default",
    "dataset_kwargs": "the samples are pre-tokenized; leave it unset",
    "dataset_num_proc": "the samples are pre-tokenized; leave it unset",
    "eos_token": "the chat template's end-of-turn token ends each completion; leave it unset",
    "pad_token": "the tokenizer's pad token is used; leave it unset",
    "truncation_mode": "over-long samples are dropped (truncating would cut trained completions); set max_length",
    "packing": "set max_tokens_per_batch (micro-batches cut by tokens) and shared_prefix",
    "packing_strategy": "set max_tokens_per_batch and shared_prefix",
    "padding_free": "set max_tokens_per_batch and shared_prefix",
    "eval_packing": "evaluate checkpoints with `sculptor-rl eval`",
    "completion_only_loss": "the loss is on the samples' loss masks (Algorithm 1); leave it unset",
    "assistant_only_loss": "the loss is on the samples' loss masks (Algorithm 1); leave it off",
    "loss_type": "the loss is the masked NLL; leave it at nll",
    "activation_offloading": "use gradient_checkpointing to save activation memory",
}
SFT_HONOURED = _TRAINER_LOOP | _EVAL | frozenset("""
model_init_kwargs max_length shuffle_dataset pad_to_multiple_of train_sampling_strategy neftune_noise_alpha
""".split())


def refused_settings(cfg, refused: dict[str, str]) -> list[str]:
    """One line per setting of `refused` that `cfg` sets away from its class's default, naming it and what to use
    instead."""
    defaults = {f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                for f in dataclasses.fields(type(cfg))}
    return [f"{name} = {getattr(cfg, name)!r} is not honoured by sculptor-rl: {instead}"
            for name, instead in refused.items() if getattr(cfg, name) != defaults[name]
            and not (defaults[name] == "auto" and getattr(cfg, name) is None)]  # TRL resolves "auto" to None
