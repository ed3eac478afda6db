"""Sandboxed execution: isolation layers, workspaces, a bounded pool, and hack-resistant code checks."""

from rlpt.envs.sandbox.codecheck import CodeChecker, check_python, default_checker
from rlpt.envs.sandbox.layers import probe
from rlpt.envs.sandbox.limits import ExecResult, IsolationError, Limits, SandboxError
from rlpt.envs.sandbox.pool import Sandbox, SandboxConfig

__all__ = [
    "CodeChecker",
    "ExecResult",
    "IsolationError",
    "Limits",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "check_python",
    "default_checker",
    "probe",
]
