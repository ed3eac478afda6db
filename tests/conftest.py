"""Test configuration: 8 fake CPU devices, set before JAX is imported anywhere; the worker-process count.

XLA's backend optimisation level 0 cuts CPU compile time about 3x, and the legacy elemental emitters in place of
XLA:CPU's fusion emitters (`--xla_cpu_use_fusion_emitters=false`) cut it about 2x more (a tiny 2-step GRPO run:
compile 9.1 -> 4.2-5.5 s); tests check numbers, not speed.
The default run is split over pytest-xdist workers (`-n auto --dist worksteal` in pyproject.toml): most of a
test's time is single-threaded tracing and compiling, so two workers on two cores took the suite from 18 to
11 minutes. `pytest -n 0` runs in one process.
"""
import os

import pytest

_FLAGS = ("--xla_force_host_platform_device_count=8", "--xla_backend_optimization_level=0",
          "--xla_cpu_use_fusion_emitters=false")
# xdist workers inherit the controller's environment: add each flag once.
_xla = os.environ.get("XLA_FLAGS", "").split()
os.environ["XLA_FLAGS"] = " ".join(_xla + [f for f in _FLAGS if f not in _xla])
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# No persistent compilation cache in tests (xdist workers would share one folder); tests/test_compile_cache.py
# turns it on in its own processes.
os.environ["RLPT_COMPILATION_CACHE"] = ""

# Each worker holds ~3-5 GB at its peak (JAX with 8 fake devices, torch, transformers).
_GB_PER_WORKER = 5
_MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per usable core, at most 4 and at most one per 5 GB of memory."""
    cores = len(os.sched_getaffinity(0))
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return max(1, min(cores, _MAX_WORKERS, int(memory_gb // _GB_PER_WORKER)))


# Tests moved to `-m slow` to keep the default run (CI: 2 cores) under 15 minutes. Each is a second instance of
# what a default test already covers: another parametrisation of the same equality, another stage through the same
# machinery, the same CLI convention for another entry point. `pytest -m slow` runs them (and the other slow tests).
# Not here, because an issue requires them in the default run: the multi-process SFT/GRPO/DPO tests (#28), the three
# notebooks (#30), the import-collision, verifier-property and process-pool tests (#26), the AOT rehearsals (#29).
SLOW_FOR_CI_BUDGET = {
    "tests/train/test_checkpoint_source.py::test_reward_model_and_ppo_rlhf_stages_start_from_the_checkpoint",
    "tests/pipeline/test_reward_audit.py::test_judge_component_shapes_rl",
    "tests/pipeline/test_reward_audit.py::test_multi_turn_episodes_scored_by_the_mixture",
    "tests/test_import_names.py::test_transformers_and_rlpt_kernels_in_one_process[other_folder]",
    "tests/pipeline/test_rl_resume.py::test_resume_after_crash_is_exact[async]",
    "tests/models/test_synthetic_checkpoint.py::test_100m_checkpoint_and_preset",
    "tests/models/test_synthetic_checkpoint.py::test_tokenizer_trains_to_the_same_bytes",
    "tests/pipeline/test_distill.py::test_distill_runs_and_resumes[logit]",
    "tests/kernels/test_shared_prefix_ring.py::test_shared_prefix_on_a_ring_mesh_matches_dense_full_rows"
    "[zigzag-window-is-the-row]",
    "tests/kernels/test_shared_prefix_ring.py::test_shared_prefix_on_a_ring_mesh_matches_dense_full_rows"
    "[zigzag-padded-prefix]",
    "tests/kernels/test_shared_prefix_ring.py::test_shared_prefix_on_a_seq_mesh_with_other_attention[allgather]",
    "tests/kernels/test_shared_prefix_ring.py::test_shared_prefix_without_prefix_columns_on_one_device",
    "tests/kernels/test_shared_prefix_ring.py::test_recompute_old_logp_with_shared_prefix_on_a_ring_mesh",
    "tests/train/test_chunked_logprobs.py::test_bf16_compute_chunked_matches_whole",
    "tests/train/test_chunked_logprobs.py::test_rl_loss_chunked_equals_whole[shared-prefix-untied]",
    "tests/train/test_chunked_logprobs.py::test_rl_loss_chunked_equals_whole[window-tied]",
    "tests/train/test_chunked_logprobs.py::test_rl_loss_chunked_equals_whole[all-columns-tied]",
    "tests/train/test_chunked_logprobs.py::test_rl_loss_chunked_equals_whole[window-untied]",
    "tests/train/test_chunked_logprobs.py::test_rl_loss_chunked_equals_whole[all-columns-untied]",
    "tests/train/test_lora_forward.py::test_shared_prefix_and_cached_forward_apply_the_adapters",
    "tests/train/test_lora_forward.py::test_train_step_builds_no_weight_sized_f32_temporary",
    "tests/train/test_lora_forward.py::test_each_target_alone[wq]",
    "tests/train/test_lora_forward.py::test_loss_and_adapter_gradients_equal_the_merged_weights[all_biases]",
    "tests/pipeline/test_rl_loss.py::test_logits_window_gives_the_same_loss_metrics_and_gradients[ppo]",
    "tests/test_cli_convention.py::test_help_lists_every_option_and_typos_fail_naming_the_key[eval]",
    "tests/test_cli_convention.py::test_help_lists_every_option_and_typos_fail_naming_the_key[flywheel]",
    "tests/test_cli_convention.py::test_help_lists_every_option_and_typos_fail_naming_the_key[tasks]",
    "tests/test_cli_convention.py::test_flywheel_writes_in_the_hydra_run_folder",
    "tests/test_cli_convention.py::test_tasks_accepts_hydra_run_dir",
    "tests/eval/test_cli.py::test_cli_unknown_key_and_bad_value_name_the_key",
    "tests/train/test_bad_input.py::test_refused_resume_leaves_config_and_hydra_untouched[experiment1]",
    "tests/models/test_lowp_matmuls.py::test_bf16_train_step_runs_every_matmul_in_bf16[False]",
    "tests/models/test_lowp_matmuls.py::test_weight_gradients_do_not_transpose_the_large_operand[bfloat16]",
    "tests/sampling/test_decode_layout_once.py::test_the_plain_cached_forward_samples_what_the_cpu_layout_samples"
    "[kwargs2]",
    "tests/train/test_resume.py::test_kill_and_resume_is_exact",  # RL's crash-and-resume test stays
    "tests/pipeline/test_rl_loss.py::test_recompute_old_logp_is_the_trainers_forward_and_bad_settings_fail",
    "tests/test_cli_convention.py::test_eval_writes_in_the_hydra_run_folder",
    "tests/pipeline/test_rl_refill.py::test_refill_run_equals_plain_run",  # the sampler's refill equality stays
    "tests/pipeline/test_rollout_dtype.py::test_bf16_rollouts_from_f32_trainer",
    "tests/models/test_dense_attention.py::test_causal_chunks_in_bf16_equal_the_full_block",
    "tests/sampling/test_prefix_cache.py::test_fill_then_hit_equals_full_prefills[int8]",  # [None] stays
    "tests/train/test_lora_forward.py::test_loss_and_adapter_gradients_equal_the_merged_weights[qwen3_qk_norm]",
    "tests/models/test_lowp_matmuls.py::test_the_cpu_layout_workarounds_leave_the_bf16_step_unchanged",
    "tests/train/test_lora_forward.py::test_trainer_shards_the_adapters_and_merges_once_for_the_policy",
    "tests/train/test_chunked_logprobs.py::test_sft_and_preference_log_probs_chunked_equal_whole",
    "tests/eval/test_cli.py::test_checkpoint_eval_with_samples_and_regression_flag",
    "tests/train/test_sweep_cli.py::test_sweep_jobs_own_folders_failure_recorded_and_summarized",
    "tests/train/test_sharding.py::test_sequence_parallel_ring_with_zigzag_matches_single_device",
    "tests/sampling/test_decode_layout_once.py::test_decode_makes_no_copy_of_the_weights[float32]",
    "tests/preference/test_dpo.py::test_stage_loss_equals_registry_loss_on_hand_sums[kto]",
    "tests/train/test_lora_forward.py::test_loss_and_adapter_gradients_equal_the_merged_weights[qwen2_qkv_bias]",
    "tests/pipeline/test_rl_loss.py::test_shared_prefix_gives_the_same_loss_metrics_and_gradients[ppo-entropy-dense]",
    # tests/train/test_checkpoint_source.py runs SFT and RL from a checkpoint with export and tokenizer checks
    "tests/real/test_end_to_end.py::test_tiny_real_checkpoint_sft_rl_dpo_export",
    # session 22 (CI took 952 s): more second parametrisations; one of each family stays in the default run
    "tests/train/test_lora_forward.py::test_loss_and_adapter_gradients_equal_the_merged_weights[untied_unrolled]",
    "tests/train/test_lora_forward.py::test_each_target_alone[wk]",  # wv, w_up stay
    "tests/train/test_lora_forward.py::test_each_target_alone[wo]",
    "tests/train/test_lora_forward.py::test_each_target_alone[w_gate]",
    "tests/train/test_lora_forward.py::test_each_target_alone[w_down]",
    "tests/pipeline/test_rl_loss.py::test_shared_prefix_gives_the_same_loss_metrics_and_gradients"
    "[ppo-entropy-reference]",
    "tests/pipeline/test_rl_loss.py::test_logits_window_gives_the_same_loss_metrics_and_gradients[gspo-kl-mis]",
    "tests/sampling/test_decode_layout_once.py::test_the_plain_cached_forward_samples_what_the_cpu_layout_samples"
    "[kwargs1]",
    "tests/models/test_decode_layout.py::test_decode_logits_equal_the_row_major_cached_forward"
    "[sliding_window-bfloat16]",  # every flag stays in float32, plain in bfloat16
    "tests/models/test_decode_layout.py::test_decode_logits_equal_the_row_major_cached_forward[biases_untied-bfloat16]",
    "tests/models/test_decode_layout.py::test_decode_logits_equal_the_row_major_cached_forward[qk_norm_mqa-bfloat16]",
    "tests/sampling/test_decode_layout_once.py::test_tpu_decode_temporaries_are_far_below_the_weights[float32]",
    "tests/test_cli_convention.py::test_cfg_job_prints_the_composed_options[eval]",  # [flywheel] stays
    "tests/test_cli_convention.py::test_cfg_job_prints_the_composed_options[tasks]",
    "tests/train/test_sharding.py::test_same_losses_across_meshes[fsdp8]",  # data8 and fsdp2xtp4 stay
    "tests/sampling/test_continuation.py::test_two_turns_match_full_recomputation[32]",  # [2] stays
    "tests/kernels/test_blockwise.py::test_blockwise_matches_reference_f32[window]",  # [masks] stays
    "tests/kernels/test_blockwise.py::test_blockwise_matches_reference_f32[noncausal]",
    "tests/sampling/test_speculative.py::test_self_draft_from_the_targets_first_layers",
    # (the CI run took 1042 s on December 5)
    "tests/test_launch.py::test_a_checkpoint_resumes_across_process_counts",  # the 2-vs-1-process SFT run stays
    "tests/test_launch.py::test_grpo_with_the_sampler_on_its_own_devices_matches_colocated",  # 2-process GRPO stays
    "tests/train/test_vision_train.py::test_lora_and_a_frozen_tower_train_only_their_parts[overrides1]",  # [0] stays
    "tests/train/test_vision_train.py::test_lora_and_a_frozen_tower_train_only_their_parts[overrides2]",
    "tests/train/test_vision_train.py::test_the_tower_trains_or_stays_frozen[True]",  # [False] stays
    "tests/pipeline/test_judge_reward.py::test_judge_reward_pulse",  # test_reward_mixture's RL runs stay
    "tests/sampling/test_speculative.py::test_same_seed_same_tokens_and_a_row_is_independent_of_its_batch",
    "tests/pipeline/test_rl_loss.py::test_shared_prefix_gives_the_same_loss_metrics_and_gradients"
    "[gspo-kl-mis-reference]",  # [gspo-kl-mis-dense] stays
    "tests/tasks/test_generation.py::test_bulk_generation_from_a_script_without_main_guard",  # rewards' one stays
    "tests/train/test_lora_forward.py::test_each_target_alone[wv]",  # w_up stays
    "tests/preference/test_dpo.py::test_stage_loss_equals_registry_loss_on_hand_sums[simpo]",  # [sigmoid] stays
    "tests/test_cli_convention.py::test_eval_multirun_one_folder_per_job",  # test_sweep_cli's sweep of jobs stays
    "tests/train/test_sweep_cli.py::test_cli_typo_exits_2_and_starts_nothing",  # test_bad_input's one stays
    "tests/flywheel/test_flywheel.py::test_cli_entry_point_prints_json",  # test_cli_convention[flywheel] stays
    "tests/sampling/test_decode_layout_once.py::test_the_layout_is_built_once_per_weight_version",  # [kwargs0] stays
    "tests/sampling/test_speculative.py::test_sampling_follows_the_target_when_the_draft_is_far_off",  # marginal stays
}


def pytest_collection_modifyitems(config, items):
    """Mark SLOW_FOR_CI_BUDGET slow (before `-m` deselects); a listed test that no longer exists fails the run."""
    import pytest

    ids = {item.nodeid for item in items}
    for item in items:
        if item.nodeid in SLOW_FOR_CI_BUDGET:
            item.add_marker(pytest.mark.slow)
    whole = not config.args or config.args == ["tests"] or config.args == [os.path.dirname(__file__)]
    missing = SLOW_FOR_CI_BUDGET - ids
    if whole and missing:
        raise pytest.UsageError(f"tests/conftest.py SLOW_FOR_CI_BUDGET names tests that are gone: {sorted(missing)}")


@pytest.fixture(scope="module")
def shared_compiles(tmp_path_factory):
    """Runs of the same shapes in a module share their compiled programs through a JAX persistent compilation
    cache of their own (the later runs skip XLA compilation; the programs and results are the same); the
    worker compiles without a cache again once the module's tests are done."""
    from rlpt.config.schema import RuntimeConfig
    from rlpt.runtime import setup

    setup(RuntimeConfig(compilation_cache=str(tmp_path_factory.mktemp("xla_cache"))))
    yield
    setup(RuntimeConfig(compilation_cache=""))
