"""Preference alignment: pairs (data, pairs), DPO family (dpo), reward models (reward_model), PPO-RLHF (ppo_rlhf)."""
