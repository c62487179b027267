# Runs a command that must fail, and checks it ended within a time limit:
#   fails-within.py TIMEOUT LIMIT COMMAND...
# Prints the command's output, then its exit status and elapsed seconds;
# exits non-zero if the command succeeded or took longer than LIMIT.
import subprocess
import sys
import time

timeout, limit = float(sys.argv[1]), float(sys.argv[2])
start = time.monotonic()
run = subprocess.run(sys.argv[3:], stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT, text=True)
elapsed = time.monotonic() - start
sys.stdout.write(run.stdout)
print("exit status %d after %.1f s (timeout %g s, limit %g s)"
      % (run.returncode, elapsed, timeout, limit))
sys.exit(0 if run.returncode != 0 and elapsed <= limit else 1)
