"""The sandbox launcher: runs as `python -I -S -c <this file's text> <fd>`, its config JSON read
from the pipe `fd` (a command line is readable by every process in /proc).

It is a separate process image (not a preexec_fn) so it is safe to start from threads. It
contains the program and then execs it. Inside bubblewrap (which already built the namespaces
and the filesystem view) it does steps 3-5 only; as the fallback without bubblewrap, all:
  1. a new network namespace (only a downed loopback: every connection fails);
  2. a new mount namespace in which every mount is read-only except the scratch directory, which
     becomes a tmpfs of its own with a size limit (the scratch quota);
  3. resource limits: CPU seconds, address space, file size (caps stdout too), processes, files;
  4. as root: drops to an unprivileged uid of its own, so RLIMIT_NPROC counts (root ignores it)
     and a later `kill -1` as that uid removes every process the program left behind;
  5. as root: a PID namespace of the program's own, in which the program is PID 1: when it
     exits, the kernel kills every process it left (a forked daemon cannot write its output
     after it ended), before this launcher, which waits for it outside, reports its end;
  6. a parent-death signal (SIGKILL), set after the uid drop because changing credentials
     clears it.
What it achieved is written as one JSON line to the status fd (closed on exec). In "kill" mode it
becomes the sandbox uid and SIGKILLs every process of that uid.
Only the standard library; no rewardprof import (it runs with -I -S).
"""

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 32, 4096, 16384, 1 << 18
MS_NODEV, PR_SET_PDEATHSIG = 4, 1
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY, SYS_MOUNT_SETATTR = -100, 0x8000, 1, 442


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def drop_to(uid):
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def readonly_everything(libc):
    """Every mount read-only: mount_setattr(AT_RECURSIVE), else remount each one."""
    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    if (
        libc.syscall(
            SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)
        )
        == 0
    ):
        return True
    ok = True
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for p in points:
        if libc.mount(None, p.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY, None) != 0:
            ok = ok and p.startswith(("/proc", "/sys"))  # pseudo files: not writable as non-root
    return ok


def contain(cfg, status):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) == 0:
        status["net_isolated"] = True
    if (
        libc.unshare(CLONE_NEWNS) == 0
        and libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0
    ):
        scratch = cfg["scratch"].encode()
        if readonly_everything(libc):
            # The scratch directory alone gets a writable mount of its own: a tmpfs whose size
            # is the scratch quota, owned by the sandbox uid.
            uid, size = int(cfg["uid"]), int(cfg["scratch_bytes"])
            options = f"size={size},mode=0700,uid={uid},gid={uid}".encode()
            if libc.mount(b"tmpfs", scratch, b"tmpfs", MS_NOSUID | MS_NODEV, options) == 0:
                status["fs_readonly"] = status["scratch_quota"] = True
            else:
                raise OSError(ctypes.get_errno(), "cannot mount the scratch tmpfs")


def set_limits(cfg, status):
    cpu = int(cfg["cpu_s"])
    mem = int(cfg["memory_mb"]) << 20
    fsize = int(cfg["max_output_bytes"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    nproc = int(cfg["nproc"])
    if os.getuid() != 0:
        # Not root: the limit counts every process of this uid, so allow for those running.
        mine = 0
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    mine += os.stat(f"/proc/{pid}").st_uid == os.getuid()
                except OSError:
                    continue
        nproc += mine
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    status["nproc_limited"] = True


def program_in_own_pid_namespace(status, fd):
    """Fork the program into a new PID namespace; this process stays outside, root, and ends
    as the program did (exit code or signal) once every process of the namespace is gone. It
    also writes how the program ended to the status fd: through bubblewrap a signal would only
    arrive as exit code 128 + n, like a program's own exit code."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWPID) != 0:
        return  # not allowed here: the program runs without (the status says so)
    status["pid_isolated"] = True
    child = os.fork()
    if child == 0:
        return
    try:
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        _, wait_status = os.waitpid(child, 0)
        code = os.waitstatus_to_exitcode(wait_status)  # -n: killed by signal n
        os.write(fd, (json.dumps({"program_exit": code}) + "\n").encode())
        if code < 0 and -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        if code < 0:
            os.kill(os.getpid(), -code)
        os._exit(code & 0xFF)
    finally:
        os._exit(125)  # the child started the program: never report a setup error from here


def read_config(fd):
    """The configuration from the pipe named in argv (never argv itself: /proc shows it)."""
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return json.loads(b"".join(chunks))


def main():
    cfg = read_config(int(sys.argv[1]))
    fd = cfg["status_fd"]
    if cfg["mode"] == "kill":
        drop_to(cfg["uid"])
        for _ in range(10):
            try:
                os.kill(-1, 9)  # every process of this uid except this one
            except ProcessLookupError:
                break
        os._exit(0)
    status = {
        "net_isolated": False,
        "fs_readonly": False,
        "nproc_limited": False,
        "uid_dropped": False,
        "scratch_quota": False,
        "dies_with_parent": False,
        "pid_isolated": False,
    }
    try:
        if cfg["contain"] and os.getuid() == 0:
            contain(cfg, status)
        set_limits(cfg, status)
        if os.getuid() == 0 and cfg["pid_namespace"]:
            program_in_own_pid_namespace(status, fd)
        if os.getuid() == 0:
            drop_to(cfg["uid"])
            status["uid_dropped"] = True
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0:
            status["dies_with_parent"] = True
        os.chdir(cfg["scratch"])
        os.write(fd, (json.dumps(status) + "\n").encode())
        os.set_inheritable(fd, False)
        os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
    except Exception as exc:  # report why the sandbox could not start
        os.write(fd, (json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n").encode())
        os._exit(125)


main()
