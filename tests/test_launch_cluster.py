"""`python -m rlpt.launch slurm|tpu|gpu`: the generated launch files (no cluster here: checked by content), and the
multi-node GPU script run for real as two "nodes" on this machine."""
import os
import subprocess
import sys

import pytest
import yaml

from rlpt.launch.cluster import tpu_slice_hosts
from rlpt.launch.local import free_port

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = ["python", "-m", "rlpt.train", "experiment=quickstart"]


def _launch(*args):
    return subprocess.run([sys.executable, "-m", "rlpt.launch", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_slurm_script_runs_one_process_per_node(tmp_path):
    out = tmp_path / "job.sbatch"
    proc = _launch("slurm", "--nodes", "4", "--gpus-per-node", "8", "--partition", "gpu", "--time", "04:00:00",
                   "--out", str(out), "--", *TRAIN)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == f"sbatch {out}"
    text = out.read_text()
    for line in ("#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --partition=gpu", "#SBATCH --time=04:00:00",
                 "srun --kill-on-bad-exit=1 python -m rlpt.train experiment=quickstart mesh.distributed=true"):
        assert line in text.splitlines(), line
    assert os.access(out, os.X_OK)


def test_tpu_command_runs_on_every_worker():
    proc = _launch("tpu", "--name", "my-v5p", "--zone", "us-east5-a", "--project", "proj", "--", *TRAIN)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("gcloud compute tpus tpu-vm ssh my-v5p --zone=us-east5-a --worker=all "
                                   "--project=proj '--command=cd ~/rlpt && python -m rlpt.train "
                                   "experiment=quickstart mesh.distributed=true'")
    assert _launch("tpu", "--", *TRAIN).returncode == 2


@pytest.mark.parametrize("tpu_type, topology, hosts", [("v5p-64", "2x4x4", 8), ("v5e-16", "4x4", 4),
                                                      ("v6e-8", "2x4", 2)])
def test_gke_jobset_has_one_pod_per_tpu_host(tmp_path, tpu_type, topology, hosts):
    out = tmp_path / "jobset.yaml"
    proc = _launch("tpu", "--gke", "--type", tpu_type, "--topology", topology, "--image", "gcr.io/p/rlpt:1",
                   "--out", str(out), "--", *TRAIN)
    assert proc.returncode == 0, proc.stderr
    job = yaml.safe_load(out.read_text())
    assert job["kind"] == "JobSet"
    spec = job["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert spec["parallelism"] == spec["completions"] == hosts == tpu_slice_hosts(tpu_type)[2]
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == topology
    assert pod["containers"][0]["resources"]["limits"]["google.com/tpu"] == 4
    assert pod["containers"][0]["command"][-1].endswith("experiment=quickstart mesh.distributed=true")
    bad = _launch("tpu", "--gke", "--type", "v9-8", "--topology", "2x2", "--image", "x", "--", *TRAIN)
    assert bad.returncode == 2 and "generation one of" in bad.stderr


def test_gpu_node_script_starts_one_program_across_nodes(tmp_path):
    """The per-node script, run for two "nodes" on this machine, joins them into one JAX program."""
    out = tmp_path / "node.sh"
    probe = ("import jax; from rlpt.config.schema import MeshConfig; "
             "from rlpt.parallel import maybe_initialize_distributed; maybe_initialize_distributed(MeshConfig()); "
             "print('joined', jax.process_index(), jax.process_count(), jax.device_count())")
    proc = _launch("gpu", "--nnodes", "2", "--coordinator", f"127.0.0.1:{free_port()}", "--workdir", REPO,
                   "--out", str(out), "--", sys.executable, "-c", probe)
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    nodes = [subprocess.Popen(["bash", str(out), str(r)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(2)]
    outs = [n.communicate(timeout=120)[0] for n in nodes]
    for r, text in enumerate(outs):
        assert f"joined {r} 2 4" in text, text[-2000:]
    assert _launch("gpu", "--nnodes", "2", "--coordinator", "nohost", "--", "x").returncode == 2
