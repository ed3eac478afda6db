"""Episode workspaces from a task template: snapshot and rollback, overlay on tmpfs when the host allows.

Overlay mode (root): a size-capped tmpfs holds layer 0 (the template, owned by the episode's uid), frozen
snapshot layers, and the writable upper layer; rollback drops layers and remounts (~1 ms). Copy mode
(elsewhere): snapshots are folder copies. Either way close() leaves no mount and no folder behind.

Everything under `path` was written by untrusted code, and the host side runs as root: mounts are nosuid and
nodev, and every host-side read or copy goes through the functions here, which open without following
symlinks and without blocking (a FIFO would hang the reader), accept regular files only, cap sizes, and copy
modes without setuid, setgid or sticky bits.
"""

import base64
import collections
import ctypes
import ctypes.util
import dataclasses
import functools
import os
import shutil
import stat
import subprocess
import tempfile
import weakref

_MNT_DETACH = 2
_MS_NOSUID, _MS_NODEV = 2, 4
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_DEPTH, _MAX_ENTRIES = 64, 100_000  # host-side copies stop there (recursion and fds per level)
# The latest workspace folders this process created (tests check that none outlives its episode).
RECENT_BASES: collections.deque = collections.deque(maxlen=4096)


@functools.lru_cache(maxsize=1)
def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _mount(src: str, target: str, fstype: str, data: str) -> None:
    flags = _MS_NOSUID | _MS_NODEV  # a setuid file or device node written by the sandbox means nothing here
    if _libc().mount(src.encode(), target.encode(), fstype.encode(), flags, data.encode()) != 0:
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
            copy_tree(self._layers[-1], self.path, max_bytes=self.size_mb << 20, links="all")
            self._chown(self.path)

    def snapshot(self) -> int:
        """Freeze the current state; returns its id for rollback (0 is the template)."""
        name = f"layer{len(self._layers)}"
        if self.mode == "overlay":
            _umount(self.path)
            self._mounted.remove(self.path)
            os.rename(os.path.join(self.base, "upper"), os.path.join(self.base, name))
        else:
            copy_tree(self.path, os.path.join(self.base, name), max_bytes=self.size_mb << 20, links="all")
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

    def keep(self, dest: str, max_bytes: int | None = None) -> "CopyReport":
        """Copy the current state to a new folder dest (e.g. a failed episode for the data flywheel).

        Folders, regular files (no setuid/setgid/sticky bits, at most max_bytes in all, default the
        workspace's size) and symlinks that can only lead further down are copied; FIFOs, sockets, devices,
        other symlinks and files over the budget are skipped and listed in the returned report.
        """
        budget = (self.size_mb << 20) if max_bytes is None else max_bytes
        return copy_tree(self.path, dest, max_bytes=budget, links="inside")

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
    # O_NONBLOCK: opening a FIFO for writing would wait for a reader; O_TRUNC only after fstat says regular
    try:
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise ValueError(f"{rel!r} cannot be written: {e.strerror}") from None
    _require_regular(fd, rel)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        fh.write(content)
    if owner is not None:
        for d in missing:
            os.chown(d, owner, owner)
        os.chown(full, owner, owner)


def read_inside(root: str, rel: str, max_bytes: int = 1 << 20) -> str | None:
    """Text of a workspace file (its first max_bytes), or None if it does not exist.

    Never blocks and never follows a symlink out: ValueError for a FIFO, socket, device or folder.
    """
    full = resolve_inside(root, rel)
    try:
        fd = os.open(full, _O_READ)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise ValueError(f"{rel!r} cannot be read: {e.strerror}") from None
    _require_regular(fd, rel)
    with os.fdopen(fd, "rb") as fh:
        return fh.read(max_bytes).decode("utf-8", errors="replace")


def _require_regular(fd: int, rel: str) -> None:
    """ValueError (closing fd) unless fd is a regular file."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ValueError(f"{rel!r} is not a regular file ({_kind(mode).split(':')[0]})")


@dataclasses.dataclass
class CopyReport:
    """What copy_tree did: dest, regular files and bytes copied, and (relative path, reason) per skipped entry."""

    dest: str
    files: int = 0
    bytes: int = 0
    entries: int = 0
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def copy_tree(src: str, dest: str, *, max_bytes: int, links: str = "inside") -> CopyReport:
    """Copy a folder the sandbox wrote into a new folder dest, without trusting anything in it.

    Walks with directory fds (nothing is followed through a symlink, even one swapped in midway); opens files
    O_NOFOLLOW | O_NONBLOCK and copies them only if fstat says they are regular; modes keep only the 0o777
    bits. links="inside": keep symlinks whose target is relative with no '..' (they can only lead further
    down, even chained); links="all": keep every symlink as it is (for copy-mode layers that stay inside).
    """
    if links not in ("inside", "all"):
        raise ValueError(f"links must be 'inside' or 'all', got {links!r}")
    report = CopyReport(dest)
    top = os.open(src, _O_DIR)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
        os.mkdir(dest, 0o700)
        _copy_dir(top, dest, "", report, max_bytes, links)
        os.chmod(dest, stat.S_IMODE(os.fstat(top).st_mode) & 0o777)
    finally:
        os.close(top)
    return report


def _copy_dir(dfd: int, dest: str, rel: str, report: CopyReport, max_bytes: int, links: str) -> None:
    with os.scandir(dfd) as it:
        names = [e.name for e in it]
    for name in names:
        r, target = os.path.join(rel, name), os.path.join(dest, name)
        report.entries += 1
        if report.entries > _MAX_ENTRIES:
            report.skipped.append((r, f"over the copy budget of {_MAX_ENTRIES} entries"))
            continue
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError as e:
            report.skipped.append((r, f"unreadable: {e.strerror}"))
            continue
        if stat.S_ISDIR(st.st_mode):
            if r.count("/") >= _MAX_DEPTH:
                report.skipped.append((r, f"folder deeper than {_MAX_DEPTH} levels"))
                continue
            try:
                sub = os.open(name, _O_DIR, dir_fd=dfd)
            except OSError as e:
                report.skipped.append((r, f"unreadable: {e.strerror}"))
                continue
            try:
                os.mkdir(target, 0o700)
                _copy_dir(sub, target, r, report, max_bytes, links)
            finally:
                os.close(sub)
            os.chmod(target, st.st_mode & 0o777)
        elif stat.S_ISREG(st.st_mode):
            _copy_file(dfd, name, target, r, report, max_bytes)
        elif stat.S_ISLNK(st.st_mode):
            link = os.readlink(name, dir_fd=dfd)
            if links == "all" or (link and not link.startswith("/") and ".." not in link.split("/")):
                os.symlink(link, target)
            else:
                report.skipped.append((r, f"symlink to {link[:200]!r} could lead out"))
        else:
            report.skipped.append((r, _kind(st.st_mode)))


def _copy_file(dfd: int, name: str, target: str, rel: str, report: CopyReport, max_bytes: int) -> None:
    try:
        fd = os.open(name, _O_READ, dir_fd=dfd)
    except OSError as e:
        report.skipped.append((rel, f"unreadable: {e.strerror}"))
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped after the stat above
            report.skipped.append((rel, _kind(st.st_mode)))
            return
        if report.bytes + st.st_size > max_bytes:
            report.skipped.append((rel, f"over the copy budget of {max_bytes} bytes"))
            return
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            left = max_bytes - report.bytes
            while left > 0 and (chunk := os.read(fd, min(1 << 20, left))):
                os.write(out, chunk)  # regular files take whole writes
                left -= len(chunk)
                report.bytes += len(chunk)
            os.fchmod(out, st.st_mode & 0o777)  # never setuid, setgid or sticky
        finally:
            os.close(out)
        report.files += 1
    finally:
        os.close(fd)


_KINDS = (
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISDIR, "folder"),
)


def _kind(mode: int) -> str:
    kind = next((k for test, k in _KINDS if test(mode)), f"file type {stat.S_IFMT(mode):o}")
    return f"{kind}: not copied"


def dump_tree(root: str, max_bytes: int) -> dict:
    """A workspace's contents as JSON-able entries, to pause an episode and bring it back (`load_tree`):
    {relative path: ["dir", mode] | ["file", mode, base64 bytes] | ["link", target]}.

    Walks without following symlinks (a link is kept as its target text) and reads regular files only, opened
    O_NOFOLLOW | O_NONBLOCK; modes keep the 0o777 bits. ValueError naming the path for a FIFO, socket or device,
    or once the files pass max_bytes in all.
    """
    out, total = {}, 0
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs) + sorted(files):
            full = os.path.join(top, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ["link", os.readlink(full)]
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ["dir", stat.S_IMODE(st.st_mode) & 0o777]
            elif stat.S_ISREG(st.st_mode):
                fd = os.open(full, _O_READ)
                _require_regular(fd, rel)
                with os.fdopen(fd, "rb") as fh:
                    data = fh.read(max_bytes - total + 1)
                total += len(data)
                if total > max_bytes:
                    raise ValueError(f"workspace files pass {max_bytes} bytes at {rel!r}; it cannot be saved")
                out[rel] = ["file", stat.S_IMODE(st.st_mode) & 0o777, base64.b64encode(data).decode("ascii")]
            else:
                raise ValueError(f"{rel!r} is a {_kind(st.st_mode).split(':')[0]}; a workspace with one cannot "
                                 "be saved")
    return out


def load_tree(root: str, tree: dict, owner: int | None) -> None:
    """Make `root`'s contents exactly `tree` (from `dump_tree`): everything in it is removed first, then the
    folders, files and links are made in path order, owned by `owner`."""
    modes = []
    for name in os.listdir(root):
        full = os.path.join(root, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.unlink(full)
    for rel in sorted(tree):
        kind, *rest = tree[rel]
        full = os.path.join(resolve_inside(root, os.path.dirname(rel) or "."), os.path.basename(rel))
        if kind == "dir":
            os.mkdir(full, 0o700)
            modes.append((full, rest[0]))  # set last: a read-only folder must still take its entries
        elif kind == "file":
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, rest[0])
            with os.fdopen(fd, "wb") as fh:
                fh.write(base64.b64decode(rest[1]))
                os.fchmod(fh.fileno(), rest[0])
        elif kind == "link":
            os.symlink(rest[0], full)
        else:
            raise ValueError(f"workspace entry {rel!r} has kind {kind!r}; expected dir, file or link")
        if owner is not None:
            os.lchown(full, owner, owner)
    for full, mode in reversed(modes):
        os.chmod(full, mode)
