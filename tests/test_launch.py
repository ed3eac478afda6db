"""`python -m rlpt.launch local`: real JAX processes on this machine (the coordinator on loopback, gloo collectives
on CPU) run one program: SFT, GRPO and DPO as 2 processes x 4 devices give the results of 1 process x 8 devices
(tests/conftest.py), checkpoints move between process counts, a config that differs between processes or a
process that dies stops the run with a message that names it."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from safetensors.numpy import load_file

import rlpt
from rlpt.launch.local import free_port, process_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# data.shards=2: each process packs its own stream, one process packs both: the same global batches
SFT = ["experiment=sft_tiny", "train.steps=2", "train.eval_every=0", "train.ckpt_every=2", "runtime.compilation_cache=",
       "data.shards=2", "optim.grad_accum=2"]
TINY = ["model.hidden_size=32", "model.intermediate_size=64", "train.progress=false", "train.export_hf=true",
        "runtime.compilation_cache=", "optim.name=sgd"]
# from scratch on two-digit sums; the length penalty gives rewards that differ within groups, so updates are real
GRPO = ["stage=rl", "domains.include=[arith/add]", "domains.tiers=[2]", "rl.steps=2", "rl.rollout.prompts_per_step=4",
        "rl.rollout.group_size=4", "rl.rollout.max_new_tokens=6", "rl.rollout.max_prompt_len=24", "reward=short",
        "reward.components.length_penalty.target_chars=2", "reward.components.length_penalty.max_chars=8",
        "train.ckpt_every=2", "rl.eval_per_domain=4", *TINY]
DPO = ["experiment=dpo_tiny", "pref.sft_steps=0", "pref.steps=3", "pref.train_tasks=16", "pref.samples_per_task=4",
       "pref.eval_per_domain=8", "pref.batch_size=8", "pref.gold_fallback=true", *TINY]


def _launch(*args, timeout=300):
    # RLPT_MALLOC_TUNING=0: no re-exec per process for glibc's malloc settings (start-up time; the CI budget)
    return subprocess.run([sys.executable, "-m", "rlpt.launch", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, RLPT_MALLOC_TUNING="0"))


def _rows(folder) -> list[dict]:
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _losses(folder) -> list[float]:
    return [r["loss"] for r in _rows(folder)]


def _two_processes(overrides, out_dir):
    proc = _launch("local", "--nproc", "2", "--devices-per-process", "4", "--", sys.executable, "-m", "rlpt.train",
                   *overrides, f"train.out_dir={out_dir}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = proc.stdout.splitlines()
    summary = json.loads([ln for ln in lines if ln.startswith("[p0] {")][-1][len("[p0] "):])
    assert summary["process_count"] == 2 and not any(ln.startswith("[p1] {") for ln in lines)  # process 0 reports
    return summary


def _same_weights(a, b, rel=1e-5):
    """The exported HF weights of two runs agree to `rel` of the largest weight magnitude (k_proj's bias, which
    attention ignores, stays ~1e-9: a per-tensor scale would judge rounding noise)."""
    x, y = load_file(os.path.join(a, "hf", "model.safetensors")), load_file(os.path.join(b, "hf", "model.safetensors"))
    assert x.keys() == y.keys()
    scale = max(float(np.max(np.abs(v))) for v in y.values())
    for k in x:
        assert np.max(np.abs(x[k] - y[k])) <= rel * scale, k


def test_two_processes_of_four_devices_train_as_one_of_eight(tmp_path):
    _two_and_one(tmp_path)


def test_a_checkpoint_resumes_across_process_counts(tmp_path):
    """2 -> 1 and 1 -> 2 processes: each resumed run continues as the straight one-process run does."""
    two, one = _two_and_one(tmp_path)
    shutil.copytree(one.out_dir, tmp_path / "one_to_two")
    # 2 -> 1: the 2-process checkpoint resumes in 1 process (8 devices) and continues as the 1-process run does
    more = [o.replace("train.steps=2", "train.steps=3") for o in SFT]
    resumed = rlpt.run(more + [f"train.out_dir={two}"])
    straight = rlpt.run(more + [f"train.out_dir={one.out_dir}"])
    assert resumed.summary["process_count"] == 1 and len(_losses(two)) == 3
    assert _losses(two) == pytest.approx(_losses(straight.out_dir), rel=1e-5)
    # 1 -> 2: the 1-process checkpoint resumes in 2 processes
    proc = _launch("local", "--nproc", "2", "--devices-per-process", "4", "--", sys.executable, "-m", "rlpt.train",
                   *more, f"train.out_dir={tmp_path / 'one_to_two'}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert _losses(tmp_path / "one_to_two") == pytest.approx(_losses(straight.out_dir), rel=1e-5)


def _two_and_one(tmp_path):
    """The SFT run as 2 processes of 4 devices and as 1 of 8 (this process): same losses and data; (two, one)."""
    two = tmp_path / "two"
    proc = _launch("local", "--nproc", "2", "--devices-per-process", "4", "--", sys.executable, "-m", "rlpt.train",
                   *SFT, f"train.out_dir={two}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("[p0] step 2/2") for ln in lines) and not any(ln.startswith("[p1] step") for ln in lines)
    assert (two / "logs" / "process_1.log").is_file()  # process 1's output goes to its log, the console is process 0's
    summary = json.loads([ln for ln in lines if ln.startswith("[p0] {")][-1][len("[p0] "):])
    assert summary["process_count"] == 2 and not any(ln.startswith("[p1] {") for ln in lines)  # process 0 reports
    assert (two / "checkpoints" / "2").is_dir()
    # the same run in this process: 8 fake devices (tests/conftest.py), the same global mesh and data
    one = rlpt.run(SFT + [f"train.out_dir={tmp_path / 'one'}"])
    assert one.summary["process_count"] == 1
    assert _losses(two) == pytest.approx(_losses(one.out_dir), rel=1e-5)
    assert [r["data/examples"] for r in _rows(two)] == [r["data/examples"] for r in _rows(one.out_dir)]
    return two, one


def test_grpo_as_two_processes_matches_one(tmp_path):
    """Each process samples and verifies its 2 of the 4 prompts with its own sampler; the shares are exchanged, so
    rewards, losses and the final weights are those of one process (2 steps: the second trains on rollouts of the
    weights the first update made and synced)."""
    two = _two_processes(GRPO, tmp_path / "two")
    one = rlpt.run(GRPO + [f"train.out_dir={tmp_path / 'one'}"])
    a, b = _rows(tmp_path / "two" / "rl"), _rows(tmp_path / "one" / "rl")
    assert len(a) == len(b) == 2
    assert [r["reward_mean"] for r in a] == pytest.approx([r["reward_mean"] for r in b], rel=1e-6)
    assert len({r["reward_mean"] for r in a}) > 1 or any(r["reward_std"] > 0 for r in a)  # rewards that vary
    assert [r["loss"] for r in a] == pytest.approx([r["loss"] for r in b], rel=1e-5, abs=1e-6)
    assert two["tokens_generated"] == one.summary["tokens_generated"]
    _same_weights(tmp_path / "two", tmp_path / "one")


def test_grpo_with_the_sampler_on_its_own_devices_matches_colocated(tmp_path):
    """rl.placement=split: the sampler on 4 devices of its own, the trainer's mesh on the other 4, weights copied
    after each update; the run is the colocated one."""
    rlpt.run(GRPO + [f"train.out_dir={tmp_path / 'one'}"])
    b = _rows(tmp_path / "one" / "rl")
    split = rlpt.run(GRPO + ["rl.placement=split", f"train.out_dir={tmp_path / 'split'}"])
    assert (split.summary["trainer_devices"], split.summary["sampler_devices"]) == (4, 4)
    c = _rows(tmp_path / "split" / "rl")
    assert [r["reward_mean"] for r in c] == pytest.approx([r["reward_mean"] for r in b], rel=1e-6)
    assert [r["loss"] for r in c] == pytest.approx([r["loss"] for r in b], rel=1e-5, abs=1e-6)
    assert all(r["weight_sync_s"] > 0 for r in c) and all(r["weight_sync_s"] == 0 for r in b)
    _same_weights(tmp_path / "split", tmp_path / "one")


def test_dpo_as_two_processes_matches_one(tmp_path):
    """Pairs are sampled chunk-wise across the processes and exchanged; the DPO losses and weights are those of one
    process."""
    _two_processes(DPO, tmp_path / "two")
    rlpt.run(DPO + [f"train.out_dir={tmp_path / 'one'}"])
    assert _losses(tmp_path / "two") == pytest.approx(_losses(tmp_path / "one"), rel=1e-5)
    _same_weights(tmp_path / "two", tmp_path / "one")


def test_processes_with_different_configs_stop_naming_the_key(tmp_path):
    cmd = (f"exec {sys.executable} -m rlpt.train experiment=sft_tiny train.steps=1 train.eval_every=0 "
           f"train.out_dir={tmp_path} runtime.compilation_cache= optim.lr=$((JAX_PROCESS_ID + 1))e-3")
    proc = _launch("local", "--nproc", "2", "--devices-per-process", "1", "--", "sh", "-c", cmd, timeout=120)
    assert proc.returncode == 1
    assert "config differs between processes: optim.lr is 0.001 in process 0 and 0.002 in process 1" in proc.stdout


def test_a_peer_that_dies_mid_collective_stops_the_run_without_a_launcher(tmp_path):
    """No launcher to kill the others: the survivor's collective fails (gloo) or the coordination service's
    heartbeat (mesh.heartbeat_s) ends it, well within a minute, instead of a hang."""
    script = tmp_path / "loop.py"
    script.write_text(
        "import sys, jax, jax.numpy as jnp\n"
        "from rlpt.config.schema import MeshConfig\n"
        "from rlpt.parallel import maybe_initialize_distributed, peer_failure\n"
        "maybe_initialize_distributed(MeshConfig(heartbeat_s=5))\n"
        "mesh = jax.make_mesh((jax.device_count(),), ('data',))\n"
        "x = jax.device_put(jnp.ones(jax.device_count()), jax.NamedSharding(mesh, jax.P('data')))\n"
        "total = jax.jit(lambda v: v.sum(), out_shardings=jax.NamedSharding(mesh, jax.P()))\n"
        "print('ready', flush=True)\n"
        "try:\n"
        "    while True:\n"
        "        float(total(x))\n"
        "except Exception as e:\n"
        "    print('PEER', peer_failure(e), flush=True)\n"
        "    sys.exit(1)\n")
    port = free_port()
    env = dict(os.environ, RLPT_COMPILATION_CACHE="")
    procs = [subprocess.Popen([sys.executable, str(script)], env=process_env(env, r, 2, port, 1), cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    for p in procs:  # both in the loop of collectives (gloo prints its own lines first)
        assert any(line.strip() == "ready" for line in p.stdout)
    procs[1].send_signal(signal.SIGKILL)
    t0 = time.time()
    code = procs[0].wait(timeout=60)
    out = procs[0].stdout.read()
    procs[1].wait()
    assert code != 0 and time.time() - t0 < 60
    assert "PEER process 0 of 2: a cross-process collective failed" in out or "heartbeat" in out, out[-2000:]


def test_a_dead_process_stops_the_others_and_is_named():
    code = ("import os, time, sys\n"
            "if os.environ['JAX_PROCESS_ID'] == '1': sys.exit(3)\n"
            "time.sleep(120)\n")
    t0 = time.time()
    proc = _launch("local", "--nproc", "3", "--", sys.executable, "-c", code, timeout=60)
    assert proc.returncode == 3
    assert "[launch] process 1 exited with status 3; stopping the other 2" in proc.stdout
    assert time.time() - t0 < 30


def test_launch_needs_a_command():
    proc = _launch("local", "--nproc", "2")
    assert proc.returncode == 2 and "put the command after --" in proc.stderr


@pytest.mark.slow  # ~2 min; the default run covers SFT, GRPO and DPO, which these stages build on
@pytest.mark.parametrize("overrides", [
    ["experiment=agent_code_tiny", "rl.sft_steps=2", "rl.steps=2", "data.pool_size=8", "data.batch_size=2",
     "rl.eval_per_domain=2", "rl.rollout.prompts_per_step=2", "rl.rollout.group_size=2", "train.ckpt_every=2"],
    ["experiment=rm_tiny", "pref.sft_steps=2", "pref.steps=3", "pref.train_tasks=32", "pref.heldout_tasks=16"],
    ["experiment=ppo_rlhf_tiny", "pref.sft_steps=2", "pref.rm_steps=2", "rl.steps=2", "rl.ppo_epochs=2",
     "rl.rollout.prompts_per_step=4", "rl.rollout.group_size=2", "pref.eval_per_domain=4", "data.batch_size=8",
     "train.ckpt_every=2", "pref.train_tasks=32", "pref.heldout_tasks=16"],
], ids=["agent", "rm", "ppo_rlhf"])
def test_other_stages_run_as_two_processes(tmp_path, overrides):
    _two_processes(overrides + ["model.hidden_size=32", "model.intermediate_size=64", "train.progress=false",
                                "runtime.compilation_cache="], tmp_path / "run")
