"""Preference alignment: pairs (data, pairs), DPO family (dpo), reward models (reward_model); PPO-RLHF runs on
the RL loop (rlpt.pipeline.ppo_rlhf)."""
