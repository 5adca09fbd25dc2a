"""kill -9 in the middle of ingesting: nothing acknowledged is lost, no batch is half-written."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np

from dsonet.codec import Profile
from dsonet.library import Library
from lib_helpers import DIM, HashEncoder

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from dsonet.codec import Profile, make_batch
    from dsonet.experience import Experience
    from dsonet.identity import NodeIdentity
    from dsonet.library import Library
    sys.path.insert(0, sys.argv[2])
    from lib_helpers import DIM, HashEncoder
    ident = NodeIdentity.generate()
    lib = Library(sys.argv[1], encoder=HashEncoder(), profile=Profile(DIM, DIM, "test:hash"))
    for b in range(10_000):
        exps = [Experience(f"When batch {b} case {i}, do step {i}", "general", 0.5) for i in range(200)]
        vecs = np.random.default_rng(b).standard_normal((200, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        lib.ingest(make_batch(exps, vecs, lib.profile, ident))
        print(f"ACK {b}", flush=True)
""")


def test_kill_mid_ingest_loses_no_acknowledged_batch_and_no_half_batch(tmp_path):
    db = tmp_path / "crash.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db), os.path.dirname(__file__)],
                            stdout=subprocess.PIPE, text=True)
    acked = []
    for line in proc.stdout:
        acked.append(int(line.split()[1]))
        if len(acked) == 5:
            time.sleep(0.05)  # the writer is inside its next transaction by now
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with Library(db, encoder=HashEncoder(), profile=Profile(DIM, DIM, "test:hash")) as lib:
        assert lib.db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        texts = [e.text for e in lib.all()]
        per_batch = np.bincount([int(t.split()[2].rstrip(",")) for t in texts])
        assert set(per_batch[per_batch > 0]) == {200}  # whole batches only
        assert all(per_batch[b] == 200 for b in acked)  # every acknowledged batch is there
        assert len(lib) == len(texts)  # the index reloads every committed row
