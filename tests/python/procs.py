"""Processes of a multi-process test (test_coord_jax_cpu.py,
test_distributed_jax.py): a free port for their coordinator, and each
process run to its end."""
import socket
import subprocess


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_all(argvs, envs, timeout):
    """Start every process, wait for each (timeout seconds apiece), kill
    those still running; returns [(exit status, output)] in order."""
    procs = [subprocess.Popen(a, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for a, e in zip(argvs, envs)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0].decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(p.returncode, log) for p, log in zip(procs, logs)]
