"""Audit log of every trajectory: gzip JSONL files rotated by compressed size, oldest deleted past a count."""
import glob
import gzip
import json
import os


def _index(path: str) -> int:
    return int(os.path.basename(path).split("-")[1].split(".")[0])


def log_files(directory: str) -> list[str]:
    """The log files of a trajectory log directory, oldest first."""
    return sorted(glob.glob(os.path.join(directory, "trajectories-*.jsonl.gz")), key=_index)


class TrajectoryLog:
    """Writes one JSON record per line to <dir>/trajectories-<index>.jsonl.gz. A file is closed (a complete
    gzip member, readable on its own) once its compressed size passes max_bytes; at most max_files are kept.
    Indices continue after existing files, so a resumed run appends instead of overwriting."""

    def __init__(self, directory: str, max_bytes: int, max_files: int):
        if max_bytes <= 0 or max_files < 1:
            raise ValueError(f"observe.traj_log_max_bytes must be > 0 and traj_log_max_files >= 1, "
                             f"got {max_bytes}, {max_files}")
        os.makedirs(directory, exist_ok=True)
        self.dir, self.max_bytes, self.max_files = directory, max_bytes, max_files
        self.index = max((_index(p) for p in log_files(directory)), default=-1) + 1
        self.records = 0
        self._raw = self._gz = None

    def _open(self):
        path = os.path.join(self.dir, f"trajectories-{self.index:06d}.jsonl.gz")
        self._raw = open(path, "ab")
        self._gz = gzip.GzipFile(fileobj=self._raw, mode="ab")
        self.index += 1
        for old in log_files(self.dir)[:-self.max_files]:
            os.remove(old)

    def _close_file(self):
        if self._gz is not None:
            self._gz.close()
            self._raw.close()
            self._gz = self._raw = None

    def write(self, records: list[dict]):
        if self._gz is None:
            self._open()
        for rec in records:
            self._gz.write((json.dumps(rec) + "\n").encode("utf-8"))
        self.records += len(records)
        self._gz.flush()  # a sync point: the compressed size is now on disk
        if self._raw.tell() >= self.max_bytes:
            self._close_file()

    def close(self):
        self._close_file()


def read_trajectories(directory: str) -> list[dict]:
    """All records of a trajectory log directory, oldest file first."""
    out = []
    for path in log_files(directory):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            out.extend(json.loads(line) for line in f if line.strip())
    return out
