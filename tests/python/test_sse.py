"""Server-side encryption with boto3: SSE-S3 (`--master-key-file`), bucket default
encryption, SSE-C (over HTTPS), multipart uploads with boto3's transfer manager, ranges.

The module fixture starts its own cairn server with a master key file (outside its data
directory) and a throwaway certificate (test_tls.make_certs), so SSE-C is allowed.
"""

import base64
import hashlib
import os
import signal
import subprocess

import boto3
import botocore.exceptions
import pytest
from boto3.s3.transfer import TransferConfig

from conftest import ACCESS_KEY, REGION, SECRET_KEY, SHUTDOWN_TIMEOUT, _find_binary, _start
from test_tls import make_certs

MARKER = b"PY-SSE-PLAINTEXT-MARKER-4b1e"


@pytest.fixture(scope="module")
def sse_server(tmp_path_factory):
    """A cairn server with HTTPS and a master key file; yields (endpoint, CA path, data dir)."""
    base = tmp_path_factory.mktemp("cairn-sse")
    certs = base / "certs"
    certs.mkdir()
    ca, cert, key = make_certs(certs)
    keys = base / "master.keys"
    keys.write_text("# test master key\npy-1 %s\n" % base64.b64encode(os.urandom(32)).decode())
    os.chmod(keys, 0o600)
    data_dir, log_path = base / "data", base / "server.log"
    proc, ready = _start(_find_binary(), base, data_dir, log_path,
                         ["--tls-cert", cert, "--tls-key", key, "--master-key-file", keys])
    if not ready:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        pytest.fail("cairn server with --master-key-file did not start\n" + log_path.read_text(errors="replace")[-4000:], pytrace=False)
    yield "https://" + ready["s3"], str(ca), data_dir
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=SHUTDOWN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def s3e(sse_server):
    endpoint, ca, _ = sse_server
    return boto3.session.Session().client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
                                          aws_secret_access_key=SECRET_KEY, region_name=REGION, verify=ca)


def body(n):
    b = (MARKER + b" ") * (n // (len(MARKER) + 1) + 1)
    return b[:n]


def test_sse_s3(s3e):
    s3e.create_bucket(Bucket="py-sse-s3")
    data = body(200 * 1024 + 3)
    put = s3e.put_object(Bucket="py-sse-s3", Key="k", Body=data, ServerSideEncryption="AES256")
    assert put["ServerSideEncryption"] == "AES256"
    assert put["ETag"].strip('"') == hashlib.md5(data).hexdigest()
    got = s3e.get_object(Bucket="py-sse-s3", Key="k")
    assert got["ServerSideEncryption"] == "AES256" and got["ContentLength"] == len(data)
    assert got["Body"].read() == data
    part = s3e.get_object(Bucket="py-sse-s3", Key="k", Range="bytes=65530-131080")["Body"].read()
    assert part == data[65530:131081]
    head = s3e.head_object(Bucket="py-sse-s3", Key="k")
    assert head["ServerSideEncryption"] == "AES256" and head["ContentLength"] == len(data)
    assert s3e.list_objects_v2(Bucket="py-sse-s3")["Contents"][0]["Size"] == len(data)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3e.put_object(Bucket="py-sse-s3", Key="kms", Body=b"x", ServerSideEncryption="aws:kms")
    assert e.value.response["Error"]["Code"] == "NotImplemented"


def test_bucket_default_and_multipart(s3e, tmp_path):
    s3e.create_bucket(Bucket="py-sse-default")
    s3e.put_bucket_encryption(Bucket="py-sse-default", ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    rule = s3e.get_bucket_encryption(Bucket="py-sse-default")["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    src = tmp_path / "big"
    src.write_bytes(body(12 * 1024 * 1024 + 5))
    # Multipart (5 MiB parts) with no SSE parameter: the bucket's default applies.
    cfg = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024)
    s3e.upload_file(str(src), "py-sse-default", "big", Config=cfg)
    head = s3e.head_object(Bucket="py-sse-default", Key="big")
    assert head["ServerSideEncryption"] == "AES256" and head["ContentLength"] == src.stat().st_size
    assert head["ETag"].strip('"').endswith("-3")
    out = tmp_path / "big.out"
    s3e.download_file("py-sse-default", "big", str(out), Config=cfg)  # ranged GETs
    assert out.read_bytes() == src.read_bytes()
    s3e.delete_bucket_encryption(Bucket="py-sse-default")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3e.get_bucket_encryption(Bucket="py-sse-default")
    assert e.value.response["Error"]["Code"] == "ServerSideEncryptionConfigurationNotFoundError"


def test_sse_c(s3e, sse_server):
    s3e.create_bucket(Bucket="py-sse-c")
    key, other = os.urandom(32), os.urandom(32)
    data = body(100 * 1024)
    # boto3 base64-encodes the key and adds its MD5.
    put = s3e.put_object(Bucket="py-sse-c", Key="k", Body=data, SSECustomerAlgorithm="AES256", SSECustomerKey=key)
    assert put["SSECustomerAlgorithm"] == "AES256"
    assert put["SSECustomerKeyMD5"] == base64.b64encode(hashlib.md5(key).digest()).decode()
    assert put["ETag"].strip('"') != hashlib.md5(data).hexdigest()
    got = s3e.get_object(Bucket="py-sse-c", Key="k", SSECustomerAlgorithm="AES256", SSECustomerKey=key)
    assert got["Body"].read() == data
    for kw, code in (({}, "InvalidRequest"), ({"SSECustomerAlgorithm": "AES256", "SSECustomerKey": other}, "AccessDenied")):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3e.get_object(Bucket="py-sse-c", Key="k", **kw)
        assert e.value.response["Error"]["Code"] == code
    # A copy with the source key into another key.
    s3e.copy_object(Bucket="py-sse-c", Key="copy", CopySource={"Bucket": "py-sse-c", "Key": "k"},
                    CopySourceSSECustomerAlgorithm="AES256", CopySourceSSECustomerKey=key,
                    SSECustomerAlgorithm="AES256", SSECustomerKey=other)
    got = s3e.get_object(Bucket="py-sse-c", Key="copy", SSECustomerAlgorithm="AES256", SSECustomerKey=other)
    assert got["Body"].read() == data


def test_no_plaintext_on_disk(s3e, sse_server):
    """Runs after the others (pytest keeps file order): nothing on disk holds the marker."""
    _, _, data_dir = sse_server
    s3e.create_bucket(Bucket="py-sse-disk")
    s3e.put_object(Bucket="py-sse-disk", Key="k", Body=body(300 * 1024), ServerSideEncryption="AES256")
    found = []
    for root, _, files in os.walk(data_dir):
        for name in files:
            path = os.path.join(root, name)
            try:
                with open(path, "rb") as f:
                    if MARKER in f.read():
                        found.append(path)
            except FileNotFoundError:
                pass
    assert not found, "plaintext of encrypted objects in %s" % found
