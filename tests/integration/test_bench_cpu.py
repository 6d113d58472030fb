"""The streaming bench's CPU figure: a child's CPU seconds read from /proc, only children of the given name."""

import subprocess
import sys
from pathlib import Path

from benchmarks.streaming import children_cpu_s

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\nprint('done', flush=True)\ninput()"


def test_a_childs_cpu_is_counted_by_its_name_only(tmp_path):
    # A name of its own (the kernel names a process after the file it runs): other Python children of the session,
    # such as the demo test_demo_running starts with it, are not this one.
    burner = tmp_path / "tidal-burner"
    burner.symlink_to(sys.executable)
    child = subprocess.Popen([str(burner), "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "done\n"  # burnt 0.5 s of CPU and still running
        name = Path(f"/proc/{child.pid}/comm").read_text().strip()  # read after its exec
        assert name == "tidal-burner"
        assert 0.4 <= children_cpu_s(name) < 5
        assert children_cpu_s("no-such-child") == 0
    finally:
        child.communicate("\n", timeout=10)
