# Starts N copies of a command the way torchrun starts workers on one node:
# RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (127.0.0.1) and
# MASTER_PORT (a free loopback port) in each one's environment. Like torchrun,
# when a worker fails the others are stopped, and the exit status is the
# first failure's. (torchrun itself comes from PyPI, which is not reachable
# here; the program under test cannot tell the difference.)
# With --keep-going the others are left running, as workers on other nodes
# are when one node's worker dies: they must notice by themselves.
#   torchrun-env.py [--keep-going] --nproc N COMMAND...
import os
import socket
import subprocess
import sys
import time

keep_going = len(sys.argv) > 1 and sys.argv[1] == "--keep-going"
if keep_going:
    del sys.argv[1]
if len(sys.argv) < 4 or sys.argv[1] != "--nproc":
    sys.exit("usage: torchrun-env.py [--keep-going] --nproc N COMMAND...")
n = int(sys.argv[2])
command = sys.argv[3:]
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
workers = []
for rank in range(n):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank),
               LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    workers.append(subprocess.Popen(command, env=env))
status = 0
deadline = time.monotonic() + 600
while workers and time.monotonic() < deadline:
    for worker in list(workers):
        code = worker.poll()
        if code is None:
            continue
        workers.remove(worker)
        if code != 0 and status == 0:
            status = code
            if not keep_going:
                for other in workers:
                    other.terminate()
    time.sleep(0.02)
for worker in workers:
    worker.kill()
sys.exit(status)
