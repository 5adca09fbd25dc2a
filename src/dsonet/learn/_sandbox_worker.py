"""The pre-imported worker that runs model-written code inside the sandbox (see sandbox.py).

Runs under bubblewrap with the interpreter of the drift venv, which has no dsonet: stdlib only, plus
the modules named by --preload and `_sandbox_canonical`, bound beside it (a result's canonical form).
Protocol: one JSON request per line on stdin, one JSON reply per line on the protocol fd (the original stdout, kept away from the answer's prints). Each request is
run in a forked child, so the imports are paid once per worker and a run costs a fork.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import io
import json
import math
import os
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback

from _sandbox_canonical import canonical, stable  # beside this file (see its docstring)

TMP = "/tmp"  # the sandbox's private tmpfs, emptied after every run; each run gets a fresh directory in it
FILE_BYTES = 64 << 20  # RLIMIT_FSIZE: no single file the answer writes grows past this
OPEN_FILES = 256  # RLIMIT_NOFILE: enough for any library call, too few to exhaust the tmpfs inodes
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
# Syscalls an answer never needs and kernel exploits favour: new namespaces (a user namespace would give
# it capabilities there, and an uncapped tmpfs), keyrings, bpf, perf, userfaultfd, io_uring, ptrace.
# (audit arch, numbers) per machine; elsewhere the rlimits and bwrap hold alone.
DENIED_SYSCALLS = {
    "x86_64": (0xC000003E, (272, 308, 248, 249, 250, 321, 298, 323, 425, 101)),
    "aarch64": (0xC00000B7, (97, 268, 217, 218, 219, 280, 241, 282, 425, 117)),
}
X32_BIT = 0x40000000  # x86_64's x32 ABI numbers: another way to name the same syscalls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preload", default="")
    parser.add_argument("--drop-to", type=int, default=-1, help="uid/gid to become when started as root")
    parser.add_argument("--result-bytes", type=int, required=True)
    args = parser.parse_args()
    if args.drop_to >= 0 and os.getuid() == 0:
        # uid 0 ignores RLIMIT_NPROC, so the answer must not run as root even without capabilities
        os.setgroups([])
        os.setresgid(args.drop_to, args.drop_to, args.drop_to)
        os.setresuid(args.drop_to, args.drop_to, args.drop_to)
    # not dumpable: the answer runs as the same uid and must not ptrace or /proc/<pid>/mem the worker
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # a stray print in the worker must not corrupt the protocol
    try:
        for name in filter(None, args.preload.split(",")):
            importlib.import_module(name)
    except BaseException as exc:  # noqa: BLE001 - any import failure is reported, not raised
        _reply(protocol, {"ready": False, "error": _last_line(exc)})
        return
    gc.freeze()  # a child's collections then skip the preloaded objects instead of copying their pages
    _reply(protocol, {"ready": True, "uid": os.getuid()})
    for line in sys.stdin:
        request = json.loads(line)
        _reply(protocol, _run(request, args.result_bytes))


def _reply(protocol: io.TextIOBase, message: dict) -> None:
    protocol.write(json.dumps(message) + "\n")
    protocol.flush()


def _run(request: dict, result_bytes: int) -> dict:
    limits = request["limits"]
    workdir = tempfile.mkdtemp(dir=TMP)
    out_path = workdir + ".out"
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        _child(request, limits, workdir, out_path, write_fd, result_bytes)
    os.close(write_fd)
    data, reason = _collect(read_fd, pid, started, limits, result_bytes + 8 * limits["output_bytes"])
    os.close(read_fd)
    if not _exits_by(pid, max(_deadline(pid, started, limits), time.monotonic() + 0.5)):
        os.kill(pid, signal.SIGKILL)  # it closed the pipe but lives on (a sleep, say)
        data, reason = b"", "wall"
    _, status, usage = os.wait4(pid, 0)
    reply = _verdict(data, reason, status, usage, limits)
    reply["stdout"] = _merge_output(reply.get("stdout", ""), out_path, limits["output_bytes"])
    # nothing a run leaves may reach the next one; SysV IPC objects outlive their process, so a run
    # that made one gets a fresh worker (and with it a fresh IPC namespace)
    reply["recycle"] = not _wipe(TMP) or _ipc_left()
    return reply


def _wipe(top: str) -> bool:
    try:
        for entry in os.scandir(top):
            if entry.is_dir(follow_symlinks=False):
                _rmtree(entry.path)
            else:
                os.unlink(entry.path)
    except OSError:
        return False
    return True


def _ipc_left() -> bool:
    for kind in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{kind}") as table:
            if len(table.readlines()) > 1:  # a header line, then one line per object
                return True
    return False


def _collect(fd: int, pid: int, started: float, limits: dict, cap: int) -> tuple[bytes, str]:
    """Read the child's reply until EOF, the wall-clock deadline or the size cap (then kill it)."""
    chunks, size = [], 0
    while True:
        left = _deadline(pid, started, limits) - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            return b"", "wall"
        if not select.select([fd], [], [], left)[0]:
            continue  # the deadline moves while the child waits for a core: look again
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks), ""
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            os.kill(pid, signal.SIGKILL)
            return b"", "size"


def _deadline(pid: int, started: float, limits: dict) -> float:
    """When the child's wall-clock limit runs out: time spent waiting for a core does not count.

    On a loaded machine a starved one-line check would otherwise fail with a TimeoutError that says
    nothing of the answer (and a lesson's gate verdict would depend on the machine's load). A sleep
    or a blocked read waits on no runqueue, so it still stops at wall_s; a busy child stops at its
    CPU limit; `wall_cap_s` bounds the whole run even on a machine that never gives it a core.
    """
    try:
        with open(f"/proc/{pid}/schedstat") as stats:  # ns on a CPU, ns runnable but waiting, slices
            waited = int(stats.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):  # the child is gone, or a kernel without schedstat
        waited = 0.0
    return started + min(limits["wall_s"] + waited, limits["wall_cap_s"])


def _exits_by(pid: int, deadline: float) -> bool:
    """Whether the child exits before `deadline` (a pidfd turns readable when it does)."""
    pidfd = os.pidfd_open(pid)
    try:
        return bool(select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))[0])
    finally:
        os.close(pidfd)


def _verdict(data: bytes, reason: str, status: int, usage: resource.struct_rusage, limits: dict) -> dict:
    if reason == "wall":
        return _failed(f"TimeoutError: wall-clock limit of {limits['wall_s']:g} s")
    if reason == "size":
        return _failed("ValueError: the result is larger than the sandbox returns")
    if data:
        try:
            reply = json.loads(data)
        except ValueError:
            return _failed("RuntimeError: the answer's process wrote an unreadable result")
        if isinstance(reply, dict):
            return reply
    cpu = usage.ru_utime + usage.ru_stime
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= limits["cpu_s"]):
            return _failed(f"TimeoutError: CPU-time limit of {limits['cpu_s']:g} s")
        return _failed(f"RuntimeError: the answer's process died of {signal.Signals(sig).name}")
    code = os.waitstatus_to_exitcode(status)
    return _failed(f"SystemExit: the answer's process exited with status {code} before returning")


def _failed(error: str) -> dict:
    return {"ok": False, "value": None, "error": error}


def _merge_output(captured: str, out_path: str, limit: int) -> str:
    """Python-level prints, then whatever C code wrote to fds 1 and 2, cut to `limit` bytes."""
    try:
        with open(out_path, "rb") as f:
            raw = f.read(limit)
    except OSError:
        raw = b""
    merged = captured.encode("utf-8", "replace") + raw
    return merged[:limit].decode("utf-8", "replace")


def _rmtree(path: str) -> None:
    # onexc replaces onerror from 3.12 (same arguments but the last, which _force_remove ignores)
    handler = {"onexc" if sys.version_info >= (3, 12) else "onerror": _force_remove}
    shutil.rmtree(path, **handler)


def _force_remove(func, path, _exc_info) -> None:
    """rmtree's retry for a directory the answer made unwritable (it runs as our uid)."""
    os.chmod(os.path.dirname(path), 0o700)
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, 0o700)
        _rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _child(request: dict, limits: dict, workdir: str, out_path: str, result_fd: int, result_bytes: int) -> None:
    try:
        os.closerange(3, result_fd)
        os.closerange(result_fd + 1, 1 << 16)
        os.chdir(workdir)
        os.environ["TMPDIR"] = workdir  # tempfile's files land in the run's directory too
        tempfile.tempdir = None
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-size write fails with EFBIG instead of killing
        _set_limits(limits)
        _deny_syscalls()
        captured = _Bounded(limits["output_bytes"])
        sys.stdout = sys.stderr = captured
        reply = _execute(request["code"], request["result"], limits, result_bytes)
        reply["stdout"] = captured.text()
        payload = json.dumps(reply).encode()
    except BaseException as exc:  # noqa: BLE001 - the child reports everything and exits
        payload = json.dumps(_failed(_last_line(exc))).encode()
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(result_fd, view) :]
    finally:
        os._exit(0)


def _set_limits(limits: dict) -> None:
    cpu = max(1, math.ceil(limits["cpu_s"]))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # soft: SIGXCPU; hard: SIGKILL a second later
    mapped = _address_space_bytes()
    memory = mapped + (limits["memory_mb"] << 20)
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # POSIX message queues hold kernel memory
    # no new processes or threads at all: fork bombs, os.system and subprocess fail with EAGAIN
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _deny_syscalls() -> None:
    """A seccomp filter: DENIED_SYSCALLS fail with EPERM, as does any syscall of another ABI (i386, x32)."""
    if os.uname().machine not in DENIED_SYSCALLS:
        return
    arch, numbers = DENIED_SYSCALLS[os.uname().machine]
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    n = len(numbers)
    deny_at = 6 + n  # index of the final `ret deny`
    program = [(load, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, deny), (load, 0, 0, 0)]
    program += [(jeq, deny_at - (4 + i) - 1, 0, nr) for i, nr in enumerate(numbers)]
    program += [(jge, deny_at - (4 + n) - 1, 0, X32_BIT), (ret, 0, 0, allow), (ret, 0, 0, deny)]
    filters = (_SockFilter * len(program))(*[_SockFilter(*op) for op in program])
    prog = _SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


def _address_space_bytes() -> int:
    """The worker's mapped size (VmSize): the memory limit is counted on top of the preloaded libraries."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _execute(code: str, result: str, limits: dict, result_bytes: int) -> dict:
    namespace: dict = {"__name__": "__sandbox__"}
    try:
        exec(compile(code, "<answer>", "exec"), namespace)  # noqa: S102 - running the answer is the sandbox's job
        if result not in namespace:
            return _failed(f"NameError: {result} was not assigned")
        value = canonical(namespace[result])
        encoded = json.dumps(value)
    except MemoryError as exc:
        return _failed(f"MemoryError: {str(exc) or 'out of memory'} (memory limit of {limits['memory_mb']} MB)")
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are answers' errors too
        return _failed(_last_line(exc))
    if len(encoded) > result_bytes:
        return _failed(f"ValueError: the result's JSON is {len(encoded)} bytes (limit {result_bytes})")
    return {"ok": True, "value": value, "error": ""}


def _last_line(exc: BaseException) -> str:
    return stable(traceback.format_exception_only(type(exc), exc)[-1].strip())


class _Bounded(io.TextIOBase):
    """A text stream keeping the first `limit` bytes written to it and dropping the rest."""

    def __init__(self, limit: int):
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if self.size < self.limit:
            part = s[: self.limit - self.size]
            self.parts.append(part)
            self.size += len(part.encode("utf-8", "replace"))
        return len(s)

    def text(self) -> str:
        return "".join(self.parts)


if __name__ == "__main__":
    main()
