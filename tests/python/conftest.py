"""Fixtures for the client-compatibility suite: one cairn server per session, real clients.

The server binary comes from $CAIRN_BIN (relative paths are tried against the current
directory, then the repository root), default <repo>/bin/cairn. It is started on loopback
port 0 (the kernel picks free ports: nothing can take them between a probe and the bind)
in a temporary data directory with fixed credentials, and is ready when its ready file
(`cairn server --ready-file`) appears, naming the ports it got. On teardown it is sent
SIGTERM and must exit with status 0 within 30 seconds.
"""

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

REPO_ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
ACCESS_KEY = "CAIRNPYTESTACCESS001"
SECRET_KEY = "cairn+py/test-secret-0123456789abcdefghij"
STARTUP_TIMEOUT = 30.0
SHUTDOWN_TIMEOUT = 30.0

# Nothing from the developer's own AWS setup (profiles, config files, endpoint overrides)
# may leak into the clients under test: boto3 here, and the aws cli and rclone via env.
for _name in list(os.environ):
    if _name.startswith("AWS_") or _name.startswith("RCLONE_"):
        del os.environ[_name]
os.environ["AWS_CONFIG_FILE"] = os.path.join(os.sep, "nonexistent", "cairn-tests", "config")
os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.path.join(os.sep, "nonexistent", "cairn-tests", "credentials")
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


def _find_binary() -> Path:
    raw = os.environ.get("CAIRN_BIN", "")
    candidates = []
    if raw:
        p = Path(raw)
        candidates = [p] if p.is_absolute() else list(dict.fromkeys([Path.cwd() / p, REPO_ROOT / p]))
    else:
        candidates = [REPO_ROOT / "bin" / "cairn"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c.resolve()
    pytest.fail(
        "cairn binary not found (tried %s); build it with "
        "`go build -o bin/cairn ./cmd/cairn` or set CAIRN_BIN" % ", ".join(map(str, candidates)),
        pytrace=False,
    )


@dataclass
class Server:
    endpoint: str
    admin: str
    access_key: str
    secret_key: str
    region: str
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen

    def log_tail(self, n: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])


def _start(binary: Path, base: Path, data_dir: Path, log_path: Path, extra_args=(), extra_env=None):
    """Starts the server (with more `cairn server` flags in extra_args and environment in
    extra_env) and waits for its ready file; returns (proc, ready dict or None)."""
    ready_path = base / "ready.json"
    env = dict(os.environ, CAIRN_ACCESS_KEY=ACCESS_KEY, CAIRN_SECRET_KEY=SECRET_KEY, **(extra_env or {}))
    log = open(log_path, "ab")
    proc = subprocess.Popen(
        [
            str(binary), "server",
            "--data", str(data_dir),
            "--listen", "127.0.0.1:0",
            "--admin-listen", "127.0.0.1:0",
            "--node-addr", "127.0.0.1:0",
            "--ready-file", str(ready_path),
            *map(str, extra_args),
        ],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    log.close()
    # Poll for the ready file (written atomically, so it is whole once it exists) until the
    # deadline, failing at once if the process exits.
    deadline = time.monotonic() + STARTUP_TIMEOUT
    delay = 0.01
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return proc, None
        try:
            ready = json.loads(ready_path.read_text())
        except FileNotFoundError:
            ready = None
        if ready and ready.get("pid") == proc.pid:
            return proc, ready
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
    return proc, None


@pytest.fixture(scope="session")
def cairn_server(tmp_path_factory):
    binary = _find_binary()
    base = tmp_path_factory.mktemp("cairn")
    data_dir = base / "data"
    log_path = base / "server.log"
    proc, ready = _start(binary, base, data_dir, log_path)
    if not ready:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        pytest.fail(
            "cairn server did not become ready within %ss (exit=%s)\nlog:\n%s"
            % (STARTUP_TIMEOUT, proc.returncode, log_path.read_text(errors="replace")[-4000:]),
            pytrace=False,
        )
    endpoint = "http://" + ready["s3"]
    assert endpoint.startswith("http://127.0.0.1:"), endpoint
    srv = Server(endpoint, "http://" + ready["admin"], ACCESS_KEY, SECRET_KEY, REGION, data_dir, log_path, proc)
    yield srv

    # Teardown: a graceful stop must be clean.
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=SHUTDOWN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("cairn did not exit within %ss of SIGTERM\n%s" % (SHUTDOWN_TIMEOUT, srv.log_tail()), pytrace=False)
    assert rc == 0, "cairn exited with status %s after SIGTERM\n%s" % (rc, srv.log_tail())


def make_s3_client(server: Server, access_key=None, secret_key=None, signature_version=None):
    """A boto3 S3 client with default settings except endpoint, credentials and region
    (and, only where a test asks for it, the signature version)."""
    kw = {}
    if signature_version:
        kw["config"] = Config(signature_version=signature_version)
    return boto3.session.Session().client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=access_key or server.access_key,
        aws_secret_access_key=secret_key or server.secret_key,
        region_name=server.region,
        **kw,
    )


@pytest.fixture(scope="session")
def s3(cairn_server):
    return make_s3_client(cairn_server)


@pytest.fixture(scope="session")
def s3_client_factory(cairn_server):
    """s3_client_factory(access_key=..., secret_key=..., signature_version=...) builds
    another client."""

    def make(access_key=None, secret_key=None, signature_version=None):
        return make_s3_client(cairn_server, access_key, secret_key, signature_version)

    return make


_bucket_seq = itertools.count(1)


@pytest.fixture
def make_bucket(s3, request):
    """Factory: make_bucket() creates and returns a new, empty bucket for this test."""

    def make():
        stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")
        name = ("t%03d-%s" % (next(_bucket_seq), stem))[:63].rstrip("-")
        s3.create_bucket(Bucket=name)
        return name

    return make


@pytest.fixture
def bucket(make_bucket):
    return make_bucket()


def _venv_bin() -> Path:
    # The interpreter running pytest is the venv's; its bin dir holds `aws`. Do not resolve
    # symlinks: a venv's python is a symlink to the base interpreter.
    return Path(sys.executable).parent


@pytest.fixture(scope="session")
def aws_env(cairn_server):
    """Environment for the aws cli (pass --endpoint-url on the command line)."""
    env = dict(os.environ)
    env.update(
        AWS_ACCESS_KEY_ID=cairn_server.access_key,
        AWS_SECRET_ACCESS_KEY=cairn_server.secret_key,
        AWS_DEFAULT_REGION=cairn_server.region,
        AWS_PAGER="",
        PATH=str(_venv_bin()) + os.pathsep + env.get("PATH", ""),
    )
    return env


@pytest.fixture(scope="session")
def aws(cairn_server, aws_env):
    """aws(*args, check=True) runs `aws --endpoint-url EP args...` and returns the result."""
    exe = _venv_bin() / "aws"
    if not exe.exists():
        found = shutil.which("aws", path=aws_env["PATH"])
        assert found, "aws cli not found next to %s nor on PATH" % sys.executable
        exe = Path(found)

    def run(*args, check=True, timeout=300):
        cmd = [str(exe), "--endpoint-url", cairn_server.endpoint, *map(str, args)]
        res = subprocess.run(cmd, env=aws_env, capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            pytest.fail(
                "aws %s -> exit %d\nstdout:\n%s\nstderr:\n%s"
                % (" ".join(map(str, args)), res.returncode, res.stdout[-3000:], res.stderr[-3000:]),
                pytrace=False,
            )
        return res

    return run


@pytest.fixture(scope="session")
def rclone_env(cairn_server, tmp_path_factory):
    """Environment that defines the rclone remote `cairn:` without a config file."""
    env = dict(os.environ)
    env.update(
        RCLONE_CONFIG=str(tmp_path_factory.mktemp("rclone") / "rclone.conf"),
        RCLONE_CONFIG_CAIRN_TYPE="s3",
        RCLONE_CONFIG_CAIRN_PROVIDER="Other",
        RCLONE_CONFIG_CAIRN_ENDPOINT=cairn_server.endpoint,
        RCLONE_CONFIG_CAIRN_ACCESS_KEY_ID=cairn_server.access_key,
        RCLONE_CONFIG_CAIRN_SECRET_ACCESS_KEY=cairn_server.secret_key,
        RCLONE_CONFIG_CAIRN_REGION=cairn_server.region,
    )
    return env
