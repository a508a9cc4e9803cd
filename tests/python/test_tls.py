"""HTTPS: boto3, the aws cli and rclone against `cairn server --tls-cert --tls-key`.

The session fixture makes a throwaway CA and a server certificate for 127.0.0.1 with
Debian's `openssl` (ECDSA P-256), starts a second cairn server (the one of conftest.py
stays plain HTTP) with them on free loopback ports, and gives the clients the CA file:
boto3 `verify=`, aws `--ca-bundle`, rclone `--ca-cert`.
"""

import filecmp
import os
import shutil
import signal
import subprocess
from pathlib import Path

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from conftest import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    SHUTDOWN_TIMEOUT,
    STARTUP_TIMEOUT,
    Server,
    _find_binary,
    _start,
    _venv_bin,
)


def _openssl(*args, cwd):
    res = subprocess.run(["openssl", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, "openssl %s -> %d\n%s" % (" ".join(map(str, args)), res.returncode, res.stderr)


def make_certs(d: Path):
    """Writes ca.pem (the CA to trust), cert.pem and key.pem (the server's, for 127.0.0.1
    and localhost) in d and returns their paths."""
    if not shutil.which("openssl"):
        pytest.fail("openssl not found (make deps-apt installs it)", pytrace=False)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=cairn test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    _openssl("req", *ec, "-keyout", "key.pem", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n"
    )
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "cert.pem", "-days", "2", "-extfile", "server.ext", cwd=d)
    os.chmod(d / "key.pem", 0o600)
    return d / "ca.pem", d / "cert.pem", d / "key.pem"


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory):
    """A cairn server serving HTTPS; yields (Server, CA file path)."""
    binary = _find_binary()
    base = tmp_path_factory.mktemp("cairn-tls")
    certs = base / "certs"
    certs.mkdir()
    ca, cert, key = make_certs(certs)
    data_dir, log_path = base / "data", base / "server.log"
    proc, ready = _start(binary, base, data_dir, log_path, ["--tls-cert", cert, "--tls-key", key])
    if not ready:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        pytest.fail("cairn server --tls-cert did not become ready within %ss (exit=%s)\nlog:\n%s"
                    % (STARTUP_TIMEOUT, proc.returncode, log_path.read_text(errors="replace")[-4000:]), pytrace=False)
    assert ready.get("tls") is True, ready
    srv = Server("https://" + ready["s3"], "https://" + ready["admin"], ACCESS_KEY, SECRET_KEY, REGION, data_dir, log_path, proc)
    yield srv, ca

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=SHUTDOWN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("cairn did not exit within %ss of SIGTERM\n%s" % (SHUTDOWN_TIMEOUT, srv.log_tail()), pytrace=False)
    assert rc == 0, "cairn exited with status %s after SIGTERM\n%s" % (rc, srv.log_tail())


def _client(endpoint, verify, attempts=None):
    kw = {"config": Config(retries={"max_attempts": attempts})} if attempts else {}
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        region_name=REGION, verify=verify, **kw)


def test_tls_boto3(tls_server, tmp_path):
    srv, ca = tls_server
    s3 = _client(srv.endpoint, str(ca))
    s3.create_bucket(Bucket="tls-boto3")
    body = os.urandom(3 * 1024 * 1024 + 17)
    s3.put_object(Bucket="tls-boto3", Key="dir/obj", Body=body)
    assert s3.get_object(Bucket="tls-boto3", Key="dir/obj")["Body"].read() == body
    # upload_file: multipart above 8 MiB with boto3's defaults.
    big = tmp_path / "big"
    big.write_bytes(os.urandom(9 * 1024 * 1024))
    s3.upload_file(str(big), "tls-boto3", "dir/big")
    out = tmp_path / "big.out"
    s3.download_file("tls-boto3", "dir/big", str(out))
    assert filecmp.cmp(big, out, shallow=False)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="tls-boto3")["Contents"]]
    assert keys == ["dir/big", "dir/obj"]

    # Without the CA (the system's trust store) the certificate is refused; plain HTTP fails.
    with pytest.raises(botocore.exceptions.SSLError):
        _client(srv.endpoint, True, attempts=1).list_buckets()
    with pytest.raises(Exception):
        _client(srv.endpoint.replace("https://", "http://"), True, attempts=1).list_buckets()


def test_tls_aws_cli(tls_server, tmp_path):
    srv, ca = tls_server
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION=REGION,
               AWS_PAGER="", PATH=str(_venv_bin()) + os.pathsep + os.environ.get("PATH", ""))
    exe = shutil.which("aws", path=env["PATH"])
    assert exe, "aws cli not found"

    def aws(*args, ca_bundle=ca):
        cmd = [exe, "--endpoint-url", srv.endpoint, *(["--ca-bundle", str(ca_bundle)] if ca_bundle else []), *map(str, args)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)

    src = tmp_path / "src"
    src.write_bytes(os.urandom(12 * 1024 * 1024 + 5))  # multipart with the cli's 8 MiB threshold
    for args in (["s3", "mb", "s3://tls-cli"], ["s3", "cp", src, "s3://tls-cli/k"], ["s3", "cp", "s3://tls-cli/k", tmp_path / "dst"]):
        res = aws(*args)
        assert res.returncode == 0, "aws %s -> %d\n%s\n%s" % (" ".join(map(str, args)), res.returncode, res.stdout, res.stderr)
    assert filecmp.cmp(src, tmp_path / "dst", shallow=False)
    res = aws("s3", "ls", "s3://tls-cli/")
    assert res.returncode == 0 and " k\n" in res.stdout, res.stdout + res.stderr
    env["AWS_MAX_ATTEMPTS"] = "1"  # an SSL error is retried otherwise
    res = aws("s3", "ls", ca_bundle=None)
    assert res.returncode != 0 and "SSL" in res.stderr, res.stderr


def test_tls_rclone(tls_server, tmp_path):
    srv, ca = tls_server
    if not shutil.which("rclone"):
        pytest.fail("rclone not found (make deps-apt installs it)", pytrace=False)
    env = dict(os.environ)
    env.update(
        RCLONE_CONFIG=str(tmp_path / "rclone.conf"),
        RCLONE_CONFIG_CAIRNTLS_TYPE="s3",
        RCLONE_CONFIG_CAIRNTLS_PROVIDER="Other",
        RCLONE_CONFIG_CAIRNTLS_ENDPOINT=srv.endpoint,
        RCLONE_CONFIG_CAIRNTLS_ACCESS_KEY_ID=ACCESS_KEY,
        RCLONE_CONFIG_CAIRNTLS_SECRET_ACCESS_KEY=SECRET_KEY,
        RCLONE_CONFIG_CAIRNTLS_REGION=REGION,
        RCLONE_CONFIG_CAIRNTLS_UPLOAD_CUTOFF="5M",
        RCLONE_CONFIG_CAIRNTLS_CHUNK_SIZE="5M",
    )

    def rclone(*args, ca_cert=ca):
        cmd = ["rclone", *(["--ca-cert", str(ca_cert)] if ca_cert else []), "--retries", "1", *map(str, args)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)

    src = tmp_path / "src"
    src.mkdir()
    (src / "small").write_bytes(os.urandom(1000))
    (src / "big").write_bytes(os.urandom(11 * 1024 * 1024))  # multipart above the 5M cutoff
    dst = tmp_path / "dst"
    for args in (["mkdir", "cairntls:tls-rclone"], ["copy", src, "cairntls:tls-rclone/d"], ["check", src, "cairntls:tls-rclone/d"],
                 ["copy", "cairntls:tls-rclone/d", dst]):
        res = rclone(*args)
        assert res.returncode == 0, "rclone %s -> %d\n%s\n%s" % (" ".join(map(str, args)), res.returncode, res.stdout, res.stderr)
    for name in ("small", "big"):
        assert filecmp.cmp(src / name, dst / name, shallow=False), name
    res = rclone("lsf", "--low-level-retries", "1", "cairntls:tls-rclone/d", ca_cert=None)
    assert res.returncode != 0 and "certificate" in res.stderr, res.stderr
