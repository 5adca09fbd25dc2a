"""A sandbox for model-written code: one line assigning `r`, run and compared with a reference's.

Isolation is bubblewrap (Debian's `bubblewrap`, installed by `make system`): the worker runs in new
pid, network, ipc and uts namespaces (a network namespace of its own holds only a loopback: no route
anywhere, not to the host's localhost either), on a root built from read-only binds of /usr and of
the interpreter's prefixes, with a private 256 MiB tmpfs as /tmp (emptied after every run) and
nothing else writable: no home, no /work, no /etc beyond the loader cache. Started as root, bwrap
sets up the mounts and the worker drops to `nobody` (uid 0 ignores RLIMIT_NPROC); otherwise bwrap
maps the caller's uid in a user namespace. Without bwrap, or where it cannot make namespaces,
`Sandbox` refuses with a SandboxError saying how to fix it: model-written code never runs bare.

The worker imports the preload modules once, then forks a child per run; the child sets rlimits
(CPU, address space, file size, open files, no new processes or threads) and a seccomp filter (no new
namespaces, keyrings, bpf, perf, userfaultfd, io_uring or ptrace), runs the code in a fresh
directory with prints captured to a bounded buffer, and returns the canonical form of `r` as JSON
(never pickle: what comes out of the sandbox is untrusted). The worker kills a child at the
wall-clock limit, not counting the time the child waited for a core (from /proc/<pid>/schedstat;
at most WALL_STRETCH times the limit in all): a check's verdict must not depend on the machine's
load. This side has its own deadline and restarts a worker that died or hangs, or that a run left
SysV IPC objects in.

Canonical forms (JSON): None, bool, str, int and finite floats as themselves; lists as lists; any
other value as a one-key dict naming its kind: {"float": "nan"}, {"tuple": [...]}, {"set": sorted},
{"dict": sorted [key, value] pairs}, {"complex": [re, im]}, {"ndarray": {dtype, shape, values}},
{"npscalar": {dtype, value}}, {"DataFrame": {columns, index, dtypes, values by column}},
{"Series": {name, dtype, index, values}}, {"Index": {dtype, names, values}} (the index class is not
kept: a RangeIndex equals an int64 Index of the same labels), {"graph": {directed, multigraph,
attrs, nodes, edges}}, {"sparse": ndarray form}, {"na": "<NA>"}, else {"repr": ..., "type": ...}.
dtypes are kept whole ("float32", not just the kind "f"): NumPy 2's promotion rules show there.

Cost, measured on the dev container (2 cores shared by six sessions, load 2-8;
`DSONET_SANDBOX_PYTHON=.venv-drift/bin/python python -m dsonet.learn.sandbox MODULES...`):
worker start 0.15-0.4 s with numpy, 1.4-4 s with drift.PRELOAD (numpy, scipy, pandas, networkx,
sklearn and seven submodules); a trivial numpy line then costs 3-13 ms median with numpy and 8-47 ms
with drift.PRELOAD, against 0.4 s for a bare interpreter start + numpy. Most of the latter is the
fork itself: ~11 ms of CPU to copy 1545 mappings (175 MB resident), the rest waiting for a core.
Every drift fact's reference and stale line (278 runs): 36 ms median, 80 ms at most.

What answers cannot do: start threads or processes (os.fork, subprocess, threading and multiprocessing
fail; sklearn's n_jobs=2 and scipy.fft's workers=2 still run, on one thread, as BLAS does), write
outside /tmp, reach any network, or read anything of the host but the interpreter, /usr and the
loader cache.

Not contained: CPU is limited per run, not shared fairly (a run may use a whole core for cpu_s);
an answer may forge its own result (write JSON to the result pipe, patch the worker's canonical())
- it can only claim a value it could have computed; and the sandbox trusts the kernel and bwrap.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Self

from dsonet.errors import DsoError

WORKER = Path(__file__).with_name("_sandbox_worker.py")
CANONICAL = WORKER.with_name("_sandbox_canonical.py")  # the worker imports it from its own folder
REPO_DRIFT_PYTHON = Path(__file__).resolve().parents[3] / ".venv-drift" / "bin" / "python"
RESULT_BYTES = 1 << 20  # a canonical value's JSON; a drift answer is a scalar, a small array or frame
TMPFS_BYTES = 256 << 20  # the sandbox's whole /tmp: held in RAM, so small
START_TIMEOUT_S = 120.0  # importing pandas + scipy on a busy 2-core machine takes seconds, not minutes
REPLY_GRACE_S = 5.0  # past the wall limit, time for the worker to kill, reap and answer
# the wall limit leaves out time a run waited for a core, up to this many times wall_s in all
WALL_STRETCH = 4
NOBODY = 65534  # the uid the worker becomes when this process is root


class SandboxError(DsoError, RuntimeError):
    """The sandbox cannot run code: isolation unavailable, worker failed to start or keep running."""


class LimitsError(DsoError, ValueError):
    """A Limits field that is not a positive number."""


@dataclass(frozen=True)
class Limits:
    # a drift line is one library call on tiny data (milliseconds); 5 s leaves room for a slow scipy
    # routine on a loaded machine and stops an infinite loop quickly
    cpu_s: float = 5.0
    # on top of the pre-imported worker's own mappings: ample for small frames, stops a 50 GB allocation
    memory_mb: int = 1024
    # the feedback is one error line; 64 KiB of prints is plenty to debug and bounds every pipe
    output_bytes: int = 64 << 10
    # twice the CPU limit: on 2 shared cores a CPU-bound run may get half a core; also catches sleeps
    wall_s: float = 10.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            kinds = int if name in ("memory_mb", "output_bytes") else (int, float)
            if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
                what = "a positive integer" if kinds is int else "a positive number"
                raise LimitsError(f"Limits.{name}: {value!r} is not {what}; pass e.g. {name}={getattr(Limits, name)}")


@dataclass(frozen=True)
class RunResult:
    ok: bool
    value: object  # canonical JSON-able form of the requested variable (None when not ok)
    error: str  # '' when ok, else the error's last line
    stdout: str  # captured, truncated to the output limit
    seconds: float


def same(a: object, b: object, rtol: float = 1e-6, atol: float = 1e-9) -> bool:
    """Whether two canonical values are equal, floats within tolerance (NaN equals NaN).

    Kinds must match: a tuple is not a list, True is not 1, arrays and frames need equal dtypes,
    shapes and labels. The one leniency: plain numbers compare by value across int, float and numpy
    scalars (`2 == 2.0`, `np.float64(0.5) == 0.5`), because an answer that converts with float()
    computed the same thing; two numpy scalars must share their dtype (float32 is not float64).
    """
    if _is_number(a) and _is_number(b):
        both_numpy = isinstance(a, dict) and isinstance(b, dict) and "npscalar" in a and "npscalar" in b
        if both_numpy and a["npscalar"]["dtype"] != b["npscalar"]["dtype"]:
            return False
        return _close(_number(a), _number(b), rtol, atol)
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y, rtol, atol) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rtol, atol) for k in a)
    return a == b


def _is_number(c: object) -> bool:
    if isinstance(c, (int, float)) and not isinstance(c, bool):
        return True
    if isinstance(c, dict) and len(c) == 1:
        if "float" in c:
            return True
        if "npscalar" in c:
            return _is_number(c["npscalar"]["value"])
    return False


def _number(c: object) -> float:
    if isinstance(c, dict):
        return float(c["float"]) if "float" in c else _number(c["npscalar"]["value"])
    return c


def _close(x: float, y: float, rtol: float, atol: float) -> bool:
    if isinstance(x, int) and isinstance(y, int):
        return x == y  # exact: big ints do not round-trip through float
    x, y = float(x), float(y)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if x == y:
        return True  # also equal infinities
    return abs(x - y) <= atol + rtol * abs(y)


class Sandbox:
    """A pre-imported worker in bubblewrap; `run` executes code and returns `result`'s canonical form."""

    _proc: subprocess.Popen | None = None  # the worker, once started (still None for `__del__` when __init__ raised)

    def __init__(self, python: str | Path | None = None, preload: Sequence[str] = (), limits: Limits = Limits()):
        self.python = Path(python or os.environ.get("DSONET_SANDBOX_PYTHON") or REPO_DRIFT_PYTHON).absolute()
        if not self.python.exists():
            raise SandboxError(f"python: {self.python} does not exist; build the drift venv with "
                               "`make .venv-drift/.installed` or pass python= / set DSONET_SANDBOX_PYTHON")
        if isinstance(preload, str):
            raise SandboxError(f"preload: {preload!r} is a string; pass a sequence of module names, e.g. ('numpy',)")
        for name in preload:
            if not all(part.isidentifier() for part in str(name).split(".")):
                raise SandboxError(f"preload: {name!r} is not a module name; pass names like 'numpy' or 'scipy.sparse'")
        self.preload = tuple(preload)
        self.limits = limits
        self.bwrap = os.environ.get("DSONET_SANDBOX_BWRAP") or shutil.which("bwrap") or "bwrap"
        self.start_seconds = 0.0
        self._lock = threading.Lock()
        self._buffer = b""
        self._closed = False
        self._start()

    # ---- public ----

    def run(self, code: str, result: str = "r", limits: Limits | None = None) -> RunResult:
        if not isinstance(code, str):
            raise SandboxError(f"code: expected str, got {type(code).__name__}")
        if not isinstance(result, str) or not result.isidentifier():
            raise SandboxError(f"result: {result!r} is not a variable name; pass e.g. result='r'")
        limits = limits or self.limits
        wall_cap_s = limits.wall_s * WALL_STRETCH
        request = json.dumps({"code": code, "result": result,
                              "limits": {**asdict(limits), "wall_cap_s": wall_cap_s}}) + "\n"
        with self._lock:
            if self._closed:
                raise SandboxError("run: this Sandbox is closed; make a new one")
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            started = time.perf_counter()
            try:
                self._proc.stdin.write(request.encode())
                self._proc.stdin.flush()
                reply = self._read_reply(time.monotonic() + wall_cap_s + REPLY_GRACE_S,
                                         RESULT_BYTES + 8 * limits.output_bytes + 4096)
            except (OSError, TimeoutError, ValueError, TypeError) as exc:
                # the answer killed or wedged its worker: contain it, restart, and say what happened
                self._stop()
                self._start()
                error = f"RuntimeError: the sandbox worker was lost during the run ({exc}); restarted"
                return RunResult(False, None, error, "", time.perf_counter() - started)
            if reply.get("recycle") is True:
                self._stop()  # the run left something in the sandbox: the next run starts a fresh worker
            return _result(reply, limits, time.perf_counter() - started)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(Exception):  # at interpreter exit the modules may already be gone
                self._stop()

    # ---- worker lifecycle ----

    def _start(self) -> None:
        if not (os.path.isfile(self.bwrap) or shutil.which(self.bwrap)):
            raise SandboxError(f"bubblewrap: {self.bwrap} not found; model-written code runs only isolated. "
                               "Install it with `sudo apt-get install -y bubblewrap` (or `make system` as root)")
        argv = self._command()
        started = time.perf_counter()
        with tempfile.TemporaryFile() as stderr:
            try:
                self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                              start_new_session=True, close_fds=True)
            except OSError as exc:
                raise SandboxError(f"bubblewrap: {self.bwrap} cannot start ({exc}); reinstall bubblewrap") from exc
            self._buffer = b""
            os.set_blocking(self._proc.stdout.fileno(), False)
            try:
                ready = self._read_reply(time.monotonic() + START_TIMEOUT_S, 1 << 16)
            except (OSError, TimeoutError, ValueError, TypeError) as exc:
                self._stop()
                stderr.seek(0)
                said = (stderr.read().decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1]
                raise SandboxError(f"the sandbox did not start ({exc}): {said}.{_namespace_hint(said)}") from exc
        if not ready.get("ready"):
            self._stop()
            raise SandboxError(f"preload: {self.python} cannot import {list(self.preload)}: {ready.get('error')}; "
                               "install them in that interpreter or drop them from preload")
        if ready.get("uid") == 0:
            self._stop()  # uid 0 is exempt from RLIMIT_NPROC: answers could fork
            raise SandboxError("the worker runs as uid 0 inside the sandbox, where fork cannot be stopped; "
                               "run dsonet as root (the worker then becomes nobody) or as an ordinary user")
        self.start_seconds = time.perf_counter() - started

    def _command(self) -> list[str]:
        """bwrap's argv: read-only binds of what the interpreter needs, nothing else of the host."""
        found = subprocess.run([str(self.python), "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                               capture_output=True, text=True, timeout=60, check=False)
        if found.returncode != 0:
            raise SandboxError(f"python: {self.python} does not run ({found.stderr.strip()[-200:]}); "
                               "pass a working interpreter")
        binds = _outermost(["/usr", *found.stdout.split(), str(self.python.parent)])
        argv = [self.bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--clearenv"]
        if os.geteuid() == 0:
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # kept only to become nobody
        else:
            argv += ["--unshare-user"]
        for name in ("bin", "lib", "lib32", "lib64", "sbin"):
            top = Path("/", name)
            if top.is_symlink():
                argv += ["--symlink", os.readlink(top), str(top)]
            elif top.is_dir():
                binds = _outermost([*binds, str(top)])
        made: set[str] = set()
        for path in binds:
            for parent in reversed(Path(path).parents[:-1]):
                if str(parent) not in made:
                    made.add(str(parent))
                    argv += ["--perms", "0755", "--dir", str(parent)]
            argv += ["--ro-bind", path, path]
        argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
                 "--ro-bind", str(WORKER), "/sandbox/worker.py",
                 "--ro-bind", str(CANONICAL), f"/sandbox/{CANONICAL.name}",
                 "--proc", "/proc", "--dev", "/dev",
                 "--perms", "1777", "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp",
                 # the root and /dev tmpfs have no size cap: nothing may write there (device nodes still work)
                 "--remount-ro", "/", "--remount-ro", "/dev", "--chdir", "/tmp"]
        for var, value in (("PATH", "/usr/bin:/bin"), ("LANG", "C.UTF-8"), ("PYTHONHASHSEED", "0"),
                           ("PYTHONDONTWRITEBYTECODE", "1"), ("OPENBLAS_NUM_THREADS", "1"),
                           ("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")):
            argv += ["--setenv", var, value]  # one BLAS thread: the child may not create threads
        argv += [str(self.python), "-s", "/sandbox/worker.py", "--preload", ",".join(self.preload),
                 "--result-bytes", str(RESULT_BYTES), "--drop-to", str(NOBODY if os.geteuid() == 0 else -1)]
        return argv

    def _read_reply(self, deadline: float, cap: int) -> dict:
        """One JSON line from the worker, within `deadline` and `cap` bytes (its output is untrusted)."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            if len(self._buffer) > cap:
                raise ValueError(f"the worker's reply exceeded {cap} bytes")
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no reply from the worker in time")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise OSError(f"the worker exited with status {self._proc.wait()}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise TypeError("the worker's reply is not a JSON object")
        return reply

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            pipe.close()


def _namespace_hint(said: str) -> str:
    if "namespace" not in said.lower() and "permission" not in said.lower():
        return ""
    return (" bwrap needs namespaces: run as root, or enable unprivileged user namespaces "
            "(sysctl user.max_user_namespaces=10000, kernel.unprivileged_userns_clone=1), or in a "
            "container allow them (e.g. docker --security-opt seccomp=unconfined)")


def _outermost(paths: list[str]) -> list[str]:
    """The given paths without those inside another one (a bind covers its subtree)."""
    kept: list[str] = []
    for path in sorted({os.path.abspath(p) for p in paths}):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def _result(reply: dict, limits: Limits, seconds: float) -> RunResult:
    ok = reply.get("ok") is True
    error = reply.get("error")
    stdout = reply.get("stdout")
    error = error[:1000] if isinstance(error, str) else "RuntimeError: the sandbox returned no error text"
    stdout = stdout if isinstance(stdout, str) else ""
    stdout = stdout.encode("utf-8", "replace")[: limits.output_bytes].decode("utf-8", "ignore")
    return RunResult(ok, reply.get("value") if ok else None, "" if ok else error, stdout, seconds)


def _measure(python: str | None, preload: Sequence[str], runs: int = 50) -> None:
    """Print the worker's start time and the median run of a trivial numpy line (the docstring's numbers)."""
    with Sandbox(python, preload=preload) as box:
        times = [box.run("import numpy as np\nr = np.arange(5).sum()").seconds for _ in range(runs)]
        print(f"preload {list(preload)}: worker start {box.start_seconds:.2f} s, "
              f"median run of a numpy line over {runs}: {statistics.median(times) * 1000:.1f} ms")


if __name__ == "__main__":
    _measure(os.environ.get("DSONET_SANDBOX_PYTHON"), sys.argv[1:] or ["numpy"])
