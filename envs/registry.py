"""Registers the Gymnasium environments (ids rlpt/<Name>-v0; GridWalk observes an image) on import of rlpt.envs."""

import gymnasium as gym

ENV_IDS = {
    "rlpt/SingleTurn-v0": "rlpt.envs.single_turn:SingleTurnEnv",
    "rlpt/CodeAgent-v0": "rlpt.envs.code_agent:CodeAgentEnv",
    "rlpt/ShellAgent-v0": "rlpt.envs.shell_agent:ShellAgentEnv",
    "rlpt/RepoAgent-v0": "rlpt.envs.repo_agent:RepoAgentEnv",
    "rlpt/TerminalAgent-v0": "rlpt.envs.terminal_agent:TerminalAgentEnv",
    "rlpt/ToolUse-v0": "rlpt.envs.tool_use:ToolUseEnv",
    "rlpt/Bfcl-v0": "rlpt.envs.bfcl_env:BfclEnv",
    "rlpt/GridWalk-v0": "rlpt.envs.grid_walk:GridWalkEnv",
}

for _id, _entry in ENV_IDS.items():
    if _id not in gym.registry:
        # step and time limits live inside the environments (agent envs grade on truncation), so no TimeLimit
        gym.register(id=_id, entry_point=_entry, disable_env_checker=False)

__all__ = ["ENV_IDS"]
