"""Resource limits for one sandboxed run and the result record it produces."""

import dataclasses
import resource


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-run limits. Sizes in MiB; times in seconds; output_bytes caps each of stdout and stderr.
    workspace_mb caps /workspace (when fresh) and /tmp each; shm_mb caps the private /dev/shm."""

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_mb: int = 64
    workspace_mb: int = 128
    shm_mb: int = 16
    nofile: int = 256
    nproc: int = 64
    output_bytes: int = 1 << 20

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if getattr(self, f.name) <= 0:
                raise ValueError(f"Limits.{f.name} must be > 0, got {getattr(self, f.name)}")

    def rlimits(self) -> dict[int, tuple[int, int]]:
        """The rlimits applied to the sandboxed process (soft == hard so they cannot be raised)."""
        mib = 1 << 20
        cpu = max(1, int(self.cpu_s))
        return {
            resource.RLIMIT_CPU: (cpu, cpu + 1),
            resource.RLIMIT_AS: (self.memory_mb * mib, self.memory_mb * mib),
            resource.RLIMIT_FSIZE: (self.file_mb * mib, self.file_mb * mib),
            resource.RLIMIT_NOFILE: (self.nofile, self.nofile),
            resource.RLIMIT_NPROC: (self.nproc, self.nproc),
            resource.RLIMIT_CORE: (0, 0),
            resource.RLIMIT_MEMLOCK: (0, 0),
            resource.RLIMIT_MSGQUEUE: (0, 0),
        }


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """Outcome of one run. killed_for: None, 'deadline', 'output', 'cpu', 'memory' or 'signal:<n>'."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    killed_for: str | None
    wall_s: float
    cpu_s: float
    truncated: bool = False
    layers: tuple[str, ...] = ()


class SandboxError(RuntimeError):
    """Infrastructure failure (the sandbox could not run the code); never the policy's own error."""


class IsolationError(SandboxError):
    """The configured minimum set of isolation layers is not available on this host."""
