"""Launch files for clusters: a SLURM batch script, Cloud TPU pod-slice commands (gcloud or a GKE JobSet), and a
per-node script for multi-node GPU machines. Each is a generated file plus the command that starts it; the
processes find each other the way `jax.distributed.initialize` does on that platform, and rlpt's stage command
gets `mesh.distributed=true` (rlpt.parallel.maybe_initialize_distributed).

- SLURM: one task per node (`--ntasks-per-node=1`), each owning the node's GPUs; JAX reads the coordinator, the
  process count and id from SLURM's variables (SLURM_JOB_NODELIST, SLURM_NTASKS, SLURM_PROCID).
- Cloud TPU: the same command on every worker of the slice (`gcloud compute tpus tpu-vm ssh --worker=all`); JAX
  reads the slice's metadata. On GKE, a JobSet with one pod per TPU VM host (JAX reads the pod's environment).
- Multi-node GPU without a scheduler (torchrun style): a script run once per node with its rank; it exports
  JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID.
"""
import json
import os
import shlex
import stat

DISTRIBUTED = "mesh.distributed=true"

# TPU generation -> (chips per VM host, GKE accelerator label); a slice of n chips has n / chips-per-host hosts
TPU_HOSTS = {"v4": (4, "tpu-v4-podslice"), "v5e": (4, "tpu-v5-lite-podslice"), "v5p": (4, "tpu-v5p-slice"),
             "v6e": (4, "tpu-v6e-slice")}


def stage_command(cmd: list[str]) -> str:
    """The user's command as one shell line, with mesh.distributed=true added to an rlpt entry point."""
    if not cmd:
        raise ValueError("no command to launch: put it after --, e.g. -- python -m rlpt.train experiment=sft_tiny")
    parts = list(cmd)
    if any(p.startswith("rlpt.") for p in parts) and not any(p.startswith("mesh.distributed=") for p in parts):
        parts.append(DISTRIBUTED)
    return shlex.join(parts)


def _write(path: str, text: str, executable: bool = False) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    if executable:
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def slurm_script(cmd: list[str], *, nodes: int, gpus_per_node: int = 0, partition: str | None = None,
                 time_limit: str | None = None, account: str | None = None, job_name: str = "rlpt",
                 cpus_per_task: int | None = None, workdir: str | None = None) -> str:
    """An sbatch script: `nodes` nodes, one task (one JAX process) per node owning its GPUs."""
    if nodes < 1:
        raise ValueError(f"--nodes={nodes}: need at least 1 node")
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name}", f"#SBATCH --nodes={nodes}",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --output={job_name}-%j.out"]
    if gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={gpus_per_node}")
    for flag, value in (("partition", partition), ("time", time_limit), ("account", account),
                        ("cpus-per-task", cpus_per_task)):
        if value:
            lines.append(f"#SBATCH --{flag}={value}")
    lines += ["", "# One JAX process per node; jax.distributed reads SLURM's variables (coordinator: the first node).",
              "set -euo pipefail", f"cd {shlex.quote(workdir or os.getcwd())}",
              f"srun --kill-on-bad-exit=1 {stage_command(cmd)}", ""]
    return "\n".join(lines)


def tpu_command(cmd: list[str], *, name: str, zone: str, project: str | None = None,
                workdir: str = "~/rlpt") -> str:
    """The gcloud command that runs `cmd` on every worker of the TPU VM slice `name`."""
    remote = f"cd {workdir} && {stage_command(cmd)}"
    parts = ["gcloud", "compute", "tpus", "tpu-vm", "ssh", name, f"--zone={zone}", "--worker=all"]
    if project:
        parts.append(f"--project={project}")
    return shlex.join(parts + [f"--command={remote}"])


def tpu_slice_hosts(tpu_type: str) -> tuple[str, int, int]:
    """(generation, chips, VM hosts) of a Cloud TPU type such as v5p-64 (cores for v4/v5p) or v5e-16 (chips)."""
    gen, _, count = tpu_type.partition("-")
    if gen not in TPU_HOSTS or not count.isdigit():
        raise ValueError(f"--type={tpu_type!r}: expected <generation>-<n> with generation one of {sorted(TPU_HOSTS)}")
    chips = int(count) // 2 if gen in ("v4", "v5p") else int(count)
    per_host = TPU_HOSTS[gen][0]
    return gen, chips, max(1, chips // per_host)


def gke_jobset(cmd: list[str], *, tpu_type: str, topology: str, image: str, name: str = "rlpt",
               workdir: str = "/app") -> str:
    """A JobSet manifest (YAML) for a GKE TPU slice: one pod per VM host, each with the host's chips."""
    gen, chips, hosts = tpu_slice_hosts(tpu_type)
    per_host = min(TPU_HOSTS[gen][0], chips)
    command = f"cd {workdir} && {stage_command(cmd)}"
    return f"""apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: {name}
  annotations:
    alpha.jobset.sigs.k8s.io/exclusive-topology: cloud.google.com/gke-nodepool
spec:
  failurePolicy:
    maxRestarts: 0
  replicatedJobs:
    - name: workers
      replicas: 1
      template:
        spec:
          parallelism: {hosts}
          completions: {hosts}
          backoffLimit: 0
          template:
            spec:
              restartPolicy: Never
              nodeSelector:
                cloud.google.com/gke-tpu-accelerator: {TPU_HOSTS[gen][1]}
                cloud.google.com/gke-tpu-topology: {topology}
              containers:
                - name: rlpt
                  image: {image}
                  command: ["bash", "-c", {json.dumps(command)}]
                  resources:
                    limits:
                      google.com/tpu: {per_host}
"""


def gpu_node_script(cmd: list[str], *, nnodes: int, coordinator: str, workdir: str | None = None) -> str:
    """A script to run once on each of `nnodes` GPU nodes as `<script> <node rank>`: one JAX process per node,
    owning its GPUs, the coordinator on node 0's `host:port`."""
    if nnodes < 1:
        raise ValueError(f"--nnodes={nnodes}: need at least 1 node")
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--coordinator={coordinator!r}: expected host:port of node 0 (e.g. 10.0.0.1:12355)")
    return "\n".join([
        "#!/bin/bash",
        f"# Run on every node as: bash <this script> <node rank 0..{nnodes - 1}> (node 0 is the coordinator).",
        "set -euo pipefail",
        'if [ $# -ne 1 ]; then echo "usage: $0 <node rank>" >&2; exit 2; fi',
        f"export JAX_COORDINATOR_ADDRESS={shlex.quote(coordinator)}",
        f"export JAX_NUM_PROCESSES={nnodes}",
        'export JAX_PROCESS_ID="$1"',
        f"cd {shlex.quote(workdir or os.getcwd())}",
        f"exec {stage_command(cmd)}", ""])


def write_slurm(cmd, out: str, **kw) -> tuple[str, str]:
    return _write(out, slurm_script(cmd, **kw), executable=True), f"sbatch {shlex.quote(out)}"


def write_gpu(cmd, out: str, *, nnodes: int, **kw) -> tuple[str, str]:
    path = _write(out, gpu_node_script(cmd, nnodes=nnodes, **kw), executable=True)
    return path, f"on node r (0..{nnodes - 1}): bash {shlex.quote(out)} r"


def write_jobset(cmd, out: str, **kw) -> tuple[str, str]:
    return _write(out, gke_jobset(cmd, **kw)), f"kubectl apply -f {shlex.quote(out)}"
