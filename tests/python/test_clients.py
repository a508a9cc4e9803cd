"""Client-compatibility tests: boto3, the aws cli, curl (presigned URLs) and rclone against a
real cairn server (see conftest.py). Every data check is byte-for-byte."""

import hashlib
import json
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
from botocore.exceptions import ClientError

from fileutil import make_tree, random_bytes, sha256_file, tree_digests

KiB = 1 << 10
MiB = 1 << 20


def error_of(excinfo):
    """(code, http status) of a botocore ClientError."""
    err = excinfo.value.response
    return err.get("Error", {}).get("Code"), err.get("ResponseMetadata", {}).get("HTTPStatusCode")


def list_all_v2(s3, bucket, **kw):
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, **kw):
        for o in page.get("Contents", []):
            out[o["Key"]] = o
    return out


def put_many(s3, bucket, items):
    """items: {key: bytes}; uploaded with a few threads."""
    with ThreadPoolExecutor(max_workers=8) as ex:
        list(ex.map(lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), items.items()))


# ---- boto3: multipart transfer ----------------------------------------------------------


def test_boto3_multipart_upload_download_100mib(s3, bucket, tmp_path):
    size = 100 * MiB
    part = 8 * MiB  # boto3's default TransferConfig: 8 MiB threshold and part size
    data = os.urandom(size)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    want_sha = hashlib.sha256(data).hexdigest()
    nparts = -(-size // part)
    assert nparts == 13
    # S3's multipart ETag: MD5 of the concatenated binary part MD5s, "-", part count.
    part_md5s = b"".join(hashlib.md5(data[i:i + part]).digest() for i in range(0, size, part))
    want_etag = '"%s-%d"' % (hashlib.md5(part_md5s).hexdigest(), nparts)

    key = "multipart/big object.bin"
    s3.upload_file(str(src), bucket, key)

    head = s3.head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] == size
    assert re.fullmatch(r'"[0-9a-f]{32}-%d"' % nparts, head["ETag"]), head["ETag"]
    assert head["ETag"] == want_etag

    listed = list_all_v2(s3, bucket)
    assert list(listed) == [key]
    assert listed[key]["Size"] == size
    assert listed[key]["ETag"] == want_etag

    dst = tmp_path / "big.out"
    s3.download_file(bucket, key, str(dst))  # parallel ranged GETs
    assert dst.stat().st_size == size
    assert sha256_file(dst) == want_sha

    # A range across the first part boundary of the assembled object.
    r = s3.get_object(Bucket=bucket, Key=key, Range="bytes=%d-%d" % (part - 5, part + 4))
    assert r["ContentRange"] == "bytes %d-%d/%d" % (part - 5, part + 4, size)
    assert r["Body"].read() == data[part - 5:part + 5]


# ---- boto3: ranged reads ----------------------------------------------------------------


def test_boto3_ranged_get(s3, bucket):
    size = 9 * MiB + 4321  # spans several 4 MiB store chunks
    data = random_bytes(size, "ranged")
    s3.put_object(Bucket=bucket, Key="ranged.bin", Body=data)
    small = random_bytes(1000, "small")
    s3.put_object(Bucket=bucket, Key="small.bin", Body=small)

    cases = [
        # (Range header, first byte, last byte inclusive)
        ("bytes=0-0", 0, 0),
        ("bytes=0-99", 0, 99),
        ("bytes=4194300-4194310", 4194300, 4194310),  # across the first chunk boundary
        ("bytes=1000-8389000", 1000, 8389000),  # three chunks
        ("bytes=-100", size - 100, size - 1),  # suffix
        ("bytes=-%d" % (5 * MiB), size - 5 * MiB, size - 1),  # long suffix
        ("bytes=%d-" % (size - 10), size - 10, size - 1),  # open-ended
        ("bytes=123456-", 123456, size - 1),
        ("bytes=%d-%d" % (size - 5, size + 1000), size - 5, size - 1),  # end past the object
        ("bytes=-%d" % (size + 500), 0, size - 1),  # suffix longer than the object
    ]
    for rng, first, last in cases:
        r = s3.get_object(Bucket=bucket, Key="ranged.bin", Range=rng)
        body = r["Body"].read()
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 206, rng
        assert r["ContentRange"] == "bytes %d-%d/%d" % (first, last, size), rng
        assert r["ContentLength"] == last - first + 1, rng
        assert body == data[first:last + 1], rng

    for rng, first, last in [("bytes=10-19", 10, 19), ("bytes=-1", 999, 999), ("bytes=990-", 990, 999)]:
        r = s3.get_object(Bucket=bucket, Key="small.bin", Range=rng)
        assert r["ContentRange"] == "bytes %d-%d/1000" % (first, last), rng
        assert r["Body"].read() == small[first:last + 1], rng

    # A full GET is still 200 with the whole body.
    r = s3.get_object(Bucket=bucket, Key="ranged.bin")
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert r["Body"].read() == data

    for rng in ["bytes=%d-" % size, "bytes=%d-%d" % (size + 10, size + 20)]:
        with pytest.raises(ClientError) as ei:
            s3.get_object(Bucket=bucket, Key="ranged.bin", Range=rng)
        assert error_of(ei) == ("InvalidRange", 416), rng


# ---- boto3: copy ------------------------------------------------------------------------


def test_boto3_copy_object(s3, make_bucket):
    b1, b2 = make_bucket(), make_bucket()
    data = random_bytes(300 * KiB + 7, "copy-src")
    src_key = "src dir/ünï cødé+1.txt"
    put = s3.put_object(Bucket=b1, Key=src_key, Body=data, ContentType="text/plain",
                        Metadata={"color": "blue", "owner": "alice"})
    src_etag = put["ETag"]
    assert src_etag == '"%s"' % hashlib.md5(data).hexdigest()

    # Same bucket, default directive (COPY): data, type and metadata come along.
    r = s3.copy_object(Bucket=b1, Key="copy/same.txt", CopySource={"Bucket": b1, "Key": src_key})
    assert r["CopyObjectResult"]["ETag"] == src_etag
    h = s3.head_object(Bucket=b1, Key="copy/same.txt")
    assert h["ContentLength"] == len(data)
    assert h["ContentType"] == "text/plain"
    assert h["Metadata"] == {"color": "blue", "owner": "alice"}
    assert h["ETag"] == src_etag
    assert s3.get_object(Bucket=b1, Key="copy/same.txt")["Body"].read() == data

    # Explicit COPY across buckets, CopySource given as a string.
    s3.copy_object(Bucket=b2, Key="from-b1.txt", CopySource="%s/%s" % (b1, src_key), MetadataDirective="COPY")
    h = s3.head_object(Bucket=b2, Key="from-b1.txt")
    assert h["Metadata"] == {"color": "blue", "owner": "alice"}
    assert h["ContentType"] == "text/plain"
    assert s3.get_object(Bucket=b2, Key="from-b1.txt")["Body"].read() == data

    # Across buckets with REPLACE: only the new metadata and type.
    r = s3.copy_object(Bucket=b2, Key="replaced/ü.bin", CopySource={"Bucket": b1, "Key": src_key},
                       MetadataDirective="REPLACE", ContentType="application/x-cairn-test",
                       Metadata={"shape": "round"})
    assert r["CopyObjectResult"]["ETag"] == src_etag
    h = s3.head_object(Bucket=b2, Key="replaced/ü.bin")
    assert h["Metadata"] == {"shape": "round"}
    assert h["ContentType"] == "application/x-cairn-test"
    assert h["ContentLength"] == len(data)
    assert s3.get_object(Bucket=b2, Key="replaced/ü.bin")["Body"].read() == data

    # Copy onto itself with REPLACE changes only the metadata.
    s3.copy_object(Bucket=b1, Key=src_key, CopySource={"Bucket": b1, "Key": src_key},
                   MetadataDirective="REPLACE", Metadata={"color": "green"}, ContentType="text/x-new")
    h = s3.head_object(Bucket=b1, Key=src_key)
    assert h["Metadata"] == {"color": "green"}
    assert h["ContentType"] == "text/x-new"
    assert s3.get_object(Bucket=b1, Key=src_key)["Body"].read() == data

    # Copy of a missing source.
    with pytest.raises(ClientError) as ei:
        s3.copy_object(Bucket=b2, Key="x", CopySource={"Bucket": b1, "Key": "does/not/exist"})
    assert error_of(ei) == ("NoSuchKey", 404)

    assert sorted(list_all_v2(s3, b1)) == sorted([src_key, "copy/same.txt"])
    assert sorted(list_all_v2(s3, b2)) == sorted(["from-b1.txt", "replaced/ü.bin"])


# ---- boto3: listing ---------------------------------------------------------------------

LIST_KEYS = (
    ["top-%02d" % i for i in range(5)]
    + ["dir1.txt"]
    + ["dir1/x-%02d" % i for i in range(10)]
    + ["dir1/sub/y-%02d" % i for i in range(8)]
    + ["dir2/z-%02d" % i for i in range(10)]
    + ["dir2/a+b%c.txt", "dir2/ü space"]
    + ["dir3/deep/er/w-%02d" % i for i in range(9)]
    + ["dir10/q-%d" % i for i in range(5)]
)


def expected_listing(keys, prefix="", delimiter=None, after=""):
    """Reference S3 listing: (sorted keys, sorted common prefixes)."""
    contents, prefixes = [], set()
    for k in sorted(keys):
        if not k.startswith(prefix):
            continue
        rest = k[len(prefix):]
        if delimiter and delimiter in rest:
            # A key rolled up into a common prefix is listed as that prefix, which is then
            # compared with the marker (so a marker naming a prefix skips the whole prefix).
            cp = prefix + rest[:rest.index(delimiter) + len(delimiter)]
            if cp > after:
                prefixes.add(cp)
        elif k > after:
            contents.append(k)
    return contents, sorted(prefixes)


LIST_CASES = [
    # (prefix, delimiter, start-after / marker)
    ("", None, ""),
    ("", "/", ""),
    ("dir1/", "/", ""),
    ("dir1", "/", ""),
    ("dir3/", "/", ""),
    ("dir2/", None, ""),
    ("", "-", ""),
    ("", None, "dir2/z-05"),
    ("", "/", "dir1/"),
    ("nothing/", "/", ""),
]


def test_boto3_list_objects_v2_paginated(s3, bucket):
    assert len(LIST_KEYS) == 50
    put_many(s3, bucket, {k: k.encode() for k in LIST_KEYS})
    paginator = s3.get_paginator("list_objects_v2")
    for prefix, delim, after in LIST_CASES:
        kw = {"Bucket": bucket, "Prefix": prefix, "PaginationConfig": {"PageSize": 7}}
        if delim:
            kw["Delimiter"] = delim
        if after:
            kw["StartAfter"] = after
        keys, prefixes, sizes = [], [], {}
        pages = list(paginator.paginate(**kw))
        for i, page in enumerate(pages):
            pk = [o["Key"] for o in page.get("Contents", [])]
            pp = [p["Prefix"] for p in page.get("CommonPrefixes", [])]
            assert page["MaxKeys"] == 7
            assert len(pk) + len(pp) <= 7, (prefix, delim, i)
            assert page["KeyCount"] == len(pk) + len(pp), (prefix, delim, i)
            last = i == len(pages) - 1
            assert page["IsTruncated"] == (not last), (prefix, delim, i)
            if not last:
                assert page.get("NextContinuationToken"), (prefix, delim, i)
                assert pk or pp, "empty truncated page"
            keys += pk
            prefixes += pp
            sizes.update((o["Key"], o["Size"]) for o in page.get("Contents", []))
        want_keys, want_prefixes = expected_listing(LIST_KEYS, prefix, delim, after)
        assert keys == want_keys, (prefix, delim, after)
        assert prefixes == want_prefixes, (prefix, delim, after)
        assert all(sizes[k] == len(k.encode()) for k in keys)

    # One unpaginated call with a delimiter at the top level.
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert r["IsTruncated"] is False
    assert [o["Key"] for o in r["Contents"]] == ["dir1.txt"] + ["top-%02d" % i for i in range(5)]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["dir1/", "dir10/", "dir2/", "dir3/"]
    assert r["KeyCount"] == 10


def test_boto3_list_objects_v1(s3, bucket):
    put_many(s3, bucket, {k: k.encode() for k in LIST_KEYS})
    paginator = s3.get_paginator("list_objects")
    for prefix, delim, marker in LIST_CASES:
        kw = {"Bucket": bucket, "Prefix": prefix, "PaginationConfig": {"PageSize": 7}}
        if delim:
            kw["Delimiter"] = delim
        if marker:
            kw["Marker"] = marker
        keys, prefixes = [], []
        pages = list(paginator.paginate(**kw))
        for i, page in enumerate(pages):
            pk = [o["Key"] for o in page.get("Contents", [])]
            pp = [p["Prefix"] for p in page.get("CommonPrefixes", [])]
            assert len(pk) + len(pp) <= 7, (prefix, delim, i)
            last = i == len(pages) - 1
            assert page["IsTruncated"] == (not last), (prefix, delim, i)
            if not last and delim:
                # With a delimiter, S3 returns NextMarker on truncated responses.
                assert page.get("NextMarker") == max(pk + pp), (prefix, delim, i)
            keys += pk
            prefixes += pp
        want_keys, want_prefixes = expected_listing(LIST_KEYS, prefix, delim, marker)
        assert keys == want_keys, (prefix, delim, marker)
        assert prefixes == want_prefixes, (prefix, delim, marker)

    # Manual marker walk without the paginator.
    got, marker = [], ""
    while True:
        r = s3.list_objects(Bucket=bucket, Prefix="dir1/", MaxKeys=7, Marker=marker)
        got += [o["Key"] for o in r.get("Contents", [])]
        if not r["IsTruncated"]:
            break
        marker = r["Contents"][-1]["Key"]
    assert got == sorted(k for k in LIST_KEYS if k.startswith("dir1/"))


def test_boto3_list_object_versions(s3, cairn_server, bucket):
    """Unversioned buckets list every object as its one version, null; the paginator
    pages through key-marker/version-id-marker; the clean-up idiom of SDK-based tools
    (resource API: bucket.object_versions.delete()) empties the bucket."""
    put_many(s3, bucket, {k: k.encode() for k in LIST_KEYS})
    assert s3.get_bucket_versioning(Bucket=bucket).get("Status") is None
    paginator = s3.get_paginator("list_object_versions")
    for prefix, delim, marker in LIST_CASES:
        kw = {"Bucket": bucket, "Prefix": prefix, "PaginationConfig": {"PageSize": 7}}
        if delim:
            kw["Delimiter"] = delim
        if marker:
            kw["KeyMarker"] = marker
        keys, prefixes = [], []
        pages = list(paginator.paginate(**kw))
        for i, page in enumerate(pages):
            vs = page.get("Versions", [])
            assert not page.get("DeleteMarkers"), (prefix, delim, i)
            assert all(v["VersionId"] == "null" and v["IsLatest"] and v["Size"] == len(v["Key"].encode()) for v in vs)
            pp = [p["Prefix"] for p in page.get("CommonPrefixes", [])]
            assert len(vs) + len(pp) <= 7, (prefix, delim, i)
            assert page["IsTruncated"] == (i != len(pages) - 1), (prefix, delim, i)
            keys += [v["Key"] for v in vs]
            prefixes += pp
        want_keys, want_prefixes = expected_listing(LIST_KEYS, prefix, delim, marker)
        assert keys == want_keys, (prefix, delim, marker)
        assert prefixes == want_prefixes, (prefix, delim, marker)

    res = boto3.session.Session().resource(
        "s3",
        endpoint_url=cairn_server.endpoint,
        aws_access_key_id=cairn_server.access_key,
        aws_secret_access_key=cairn_server.secret_key,
        region_name=cairn_server.region,
    )
    res.Bucket(bucket).object_versions.delete()
    assert s3.list_object_versions(Bucket=bucket).get("Versions") is None
    s3.delete_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=bucket)  # the fixture's teardown deletes it again


# ---- presigned URLs via curl ------------------------------------------------------------


def curl(*args):
    return subprocess.run(["curl", "-g", "-s", *args], capture_output=True, timeout=60)


def curl_status(url, body_path):
    res = curl("-o", str(body_path), "-w", "%{http_code}", url)
    return res.stdout.decode(), body_path.read_bytes() if body_path.exists() else b""


def test_presigned_urls_sigv4_with_curl(s3_client_factory, bucket, tmp_path):
    s3 = s3_client_factory(signature_version="s3v4")
    data = random_bytes(300 * KiB + 11, "presign")
    key = "pre signed/ü file+x.bin"
    s3.put_object(Bucket=bucket, Key=key, Body=data)

    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300)
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url
    out = tmp_path / "got.bin"
    res = curl("-f", "-o", str(out), url)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == data

    # A tampered signature is refused.
    bad = re.sub(r"(X-Amz-Signature=)([0-9a-f])", lambda m: m.group(1) + ("0" if m.group(2) != "0" else "1"), url)
    assert bad != url
    status, body = curl_status(bad, tmp_path / "bad.xml")
    assert status == "403"
    assert b"<Code>SignatureDoesNotMatch</Code>" in body

    # Presigned PUT.
    up = tmp_path / "up.bin"
    up_data = random_bytes(200 * KiB + 3, "presign-put")
    up.write_bytes(up_data)
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "uploaded via curl.bin"},
                                        ExpiresIn=300)
    res = curl("-f", "-T", str(up), put_url)
    assert res.returncode == 0, res.stderr
    assert s3.get_object(Bucket=bucket, Key="uploaded via curl.bin")["Body"].read() == up_data

    # Expired.
    expired = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=1)
    time.sleep(2)
    status, body = curl_status(expired, tmp_path / "expired.xml")
    assert status == "403"
    assert b"<Code>AccessDenied</Code>" in body


def test_presigned_bucket_operations_with_curl(s3, tmp_path):
    """botocore's default presigner (Signature V2) for bucket operations: CreateBucket,
    ListObjects and DeleteBucket through curl."""
    name = "presigned-bucket-%d" % os.getpid()
    url = s3.generate_presigned_url("create_bucket", Params={"Bucket": name}, ExpiresIn=300)
    res = curl("-X", "PUT", "-o", str(tmp_path / "c"), "-w", "%{http_code}", url)
    assert res.stdout.decode() == "200", (tmp_path / "c").read_bytes()
    s3.head_bucket(Bucket=name)
    url = s3.generate_presigned_url("list_objects", Params={"Bucket": name}, ExpiresIn=300)
    status, body = curl_status(url, tmp_path / "l")
    assert status == "200" and b"<ListBucketResult" in body, body
    url = s3.generate_presigned_url("delete_bucket", Params={"Bucket": name}, ExpiresIn=300)
    res = curl("-X", "DELETE", "-o", str(tmp_path / "d"), "-w", "%{http_code}", url)
    assert res.stdout.decode() == "204", (tmp_path / "d").read_bytes()
    with pytest.raises(ClientError):
        s3.head_bucket(Bucket=name)


def test_presigned_get_default_config_with_curl(s3, aws, bucket, tmp_path):
    """generate_presigned_url with boto3's default config, and `aws s3 presign`, as users
    call them. (Both produce S3 query-string URLs signed with AWSAccessKeyId/Signature/
    Expires by default: botocore presigns S3 with signature version 2 unless told otherwise.)"""
    data = random_bytes(100 * KiB + 5, "presign-default")
    key = "default presign/ö.bin"
    s3.put_object(Bucket=bucket, Key=key, Body=data)

    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300)
    status, body = curl_status(url, tmp_path / "boto3.bin")
    assert status == "200", "GET %s -> %s\n%s" % (url, status, body[:500].decode(errors="replace"))
    assert body == data

    url = aws("s3", "presign", "s3://%s/%s" % (bucket, key), "--expires-in", "300").stdout.strip()
    status, body = curl_status(url, tmp_path / "cli.bin")
    assert status == "200", "GET %s -> %s\n%s" % (url, status, body[:500].decode(errors="replace"))
    assert body == data

    expired = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=1)
    time.sleep(2)
    status, body = curl_status(expired, tmp_path / "expired.xml")
    assert status == "403", "GET %s -> %s\n%s" % (expired, status, body[:500].decode(errors="replace"))


# ---- aws cli ----------------------------------------------------------------------------

SYNC_TREE = {
    "empty.txt": 0,
    "one byte": 1,
    "readme.md": 1500,
    "-leading-dash.txt": 10,
    "UPPER/Case.TXT": 99,
    "docs/guide one.txt": 4096,
    "docs/ünïcödé ñame.txt": 777,
    "docs/日本語/ファイル.bin": 65536,
    "docs/a+b=c&d.txt": 321,
    "docs/100% done.txt": 12,
    "docs/emoji 😀.txt": 5,
    "nested/a/b/c/d/deep.bin": 128 * KiB,
    "nested/a/b/c/d/e/deeper.bin": 128 * KiB + 1,
    "nested/a/sibling.dat": 1 * MiB,
    "media/clip 01.bin": 5 * MiB,
    "media/clip 02.bin": 8 * MiB,
    "media/clip 03.bin": 8 * MiB + 1,
    "media/big one.bin": 20 * MiB,
}
SYNC_TREE.update({"logs/2024/01/day %02d.log" % d: 37 * d * d for d in range(1, 23)})


def _cli_lines(stdout, verb):
    return [ln for ln in stdout.splitlines() if ln.startswith(verb + ":")]


def _remote_state(s3, bucket, prefix):
    return {k: (o["ETag"], o["Size"], o["LastModified"]) for k, o in list_all_v2(s3, bucket, Prefix=prefix).items()}


def test_aws_s3_sync_roundtrip(s3, aws, bucket, tmp_path):
    assert len(SYNC_TREE) == 40
    src, dst = tmp_path / "src", tmp_path / "dst"
    want = make_tree(src, SYNC_TREE)
    # Files last modified an hour ago (sync compares local mtime with LastModified, which
    # S3 may report at one-second resolution).
    old = time.time() - 3600
    for rel in SYNC_TREE:
        os.utime(src / rel, (old, old))
    remote = "s3://%s/backup/2024" % bucket

    t0 = time.monotonic()
    res = aws("s3", "sync", "--no-progress", src, remote)
    took = time.monotonic() - t0
    assert len(_cli_lines(res.stdout, "upload")) == len(SYNC_TREE), res.stdout

    state = _remote_state(s3, bucket, "backup/")
    assert sorted(state) == sorted("backup/2024/" + rel for rel in SYNC_TREE)
    for rel, size in SYNC_TREE.items():
        assert state["backup/2024/" + rel][1] == size, rel

    res = aws("s3", "sync", "--no-progress", remote, dst)
    assert len(_cli_lines(res.stdout, "download")) == len(SYNC_TREE), res.stdout
    assert tree_digests(dst) == want

    # Nothing changed: a second sync transfers nothing.
    res = aws("s3", "sync", "--no-progress", src, remote)
    assert _cli_lines(res.stdout, "upload") == [], res.stdout

    # Change one file; only it is uploaded, and only it changes remotely.
    changed = "docs/guide one.txt"
    new_data = random_bytes(5000, "changed")
    (src / changed).write_bytes(new_data)
    want[changed] = hashlib.sha256(new_data).hexdigest()
    res = aws("s3", "sync", "--no-progress", src, remote)
    ups = _cli_lines(res.stdout, "upload")
    assert len(ups) == 1 and ups[0].endswith("%s/%s" % (remote, changed)), res.stdout

    after = _remote_state(s3, bucket, "backup/")
    assert sorted(after) == sorted(state)
    diff = sorted(k for k in after if after[k] != state[k])
    assert diff == ["backup/2024/" + changed]
    assert after["backup/2024/" + changed][:2] == ('"%s"' % hashlib.md5(new_data).hexdigest(), 5000)
    assert s3.get_object(Bucket=bucket, Key="backup/2024/" + changed)["Body"].read() == new_data

    # And syncing down again brings just that file.
    res = aws("s3", "sync", "--no-progress", remote, dst)
    downs = _cli_lines(res.stdout, "download")
    assert len(downs) == 1 and changed in downs[0], res.stdout
    assert tree_digests(dst) == want

    # The first upload moves ~45 MiB over loopback: a second or two. A client read timeout
    # (60 s) and silent retry shows up as a stall. (Seen with the aws cli's bundled botocore:
    # after a zero-length PUT sent with "Expect: 100-continue" that is answered without a
    # "100 Continue", it misparses the next response on that pooled connection.)
    assert took < 30, "the first aws s3 sync upload took %.1fs: stalled on a read timeout" % took


def test_aws_s3_cp_ls_rm(s3, aws, bucket, tmp_path):
    name = "report final ü.txt"
    f = tmp_path / name
    data = random_bytes(3000, "cp")
    f.write_bytes(data)
    aws("s3", "cp", "--no-progress", f, "s3://%s/single/%s" % (bucket, name))
    assert s3.get_object(Bucket=bucket, Key="single/" + name)["Body"].read() == data

    big = tmp_path / "big.bin"
    big_data = random_bytes(9 * MiB + 5, "cp-big")  # over the cli's 8 MiB multipart threshold
    big.write_bytes(big_data)
    aws("s3", "cp", "--no-progress", big, "s3://%s/single/big.bin" % bucket)
    back = tmp_path / "big.back"
    aws("s3", "cp", "--no-progress", "s3://%s/single/big.bin" % bucket, back)
    assert back.read_bytes() == big_data
    assert s3.head_object(Bucket=bucket, Key="single/big.bin")["ETag"].endswith('-2"')

    res = aws("s3", "ls", "s3://%s/single/" % bucket)
    lines = res.stdout.splitlines()
    assert any(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +3000 " + re.escape(name), ln) for ln in lines), lines
    assert any(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +%d big\.bin" % len(big_data), ln) for ln in lines), lines
    assert len(lines) == 2, lines

    # A tree for recursive removal.
    tree = {"tree/a.txt": 1, "tree/b/c.txt": 2, "tree/b/d e.txt": 3, "tree/ü/f.txt": 4}
    make_tree(tmp_path / "local", {k[len("tree/"):]: v for k, v in tree.items()})
    res = aws("s3", "cp", "--no-progress", "--recursive", tmp_path / "local", "s3://%s/tree/" % bucket)
    assert len(_cli_lines(res.stdout, "upload")) == len(tree)

    res = aws("s3", "ls", "s3://%s/" % bucket)
    assert sorted(ln.strip() for ln in res.stdout.splitlines()) == ["PRE single/", "PRE tree/"]
    res = aws("s3", "ls")
    assert any(ln.endswith(" " + bucket) for ln in res.stdout.splitlines()), res.stdout
    res = aws("s3", "ls", "--recursive", "s3://%s/tree/" % bucket)
    assert sorted(ln.split(None, 3)[3] for ln in res.stdout.splitlines()) == sorted(tree)

    res = aws("s3", "rm", "--recursive", "s3://%s/tree/" % bucket)
    assert len(_cli_lines(res.stdout, "delete")) == len(tree), res.stdout
    assert sorted(list_all_v2(s3, bucket)) == ["single/big.bin", "single/" + name]

    res = aws("s3", "rm", "--recursive", "s3://%s" % bucket)
    assert len(_cli_lines(res.stdout, "delete")) == 2, res.stdout
    assert list_all_v2(s3, bucket) == {}
    s3.delete_bucket(Bucket=bucket)  # now empty


def test_aws_s3api_delete_objects_and_head_bucket(s3, aws, bucket):
    res = aws("s3api", "head-bucket", "--bucket", bucket)
    assert res.returncode == 0
    res = aws("s3api", "head-bucket", "--bucket", bucket + "-missing", check=False)
    assert res.returncode != 0
    assert "(404)" in res.stderr, res.stderr

    keys = ["k1", "dir/k2", "amp&ersand.txt", "ü space/x.txt", "keep/one", "keep/two"]
    put_many(s3, bucket, {k: k.encode() * 3 for k in keys})

    gone = ["k1", "dir/k2", "amp&ersand.txt", "ü space/x.txt", "never-existed"]
    spec = {"Objects": [{"Key": k} for k in gone], "Quiet": False}
    res = aws("s3api", "delete-objects", "--bucket", bucket, "--delete", json.dumps(spec))
    out = json.loads(res.stdout)
    assert sorted(d["Key"] for d in out.get("Deleted", [])) == sorted(gone)
    assert not out.get("Errors")
    assert sorted(list_all_v2(s3, bucket)) == ["keep/one", "keep/two"]

    spec = {"Objects": [{"Key": "keep/one"}, {"Key": "keep/two"}], "Quiet": True}
    res = aws("s3api", "delete-objects", "--bucket", bucket, "--delete", json.dumps(spec))
    out = json.loads(res.stdout) if res.stdout.strip() else {}
    assert not out.get("Deleted") and not out.get("Errors"), out
    assert list_all_v2(s3, bucket) == {}

    res = aws("s3api", "head-object", "--bucket", bucket, "--key", "k1", check=False)
    assert res.returncode != 0 and "(404)" in res.stderr, res.stderr


# ---- errors through boto3 ---------------------------------------------------------------


def test_boto3_errors(s3, s3_client_factory, bucket, cairn_server):
    missing_bucket = bucket + "-nope"

    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="no/such/key")
    assert error_of(ei) == ("NoSuchKey", 404)

    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="no/such/key")
    assert error_of(ei)[1] == 404  # HEAD has no body: botocore reports the status as the code

    for call in (
        lambda: s3.get_object(Bucket=missing_bucket, Key="k"),
        lambda: s3.put_object(Bucket=missing_bucket, Key="k", Body=b"x"),
        lambda: s3.list_objects_v2(Bucket=missing_bucket),
        lambda: s3.delete_bucket(Bucket=missing_bucket),
    ):
        with pytest.raises(ClientError) as ei:
            call()
        assert error_of(ei) == ("NoSuchBucket", 404)

    s3.put_object(Bucket=bucket, Key="occupant", Body=b"here")
    with pytest.raises(ClientError) as ei:
        s3.delete_bucket(Bucket=bucket)
    assert error_of(ei) == ("BucketNotEmpty", 409)
    s3.head_bucket(Bucket=bucket)  # still there

    wrong = s3_client_factory(secret_key=cairn_server.secret_key + "x")
    for call in (
        lambda: wrong.list_buckets(),
        lambda: wrong.get_object(Bucket=bucket, Key="occupant"),
        lambda: wrong.put_object(Bucket=bucket, Key="intruder", Body=b"nope"),
    ):
        with pytest.raises(ClientError) as ei:
            call()
        assert error_of(ei) == ("SignatureDoesNotMatch", 403)

    unknown = s3_client_factory(access_key="AKIDUNKNOWNUNKNOWN00")
    with pytest.raises(ClientError) as ei:
        unknown.list_buckets()
    assert error_of(ei) == ("InvalidAccessKeyId", 403)

    # Nothing the bad clients sent was stored.
    assert sorted(list_all_v2(s3, bucket)) == ["occupant"]

    s3.delete_object(Bucket=bucket, Key="occupant")
    s3.delete_bucket(Bucket=bucket)
    with pytest.raises(ClientError) as ei:
        s3.head_bucket(Bucket=bucket)
    assert error_of(ei)[1] == 404


# ---- rclone -----------------------------------------------------------------------------

RCLONE_TREE = {
    "empty": 0,
    "hello world.txt": 12,
    "ünïcödé/naïve café.txt": 2048,
    "a/b/c/deep file.bin": 300 * KiB,
    "a/b/sibling.bin": 1 * MiB + 17,
    "a/plus+and&amp.txt": 99,
    "big/multipart.bin": 12 * MiB + 5,  # over the 5M upload cutoff set below: multipart
    "big/just-under.bin": 5 * MiB - 1,
}


def test_rclone_copy_check_lsf(rclone_env, bucket, s3, tmp_path):
    env = dict(rclone_env, RCLONE_CONFIG_CAIRN_UPLOAD_CUTOFF="5M", RCLONE_CONFIG_CAIRN_CHUNK_SIZE="5M")

    def rclone(*args):
        res = subprocess.run(["rclone", *map(str, args)], env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, "rclone %s -> %d\n%s\n%s" % (" ".join(map(str, args)), res.returncode,
                                                                 res.stdout[-3000:], res.stderr[-3000:])
        return res

    src, dst = tmp_path / "src", tmp_path / "dst"
    want = make_tree(src, RCLONE_TREE)
    remote = "cairn:%s/data" % bucket

    rclone("copy", src, remote)
    state = _remote_state(s3, bucket, "data/")
    assert sorted(state) == sorted("data/" + rel for rel in RCLONE_TREE)
    assert state["data/big/multipart.bin"][0].endswith('-3"')

    res = rclone("lsf", "-R", "--files-only", remote)
    assert sorted(res.stdout.splitlines()) == sorted(RCLONE_TREE)
    res = rclone("lsf", remote)
    assert sorted(res.stdout.splitlines()) == sorted(["a/", "big/", "empty", "hello world.txt", "ünïcödé/"])
    res = rclone("lsf", "--format", "ps", "%s/big" % remote)
    assert sorted(res.stdout.splitlines()) == sorted("%s;%d" % (k[len("big/"):], v)
                                                      for k, v in RCLONE_TREE.items() if k.startswith("big/"))

    rclone("check", src, remote)
    rclone("check", "--download", src, remote)

    rclone("copy", remote, dst)
    assert tree_digests(dst) == want


def test_boto3_bucket_cors(s3, bucket, cairn_server):
    with pytest.raises(ClientError) as ei:
        s3.get_bucket_cors(Bucket=bucket)
    assert error_of(ei) == ("NoSuchCORSConfiguration", 404)

    rules = [
        {"ID": "app", "AllowedOrigins": ["https://app.example"], "AllowedMethods": ["GET", "PUT", "POST"],
         "AllowedHeaders": ["x-amz-*", "content-type"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 300},
        {"AllowedOrigins": ["*"], "AllowedMethods": ["HEAD"]},
    ]
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": rules})
    got = s3.get_bucket_cors(Bucket=bucket)["CORSRules"]
    assert got == rules

    for bad, code in (
        ({"AllowedOrigins": ["*"], "AllowedMethods": ["PATCH"]}, "InvalidRequest"),
        ({"AllowedOrigins": ["http://*.*.example"], "AllowedMethods": ["GET"]}, "InvalidRequest"),
    ):
        with pytest.raises(ClientError) as ei:
            s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [bad]})
        assert error_of(ei) == (code, 400)
    with pytest.raises(ClientError) as ei:
        s3.put_bucket_cors(Bucket=bucket + "-nope", CORSConfiguration={"CORSRules": rules})
    assert error_of(ei) == ("NoSuchBucket", 404)

    # A preflight is answered from the rules, without credentials.
    def preflight(origin, method):
        res = curl("-o", "/dev/null", "-D", "-", "-X", "OPTIONS", "-H", "Origin: " + origin,
                   "-H", "Access-Control-Request-Method: " + method, f"{cairn_server.endpoint}/{bucket}/obj")
        head = res.stdout.decode()
        return head.split()[1], head.lower()
    status, head = preflight("https://app.example", "PUT")
    assert status == "200" and "access-control-allow-origin: https://app.example" in head
    status, _ = preflight("https://other.example", "PUT")
    assert status == "403"

    s3.delete_bucket_cors(Bucket=bucket)
    with pytest.raises(ClientError) as ei:
        s3.get_bucket_cors(Bucket=bucket)
    assert error_of(ei) == ("NoSuchCORSConfiguration", 404)
    status, _ = preflight("https://app.example", "PUT")
    assert status == "403"


def post_form(url, fields, filename, data):
    """POST a multipart/form-data upload (fields, then the file) with urllib; returns
    (status, headers, body) without following redirects."""
    import urllib.error
    import urllib.request
    boundary = "----cairn" + hashlib.md5(data).hexdigest()
    parts = []
    for k, v in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode())
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                 f'Content-Type: application/octet-stream\r\n\r\n'.encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    req = urllib.request.Request(url, data=b"".join(parts), method="POST",
                                 headers={"Content-Type": "multipart/form-data; boundary=" + boundary})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kw):
            return None
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=60) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


@pytest.mark.parametrize("signature_version", ["s3v4", "s3"])
def test_boto3_presigned_post(s3_client_factory, bucket, signature_version):
    s3 = s3_client_factory(signature_version=signature_version)
    data = random_bytes(700 * KiB + 5, "post-" + signature_version)
    post = s3.generate_presigned_post(
        bucket, "uploads/${filename}",
        Fields={"success_action_status": "201", "Content-Type": "text/plain"},
        Conditions=[{"success_action_status": "201"}, ["starts-with", "$Content-Type", "text/"],
                    ["content-length-range", 1, 1 * MiB]],
        ExpiresIn=300)
    if signature_version == "s3v4":
        assert post["fields"]["x-amz-algorithm"] == "AWS4-HMAC-SHA256"
    else:
        assert "AWSAccessKeyId" in post["fields"]
    status, headers, body = post_form(post["url"], post["fields"], "report.txt", data)
    assert status == 201, body
    assert b"<Key>uploads/report.txt</Key>" in body
    assert headers["ETag"] == '"%s"' % hashlib.md5(data).hexdigest()
    got = s3.get_object(Bucket=bucket, Key="uploads/report.txt")
    assert got["Body"].read() == data
    assert got["ContentType"] == "text/plain"

    # A violated condition: a Content-Type outside the policy's prefix.
    fields = dict(post["fields"], **{"Content-Type": "image/png"})
    status, _, body = post_form(post["url"], fields, "pic.png", data)
    assert status == 403, body
    assert b"<Code>AccessDenied</Code>" in body and b"Policy Condition failed" in body
    # Larger than the content-length-range.
    status, _, body = post_form(post["url"], post["fields"], "big.bin", random_bytes(1 * MiB + 1, "post-big"))
    assert status == 400 and b"<Code>EntityTooLarge</Code>" in body, body
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="uploads/pic.png")
    assert error_of(ei)[1] == 404


# ---- boto3: object and bucket tagging ---------------------------------------------------


def tag_dict(tag_set):
    return {t["Key"]: t["Value"] for t in tag_set}


def test_boto3_object_tagging(s3, bucket):
    # x-amz-tagging on PUT (boto3 sends the URL-encoded string as given).
    put = s3.put_object(Bucket=bucket, Key="tagged", Body=b"tagged body", Tagging="team=storage&env=prod%20eu")
    r = s3.get_object_tagging(Bucket=bucket, Key="tagged")
    assert r["TagSet"] == [{"Key": "env", "Value": "prod eu"}, {"Key": "team", "Value": "storage"}]
    g = s3.get_object(Bucket=bucket, Key="tagged")
    assert g["TagCount"] == 2 and g["Body"].read() == b"tagged body"
    before = s3.head_object(Bucket=bucket, Key="tagged")
    assert before["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "2"

    # Replace, then delete; body, ETag and Last-Modified stay.
    s3.put_object_tagging(Bucket=bucket, Key="tagged", Tagging={"TagSet": [{"Key": "ü", "Value": "ö & <x>"}]})
    assert tag_dict(s3.get_object_tagging(Bucket=bucket, Key="tagged")["TagSet"]) == {"ü": "ö & <x>"}
    h = s3.head_object(Bucket=bucket, Key="tagged")
    assert h["ETag"] == put["ETag"] and h["LastModified"] == before["LastModified"]
    d = s3.delete_object_tagging(Bucket=bucket, Key="tagged")
    assert d["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3.get_object_tagging(Bucket=bucket, Key="tagged")["TagSet"] == []
    assert "TagCount" not in s3.head_object(Bucket=bucket, Key="tagged")
    assert s3.get_object(Bucket=bucket, Key="tagged")["Body"].read() == b"tagged body"

    # Copy: the source's tags by default, the request's with REPLACE.
    s3.put_object_tagging(Bucket=bucket, Key="tagged", Tagging={"TagSet": [{"Key": "src", "Value": "1"}]})
    s3.copy_object(Bucket=bucket, Key="copy-default", CopySource={"Bucket": bucket, "Key": "tagged"})
    assert tag_dict(s3.get_object_tagging(Bucket=bucket, Key="copy-default")["TagSet"]) == {"src": "1"}
    s3.copy_object(Bucket=bucket, Key="copy-replace", CopySource={"Bucket": bucket, "Key": "tagged"},
                   TaggingDirective="REPLACE", Tagging="new=2")
    assert tag_dict(s3.get_object_tagging(Bucket=bucket, Key="copy-replace")["TagSet"]) == {"new": "2"}

    # Multipart: the completed object gets the upload's tags.
    mu = s3.create_multipart_upload(Bucket=bucket, Key="mp", Tagging="stage=upload")
    p = s3.upload_part(Bucket=bucket, Key="mp", UploadId=mu["UploadId"], PartNumber=1, Body=b"part")
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=mu["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"]}]})
    assert tag_dict(s3.get_object_tagging(Bucket=bucket, Key="mp")["TagSet"]) == {"stage": "upload"}


def test_boto3_tagging_errors(s3, bucket):
    s3.put_object(Bucket=bucket, Key="obj", Body=b"x")
    cases = [
        [{"Key": "k%d" % i, "Value": "v"} for i in range(11)],
        [{"Key": "k" * 129, "Value": "v"}],
        [{"Key": "k", "Value": "v" * 257}],
        [{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}],
        [{"Key": "aws:reserved", "Value": "1"}],
    ]
    for tags in cases:
        with pytest.raises(ClientError) as ei:
            s3.put_object_tagging(Bucket=bucket, Key="obj", Tagging={"TagSet": tags})
        assert error_of(ei) == ("InvalidTag", 400)
    assert s3.get_object_tagging(Bucket=bucket, Key="obj")["TagSet"] == []
    with pytest.raises(ClientError) as ei:
        s3.put_object(Bucket=bucket, Key="refused", Body=b"x", Tagging="a=1&a=2")
    assert error_of(ei) == ("InvalidArgument", 400)
    with pytest.raises(ClientError) as ei:
        s3.get_object_tagging(Bucket=bucket, Key="missing")
    assert error_of(ei) == ("NoSuchKey", 404)
    with pytest.raises(ClientError) as ei:
        s3.copy_object(Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "obj"}, TaggingDirective="MERGE")
    assert error_of(ei)[1] == 400


def test_boto3_bucket_tagging(s3, bucket):
    with pytest.raises(ClientError) as ei:
        s3.get_bucket_tagging(Bucket=bucket)
    assert error_of(ei) == ("NoSuchTagSet", 404)
    tags = [{"Key": "k%02d" % i, "Value": str(i)} for i in range(50)]
    r = s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tags})
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == tags
    with pytest.raises(ClientError) as ei:
        s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tags + [{"Key": "k50", "Value": "x"}]})
    assert error_of(ei) == ("InvalidTag", 400)
    with pytest.raises(ClientError) as ei:
        s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "aws:x", "Value": "1"}]})
    assert error_of(ei) == ("InvalidTag", 400)
    assert len(s3.get_bucket_tagging(Bucket=bucket)["TagSet"]) == 50
    s3.delete_bucket_tagging(Bucket=bucket)
    with pytest.raises(ClientError) as ei:
        s3.get_bucket_tagging(Bucket=bucket)
    assert error_of(ei) == ("NoSuchTagSet", 404)
