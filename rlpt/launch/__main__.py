"""`python -m rlpt.launch <where> [options] -- CMD ...`: one command as the processes of one JAX program.

local: N processes on this machine (rlpt/launch/local.py). slurm, tpu, gpu: the files and commands that start
CMD on a cluster (rlpt/launch/cluster.py); nothing is submitted from here.
"""
import argparse
import sys

from rlpt.launch import cluster
from rlpt.launch.local import launch_local


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m rlpt.launch")
    sub = ap.add_subparsers(dest="where", required=True)
    local = sub.add_parser("local", help="N processes on this machine, the coordinator on loopback")
    local.add_argument("--nproc", type=int, required=True)
    local.add_argument("--devices-per-process", type=int, default=None, help="fake CPU devices per process")
    local.add_argument("--port", type=int, default=None, help="coordinator port (default: a free one)")
    slurm = sub.add_parser("slurm", help="write an sbatch script: one JAX process per node")
    slurm.add_argument("--nodes", type=int, required=True)
    slurm.add_argument("--gpus-per-node", type=int, default=0)
    slurm.add_argument("--partition")
    slurm.add_argument("--time", dest="time_limit", help="SLURM time limit, e.g. 04:00:00")
    slurm.add_argument("--account")
    slurm.add_argument("--cpus-per-task", type=int)
    slurm.add_argument("--job-name", default="rlpt")
    slurm.add_argument("--workdir", help="folder the job runs in (default: this one)")
    slurm.add_argument("--out", default="rlpt.sbatch", help="script to write")
    tpu = sub.add_parser("tpu", help="the gcloud command for every worker of a TPU VM slice, or a GKE JobSet")
    tpu.add_argument("--name", help="TPU VM name (gcloud)")
    tpu.add_argument("--zone", help="its zone (gcloud)")
    tpu.add_argument("--project")
    tpu.add_argument("--workdir", default="~/rlpt", help="the checkout on the workers")
    tpu.add_argument("--gke", action="store_true", help="write a JobSet manifest instead")
    tpu.add_argument("--type", dest="tpu_type", help="slice type for --gke, e.g. v5p-64, v5e-16")
    tpu.add_argument("--topology", help="slice topology for --gke, e.g. 2x4x4")
    tpu.add_argument("--image", help="container image with rlpt, for --gke")
    tpu.add_argument("--out", default="rlpt-jobset.yaml", help="manifest to write (--gke)")
    gpu = sub.add_parser("gpu", help="write a per-node script for multi-node GPUs (torchrun style)")
    gpu.add_argument("--nnodes", type=int, required=True)
    gpu.add_argument("--coordinator", required=True, help="host:port of node 0")
    gpu.add_argument("--workdir", help="folder the nodes run in (default: this one)")
    gpu.add_argument("--out", default="rlpt-node.sh", help="script to write")
    return ap


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("rlpt.launch: error: put the command after --, e.g. python -m rlpt.launch local --nproc 2 -- "
              "python -m rlpt.train experiment=sft_tiny", file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = parser()
    args = ap.parse_args(argv[:cut])
    cmd = argv[cut + 1:]
    try:
        if args.where == "local":
            return launch_local(cmd, args.nproc, devices_per_process=args.devices_per_process, port=args.port)
        if args.where == "slurm":
            path, run = cluster.write_slurm(cmd, args.out, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                                            partition=args.partition, time_limit=args.time_limit,
                                            account=args.account, job_name=args.job_name,
                                            cpus_per_task=args.cpus_per_task, workdir=args.workdir)
        elif args.where == "gpu":
            path, run = cluster.write_gpu(cmd, args.out, nnodes=args.nnodes, coordinator=args.coordinator,
                                          workdir=args.workdir)
        elif args.gke:
            missing = [f"--{k}" for k in ("type", "topology", "image")
                       if getattr(args, {"type": "tpu_type"}.get(k, k)) is None]
            if missing:
                raise ValueError(f"tpu --gke needs {', '.join(missing)}")
            path, run = cluster.write_jobset(cmd, args.out, tpu_type=args.tpu_type, topology=args.topology,
                                             image=args.image)
        else:
            if not (args.name and args.zone):
                raise ValueError("tpu needs --name and --zone (or --gke with --type, --topology, --image)")
            path, run = None, cluster.tpu_command(cmd, name=args.name, zone=args.zone, project=args.project,
                                                  workdir=args.workdir)
    except ValueError as e:
        print(f"rlpt.launch: error: {e}", file=sys.stderr)
        return 2
    if path:
        print(f"wrote {path}")
    print(run)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
