"""boto3 through a 3-node cluster: tagging, CORS, browser POST uploads and
GetObjectAttributes set or stored through one gateway and answered by the others."""

import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import boto3
import pytest
from botocore.config import Config

from conftest import ACCESS_KEY, REGION, SECRET_KEY, SHUTDOWN_TIMEOUT, _find_binary, _start

CLUSTER_SECRET = "py-cluster-secret-0123456789abcdef0123"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three cairn processes, the second and third joining the first; yields one boto3
    client per node."""
    binary = _find_binary()
    procs, clients, join = [], [], None
    try:
        for i in range(3):
            base = tmp_path_factory.mktemp("node%d" % i)
            args = ["--node-id", "n%d" % i, "--zone", "z%d" % i]
            if join:
                args += ["--join", join]
            proc, ready = _start(binary, base, base / "data", base / "server.log", args, {"CAIRN_CLUSTER_SECRET": CLUSTER_SECRET})
            procs.append((proc, base))
            if not ready:
                pytest.fail("node %d did not start:\n%s" % (i, (base / "server.log").read_text(errors="replace")[-3000:]), pytrace=False)
            join = join or ready["node"]
            clients.append(boto3.session.Session().client(
                "s3", endpoint_url="http://" + ready["s3"], aws_access_key_id=ACCESS_KEY,
                aws_secret_access_key=SECRET_KEY, region_name=REGION,
                config=Config(retries={"max_attempts": 8, "mode": "standard"})))
        yield clients
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, base in procs:
            try:
                proc.wait(timeout=SHUTDOWN_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def eventually(fn, timeout=10.0):
    """fn() until it returns without an AssertionError (a bucket configuration reaches the
    other gateways through the map, a moment after it is accepted)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="module")
def bucket(cluster):
    name = "feat-" + uuid.uuid4().hex[:8]
    cluster[0].create_bucket(Bucket=name)
    return name


def test_tagging_through_the_cluster(cluster, bucket):
    a, b, c = cluster
    a.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="team=blue&tier=hot")
    for cl in cluster:
        tags = {t["Key"]: t["Value"] for t in cl.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]}
        assert tags == {"team": "blue", "tier": "hot"}
    b.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": [{"Key": "team", "Value": "red"}]})
    for cl in cluster:
        assert cl.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == [{"Key": "team", "Value": "red"}]
    c.delete_object_tagging(Bucket=bucket, Key="t")
    assert a.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == []
    assert a.get_object(Bucket=bucket, Key="t")["Body"].read() == b"x"

    c.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "cost", "Value": "42"}]})
    eventually(lambda: _assert_eq(a.get_bucket_tagging(Bucket=bucket)["TagSet"], [{"Key": "cost", "Value": "42"}]))


def _assert_eq(got, want):
    assert got == want, (got, want)


def test_cors_through_the_cluster(cluster, bucket):
    a, b, c = cluster
    a.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [
        {"AllowedOrigins": ["https://app.example"], "AllowedMethods": ["GET", "PUT"], "AllowedHeaders": ["*"], "MaxAgeSeconds": 60}]})

    def preflight(client, origin):
        req = urllib.request.Request(client.meta.endpoint_url + "/" + bucket + "/k", method="OPTIONS", headers={
            "Origin": origin, "Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "content-type"})
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, r.headers.get("Access-Control-Allow-Origin")
        except urllib.error.HTTPError as e:
            return e.code, None

    for cl in cluster:
        eventually(lambda: _assert_eq(preflight(cl, "https://app.example"), (200, "https://app.example")))
        assert preflight(cl, "https://evil.example")[0] == 403
    assert c.get_bucket_cors(Bucket=bucket)["CORSRules"][0]["AllowedOrigins"] == ["https://app.example"]
    b.delete_bucket_cors(Bucket=bucket)
    for cl in cluster:
        eventually(lambda: _assert_eq(preflight(cl, "https://app.example")[0], 403))


def test_presigned_post_through_the_cluster(cluster, bucket):
    a, b, c = cluster
    post = b.generate_presigned_post(Bucket=bucket, Key="up/${filename}", Conditions=[["starts-with", "$key", "up/"]])
    boundary = "----cairn" + uuid.uuid4().hex
    body = b""
    for k, v in post["fields"].items():
        body += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (boundary, k, v)).encode()
    body += ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f.txt\"\r\n\r\n" % boundary).encode()
    body += b"posted through node 2\r\n--" + boundary.encode() + b"--\r\n"
    req = urllib.request.Request(post["url"], data=body, method="POST", headers={"Content-Type": "multipart/form-data; boundary=" + boundary})
    with urllib.request.urlopen(req) as r:
        assert r.status == 204
    for cl in (a, c):
        assert cl.get_object(Bucket=bucket, Key="up/f.txt")["Body"].read() == b"posted through node 2"


def test_object_attributes_through_the_cluster(cluster, bucket):
    a, b, c = cluster
    mp = a.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="SHA256")
    parts = []
    for i, n in enumerate([5 << 20, 100], 1):
        up = b.upload_part(Bucket=bucket, Key="mp", UploadId=mp["UploadId"], PartNumber=i, Body=bytes([i]) * n, ChecksumAlgorithm="SHA256")
        parts.append({"PartNumber": i, "ETag": up["ETag"], "ChecksumSHA256": up["ChecksumSHA256"]})
    done = c.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=mp["UploadId"], MultipartUpload={"Parts": parts})
    for cl in cluster:
        at = cl.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ETag", "Checksum", "ObjectParts", "ObjectSize"])
        assert '"%s"' % at["ETag"] == done["ETag"]
        assert at["ObjectSize"] == (5 << 20) + 100
        assert at["Checksum"]["ChecksumSHA256"] == done["ChecksumSHA256"]
        assert [p["ChecksumSHA256"] for p in at["ObjectParts"]["Parts"]] == [p["ChecksumSHA256"] for p in parts]


def test_versioning_through_the_cluster(cluster):
    """Versioning set through one gateway, versions written through each, read, listed and
    deleted through the others."""
    name = "vers-" + uuid.uuid4().hex[:8]
    cluster[0].create_bucket(Bucket=name)
    cluster[0].put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})

    def enabled_everywhere():
        for c in cluster:
            assert c.get_bucket_versioning(Bucket=name).get("Status") == "Enabled"

    eventually(enabled_everywhere)
    ids = {}
    for i, c in enumerate(cluster):
        ids[c.put_object(Bucket=name, Key="k", Body=b"body %d" % i)["VersionId"]] = b"body %d" % i
    marker = cluster[1].delete_object(Bucket=name, Key="k")["VersionId"]
    for c in cluster:
        for vid, body in ids.items():
            assert c.get_object(Bucket=name, Key="k", VersionId=vid)["Body"].read() == body
        page = c.list_object_versions(Bucket=name)
        assert {v["VersionId"] for v in page["Versions"]} == set(ids)
        assert [m["VersionId"] for m in page["DeleteMarkers"]] == [marker]
        with pytest.raises(Exception):
            c.get_object(Bucket=name, Key="k")
    cluster[2].delete_object(Bucket=name, Key="k", VersionId=marker)
    assert cluster[0].get_object(Bucket=name, Key="k")["Body"].read() == b"body 2"
    boto3_delete_all_versions(cluster[1], name)
    cluster[2].delete_bucket(Bucket=name)


def boto3_delete_all_versions(c, bucket):
    for page in c.get_paginator("list_object_versions").paginate(Bucket=bucket):
        objs = [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
        if objs:
            c.delete_objects(Bucket=bucket, Delete={"Objects": objs})
