"""Helpers the Python test drivers share (tests/lib.sh is the shell scripts' counterpart).
Import with the tests directory on sys.path: sys.path.insert(0, os.path.join(ROOT, "tests"))."""
import socket


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (a moment later, something may)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
