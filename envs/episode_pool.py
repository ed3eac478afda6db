"""An asyncio episode pool: many environments at once, each episode with its own deadline.

Gymnasium's vector environments step in lockstep and return stale results after a timeout; here every
episode runs independently (env calls in worker threads), so a slow episode never holds up the others.
"""

import asyncio
import concurrent.futures
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any


@dataclasses.dataclass
class Episode:
    """One finished (or cut) episode. status: 'done', 'truncated', 'timeout' or 'error'."""

    task_id: str
    observations: list[str]
    actions: list[str]
    rewards: list[float]
    infos: list[dict]
    status: str
    error: str | None = None
    wall_s: float = 0.0

    @property
    def reward(self) -> float:
        return float(sum(self.rewards))


Policy = Callable[[str, "Episode"], Awaitable[str]]


async def _run_one(make_env, task, policy: Policy, timeout_s: float, sem: asyncio.Semaphore, pool) -> Episode:
    async with sem:
        t0 = time.monotonic()
        ep = Episode(str(getattr(task, "id", "?")), [], [], [], [], "error")
        loop = asyncio.get_running_loop()
        env = await loop.run_in_executor(pool, make_env)
        inflight: list[asyncio.Future] = []

        async def in_thread(fn, *args, **kw):
            fut = loop.run_in_executor(pool, functools.partial(fn, *args, **kw))
            inflight.append(fut)
            try:
                return await asyncio.shield(fut)
            finally:
                inflight.remove(fut)

        async def body():
            obs, info = await in_thread(env.reset, options={"task": task})
            ep.observations.append(obs)
            ep.infos.append(info)
            while True:
                action = await policy(obs, ep)
                obs, reward, terminated, truncated, info = await in_thread(env.step, action)
                ep.actions.append(action)
                ep.observations.append(obs)
                ep.rewards.append(float(reward))
                ep.infos.append(info)
                if terminated or truncated:
                    ep.status = "done" if terminated else "truncated"
                    return

        try:
            await asyncio.wait_for(body(), timeout_s)
        except TimeoutError:
            ep.status, ep.error = "timeout", f"episode exceeded {timeout_s} s"
        except Exception as e:  # one broken episode must not take the pool down; it is reported
            ep.status, ep.error = "error", f"{type(e).__name__}: {e}"
        finally:
            # an env call may still be running in its thread: let it finish before closing the env
            for fut in list(inflight):
                try:
                    await fut
                except Exception:
                    pass
            await loop.run_in_executor(pool, env.close)
        ep.wall_s = time.monotonic() - t0
        return ep


async def run_episodes(
    make_env: Callable[[], Any],
    tasks: list,
    policy: Policy,
    *,
    max_concurrency: int = 8,
    episode_timeout_s: float = 300.0,
) -> list[Episode]:
    """Run one episode per task; results in task order. policy(obs, episode) -> action (async)."""
    if max_concurrency < 1 or episode_timeout_s <= 0:
        raise ValueError(
            f"need max_concurrency >= 1 and episode_timeout_s > 0, got {max_concurrency}, {episode_timeout_s}"
        )
    sem = asyncio.Semaphore(max_concurrency)
    # one thread per concurrent episode (asyncio's default executor has only cpu_count + 4 threads)
    with concurrent.futures.ThreadPoolExecutor(max_concurrency, thread_name_prefix="episode") as pool:
        return list(await asyncio.gather(*[_run_one(make_env, t, policy, episode_timeout_s, sem, pool) for t in tasks]))
