"""Episode workspaces from a task template: snapshot and rollback, overlay on tmpfs when the host allows.

Overlay mode (root): a size-capped tmpfs holds layer 0 (the template, owned by the episode's uid), frozen
snapshot layers, and the writable upper layer; rollback drops layers and remounts (~1 ms). Copy mode
(elsewhere): snapshots are folder copies. Either way close() leaves no mount and no folder behind.
"""

import collections
import ctypes
import ctypes.util
import functools
import os
import shutil
import subprocess
import tempfile
import weakref

_MNT_DETACH = 2
# The latest workspace folders this process created (tests check that none outlives its episode).
RECENT_BASES: collections.deque = collections.deque(maxlen=4096)


@functools.lru_cache(maxsize=1)
def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _mount(src: str, target: str, fstype: str, data: str) -> None:
    if _libc().mount(src.encode(), target.encode(), fstype.encode(), 0, data.encode()) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {fstype} on {target} failed: {os.strerror(e)}")


def _umount(target: str) -> None:
    if _libc().umount2(target.encode(), _MNT_DETACH) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"umount {target} failed: {os.strerror(e)}")


@functools.lru_cache(maxsize=1)
def overlay_available() -> bool:
    """Root can mount tmpfs and overlayfs here (probed once with a throwaway mount)."""
    if os.geteuid() != 0:
        return False
    try:
        ws = Workspace(None, mode="overlay", size_mb=1)
        ws.close()
        return True
    except OSError:
        return False


def _cleanup(base: str, mounted: list[str]) -> None:
    for m in reversed(mounted):
        try:
            _umount(m)
        except OSError:
            subprocess.run(["umount", "-l", m], capture_output=True)
    mounted.clear()
    shutil.rmtree(base, ignore_errors=True)


class Workspace:
    """A host folder (`path`) to bind at /workspace. template: folder copied in (None: empty)."""

    def __init__(
        self,
        template: str | None = None,
        *,
        owner_uid: int | None = None,
        size_mb: int = 128,
        mode: str = "auto",
    ):
        if template is not None and not os.path.isdir(template):
            raise FileNotFoundError(f"workspace template {template!r} is not a folder")
        if mode == "auto":
            mode = "overlay" if overlay_available() else "copy"
        if mode not in ("overlay", "copy"):
            raise ValueError(f"workspace mode must be auto, overlay or copy, got {mode!r}")
        self.mode, self.owner, self.size_mb = mode, owner_uid, size_mb
        self.base = tempfile.mkdtemp(prefix="rlpt-ws-")
        RECENT_BASES.append(self.base)
        os.chmod(self.base, 0o755)  # the sandbox uid must reach merged/ through it
        self._mounted: list[str] = []
        self._layers: list[str] = []
        # runs on close(), on garbage collection, or at interpreter exit: no mount outlives its owner
        self._cleanup = weakref.finalize(self, _cleanup, self.base, self._mounted)
        try:
            if mode == "overlay":
                _mount("tmpfs", self.base, "tmpfs", f"size={size_mb}m,mode=0755")
                self._mounted.append(self.base)
            self.path = os.path.join(self.base, "merged")
            layer0 = self._new_dir("layer0")
            if template is not None:
                shutil.copytree(template, layer0, dirs_exist_ok=True, symlinks=True)
            self._chown(layer0)
            self._layers.append(layer0)
            self._remount()
        except BaseException:
            self.close()
            raise

    def _new_dir(self, name: str) -> str:
        p = os.path.join(self.base, name)
        os.makedirs(p, exist_ok=True)
        return p

    def _chown(self, top: str) -> None:
        if self.owner is None:
            return
        os.chown(top, self.owner, self.owner)
        for root, dirs, files in os.walk(top):
            for n in dirs + files:
                os.lchown(os.path.join(root, n), self.owner, self.owner)

    def _remount(self) -> None:
        if self.mode == "overlay":
            if self.path in self._mounted:
                _umount(self.path)
                self._mounted.remove(self.path)
            for d in ("upper", "work"):
                shutil.rmtree(os.path.join(self.base, d), ignore_errors=True)
            upper, work, merged = self._new_dir("upper"), self._new_dir("work"), self._new_dir("merged")
            if self.owner is not None:
                os.chown(upper, self.owner, self.owner)
            lower = ":".join(reversed(self._layers))
            _mount("overlay", merged, "overlay", f"lowerdir={lower},upperdir={upper},workdir={work}")
            self._mounted.append(merged)
        else:
            shutil.rmtree(self.path, ignore_errors=True)
            shutil.copytree(self._layers[-1], self.path, symlinks=True)
            self._chown(self.path)

    def snapshot(self) -> int:
        """Freeze the current state; returns its id for rollback (0 is the template)."""
        name = f"layer{len(self._layers)}"
        if self.mode == "overlay":
            _umount(self.path)
            self._mounted.remove(self.path)
            os.rename(os.path.join(self.base, "upper"), os.path.join(self.base, name))
        else:
            shutil.copytree(self.path, os.path.join(self.base, name), symlinks=True)
        self._layers.append(os.path.join(self.base, name))
        self._remount()
        return len(self._layers) - 1

    def rollback(self, snapshot: int = 0) -> None:
        """Return to a snapshot (default: the template), dropping everything written after it."""
        if not 0 <= snapshot < len(self._layers):
            raise ValueError(f"no snapshot {snapshot}; have 0..{len(self._layers) - 1}")
        if self.path in self._mounted:
            _umount(self.path)
            self._mounted.remove(self.path)
        for layer in self._layers[snapshot + 1 :]:
            shutil.rmtree(layer, ignore_errors=True)
        del self._layers[snapshot + 1 :]
        self._remount()

    def keep(self, dest: str) -> str:
        """Copy the current state to dest (e.g. a failed episode for the data flywheel); returns dest."""
        shutil.copytree(self.path, dest, symlinks=True)
        return dest

    def close(self) -> None:
        """Unmount and delete everything (idempotent)."""
        self._cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def resolve_inside(root: str, rel: str) -> str:
    """Host path of rel inside root; refuses absolute paths, '..' escapes and symlinks leading out."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel:
        raise ValueError(f"path must be a non-empty relative path, got {rel!r}")
    root_real = os.path.realpath(root)
    full = os.path.realpath(os.path.join(root_real, rel))
    if full != root_real and not full.startswith(root_real + os.sep):
        raise ValueError(f"path {rel!r} leads outside the workspace")
    return full


def write_inside(root: str, rel: str, content: str, owner: int | None) -> None:
    """Write a file in the workspace from the host side without following a symlink out of it."""
    full = resolve_inside(root, rel)
    parent = os.path.dirname(full)
    missing = []
    p = parent
    while not os.path.isdir(p):
        missing.append(p)
        p = os.path.dirname(p)
    os.makedirs(parent, exist_ok=True)
    fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(content)
    if owner is not None:
        for d in missing:
            os.chown(d, owner, owner)
        os.chown(full, owner, owner)


def read_inside(root: str, rel: str, max_bytes: int = 1 << 20) -> str | None:
    """Text of a workspace file, or None if it does not exist (symlinks are not followed)."""
    full = resolve_inside(root, rel)
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(max_bytes).decode("utf-8", errors="replace")
