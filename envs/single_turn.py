"""SingleTurn: the task prompt is the observation, one answer is verified by the task's domain."""

from rlpt.envs.base import TextEnv, verdict_info
from rlpt.envs.builtin_tasks import ArithmeticDomain

from rlpt.tasks.base import render_prompt


def resolve_domain(name: str, domains: dict):
    """A domain object by name: given ones first, then the built-in one, then rlpt.tasks' registry."""
    if name in domains:
        return domains[name]
    if name == ArithmeticDomain.name:
        return ArithmeticDomain()
    from rlpt.tasks import get_domain  # imported lazily: the task system is optional for the sandbox

    return get_domain(name)


class SingleTurnEnv(TextEnv):
    """reset(options={"task": task[, "domain": obj]}) -> prompt; step(answer) -> verdict score, done.

    domains: optional {name: domain} used before rlpt.tasks.get_domain (for custom or test domains).
    """

    def __init__(
        self,
        *,
        domains: dict | None = None,
        default_domain: str = ArithmeticDomain.name,
        default_tier: int = 0,
        **kw,
    ):
        super().__init__(max_steps=1, **kw)
        self.domains = dict(domains or {})
        self.default_domain, self.default_tier = default_domain, default_tier
        self._domain = None

    def default_task(self, seed: int):
        return resolve_domain(self.default_domain, self.domains).generate(seed, self.default_tier)

    def _start(self, task, options: dict):
        self._domain = options.get("domain") or resolve_domain(task.domain, self.domains)
        return render_prompt(task.prompt), {}

    def _act(self, action: str):
        verdict = self._domain.verify(self.task, action)
        return "", float(verdict.score), True, {"verdict": verdict_info(verdict)}
