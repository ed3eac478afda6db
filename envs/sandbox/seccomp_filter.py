"""The seccomp filter for sandboxed code: no sockets but AF_UNIX, no ptrace, mount, namespaces, bpf, ...

Built with pyseccomp (PyPI, a ctypes binding of libseccomp) and handed to bubblewrap as compiled BPF.
"""

import errno
import functools
import tempfile
import threading

# Denied with EPERM: kernel attack surface and ways out of the sandbox.
DENIED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "userfaultfd",
    "open_by_handle_at",
    "name_to_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "quotactl",
    "syslog",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
    "modify_ldt",
    "vhangup",
    "lookup_dcookie",
    "fanotify_init",
    "move_pages",
    "mbind",
    "migrate_pages",
    "kcmp",
    "pidfd_getfd",
    "process_madvise",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "open_tree",
    "move_mount",
    "mount_setattr",
    "personality",
)
AF_UNIX = 1
# clone() flags that create namespaces; clone3 is answered with ENOSYS so libc falls back to clone.
_lock = threading.Lock()


def build_filter():
    """A pyseccomp.SyscallFilter: allow by default, deny the listed syscalls and non-AF_UNIX sockets."""
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    for name in DENIED_SYSCALLS:
        try:
            f.add_rule(sc.ERRNO(errno.EPERM), name)
        except (ValueError, RuntimeError, OSError) as e:
            if "resolve" not in str(e).lower() and "not found" not in str(e).lower():
                raise
    f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.NE, AF_UNIX))
    f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socketpair", sc.Arg(0, sc.NE, AF_UNIX))
    for bit in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    # rlimits, priority and scheduling of other processes (same uid: the warm slot's pid 1) stay out of reach;
    # glibc's getrlimit/setrlimit and nice() pass pid 0
    for name, arg in (
        ("prlimit64", 0),
        ("setpriority", 1),
        ("ioprio_set", 1),
        ("sched_setscheduler", 0),
        ("sched_setparam", 0),
        ("sched_setattr", 0),
    ):
        f.add_rule(sc.ERRNO(errno.EPERM), name, sc.Arg(arg, sc.NE, 0))
    return f


@functools.lru_cache(maxsize=1)
def bpf_program() -> bytes:
    """The compiled BPF program (built once per process; bwrap reads it from a pipe with --seccomp)."""
    with _lock, tempfile.TemporaryFile() as fh:
        build_filter().export_bpf(fh)
        fh.seek(0)
        return fh.read()
