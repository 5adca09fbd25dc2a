"""The sandbox runs model-written code in bubblewrap: answers come back as canonical values or one
error line, and hostile answers are contained while the sandbox keeps serving."""

import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dsonet.learn.sandbox import REPO_DRIFT_PYTHON, Limits, LimitsError, Sandbox, SandboxError, same

REPO = Path(__file__).resolve().parents[2]
QUICK = Limits(cpu_s=1, memory_mb=512, output_bytes=4096, wall_s=3)
WANTED = ("numpy", "pandas", "networkx", "scipy.sparse")


def _importable(python: str, modules: tuple[str, ...]) -> tuple[str, ...]:
    probe = f"import importlib.util as u; print(*[m for m in {modules!r} if u.find_spec(m.split('.')[0])])"
    found = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return tuple(found.stdout.split())


# as Sandbox chooses: DSONET_SANDBOX_PYTHON, else the drift venv (its tasks run there); and where neither is
# there, this venv's python, which has numpy: the sandbox takes any interpreter
FALLBACK = REPO_DRIFT_PYTHON if REPO_DRIFT_PYTHON.exists() else sys.executable
PYTHON = os.environ.get("DSONET_SANDBOX_PYTHON") or str(FALLBACK)
PRELOAD = _importable(PYTHON, WANTED)
BWRAP_MISSING = "bwrap missing: run `make system` (apt bubblewrap)"
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason=BWRAP_MISSING)


def _needs(module: str):
    return pytest.mark.skipif(module not in PRELOAD, reason=f"{module} is not installed in {PYTHON}")


def _sandbox(preload: tuple[str, ...] = ()) -> Sandbox:
    """A sandbox on QUICK limits, or a skip where this machine cannot isolate it."""
    if shutil.which("bwrap") is None:
        pytest.skip(BWRAP_MISSING)
    try:
        return Sandbox(PYTHON, preload=preload, limits=QUICK)
    except SandboxError as exc:
        if "bwrap needs namespaces" not in str(exc):
            raise
        pytest.skip(f"isolation unavailable on this machine, so the sandbox refuses: {exc}")


@pytest.fixture(scope="module")
def box():
    with _sandbox(PRELOAD) as sandbox:
        yield sandbox


def _serves(box: Sandbox) -> None:
    after = box.run("r = 6 * 7")
    assert after.ok and after.value == 42, after


# ---- plain runs ----


def test_a_numpy_line_returns_its_canonical_value_and_prints(box):
    out = box.run("import numpy as np\nprint('made')\nr = np.arange(3) * 2")
    assert out.ok and out.error == ""
    assert out.value == {"ndarray": {"dtype": "int64", "shape": [3], "values": [0, 2, 4]}}
    assert out.stdout == "made\n"


def test_a_missing_numpy_attribute_comes_back_as_the_errors_last_line(box):
    out = box.run("import numpy as np\nr = np.no_such_function([1, 2])")
    assert not out.ok and out.value is None
    assert out.error == "AttributeError: module 'numpy' has no attribute 'no_such_function'"


def test_what_a_run_shows_carries_no_memory_address(box):
    # the same answer must show the same text in every run: it goes into the reflector's prompt
    shown = box.run("class Thing:\n    pass\nr = Thing().__init__")
    assert shown.ok and shown.value["repr"] == "<method-wrapper '__init__' of Thing object>", shown
    failed = box.run("r = 1\nraise ValueError(object())")
    assert failed.error == "ValueError: <object object>", failed


def test_an_unassigned_result_is_a_name_error(box):
    assert box.run("x = 1").error == "NameError: r was not assigned"
    assert box.run("x = 1", result="x").value == 1


def test_each_run_gets_a_fresh_writable_directory(box):
    assert box.run("open('left.txt', 'w').write('hi')\nr = 1").ok
    assert box.run("import os\nr = os.listdir('.')").value == []


def test_a_check_costs_milliseconds_not_an_interpreter_start(box):
    times = sorted(box.run("import numpy as np\nr = int(np.arange(5).sum())").seconds for _ in range(15))
    assert times[len(times) // 2] < 0.1  # measured ~3-8 ms; an interpreter start with numpy is ~150 ms


# ---- hostile answers ----


def test_an_infinite_loop_stops_at_the_cpu_limit_and_the_sandbox_still_serves(box):
    out = box.run("while True:\n    pass")
    assert out.error == "TimeoutError: CPU-time limit of 1 s"
    _serves(box)


def test_a_sleep_stops_at_the_wall_clock_limit(box):
    out = box.run("import time\ntime.sleep(60)", limits=Limits(cpu_s=1, memory_mb=512, output_bytes=4096, wall_s=1))
    assert out.error == "TimeoutError: wall-clock limit of 1 s"  # the limit fired, not the 60 s sleep's end
    hidden = "import os, time\nos.closerange(3, 256)\ntime.sleep(60)"  # closes its result pipe first
    assert box.run(hidden, limits=Limits(cpu_s=1, memory_mb=512, output_bytes=4096, wall_s=1)).error == (
        "TimeoutError: wall-clock limit of 1 s")
    _serves(box)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.exists("/proc/self/schedstat"),
                    reason="needs os.sched_setaffinity and a kernel with schedstat (/proc/<pid>/schedstat)")
def test_a_run_starved_of_cpu_gets_back_the_time_it_waited_for_a_core():
    """Half a second of work under a 1.2 s wall limit, on one core shared with three busy loops: it takes
    ~2 s of wall clock, and passes, because only the time it ran (or slept) counts."""
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(mask)})  # the worker, its child and the loops inherit the one core
    try:
        sandbox = _sandbox()
        # each loop in a session of its own, as the worker is: with autogroup scheduling, a core is
        # shared between sessions, not processes
        loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
                 for _ in range(3)]
    finally:
        os.sched_setaffinity(0, mask)
    work = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5:\n    pass\nr = 1"
    try:
        with sandbox:
            out = sandbox.run(work, limits=Limits(cpu_s=2, memory_mb=512, output_bytes=4096, wall_s=1.2))
            slept = sandbox.run("import time\ntime.sleep(60)", limits=Limits(cpu_s=1, memory_mb=512,
                                                                             output_bytes=4096, wall_s=1))
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert out.ok and out.value == 1, out
    assert out.seconds > 1.2  # it was starved: the plain wall limit would have killed it
    assert slept.error == "TimeoutError: wall-clock limit of 1 s"  # sleeping is not waiting for a core


def test_fork_and_a_fork_bomb_cannot_start_a_process(box):
    assert box.run("import os\nr = os.fork()").error.startswith("BlockingIOError: [Errno 11]")
    assert box.run("import os\nwhile True:\n    os.fork()").error.startswith("BlockingIOError")
    assert box.run("import threading\nthreading.Thread(target=print).start()").error.startswith("RuntimeError")
    _serves(box)


def test_os_system_and_subprocess_run_nothing(box, tmp_path):
    marker = tmp_path / "touched"
    out = box.run(f"import os\nstatus = os.system('touch {marker} here')\nr = [status, os.path.exists('here')]")
    assert out.ok and out.value[0] != 0 and out.value[1] is False
    assert box.run(f"import subprocess\nsubprocess.run(['touch', '{marker}'])").error.startswith("BlockingIOError")
    assert not marker.exists()
    _serves(box)


def test_rmtree_of_a_host_directory_leaves_it_intact(box, tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data.txt").write_text("keep me")
    out = box.run(f"import shutil\nshutil.rmtree('{precious}')\nr = 'gone'")
    assert out.error.startswith("FileNotFoundError")  # the host's /tmp is not even visible
    assert (precious / "data.txt").read_text() == "keep me"


def test_only_the_private_tmp_is_writable(box):
    out = box.run("import sys\nopen(sys.prefix + '/pyvenv.cfg', 'a').write('# broken')")
    assert out.error.startswith(("PermissionError", "OSError: [Errno 30] Read-only file system")), out.error
    mounts = box.run("r = [l.split()[4] for l in open('/proc/self/mountinfo') if 'rw' in l.split()[5].split(',')]")
    assert {m for m in mounts.value if not m.startswith(("/proc", "/dev/"))} == {"/tmp"}


def test_a_huge_file_fails_at_the_file_size_limit(box):
    out = box.run("f = open('big', 'wb')\nfor _ in range(200):\n    f.write(b'x' * (1 << 20))\nf.close()")
    assert out.error.startswith("OSError: [Errno 27] File too large"), out.error
    _serves(box)


def test_the_private_tmp_is_capped_and_emptied_between_runs(box):
    out = box.run("for i in range(6):\n    open(f'/tmp/junk{i}', 'wb').write(b'x' * (60 << 20))")
    assert out.error.startswith("OSError: [Errno 28] No space left on device"), out.error
    assert box.run("import os\nos.makedirs('/tmp/locked/in')\nos.chmod('/tmp/locked', 0)\nr = 1").ok
    left = box.run("import os\nrun = os.path.basename(os.getcwd())\n"
                   "r = [n for n in os.listdir('/tmp') if n not in (run, run + '.out')]")
    assert left.value == []


def test_a_sysv_shared_memory_segment_does_not_outlive_its_run(box):
    made = box.run("import ctypes\nr = ctypes.CDLL(None).shmget(0, 1 << 20, 0o1600)")
    assert made.ok and made.value >= 0
    seen = box.run("import ctypes\nctypes.CDLL(None).shmget(0, 1 << 20, 0o1600)\nr = open('/proc/sysvipc/shm').read()")
    assert len(seen.value.splitlines()) == 2  # the segment exists while its run does
    assert box.run("r = open('/proc/sysvipc/shm').read().splitlines()[1:]").value == []


def test_printing_100_mb_is_cut_to_the_output_limit(box):
    out = box.run("print('x' * 100_000_000)\nimport os\nos.write(1, b'y' * 10_000_000)\nr = 1")
    assert out.ok and out.value == 1
    assert len(out.stdout.encode()) == QUICK.output_bytes and set(out.stdout) == {"x"}


def test_a_huge_result_is_refused_not_returned(box):
    assert box.run("r = ['x' * 100] * 20000").error == "ValueError: the result's JSON is 2080000 bytes (limit 1048576)"
    out = box.run("import numpy as np\nr = np.zeros(10**6)")
    assert out.error == "ValueError: the result has 1000000 elements (the sandbox returns at most 100000)"


def test_allocating_50_gb_is_a_memory_error(box):
    out = box.run("r = bytearray(50 * 2**30)")
    assert out.error == "MemoryError: out of memory (memory limit of 512 MB)"
    out = box.run("import numpy as np\nr = np.ones(50 * 2**30 // 8)")
    assert out.error.startswith("MemoryError: Unable to allocate 50.0 GiB")
    _serves(box)


def test_a_planted_key_file_and_the_repo_are_not_readable(box, tmp_path):
    key = tmp_path / ".dsonet" / "node.key"
    key.parent.mkdir()
    key.write_text("secret-key-bytes")
    key.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert box.run(f"r = open('{key}').read()").error.startswith("FileNotFoundError")
    assert box.run("import os\nr = open(os.path.expanduser('~/.dsonet/node.key')).read()").error.startswith(
        "FileNotFoundError")
    seen = box.run(f"import os\nr = [os.path.exists('{REPO / 'src'}'), os.path.exists('{Path.home()}/.dsonet')]")
    assert seen.value == [False, False]


def test_the_network_reaches_neither_the_host_nor_the_internet(box):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]
        out = box.run(f"import socket\nr = socket.create_connection(('127.0.0.1', {port}), timeout=2)")
        assert out.error.startswith("ConnectionRefusedError"), out.error
        with pytest.raises(TimeoutError):
            server.accept()  # nothing arrived on the host side
    out = box.run("import socket\nr = socket.create_connection(('1.1.1.1', 53), timeout=2)")
    assert out.error.startswith("OSError: [Errno 101] Network is unreachable"), out.error
    assert box.run("import socket\nr = [n for _, n in socket.if_nameindex()]").value == ["lo"]


def test_the_answer_runs_unprivileged(box):
    out = box.run("r = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)")
    status = {k: v for k, v in out.value["dict"]}
    assert status["Uid"].split()[0] != "0"  # nobody when started as root, else the caller's own uid
    assert int(status["CapEff"], 16) == 0 and status["NoNewPrivs"] == "1"


def test_namespaces_keyrings_and_ptrace_are_denied(box):
    out = box.run("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                  "r = [[libc.unshare(0x10000000), ctypes.get_errno()], [libc.ptrace(0, 0, 0, 0), ctypes.get_errno()]]")
    assert out.value == [[-1, 1], [-1, 1]]  # EPERM from the seccomp filter


def test_an_answer_that_kills_its_worker_is_contained(box):
    out = box.run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    assert not out.ok and "worker was lost" in out.error
    _serves(box)


def test_an_answer_that_freezes_its_worker_meets_this_sides_deadline(box):
    quick = Limits(cpu_s=1, memory_mb=512, output_bytes=4096, wall_s=1)
    out = box.run("import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nr = 1", limits=quick)
    # this side's deadline, not the frozen worker, ended the run: it says so and the sandbox goes on serving
    assert not out.ok and "no reply from the worker in time" in out.error
    _serves(box)


# ---- refusals ----


@needs_bwrap
def test_it_refuses_without_bubblewrap(monkeypatch):
    monkeypatch.setenv("DSONET_SANDBOX_BWRAP", "/nonexistent/bwrap")
    with pytest.raises(SandboxError, match="bubblewrap: /nonexistent/bwrap not found.*apt-get install -y bubblewrap"):
        Sandbox(PYTHON)


def test_it_refuses_when_bwrap_cannot_make_namespaces(monkeypatch, tmp_path):
    # a stand-in bwrap that fails the way it does in a container without user namespaces
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DSONET_SANDBOX_BWRAP", str(fake))
    with pytest.raises(SandboxError, match="did not start.*No permissions to creating new namespace.*user namespaces"):
        Sandbox(PYTHON)


@needs_bwrap
def test_a_missing_interpreter_or_preload_is_refused(tmp_path):
    with pytest.raises(SandboxError, match="python: .*does not exist"):
        Sandbox(tmp_path / "python")
    with pytest.raises(SandboxError, match="cannot import.*no_such_module"):
        Sandbox(PYTHON, preload=("no_such_module",))


@needs_bwrap
def test_a_closed_sandbox_refuses_to_run():
    sandbox = Sandbox(PYTHON)
    sandbox.close()
    with pytest.raises(SandboxError, match="closed"):
        sandbox.run("r = 1")


def test_limits_must_be_positive():
    with pytest.raises(LimitsError, match=r"Limits.cpu_s: 0 is not a positive number; pass e.g. cpu_s=5.0"):
        Limits(cpu_s=0)
    with pytest.raises(LimitsError, match=r"Limits.memory_mb: 1.5 is not a positive integer"):
        Limits(memory_mb=1.5)


# ---- same: canonical values compared ----


def test_same_compares_floats_within_tolerance_and_nan_to_nan(box):
    a = box.run("import numpy as np\nr = np.array([1.0, np.nan, np.inf])").value
    b = box.run("import numpy as np\nr = np.array([1.0 + 1e-9, np.nan, np.inf])").value
    c = box.run("import numpy as np\nr = np.array([1.1, np.nan, np.inf])").value
    assert same(a, b) and not same(a, c)


def test_same_tells_array_dtypes_and_scalar_dtypes_apart(box):
    f32 = box.run("import numpy as np\nr = np.arange(3, dtype=np.float32)").value
    f64 = box.run("import numpy as np\nr = np.arange(3, dtype=np.float64)").value
    assert not same(f32, f64)
    promoted = box.run("import numpy as np\nr = np.float32(3) + 3.0").value  # float32 under NumPy 2's NEP 50
    assert not same(promoted, box.run("import numpy as np\nr = np.float64(6)").value)
    assert same(box.run("import numpy as np\nr = np.float64(6)").value, 6.0)


def test_same_on_plain_values_is_strict_about_kinds_but_not_int_versus_float():
    assert same(2, 2.0) and same({"float": "nan"}, {"float": "nan"})
    assert not same(True, 1) and not same([1, 2], {"tuple": [1, 2]}) and not same("1", 1)
    assert not same(10**20, 10**20 + 1)


@_needs("pandas")
def test_same_tells_frames_with_other_labels_or_dtypes_apart(box):
    base = box.run("import pandas as pd\nr = pd.DataFrame({'a': [1, 2]}, index=['x', 'y'])").value
    assert same(base, box.run("import pandas as pd\nr = pd.DataFrame({'a': [1, 2]}, index=['x', 'y'])").value)
    assert not same(base, box.run("import pandas as pd\nr = pd.DataFrame({'a': [1, 2]}, index=['x', 'z'])").value)
    assert not same(base, box.run("import pandas as pd\nr = pd.DataFrame({'a': [1.0, 2.0]}, index=['x', 'y'])").value)
    series = box.run("import pandas as pd\nr = pd.Series([1, 2], name='a')").value
    assert series["Series"]["index"]["Index"]["values"] == [0, 1] and not same(series, base)


@_needs("networkx")
def test_same_on_graphs_ignores_insertion_order_but_not_direction(box):
    g = box.run("import networkx as nx\nr = nx.Graph([(2, 1), (1, 3)])").value
    assert same(g, box.run("import networkx as nx\nr = nx.Graph([(3, 1), (1, 2)])").value)
    assert not same(g, box.run("import networkx as nx\nr = nx.DiGraph([(2, 1), (1, 3)])").value)
    assert not same(g, box.run("import networkx as nx\nr = nx.Graph([(2, 1), (1, 3, {'weight': 2})])").value)


@_needs("scipy.sparse")
def test_a_sparse_matrix_comes_back_dense(box):
    out = box.run("import scipy.sparse as sp\nr = sp.csr_matrix([[0, 1], [2, 0]])")
    assert out.value == {"sparse": {"dtype": "int64", "shape": [2, 2], "values": [0, 1, 2, 0]}}
