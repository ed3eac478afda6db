"""`python -m rlpt.launch local --nproc N [--devices-per-process K] [--port P] -- CMD ...` (rlpt/launch/local.py)."""
import argparse
import sys

from rlpt.launch.local import launch_local


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("rlpt.launch: error: put the command after --, e.g. python -m rlpt.launch local --nproc 2 -- "
              "python -m rlpt.train experiment=sft_tiny", file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = argparse.ArgumentParser(prog="python -m rlpt.launch")
    sub = ap.add_subparsers(dest="where", required=True)
    local = sub.add_parser("local", help="N processes on this machine, the coordinator on loopback")
    local.add_argument("--nproc", type=int, required=True)
    local.add_argument("--devices-per-process", type=int, default=None, help="fake CPU devices per process")
    local.add_argument("--port", type=int, default=None, help="coordinator port (default: a free one)")
    args = ap.parse_args(argv[:cut])
    try:
        return launch_local(argv[cut + 1:], args.nproc, devices_per_process=args.devices_per_process,
                            port=args.port)
    except ValueError as e:
        print(f"rlpt.launch: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
